// The worker process's event loop; see worker.h for its states.
#include "worker/worker.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>

#include "common/log.h"
#include "worker/connection.h"

namespace concert::worker {

namespace {

constexpr Millis kRecheckMs = 250;
constexpr Millis kFlushMs = 100;
constexpr Millis kSignalEchoMs = 500;
constexpr Millis kAcceptPauseMs = 100;
constexpr Millis kAcceptWarnEveryMs = 10'000;

timeval toTimeval(Millis ms) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

std::string peerAddress(const sockaddr* addr) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (addr->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, buf, sizeof buf);
  } else if (addr->sa_family == AF_INET6) {
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(addr);
    if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr))
      inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], buf, sizeof buf);
    else
      inet_ntop(AF_INET6, &a6->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

}  // namespace

Worker::Worker(const WorkerContext& context) : context_(context) {}

Worker::~Worker() {
  for (ClientConnection* c : connections_) delete c;
  connections_.clear();
  pool_.reset();
  for (evconnlistener* l : listeners_) evconnlistener_free(l);
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
  if (!access_log_.open(cfg.access_log, cfg.access_log_file)) {
    // Serving without an access log beats a respawn loop; SIGUSR1 retries the open.
    LOG_ERROR("cannot open access log %s: %s (access log off until SIGUSR1)", cfg.access_log_file.c_str(),
              std::strerror(errno));
  }
  pool_ = std::make_unique<UpstreamPool>(base_, cfg.upstream);
  std::string error;
  if (!pool_->init(&error))
    LOG_WARN("upstream %s: %s (requests get 502 until it resolves)", cfg.upstream.raw.c_str(), error.c_str());

  for (int fd : context_.listen_fds) {
    evutil_make_socket_nonblocking(fd);
    evconnlistener* l = evconnlistener_new(base_, &Worker::onAccept, this, 0, -1, fd);
    if (!l) {
      LOG_ERROR("worker: cannot listen on fd %d", fd);
      return false;
    }
    evconnlistener_set_error_cb(l, &Worker::onAcceptError);
    listeners_.push_back(l);
  }

  for (int sig : {SIGTERM, SIGINT, SIGQUIT, SIGUSR1}) {
    event* e = evsignal_new(base_, sig, &Worker::onSignal, this);
    event_add(e, nullptr);
    events_.push_back(e);
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
    int fd = context_.segment->eventFd(context_.slot);
    if (fd >= 0) {
      evutil_make_socket_nonblocking(fd);
      wake_ = event_new(base_, fd, EV_READ | EV_PERSIST, &Worker::onWake, this);
      event_add(wake_, nullptr);
      events_.push_back(wake_);
    }
  }
  recheck_ = event_new(base_, -1, EV_PERSIST, &Worker::onRecheck, this);
  events_.push_back(recheck_);
  grace_ = evtimer_new(base_, &Worker::onGrace, this);
  events_.push_back(grace_);
  accept_pause_ = evtimer_new(base_, &Worker::onAcceptResume, this);
  events_.push_back(accept_pause_);
  return true;
}

int Worker::run() {
  if (!setUp()) return 1;
  if (context_.segment && context_.slot != shm::kNoSlot) context_.segment->heartbeat(context_.slot, monotonicMs());
  // The master may have died between fork() and PR_SET_PDEATHSIG.
  if (context_.master_pid != 0 && getppid() != context_.master_pid) beginDrain("master gone");
  event_base_dispatch(base_);
  access_log_.flush();
  return exit_status_;
}

// ------------------------------------------------------------ accept

void Worker::onAccept(evconnlistener*, evutil_socket_t fd, sockaddr* addr, int, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  try {
    if (w->draining_) {
      evutil_closesocket(fd);
      return;
    }
    int one = 1;  // responses are written whole; small ones must not wait for Nagle
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto* c = new ClientConnection(*w, fd, peerAddress(addr));
    if (!c->start()) {
      delete c;
      return;
    }
    w->connections_.insert(c);
  } catch (const std::exception& e) {
    LOG_ERROR("accept: %s", e.what());
  } catch (...) {
    LOG_ERROR("accept: unknown exception");
  }
}

