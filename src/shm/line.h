// Line: the waiting line as the admission layer sees it, whichever keeps it.
//
// One host alone keeps its line in the ticket ring (tickets.h). Hosts that
// share one line through an engine (-cluster) keep it there, and each host
// reads it from the segment's cache of it (cluster.h). Both answer the same
// questions with the same types (types.h), so the page guard, /queue/status,
// /queue/events and the line's admin endpoints never ask which it is:
// Segment::line() hands out the one in effect.
//
// The methods' contracts are the ticket ring's (tickets.h); cluster.h says
// where the engine's line differs (what it keeps per ticket, when a
// position can lag, what a host does while the engine is unreachable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "shm/types.h"

namespace concert::shm {

class Line {
 public:
  virtual Issued issue(WorkerSlot slot, int64_t max_queue, Millis now, const ClientTicketing* client = nullptr) = 0;
  virtual TicketView render(const TicketCookie& cookie, Millis now, Millis ttl, Contact contact = Contact::Page) = 0;
  virtual TicketView touch(const TicketCookie& cookie, Millis now, Millis ttl, Contact contact = Contact::Page) = 0;
  virtual TicketView poll(const TicketCookie& cookie, Millis now, Millis ttl) = 0;
  virtual bool claim(const TicketCookie& cookie, Claimed* claimed = nullptr) = 0;
  virtual void retire(uint64_t ticket, bool timeout) = 0;
  virtual bool remove(uint64_t ticket, Counter counted = Counter::EvictedRemovedTotal) = 0;
  virtual std::optional<uint64_t> nonceOf(uint64_t ticket) const = 0;
  virtual std::vector<LineEntry> head(size_t limit, Millis now) const = 0;
  virtual int64_t queueDepth() const = 0;
  virtual int64_t liveQueueDepth() const = 0;

 protected:
  ~Line() = default;
};

}  // namespace concert::shm
