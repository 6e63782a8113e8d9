// The admission hook between the data path and the guards.
//
// For a proxied route (page, long-lived, asset, bypass: makeGuard) the data
// path creates one RequestGuard per request and calls admit() before reading
// any of the request body (so a queued visitor never uploads, and Expect:
// 100-continue is answered only after admission). admit() returns one of:
//   Proceed  - proxy the request; `response_headers` (e.g. the concert_admit
//              Set-Cookie) are added to the origin's response head.
//   Respond  - answer locally with `response` (waiting page, 429, 403, 503).
//   Wait     - the guard is waiting for a slot held elsewhere (another worker
//              may free it). The data path parks the request; it calls admit()
//              again whenever the worker's eventfd fires, and timedOut() once
//              `deadline` passes. A parked client that disconnects gets
//              release() only.
// The guard lasts the whole exchange. While the request is proxied the data
// path calls, in this order and at most once each:
//   onResponseHead()  the origin's final response head (101, or 200..599)
//                     arrived, before any of it goes out; also when the
//                     client is gone and the origin still works on the
//                     request (`detached`). The guard acts on the origin's
//                     word (admission/origin_policy.h) and may change the
//                     headers added to the response.
//   onLongLived()     the origin's tunnel (101) or event stream opened: a
//                     long-lived path's page slot goes back to the room (the
//                     long-lived slot taken on admission stays until release()).
// Both do nothing unless a guard says otherwise.
// release() runs exactly once for every guard, on every ending: response
// fully delivered, client gone, origin error, timeout, drain, bad request
// after admission. It returns whatever admit() took (slots, ticket, pass
// hold). Worker death is covered by the master's ledger reconciliation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "http/parser.h"
#include "http/request.h"
#include "http/response.h"
#include "shm/segment.h"

namespace concert::admission {

enum class Outcome { Admitted, Queued, Rejected, Bypass, Local };

// Access-log word for an outcome: admitted, queued, rejected, bypass, local.
constexpr const char* outcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::Admitted: return "admitted";
    case Outcome::Queued: return "queued";
    case Outcome::Rejected: return "rejected";
    case Outcome::Bypass: return "bypass";
    case Outcome::Local: break;
  }
  return "local";
}

struct Admission {
  enum class Kind { Proceed, Respond, Wait };
  Kind kind = Kind::Proceed;
  http::LocalResponse response;    // Respond
  http::Headers response_headers;  // Proceed: added to the proxied response
  Millis deadline = 0;             // Wait: when timedOut() is due
  shm::Resource resource = shm::Resource::PageSlot;  // Wait: what it waits for
  // Wait: a page request held in line (-queue-hold) waits for this ticket to
  // turn ready; the worker rechecks its held requests in ticket order.
  // Empty for every other wait (a claimed ticket waiting for a page slot,
  // the asset tier).
  std::optional<uint64_t> held_ticket;
};

class RequestGuard {
 public:
  virtual ~RequestGuard() = default;
  virtual Admission admit(const http::Request& request, Millis now) = 0;
  virtual http::LocalResponse timedOut(const http::Request& request, Millis now) = 0;
  virtual void release() = 0;  // idempotent
  virtual Outcome outcome() const = 0;
  // `response_headers`: what goes out with the response, the Proceed
  // response_headers at first.
  virtual void onResponseHead(const http::Request& /*request*/, const http::ResponseHead& /*head*/,
                              bool /*detached*/, http::Headers& /*response_headers*/) {}
  virtual void onLongLived() {}
  // A page request (not an asset, not a long-lived path): its time to first
  // byte and its failures are what -adaptive and the capacity advisor read.
  virtual bool isPage() const { return false; }
};

}  // namespace concert::admission
