// What a client connection needs from the worker that accepted it: the loop,
// the configuration, admission, the origin pool, the access log, parking, the
// list of event streams and the end of the connection. The Worker implements it; a connection never
// sees the rest of the worker.
#pragma once

#include <event2/event.h>

#include <cstdint>
#include <optional>

#include "admission/context.h"
#include "config/config.h"

namespace concert::worker {

class AccessLog;
class ClientConnection;
class UpstreamPool;

class ConnectionHost {
 public:
  virtual event_base* base() const = 0;
  virtual const config::Config& config() const = 0;
  virtual const admission::AdmissionContext& admission() const = 0;
  virtual UpstreamPool& upstreams() = 0;
  virtual AccessLog& accessLog() = 0;
  virtual bool draining() const = 0;

  // Requests waiting for a slot (in arrival order) or, with `held_ticket`,
  // held by -queue-hold (in ticket order). Called on every admit() that
  // returns Wait: a parked request is re-filed when what it waits on changed.
  virtual void park(ClientConnection* connection, std::optional<uint64_t> held_ticket) = 0;
  virtual void unpark(ClientConnection* connection) = 0;
  // Waiting pages' event streams (GET /queue/events), in ticket order: an
  // open stream is added once its first event is out and removed when it
  // ends or its connection closes. The host rechecks them on PageSlot
  // wake-ups and every second (ClientConnection::recheckStream).
  virtual void addStream(ClientConnection* connection, uint64_t ticket) = 0;
  virtual void removeStream(ClientConnection* connection) = 0;
  // The connection is closed; the host frees it on the next loop turn.
  virtual void connectionClosed(ClientConnection* connection) = 0;

 protected:
  ~ConnectionHost() = default;
};

}  // namespace concert::worker
