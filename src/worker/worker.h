// One worker process's event loop: listeners, signals, timers, the list of
// client connections, the list of requests parked waiting for a slot, the
// origin connection pool and the access log.
//
// States: Serving → Draining (SIGTERM/SIGINT/SIGQUIT, a draining generation,
// or the master gone: listeners off, idle keep-alive connections closed,
// in-flight requests finish) → exit when no connection is left (status 0)
// or when shutdown-grace runs out (remaining requests are released and
// closed, status 1). Parked requests are woken by the slot's eventfd (a
// release in any worker writes it) and by a 250 ms fallback timer. Page
// requests held by -queue-hold are kept apart, in ticket order (see
// recheckParked and ticket_order.h); draining answers them at once with the
// waiting room. If this process dies, the master reclaims everything it held
// from its ledger.
//
// Event streams (GET /queue/events, one per waiting page that listens) are
// kept in ticket order too, apart from everything else. Each open stream is
// registered as a PageSlot waiter (admission::QueueEvents parks while it is
// open), so a release or finished ticket in any worker wakes this one; a
// wake-up rechecks streams in ticket order up to the first one whose ticket
// still waits (TicketOrder::walk), so an admission writes to the streams that
// turned ready and rechecks one more, whatever the number of streams. The
// one-second tick walks every stream: coalesced position updates (at most one
// per stream every 5 s, and to at most a quarter of the streams per tick),
// keep-alive comments, the ticket kept seen, the cookie-refresh ending. Streams hold no page slot and no other shared
// resource; draining ends them all at once.
//
// Admission (src/admission/) reaches the loop only through the
// AdmissionContext the worker builds: its SlotWaiters (which owns the slot's
// shared waiting flags) and its SaturationLog.
#pragma once

#include <event2/event.h>

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <unordered_set>
#include <vector>

#include "admission/context.h"
#include "admission/saturation_log.h"
#include "worker/acceptor.h"
#include "worker/access_log.h"
#include "worker/context.h"
#include "worker/host.h"
#include "worker/ticket_order.h"
#include "worker/upstream_pool.h"
#include "worker/waiters.h"

namespace concert::worker {

class ClientConnection;

class Worker final : public ConnectionHost {
 public:
  explicit Worker(const WorkerContext& context);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs the loop; returns the process exit status.
  int run();

  // ConnectionHost
  event_base* base() const override { return base_; }
  const config::Config& config() const override { return *context_.config; }
  const admission::AdmissionContext& admission() const override { return admission_; }
  UpstreamPool& upstreams() override { return *pool_; }
  AccessLog& accessLog() override { return access_log_; }
  bool draining() const override { return draining_; }
  void park(ClientConnection* connection, std::optional<uint64_t> held_ticket) override;
  void unpark(ClientConnection* connection) override;
  void addStream(ClientConnection* connection, uint64_t ticket) override;
  void removeStream(ClientConnection* connection) override;
  void connectionClosed(ClientConnection* connection) override;

 private:
  static void onAccept(Acceptor& from, int fd, sockaddr* addr, void* arg);
  static void onAcceptFailed(Acceptor& from, int err, void* arg);
  static void onAcceptSettled(Acceptor& from, void* arg);
  struct Listener {
    bool admin = false;      // the admin listener: /_room/ only
    bool inherited = false;  // accepted sockets inherit the connection options
  };
  void accept(int fd, sockaddr* addr, const Listener& from);
  static void onAcceptResume(evutil_socket_t, short, void* arg);
  static void onFullSweep(evutil_socket_t, short, void* arg);
  static void onSignal(evutil_socket_t sig, short, void* arg);
  static void onTick(evutil_socket_t, short, void* arg);
  static void onWake(evutil_socket_t fd, short, void* arg);
  static void onControl(evutil_socket_t fd, short, void* arg);
  static void onLocalWake(evutil_socket_t, short, void* arg);
  static void onRecheck(evutil_socket_t, short, void* arg);
  static void onFlush(evutil_socket_t, short, void* arg);
  static void onGrace(evutil_socket_t, short, void* arg);

  bool setUp();
  void busyPollLoop();
  void beginDrain(const char* why);
  // `every_held`: recheck every held request (the timer) instead of stopping
  // at the first one whose ticket is still not ready (a wake-up).
  void recheckParked(bool every_held);
  void hold(ClientConnection* connection, uint64_t ticket);
  void listParked(ClientConnection* connection);
  // `every`: the tick (every stream) instead of a wake-up (up to the first
  // stream whose ticket still waits).
  void recheckStreams(bool every);
  // Whether ticket numbers are places in line (one host), so that a
  // wake-up's walk may stop at the first ticket still waiting (ticket_order.h).
  bool numbersInLineOrder() const;
  void stopNow(int status);
  // A draining worker stops once no connection is left and no accept can
  // still hand it one.
  void stopIfDrained();
  // -max-connections: at the limit the worker stops accepting; while it
  // stays there, what waits for it in the backlog is refused once a second.
  void becomeFull();
  void refuseWaiting();
  void enableAccepting();
  void disableAccepting();
  bool trustedPeer(const std::string& peer) const;  // in -trusted-proxies

  WorkerContext context_;
  bool draining_ = false;
  SlotWaiters waiters_;
  admission::SaturationLog saturation_;
  admission::AdmissionContext admission_;
  event_base* base_ = nullptr;
  std::vector<std::unique_ptr<Acceptor>> acceptors_;  // tag: index in listeners_
  std::vector<Listener> listeners_;
  std::vector<event*> events_;  // signals and timers freed at exit
  event* wake_ = nullptr;
  event* control_ = nullptr;
  event* local_wake_ = nullptr;
  event* recheck_ = nullptr;
  event* grace_ = nullptr;
  event* accept_pause_ = nullptr;
  Millis accept_warned_ms_ = -1'000'000;
  event* full_sweep_ = nullptr;
  bool full_ = false;
  Millis full_warned_ms_ = -1'000'000;
  std::unique_ptr<UpstreamPool> pool_;
  AccessLog access_log_;
  std::unordered_set<ClientConnection*> connections_;
  std::list<ClientConnection*> parked_;  // everything parked but held page requests
  TicketOrder held_;                     // held page requests (-queue-hold)
  TicketOrder streams_;                  // open event streams
  Millis drain_started_ms_ = 0;
  bool stopping_ = false;
  int exit_status_ = 0;
};

}  // namespace concert::worker
