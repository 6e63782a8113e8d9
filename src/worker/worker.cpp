// The worker process's event loop; see worker.h for its states.
#include "worker/worker.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>

#include "common/child_process.h"
#include "common/control.h"
#include "common/log.h"
#include "http/client_address.h"
#include "worker/callbacks.h"
#include "worker/connection.h"
#include "worker/stream.h"

namespace concert::worker {

namespace {

constexpr Millis kRecheckMs = 250;
constexpr Millis kFlushMs = 100;
constexpr Millis kSignalEchoMs = 500;
constexpr Millis kAcceptPauseMs = 100;
constexpr Millis kAcceptWarnEveryMs = 10'000;
constexpr Millis kFullSweepMs = 1'000;
constexpr int kFullSweepMax = 4096;  // connections refused per sweep at most

}  // namespace

Worker::Worker(const WorkerContext& context)
    : context_(context), waiters_(context.segment, context.slot, &draining_) {
  admission_.config = context_.config;
  admission_.segment = context_.segment;
  admission_.slot = context_.slot;
  admission_.waiters = &waiters_;
  admission_.saturation = &saturation_;
}

Worker::~Worker() {
  // Connections release what they hold as they go; their wake-ups must not
  // reach a worker that is being taken apart.
  if (local_wake_ && context_.segment) context_.segment->slots().setLocalWake(context_.slot, nullptr, nullptr);
  for (ClientConnection* c : connections_) delete c;
  connections_.clear();
  pool_.reset();
  acceptors_.clear();  // before the ring they may have an accept on
  Stream::stopRing();
  for (event* e : events_) event_free(e);
  if (base_) event_base_free(base_);
}

bool Worker::setUp() {
  base_ = event_base_new();
  if (!base_) {
    LOG_ERROR("worker: cannot create the event loop");
    return false;
  }
  const config::Config& cfg = config();
  // Each worker sets up its own ring: one belongs to the process that made it.
  if (cfg.io_uring == "off") {
    LOG_INFO("data path: epoll (-io-uring off)");
  } else {
    std::string why;
    if (Stream::startRing(base_, &why)) {
      LOG_INFO("data path: io_uring");
    } else if (cfg.io_uring == "on") {
      LOG_ERROR("-io-uring on: %s", why.c_str());
      return false;
    } else {
      LOG_INFO("data path: epoll (io_uring unavailable: %s)", why.c_str());
    }
  }
  if (!access_log_.open(cfg.access_log, cfg.access_log_file)) {
    // Serving without an access log beats a respawn loop; SIGUSR1 retries the open.
    LOG_ERROR("cannot open access log %s: %s (access log off until SIGUSR1)", cfg.access_log_file.c_str(),
              std::strerror(errno));
  }
  pool_ = std::make_unique<UpstreamPool>(base_, cfg.upstream);
  std::string error;
  if (!pool_->init(&error))
    LOG_WARN("upstream %s: %s (requests get 502 until it resolves)", cfg.upstream.raw.c_str(), error.c_str());

  const Acceptor::Callbacks callbacks{&Worker::onAccept, &Worker::onAcceptFailed, &Worker::onAcceptSettled};
  auto addListener = [&](int fd, bool admin) {
    // Set once on the listening socket, the options come with every
    // connection it accepts: five system calls fewer per new connection.
    listeners_.push_back({admin, setConnectionOptions(fd)});
    acceptors_.push_back(
        std::make_unique<Acceptor>(base_, fd, static_cast<int>(listeners_.size() - 1), callbacks, this));
  };
  for (int fd : context_.listen_fds) addListener(fd, false);
  for (int fd : context_.admin_listen_fds) addListener(fd, true);
  for (auto& a : acceptors_) {
    if (!a->start()) {
      LOG_ERROR("worker: cannot listen on fd %d", a->fd());
      return false;
    }
  }

  for (int sig : {SIGTERM, SIGINT, SIGQUIT, SIGUSR1}) {
    event* e = evsignal_new(base_, sig, &Worker::onSignal, this);
    event_add(e, nullptr);
    events_.push_back(e);
  }
  if (context_.control_fd >= 0) {
    control_ = event_new(base_, context_.control_fd, EV_READ | EV_PERSIST, &Worker::onControl, this);
    event_add(control_, nullptr);
    events_.push_back(control_);
  }
  event* tick = event_new(base_, -1, EV_PERSIST, &Worker::onTick, this);
  timeval one_second{1, 0};
  event_add(tick, &one_second);
  events_.push_back(tick);
  if (access_log_.enabled()) {
    event* flush = event_new(base_, -1, EV_PERSIST, &Worker::onFlush, this);
    timeval tv = toTimeval(kFlushMs);
    event_add(flush, &tv);
    events_.push_back(flush);
  }
  if (context_.segment && context_.slot != shm::kNoSlot) {
    int fd = context_.segment->slots().eventFd(context_.slot);
    if (fd >= 0) {
      evutil_make_socket_nonblocking(fd);
      wake_ = event_new(base_, fd, EV_READ | EV_PERSIST, &Worker::onWake, this);
      event_add(wake_, nullptr);
      events_.push_back(wake_);
      // A release in this worker wakes its own parked requests without the
      // eventfd: a deferred recheck later in the same loop iteration.
      local_wake_ = event_new(base_, -1, 0, &Worker::onLocalWake, this);
      events_.push_back(local_wake_);
      context_.segment->slots().setLocalWake(
          context_.slot, [](void* arg) { event_active(static_cast<Worker*>(arg)->local_wake_, EV_TIMEOUT, 0); }, this);
    }
  }
  recheck_ = event_new(base_, -1, EV_PERSIST, &Worker::onRecheck, this);
  events_.push_back(recheck_);
  grace_ = evtimer_new(base_, &Worker::onGrace, this);
  events_.push_back(grace_);
  accept_pause_ = evtimer_new(base_, &Worker::onAcceptResume, this);
  events_.push_back(accept_pause_);
  full_sweep_ = event_new(base_, -1, EV_PERSIST, &Worker::onFullSweep, this);
  events_.push_back(full_sweep_);
  return true;
}

int Worker::run() {
  if (!setUp()) return 1;
  if (context_.segment && context_.slot != shm::kNoSlot)
    context_.segment->slots().heartbeat(context_.slot, monotonicMs());
  // The master may have died between fork() and PR_SET_PDEATHSIG.
  if (context_.master_pid != 0 && getppid() != context_.master_pid) beginDrain("master gone");
  if (config().busy_poll > 0)
    busyPollLoop();
  else
    event_base_dispatch(base_);
  access_log_.flush();
  return exit_status_;
}

// -busy-poll: after a loop turn that handled socket events the worker polls
// (epoll_wait with a zero timeout) instead of sleeping, until the window
// passes without one; then it sleeps in epoll_wait as usual. A busy worker
// is never woken from sleep (on virtual machines a cross-CPU wake-up costs
// the sender more than the request itself); an idle one spins for at most
// the window after its last event. Ends like event_base_dispatch: on
// loopexit or loopbreak, or when nothing is registered any more.
void Worker::busyPollLoop() {
  const int64_t window_us = config().busy_poll * 1000;
  int64_t spin_until_us = 0;
  for (;;) {
    const uint64_t before = Stream::eventsHandled();
    const bool spinning = monotonicUs() < spin_until_us;
    const int rc = event_base_loop(base_, spinning ? EVLOOP_NONBLOCK : EVLOOP_ONCE);
    if (rc != 0 || event_base_got_exit(base_) || event_base_got_break(base_)) return;
    if (Stream::eventsHandled() != before) spin_until_us = monotonicUs() + window_us;
  }
}

// ------------------------------------------------------------ accept

void Worker::onAccept(Acceptor& from, int fd, sockaddr* addr, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  w->accept(fd, addr, w->listeners_[static_cast<size_t>(from.tag())]);
}

// A connection that arrives while the worker drains was accepted by the
// kernel before accepting stopped (an accept on the ring ends a moment after
// it is cancelled): it is served like any new one, its first request
// answered with Connection: close, within -client-header-timeout.
void Worker::accept(int fd, sockaddr* addr, const Listener& from) {
  Worker* w = this;
  try {
    const size_t limit = static_cast<size_t>(w->config().max_connections);
    if (w->connections_.size() >= limit) {  // the rest of an accept batch that reached the limit
      evutil_closesocket(fd);
      if (w->context_.segment) w->context_.segment->stats().count(shm::Counter::ConnectionsRefusedTotal);
      w->becomeFull();
      return;
    }
    std::string peer = http::socketAddressText(addr);
    if (!from.admin && w->config().proxy_protocol && !w->trustedPeer(peer)) {
      // A -proxy-protocol listener speaks only to the balancers in front of it.
      LOG_DEBUG("connection from %s: not a trusted proxy on a PROXY protocol listener, closing", peer.c_str());
      evutil_closesocket(fd);
      if (w->context_.segment) w->context_.segment->stats().count(shm::Counter::ProxyProtocolRejectedTotal);
      return;
    }
    if (!from.inherited) setConnectionOptions(fd);
    auto* c = new ClientConnection(*w, fd, std::move(peer), from.admin);
    if (!c->start()) {
      delete c;
      return;
    }
    w->connections_.insert(c);
    if (w->connections_.size() >= limit) w->becomeFull();
  } catch (const std::exception& e) {
    LOG_ERROR("accept: %s", e.what());
  } catch (...) {
    LOG_ERROR("accept: unknown exception");
  }
}

bool Worker::trustedPeer(const std::string& peer) const {
  std::optional<config::IpAddress> address = config::parseIpAddress(peer);
  return address && config::cidrListContains(config().trusted_proxies, *address);
}

void Worker::onAcceptFailed(Acceptor&, int err, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  // Out of descriptors (EMFILE, ENFILE) or memory: the connection stays in
  // the backlog and the socket stays readable, so accepting again at once
  // would spin. Pause accepting briefly (nginx does the same); connections
  // that close meanwhile make room.
  Millis now = monotonicMs();
  if (now - w->accept_warned_ms_ >= kAcceptWarnEveryMs) {
    LOG_WARN("accept: %s; pausing accepts for %lld ms", std::strerror(err), static_cast<long long>(kAcceptPauseMs));
    w->accept_warned_ms_ = now;
  }
  w->disableAccepting();
  timeval tv = toTimeval(kAcceptPauseMs);
  evtimer_add(w->accept_pause_, &tv);
}

void Worker::onAcceptSettled(Acceptor&, void* arg) {
  static_cast<Worker*>(arg)->stopIfDrained();
}

void Worker::onAcceptResume(evutil_socket_t, short, void* arg) {
  static_cast<Worker*>(arg)->enableAccepting();
}

void Worker::enableAccepting() {
  if (draining_ || full_ || evtimer_pending(accept_pause_, nullptr)) return;
  for (auto& a : acceptors_) a->enable();
}

void Worker::disableAccepting() {
  for (auto& a : acceptors_) a->disable();
}

// At -max-connections: stop accepting. Connections wait in the listen
// backlog, where another worker with room takes them; if this worker is
// still full a second later, what waits is accepted and closed at once
// (counted in connections_refused_total) rather than left hanging.
void Worker::becomeFull() {
  if (full_) return;
  full_ = true;
  disableAccepting();
  Millis now = monotonicMs();
  if (now - full_warned_ms_ >= kAcceptWarnEveryMs) {
    LOG_WARN("%zu connections open (-max-connections %d): not accepting until one closes", connections_.size(),
             config().max_connections);
    full_warned_ms_ = now;
  }
  timeval tv = toTimeval(kFullSweepMs);
  event_add(full_sweep_, &tv);
}

void Worker::onFullSweep(evutil_socket_t, short, void* arg) {
  static_cast<Worker*>(arg)->refuseWaiting();
}

void Worker::refuseWaiting() {
  if (!full_) return;
  uint64_t refused = 0;
  for (auto& a : acceptors_) {
    const int lfd = a->fd();
    for (int i = 0; i < kFullSweepMax; ++i) {
      int fd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      ::close(fd);
      ++refused;
    }
  }
  if (refused > 0 && context_.segment) context_.segment->stats().count(shm::Counter::ConnectionsRefusedTotal, refused);
}

void Worker::connectionClosed(ClientConnection* connection) {
  connections_.erase(connection);
  if (full_ && connections_.size() < static_cast<size_t>(config().max_connections)) {
    full_ = false;
    event_del(full_sweep_);
    enableAccepting();
  }
  // Freed on the next loop turn: the callback that closed it may still be
  // on the stack and looks at its closed_ flag.
  event_base_once(
      base_, -1, EV_TIMEOUT, [](evutil_socket_t, short, void* arg) { delete static_cast<ClientConnection*>(arg); },
      connection, nullptr);
  stopIfDrained();
}

// ------------------------------------------------------------ parking

void Worker::park(ClientConnection* connection, std::optional<uint64_t> held_ticket) {
  const bool was_empty = parked_.empty() && held_.empty();
  const std::optional<uint64_t> filed = held_.ticketOf(connection);
  if (held_ticket) {
    // Held on a ticket; one already filed under that ticket stays where it is.
    if (filed != held_ticket) hold(connection, *held_ticket);
  } else if (filed) {
    // Its ticket was claimed: it now waits for a page slot like any other.
    held_.remove(connection);
    listParked(connection);
  } else if (!connection->park_listed) {
    listParked(connection);
  }
  if (was_empty) {
    timeval tv = toTimeval(kRecheckMs);
    event_add(recheck_, &tv);
  }
}

void Worker::unpark(ClientConnection* connection) {
  held_.remove(connection);
  if (connection->park_listed) {
    parked_.erase(connection->park_pos);
    connection->park_listed = false;
  }
  if (parked_.empty() && held_.empty()) event_del(recheck_);
}

// Files `connection` (parked, general list or held) as held on `ticket`.
void Worker::hold(ClientConnection* connection, uint64_t ticket) {
  if (connection->park_listed) {
    parked_.erase(connection->park_pos);
    connection->park_listed = false;
  }
  held_.file(connection, ticket);
}

void Worker::listParked(ClientConnection* connection) {
  connection->park_pos = parked_.insert(parked_.end(), connection);
  connection->park_listed = true;
}

// Held page requests are rechecked in ticket order, and a wake-up stops at
// the first one that stays held on the ticket it was filed under (see
// ticket_order.h for why no later one can be ready). Claims check the window
// themselves, so the rule only saves work. The 250 ms timer walks the whole
// list, which expires hold deadlines past the first waiting ticket and keeps
// every held ticket touched (seen) for the reaper. A recheck re-files its
// request itself: answered (unpark), claimed and waiting for a slot (general
// list), or queued again further back (held under its new ticket).
void Worker::recheckParked(bool every_held) {
  if (parked_.empty() && held_.empty()) return;
  Millis now = monotonicMs();
  if (!parked_.empty()) {
    // Connections are freed only on a later loop turn, so the snapshot stays
    // valid even if a recheck closes one of them. A recheck re-files its
    // request itself (park/unpark) when what it waits on changed.
    std::vector<ClientConnection*> snapshot(parked_.begin(), parked_.end());
    for (ClientConnection* c : snapshot)
      if (c->isParked()) c->recheckAdmission(now);
  }
  held_.walk(every_held || !numbersInLineOrder(), [now](ClientConnection* c) { c->recheckAdmission(now); });
}

// ------------------------------------------------------------ event streams

// With -cluster a ticket's number names it but does not place it (the engine
// places tickets in the order it enrols them, shm/cluster.h): a wake-up cannot
// stop at the first ticket still waiting, and walks every one.
bool Worker::numbersInLineOrder() const {
  return !context_.segment->cluster().enabled();
}

void Worker::addStream(ClientConnection* connection, uint64_t ticket) {
  streams_.file(connection, ticket);
}

void Worker::removeStream(ClientConnection* connection) {
  streams_.remove(connection);
}

// A stream stays filed while its ticket waits and is removed when it ends, so
// a wake-up's walk ends at the first stream still waiting. The tick walks them
// all and lets at most a quarter of them (and one) send a position update:
// when every position changes at once (one admission after a stall moves the
// whole line) the writes spread over four or five ticks instead of stalling
// one, and as a stream that got one is not due again for 5 s, those passed
// over go first on the next tick.
void Worker::recheckStreams(bool every) {
  if (streams_.empty()) return;
  const Millis now = monotonicMs();
  size_t positions = every ? streams_.size() / 4 + 1 : SIZE_MAX;
  streams_.walk(every || !numbersInLineOrder(), [&](ClientConnection* c) {
    if (c->recheckStream(now, every, positions > 0)) --positions;
  });
}

void Worker::onWake(evutil_socket_t, short, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  // Reads the eventfd, then lowers wake_pending (the rule in shm/worker_slots.h);
  // the rechecks below see every change a skipped wake-up stood for.
  w->context_.segment->slots().consumeWake(w->context_.slot);
  w->recheckParked(false);
  w->recheckStreams(false);
}

// The master parks this worker while it grows the segment (common/control.h).
// Here, between two events, nothing of this worker's is half written in the
// segment; it answers Parked and waits, touching nothing, until told to go
// on: on the same segment, or on the grown copy it is handed. A worker that
// cannot map the copy must not go on alone on the old one: it exits, and
// the master reclaims what it held.
void Worker::onControl(evutil_socket_t fd, short, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  common::Control message{};
  int passed = -1;
  int got = common::receiveControl(fd, &message, &passed, 0);
  if (got == 0) {
    event_del(w->control_);  // the master is gone: the tick's check drains
    return;
  }
  if (passed >= 0) close(passed);
  if (got < 0 || message != common::Control::Park) return;
  if (!common::sendControl(fd, common::Control::Parked)) return;
  for (;;) {
    got = common::receiveControl(fd, &message, &passed, -1);
    if (got == 0) {
      event_del(w->control_);
      return;
    }
    if (got < 0) continue;
    if (message == common::Control::Go) return;
    if (message == common::Control::Move && passed >= 0) {
      try {
        w->context_.segment->moveTo(passed);
      } catch (const std::exception& e) {
        LOG_ERROR("cannot map the grown segment: %s; exiting", e.what());
        _exit(1);
      }
      return;
    }
    if (passed >= 0) close(passed);
  }
}

void Worker::onLocalWake(evutil_socket_t, short, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  w->recheckParked(false);
  w->recheckStreams(false);
}

void Worker::onRecheck(evutil_socket_t, short, void* arg) {
  static_cast<Worker*>(arg)->recheckParked(true);
}

// ------------------------------------------------------------ signals and timers

void Worker::onSignal(evutil_socket_t sig, short, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  if (sig == SIGUSR1) {
    w->access_log_.reopen();
    log::reopenErrorLog();
    return;
  }
  if (w->draining_) {
    // A second stop signal stops at once, unless it is the echo of the first:
    // Ctrl-C reaches every process of the group and the master then forwards
    // its own SIGTERM a moment later.
    if (monotonicMs() - w->drain_started_ms_ > kSignalEchoMs) {
      w->exit_status_ = 1;
      w->stopNow(1);
    }
    return;
  }
  w->beginDrain(sig == SIGQUIT ? "SIGQUIT" : sig == SIGINT ? "SIGINT" : "SIGTERM");
}

void Worker::onTick(evutil_socket_t, short, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  if (w->context_.segment && w->context_.slot != shm::kNoSlot) {
    w->context_.segment->slots().heartbeat(w->context_.slot, monotonicMs());
    w->saturation_.flush(*w->context_.segment, monotonicMs());
  }
  w->recheckStreams(true);
  if (w->context_.master_pid != 0 && getppid() != w->context_.master_pid && !w->draining_) w->beginDrain("master gone");
}

void Worker::onFlush(evutil_socket_t, short, void* arg) {
  static_cast<Worker*>(arg)->access_log_.flush();
}

void Worker::onGrace(evutil_socket_t, short, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  LOG_WARN("shutdown grace ran out with %zu connection(s) open", w->connections_.size());
  w->exit_status_ = 1;
  w->stopNow(1);
}

void Worker::beginDrain(const char* why) {
  if (draining_) return;
  draining_ = true;
  drain_started_ms_ = monotonicMs();
  LOG_INFO("draining (%s): %zu connection(s) open", why, connections_.size());
  disableAccepting();
  std::vector<ClientConnection*> all(connections_.begin(), connections_.end());
  for (ClientConnection* c : all) c->closeIfIdle();
  // Held page requests get the waiting room now rather than being cut off
  // when the grace runs out: the visitor keeps its place through the cookie
  // (their guards see draining() and answer). Event streams end now: the
  // pages reconnect to another worker or fall back to polling.
  recheckParked(true);
  recheckStreams(true);
  timeval tv = toTimeval(config().shutdown_grace);
  evtimer_add(grace_, &tv);
  pool_->closeIdle();
  stopIfDrained();
}

void Worker::stopIfDrained() {
  if (!draining_ || stopping_ || !connections_.empty()) return;
  for (auto& a : acceptors_)
    if (!a->settled()) return;
  stopNow(exit_status_);
}

void Worker::stopNow(int status) {
  if (stopping_) return;
  stopping_ = true;
  exit_status_ = status;
  // The requests cut here may still be at the origin, which goes on serving
  // them: their page slots stay counted for as long as it may take.
  if (context_.segment && context_.slot != shm::kNoSlot) {
    shm::PageSemaphore& pages = context_.segment->pages();
    pages.quarantine(pages.held(context_.slot), monotonicMs() + config().upstream_timeout);
  }
  std::vector<ClientConnection*> all(connections_.begin(), connections_.end());
  for (ClientConnection* c : all) c->abort();
  pool_->closeIdle();
  access_log_.flush();
  event_base_loopexit(base_, nullptr);
}

// ------------------------------------------------------------ entry point

void runWorkerProcess(const WorkerContext& context) {
  int status = 1;
  try {
    log::setRole("worker " + std::to_string(context.slot));
    log::setGeneration(context.generation);
    // A worker handles stop and reopen through its loop and leaves reload
    // and child reaping to the master; it drains on its own if the master
    // goes away.
    if (!common::enterChildProcess(context.close_fds, context.drop_privileges, context.master_pid)) _exit(1);
    // Only the child can order the reset of its slot's ledger before its own
    // first acquisition.
    context.segment->slots().started(context.slot, static_cast<int>(getpid()), context.generation, 0);
    Worker worker(context);
    status = worker.run();
    LOG_INFO("worker exiting with status %d", status);
  } catch (const std::exception& e) {
    LOG_ERROR("worker failed: %s", e.what());
    status = 1;
  } catch (...) {
    LOG_ERROR("worker failed: unknown exception");
    status = 1;
  }
  _exit(status);
}

}  // namespace concert::worker