void Worker::onAcceptError(evconnlistener*, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  int err = EVUTIL_SOCKET_ERROR();
  if (err == EAGAIN || err == EINTR || err == ECONNABORTED) return;
  // Out of descriptors (EMFILE, ENFILE) or memory: the connection stays in
  // the backlog and the socket stays readable, so accepting again at once
  // would spin. Pause accepting briefly (nginx does the same); connections
  // that close meanwhile make room.
  Millis now = monotonicMs();
  if (now - w->accept_warned_ms_ >= kAcceptWarnEveryMs) {
    LOG_WARN("accept: %s; pausing accepts for %lld ms", std::strerror(err), static_cast<long long>(kAcceptPauseMs));
    w->accept_warned_ms_ = now;
  }
  for (evconnlistener* l : w->listeners_) evconnlistener_disable(l);
  timeval tv = toTimeval(kAcceptPauseMs);
  evtimer_add(w->accept_pause_, &tv);
}

void Worker::onAcceptResume(evutil_socket_t, short, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  if (w->draining_) return;
  for (evconnlistener* l : w->listeners_) evconnlistener_enable(l);
}

void Worker::connectionClosed(ClientConnection* connection) {
  connections_.erase(connection);
  // Freed on the next loop turn: the callback that closed it may still be
  // on the stack and looks at its closed_ flag.
  event_base_once(
      base_, -1, EV_TIMEOUT, [](evutil_socket_t, short, void* arg) { delete static_cast<ClientConnection*>(arg); },
      connection, nullptr);
  if (draining_ && connections_.empty() && !stopping_) stopNow(exit_status_);
}

// ------------------------------------------------------------ parking

void Worker::park(ClientConnection* connection) {
  const bool was_empty = parked_.empty();
  connection->park_pos = parked_.insert(parked_.end(), connection);
  if (was_empty) {
    timeval tv = toTimeval(kRecheckMs);
    event_add(recheck_, &tv);
  }
}

void Worker::unpark(ClientConnection* connection) {
  parked_.erase(connection->park_pos);
  connection->park_pos = parked_.end();
  if (parked_.empty()) {
    event_del(recheck_);
    if (context_.segment && context_.slot != shm::kNoSlot)
      for (shm::Resource r : {shm::Resource::PageSlot, shm::Resource::AssetSlot, shm::Resource::PassSlot})
        context_.segment->setWaiting(context_.slot, r, false);
  }
}

void Worker::recheckParked() {
  if (parked_.empty()) return;
  // Connections are freed only on a later loop turn, so the snapshot stays valid
  // even if a recheck closes one of them.
  std::vector<ClientConnection*> snapshot(parked_.begin(), parked_.end());
  Millis now = monotonicMs();
  for (ClientConnection* c : snapshot)
    if (c->isParked()) c->recheckAdmission(now);
}

void Worker::onWake(evutil_socket_t fd, short, void* arg) {
  auto* w = static_cast<Worker*>(arg);
  uint64_t value;
  while (read(fd, &value, sizeof value) == sizeof value) {
  }
  w->recheckParked();
}

void Worker::onRecheck(evutil_socket_t, short, void* arg) {
  static_cast<Worker*>(arg)->recheckParked();
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
  if (w->context_.segment && w->context_.slot != shm::kNoSlot)
    w->context_.segment->heartbeat(w->context_.slot, monotonicMs());
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
  for (evconnlistener* l : listeners_) evconnlistener_disable(l);
  std::vector<ClientConnection*> all(connections_.begin(), connections_.end());
  for (ClientConnection* c : all) c->closeIfIdle();
  timeval tv = toTimeval(config().shutdown_grace);
  evtimer_add(grace_, &tv);
  pool_->closeIdle();
  if (connections_.empty()) stopNow(exit_status_);
}

void Worker::stopNow(int status) {
  if (stopping_) return;
  stopping_ = true;
  exit_status_ = status;
  std::vector<ClientConnection*> all(connections_.begin(), connections_.end());
  for (ClientConnection* c : all) c->abort();
  pool_->closeIdle();
  access_log_.flush();
  event_base_loopexit(base_, nullptr);
}

// ------------------------------------------------------------ entry point

int runWorker(const WorkerContext& context) {
  log::setRole("worker " + std::to_string(context.slot));
  log::setGeneration(context.generation);
  // Signal dispositions inherited from the master: the master blocks and
  // handles its own; a worker handles stop/reopen through the loop and leaves
  // reload and child reaping to the master.
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT, SIGQUIT, SIGUSR1, SIGHUP, SIGCHLD, SIGALRM}) sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGCHLD, SIG_DFL);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  try {
    Worker worker(context);
    int status = worker.run();
    LOG_INFO("worker exiting with status %d", status);
    return status;
  } catch (const std::exception& e) {
    LOG_ERROR("worker failed: %s", e.what());
    return 1;
  }
}

}  // namespace concert::worker
