// The master process: a small state machine driven by signal flags, in the
// manner of nginx's ngx_master_process_cycle and Apache prefork.
//
// What it owns: the listening sockets (bound once, never closed before exit),
// the shared segment (created before the first fork), the process table (one
// WorkerProc per segment worker slot) and the running Config of the current
// generation. It never touches a client socket.
//
// Worker slot states (master's view; the segment has its own copy):
//   Free ──spawn──▶ Running ──SIGTERM (reload, stop)──▶ Draining
//     ▲                │ died on its own                    │ exited
//     └── reap: reclaimDeadWorker(slot) ◀───────────────────┘
// A slot is reused only after its dead process was reaped and its ledger
// reclaimed, so capacity a worker held can never leak into its successor.
// A Running worker that dies is counted (worker_restarts_total) and replaced;
// one that dies within a second of its start delays the next start (0.1 s,
// doubling to 10 s) so a worker that cannot start is not a fork loop.
// The child, not the master, calls slots().started() before it serves: that call
// resets the slot's ledger, and only the child can order it before its own
// first acquisition. It registers with heartbeat 0; the worker's first
// heartbeat (sent once its event loop and listeners are set up) marks it
// ready. Readiness drives two things: an old-generation worker is drained
// only when a ready new one replaces it (a generation whose workers cannot
// start never takes the old one down), and the heartbeat timeout, which
// applies to ready workers (a worker not ready within the same timeout is
// treated as hung too).
//
// The loop sleeps in sigsuspend() with a one-shot SIGALRM armed for the next
// deadline (janitor tick, respawn back-off, drain or stop deadline), and on
// every wake handles, in this order: reap children → stop → reload → reopen
// logs → deadlines (janitor, back-off respawn, drain kills).
//
// Reload: a whole new Config is loaded and validated beside the running one;
// on any error nothing changes. On success the generation number goes up, new
// workers are forked into free slots, and each old-generation worker is told
// to drain as soon as a new one is up to replace it, so some worker is always
// accepting. Draining workers that outlive shutdown-grace + 5 s are killed.
//
// If the master dies, the workers get a parent-death signal (set in the child
// right after fork) and drain on their own.
//
// The line outliving the process (state_dir.h, upgrade.h): with -state-dir
// the segment is a file there, and a start attaches it (reclaiming what the
// previous run's dead workers held, leaving those still draining their slots,
// copying it into a larger geometry when the configuration needs one). On
// SIGUSR2 the master checks the binary at its start path, then executes it in
// place, handing over the listeners, the segment, the eventfds and the
// workers; the new image drains the old generation as a reload does. A
// reload that wants a longer ring parks every worker on its control channel
// (common/control.h) and moves everyone to a grown copy (growLive). Page slots
// of requests cut while the origin may still serve them stay in quarantine
// for -upstream-timeout (shm/semaphore.h). The service manager is told
// READY, RELOADING and STOPPING (systemd.h), and may pass the listeners.
//
// With -cluster the master also keeps one cluster agent running
// (cluster/agent.h): started with the workers, started again when it dies
// (after a second when it dies within one), replaced on a reload (it reads
// the configuration at start), and told to give the host's reservation back
// (SIGINT) once the last worker of a full stop has exited.
#include "master/master.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <ctime>
#include <exception>
#include <memory>
#include <optional>

#include "common/clock.h"
#include "admission/room.h"
#include "cluster/agent.h"
#include "common/control.h"
#include "common/log.h"
#include "config/config.h"
#include "master/adaptive.h"
#include "master/daemon.h"
#include "master/listener.h"
#include "master/origin_status.h"
#include "master/reload.h"
#include "master/signals.h"
#include "master/state_dir.h"
#include "master/systemd.h"
#include "master/upgrade.h"
#include "shm/segment.h"
#include "worker/context.h"
#include "worker/stream.h"

namespace concert::master {
namespace {

// Each worker may hold -max-connections client sockets and as many origin
// sockets, plus its listeners, eventfds and logs. The soft open-file limit
// (inherited by the workers) is raised to fit, up to the hard limit, as
// nginx's worker_rlimit_nofile would be set by hand; a hard limit too low
// for the setting is logged once per start or reload.
void raiseFileLimit(const config::Config& config) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t want = static_cast<rlim_t>(config.max_connections) * 2 + 256;
  if (limit.rlim_cur >= want) return;
  const rlim_t raised = limit.rlim_max == RLIM_INFINITY ? want : std::min(want, limit.rlim_max);
  if (raised > limit.rlim_cur) {
    rlimit next = limit;
    next.rlim_cur = raised;
    if (setrlimit(RLIMIT_NOFILE, &next) == 0) limit.rlim_cur = raised;
  }
  if (limit.rlim_cur < want)
    LOG_WARN("open-file limit %llu is below what -max-connections %d needs (%llu); connections beyond it are "
             "refused (raise LimitNOFILE / ulimit -n)",
             static_cast<unsigned long long>(limit.rlim_cur), config.max_connections,
             static_cast<unsigned long long>(want));
}

// The configured room mode and admission rate, into the segment (master,
// at start and on each reload). The mode is set only when the configured one
// differs from the one last applied, so a mode set at run time (POST
// /_room/mode) survives a reload that leaves `mode` alone, as the runtime cap
// does. The rate applies as configured; the same values leave the bucket be.
// A scheduled sale's schedule applies as configured; what its pre-queue
// did already (tickets, the block) stays in the segment (shm/sale.h).
// True when the configured mode changed.
bool applyRoomControl(shm::Segment& segment, const config::Config& config) {
  const shm::RoomMode wanted = shm::parseRoomMode(config.mode).value_or(shm::RoomMode::Open);
  const bool mode_changed = wanted != segment.modes().configured();
  if (mode_changed) {
    segment.modes().setConfigured(wanted);
    if (segment.modes().set(wanted) != wanted)
      LOG_INFO("room mode set to %s by the configuration", std::string(shm::roomModeName(wanted)).c_str());
  }
  segment.admitRate().configure(config.admit_interval_ns, config.admit_burst_tokens, monotonicNs());
  if (segment.sale().schedule(config.event_start_ms, config.prequeue, config.shuffle_prequeue) &&
      config.event_start_ms != 0)
    LOG_INFO("sale scheduled: starts at %s, pre-queue %s before", config.event_start.c_str(),
             config::goDurationString(config.prequeue).c_str());
  return mode_changed;
}

constexpr Millis kJanitorTick = 1'000;
// -origin-status is read in the master's loop: never longer than this.
constexpr Millis kOriginStatusTimeout = 300;
constexpr Millis kHeartbeatTimeout = 30'000;
constexpr Millis kDrainKillMargin = 5'000;  // after shutdown-grace, for reload drains
constexpr Millis kStopKillMargin = 2'000;   // after shutdown-grace, for a full stop
constexpr Millis kQuickDeath = 1'000;       // died this soon after spawn: back off
constexpr Millis kBackoffFirst = 100;
constexpr Millis kBackoffMax = 10'000;
constexpr Millis kMinPassSweep = 10'000;
constexpr Millis kReadyPoll = 20;  // while a reload waits for new workers to be ready

enum class SlotState { Free, Running, Draining };

struct WorkerProc {
  SlotState state = SlotState::Free;
  pid_t pid = 0;
  uint32_t generation = 0;
  Millis started_at = 0;
  Millis kill_at = 0;   // Draining: SIGKILL when still alive at this time
  bool killed = false;  // SIGKILL already sent
  bool ready = false;   // it has sent its first heartbeat
  bool child = true;    // false: a worker of a previous run (its master died), watched by pid and heartbeat
  int control_fd = -1;  // this end of its control channel (common/control.h); -1: none (a previous run's)
};

std::string describeExit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

std::string currentDirectory() {
  char buf[4096];
  return getcwd(buf, sizeof buf) ? std::string(buf) : std::string();
}

class Master {
 public:
  Master(config::ConfigPtr config, std::vector<std::string> args, config::Environment env)
      : start_dir_(currentDirectory()),
        config_(std::move(config)),
        args_(std::move(args)),
        env_(std::move(env)),
        pid_file_(config_->pid_file) {
    exe_path_ = executablePath(args_.empty() ? std::string() : args_.front(), start_dir_);
  }

  int run();

 private:
  bool startUp();
  bool takeListeners(std::string* error);
  bool openSegment(std::string* error);
  void applyCaps(bool attached);
  void startupError(const std::string& message);
  bool checkAccessLog(const config::Config& config, std::string* error) const;
  void loop();
  void shutDown();

  // -- workers
  void reconcile(Millis now);
  bool spawn(shm::WorkerSlot slot, Millis now);
  worker::WorkerContext workerContext(shm::WorkerSlot slot) const;
  void reapChildren(Millis now);
  void onWorkerExit(shm::WorkerSlot slot, int status, Millis now);
  void drain(shm::WorkerSlot slot, Millis now, Millis margin);
  void signalWorkers(int signo);
  int liveWorkers() const;
  void refreshReadiness();
  bool awaitingReadiness() const;

  // -- the cluster agent (-cluster)
  void spawnAgent(Millis now);
  void stopAgent();

  // -- events
  void beginStop(Millis now);
  void reload(Millis now);
  void upgrade(Millis now);
  bool growLive(const shm::Geometry& target, std::string* why);
  void watchForeignWorkers(Millis now);
  void reopenLogs();
  void runDeadlines(Millis now);
  void janitor(Millis now);
  Millis nextDeadline(Millis now) const;

  // -- the origin's capacity: -adaptive and the advisor (master/adaptive.h)
  void watchOrigin(Millis now, const shm::StatsSnapshot& stats);
  void adaptiveOnReload(const config::Config& fresh);

  std::string start_dir_;  // relative names in args, env and the YAML file mean this directory
  std::string exe_path_;   // the binary as started: what SIGUSR2 executes again
  std::optional<Handover> handover_;  // what the image this one replaced handed over (until startUp used it)
  int state_lock_fd_ = -1;            // -state-dir's lock, held while this master runs
  config::ConfigPtr config_;
  std::vector<std::string> args_;
  config::Environment env_;
  PidFile pid_file_;
  RunAs run_as_;
  int daemon_ready_fd_ = -1;
  std::string startup_error_;  // handed to the process that started a daemon
  pid_t master_pid_ = 0;

  std::vector<BoundListener> listeners_;
  std::vector<BoundListener> admin_listeners_;  // -admin-listen
  std::unique_ptr<shm::Segment> segment_;
  std::unique_ptr<admission::Room> room_;  // the gate of both lines (after segment_: it points into it)
  std::vector<WorkerProc> procs_;
  uint32_t generation_ = 1;

  pid_t agent_pid_ = 0;        // the cluster agent; 0 = none running
  Millis agent_started_at_ = 0;
  Millis agent_start_at_ = 0;  // the next start, after one that died quickly

  Millis backoff_ = 0;
  Millis next_spawn_at_ = 0;
  Millis next_janitor_ = 0;
  Millis next_reap_ = 0;
  Millis next_sweep_ = 0;
  uint64_t logged_block_ = 0;    // the pre-queue block whose opening was last logged
  shm::HistorySampler history_;  // the dashboard's samples (janitor); kept across reloads

  // What the origin had done by the last janitor tick (its page responses,
  // their time to first byte, its page errors): each tick's window is the
  // difference.
  struct OriginTotals {
    uint64_t pages = 0;
    uint64_t first_byte_us = 0;
    uint64_t errors = 0;
    Millis at = 0;  // 0: no tick yet
  };
  OriginTotals origin_seen_;
  std::unique_ptr<AdaptiveCap> adaptive_;  // while -adaptive moves the cap
  CapacityAdvisor advisor_;
  std::string origin_status_error_;  // -origin-status: why the last read failed ("" = it worked), logged on change

  bool stopping_ = false;
  bool stop_now_ = false;
  Millis stop_deadline_ = 0;
  int exit_code_ = 0;
};

// ------------------------------------------------------------------ startup

int Master::run() {
  if (!startUp()) {
    reportDaemonReady(daemon_ready_fd_, false, startup_error_);
    pid_file_.remove();
    closeListeners(&listeners_);
    closeListeners(&admin_listeners_);
    return 1;
  }
  reportDaemonReady(daemon_ready_fd_, true, "");
  daemon_ready_fd_ = -1;
  systemd::notify("READY=1\nMAINPID=" + std::to_string(getpid()));
  loop();
  shutDown();
  return exit_code_;
}

// Startup errors must reach the operator even when the error log is a file,
// and from a daemon, the terminal of the process that started it.
void Master::startupError(const std::string& message) {
  LOG_ERROR("%s", message.c_str());
  if (daemon_ready_fd_ < 0 && log::errorLogFd() != STDERR_FILENO)
    std::fprintf(stderr, "concert: %s\n", message.c_str());
  startup_error_ = message;
}

bool Master::startUp() {
  log::setRole("master");
  log::setGeneration(generation_);
  if (!log::openErrorLog(config_->error_log)) {
    std::fprintf(stderr, "concert: -error-log %s: %s\n", config_->error_log.c_str(), std::strerror(errno));
    return false;
  }

  std::string error, warning;
  handover_ = takeHandover(&error);
  if (!error.empty()) {
    startupError("binary upgrade: " + error);
    return false;
  }
  if (!resolveRunAs(config_->user, &run_as_, &error, &warning)) {
    startupError(error);
    return false;
  }
  if (!warning.empty()) LOG_WARN("%s", warning.c_str());
  if (!pid_file_.check(&error)) {
    startupError(error);
    return false;
  }

  if (!checkAccessLog(*config_, &error)) {
    startupError(error);
    return false;
  }
  if (config_->io_uring == "on" && !worker::Stream::ringAvailable(&error)) {
    startupError("-io-uring on: " + error + " (-io-uring auto falls back to epoll)");
    return false;
  }

  if (!takeListeners(&error)) {
    startupError(error);
    return false;
  }

  // Detach only now: every error so far reached the terminal. An upgraded
  // image is the same process, detached already.
  if (config_->daemon && !handover_ && !daemonize(&daemon_ready_fd_, &error)) {
    startupError(error);
    return false;
  }
  master_pid_ = getpid();
  if (!pid_file_.write(&error)) {
    startupError(error);
    return false;
  }

  if (!openSegment(&error)) {
    startupError(error);
    return false;
  }
  log::setGeneration(generation_);
  // The room's rules for both lines, in the master's janitor and in every
  // process forked from it (workers, the cluster agent).
  room_ = std::make_unique<admission::Room>(*segment_);
  segment_->setGate(room_.get());
  if (!config_->cluster.empty()) {
    // The cap is the room's; this host's share comes from the engine.
    segment_->cluster().configure(true, config_->cluster_fail == "open", config_->cluster_lease);
    segment_->cluster().setCap(config_->cap);
    segment_->pages().setShare(0);
  }
  applyRoomControl(*segment_, *config_);
  segment_->stats().setGeneration(generation_);
  raiseFileLimit(*config_);

  installMasterSignals();

  const config::Config& c = *config_;
  const std::string hold = c.queue_hold > 0 ? ", queue-hold=" + config::goDurationString(c.queue_hold) : "";
  LOG_INFO("concert %s -> %s (cap=%d, max-queue=%lld, token-ttl=%s%s, asset-cap=%d%s, asset-user-cap=H1 %d / H2 %d)",
           c.listen.c_str(), c.upstream.raw.c_str(), c.cap, static_cast<long long>(c.max_queue),
           config::goDurationString(c.token_ttl).c_str(), hold.c_str(), c.asset_cap,
           c.asset_cap_derived ? " (derived)" : "", c.asset_user_cap_h1, c.asset_user_cap_h2);
  for (const BoundListener& l : listeners_) LOG_INFO("listening on %s", l.display.c_str());
  for (const BoundListener& l : admin_listeners_) LOG_INFO("admin endpoints on %s", l.display.c_str());
  const shm::Geometry& geometry = segment_->geometry();
  LOG_INFO("shared memory: %zu bytes, %u worker slots, ring %u, pass table %u, revocations %u%s%s", segment_->bytes(),
           geometry.worker_slots, geometry.ring_size, geometry.pass_table_size, geometry.revocation_table_size,
           config_->state_dir.empty() ? "" : ", in ", config_->state_dir.c_str());

  Millis now = monotonicMs();
  next_janitor_ = now + kJanitorTick;
  next_reap_ = now + config_->reaper;
  next_sweep_ = now + std::max<Millis>(config_->admit_ttl / 2, kMinPassSweep);
  reconcile(now);
  return true;
}

// The listening sockets: handed over by the image this one replaced, passed
// by systemd (LISTEN_FDS, named "admin" for the admin listener), or bound
// here. Handed or passed ones are never bound again: connections waiting in
// their accept queues across a restart or an upgrade are served.
bool Master::takeListeners(std::string* error) {
  auto adopt = [](const std::vector<int>& fds, std::vector<BoundListener>* into) {
    for (int fd : fds) into->push_back(BoundListener{fd, systemd::listenerDisplay(fd)});
  };
  if (handover_) {
    adopt(handover_->listeners, &listeners_);
    adopt(handover_->admin_listeners, &admin_listeners_);
    return true;
  }
  systemd::InheritedListeners inherited = systemd::inheritedListeners();
  if (!inherited.ok()) {
    *error = inherited.error;
    return false;
  }
  if (!inherited.pub.empty()) {
    adopt(inherited.pub, &listeners_);
    LOG_INFO("socket activation: %zu listener(s) passed by the service manager", inherited.pub.size());
  } else {
    ListenResult bound = bindListeners(config_->listen);
    if (!bound.ok()) {
      *error = bound.error;
      return false;
    }
    listeners_ = std::move(bound.listeners);
  }
  if (!inherited.admin.empty()) {
    adopt(inherited.admin, &admin_listeners_);
  } else if (!config_->admin_listen.empty()) {
    ListenResult admin = bindListeners(config_->admin_listen);
    if (!admin.ok()) {
      *error = "-admin-listen: " + admin.error;
      return false;
    }
    admin_listeners_ = std::move(admin.listeners);
  }
  return true;
}

// The segment: handed over by the image this one replaced (its workers keep
// running on it), kept in -state-dir by an earlier run, or new (a memfd).
// Sets the generation and the process table to match.
bool Master::openSegment(std::string* error) {
  const shm::Geometry wanted =
      shm::computeGeometry(config_->max_queue, config_->cap, config_->workers, config_->asset_users_max);
  bool attached = false;
  std::vector<WorkerProc> adopted;  // by slot
  try {
    if (handover_) {
      segment_ = shm::Segment::attach(handover_->segment_fd, handover_->eventfds);
      if (!config_->state_dir.empty()) state_lock_fd_ = lockStateDir(config_->state_dir, error);
      if (!config_->state_dir.empty() && state_lock_fd_ < 0) LOG_WARN("%s", error->c_str());
      if (handover_->secret_fd >= 0) {
        std::string secret = readSecretMemfd(handover_->secret_fd);
        if (config_->admit_secret_generated && !secret.empty()) {
          auto kept = std::make_shared<config::Config>(*config_);
          kept->admit_secret = secret;
          config_ = kept;
        }
      }
      attached = true;
      generation_ = handover_->generation + 1;
      adopted.assign(segment_->geometry().worker_slots, WorkerProc{});
      const Millis now = monotonicMs();
      for (const Handover::Worker& w : handover_->workers) {
        if (w.slot >= adopted.size()) continue;
        WorkerProc& p = adopted[w.slot];
        p.state = w.draining ? SlotState::Draining : SlotState::Running;
        p.kill_at = now + config_->shutdown_grace + kDrainKillMargin;
        p.pid = w.pid;
        p.generation = w.generation;
        p.started_at = now;
        p.ready = true;
        p.child = w.child;
        p.control_fd = w.control_fd;
      }
      // The agent reads its settings at start: the next one (this binary's)
      // has the new ones. It is still this process's child: reaped and
      // replaced as any agent that ended.
      agent_pid_ = handover_->agent_pid;
      if (agent_pid_ != 0) kill(agent_pid_, SIGTERM);
      if (wanted.ring_size > segment_->geometry().ring_size || wanted.worker_slots > segment_->geometry().worker_slots)
        LOG_WARN("binary upgrade: the configuration wants a larger segment (ring %u, %u worker slots) than the "
                 "running one (ring %u, %u); it grows at the next restart",
                 wanted.ring_size, wanted.worker_slots, segment_->geometry().ring_size,
                 segment_->geometry().worker_slots);
    } else if (!config_->state_dir.empty()) {
      StateOpened opened;
      if (!openStateDir(config_->state_dir, wanted, config_->cap, config_->asset_cap, config_->long_lived_cap,
                        config_->upstream_timeout, &opened, error))
        return false;
      segment_ = std::move(opened.segment);
      if (opened.attached) log::setGeneration(segment_->stats().generation() + 1);
      for (const std::string& note : opened.notes) LOG_INFO("%s", note.c_str());
      state_lock_fd_ = opened.lock_fd;
      attached = opened.attached;
      adopted.assign(segment_->geometry().worker_slots, WorkerProc{});
      const Millis now = monotonicMs();
      for (shm::WorkerSlot slot : opened.draining) {
        WorkerProc& p = adopted[slot];
        p.state = SlotState::Draining;
        p.pid = segment_->slots().pid(slot);
        p.generation = segment_->slots().generation(slot);
        p.started_at = now;
        p.kill_at = now + config_->shutdown_grace + kDrainKillMargin;
        p.ready = true;
        p.child = false;
      }
      if (attached) generation_ = segment_->stats().generation() + 1;
    } else {
      segment_ = shm::Segment::create(wanted, config_->cap, config_->asset_cap, config_->long_lived_cap);
      adopted.assign(segment_->geometry().worker_slots, WorkerProc{});
    }
  } catch (const std::exception& e) {
    *error = std::string(handover_ ? "binary upgrade: " : "shared memory: ") + e.what();
    return false;
  }
  procs_ = std::move(adopted);
  // Old and new generations side by side need twice the workers in slots.
  const int fits = static_cast<int>(segment_->geometry().worker_slots / 2);
  if (config_->workers > fits) {
    LOG_WARN("-workers %d: the segment has slots for %d; running %d until a restart grows it", config_->workers, fits,
             fits);
    auto fewer = std::make_shared<config::Config>(*config_);
    fewer->workers = fits;
    config_ = fewer;
  }
  applyCaps(attached);
  return true;
}

// The caps of the configuration, into the segment. Into one an earlier run
// made, as a reload applies them: a cap set at run time (POST /_room/cap)
// stays unless the configured cap changed.
void Master::applyCaps(bool attached) {
  if (!attached) {
    segment_->pages().setConfiguredCap(config_->cap);
    return;
  }
  if (config_->cap != segment_->pages().configuredCap()) {
    if (config_->cluster.empty()) segment_->pages().setCap(config_->cap);
    segment_->pages().setConfiguredCap(config_->cap);
  }
  segment_->setLongLivedCap(config_->long_lived_cap);
  // A start that says -adaptive runs it, whatever stopped it in an earlier run.
  if (config_->adaptive) segment_->capacity().resumeAdaptive();
}

// Each worker opens the access log itself; a file it cannot open would only
// show up as workers dying at start, so the master tries it first. Skipped
// when workers switch user: root's verdict says nothing about theirs.
bool Master::checkAccessLog(const config::Config& config, std::string* error) const {
  if (!config.access_log || config.access_log_file.empty() || run_as_.active) return true;
  int fd = open(config.access_log_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = "-access-log-file " + config.access_log_file + ": " + std::strerror(errno);
    return false;
  }
  close(fd);
  return true;
}

void Master::shutDown() {
  // Worded like the original's failed shutdown, which runbooks grep for.
  if (exit_code_ != 0) LOG_ERROR("shutdown: context deadline exceeded (not every worker finished cleanly)");
  stopAgent();
  LOG_INFO("stopped");
  pid_file_.remove();
  closeListeners(&listeners_);
  closeListeners(&admin_listeners_);
  if (state_lock_fd_ >= 0) close(state_lock_fd_);
}

// ------------------------------------------------------------------ loop

void Master::loop() {
  for (;;) {
    Millis now = monotonicMs();
    if (stopping_ && liveWorkers() == 0) return;
    armAlarm(static_cast<long>(nextDeadline(now) - now));
    sigsuspend(&masterWaitMask());

    now = monotonicMs();
    if (g_signals.child) {
      g_signals.child = 0;
      reapChildren(now);
    }
    if (g_signals.stop) {
      int count = g_signals.stop;
      g_signals.stop = 0;
      for (int i = 0; i < count; ++i) beginStop(now);
    }
    if (g_signals.reload) {
      g_signals.reload = 0;
      if (!stopping_) reload(now);
    }
    if (g_signals.reopen) {
      g_signals.reopen = 0;
      reopenLogs();
    }
    if (g_signals.upgrade) {
      g_signals.upgrade = 0;
      if (!stopping_) upgrade(monotonicMs());
    }
    g_signals.alarm = 0;
    runDeadlines(monotonicMs());
  }
}

Millis Master::nextDeadline(Millis now) const {
  Millis next = std::min(next_janitor_, now + kJanitorTick);
  if (stopping_) {
    if (!stop_now_) next = std::min(next, stop_deadline_);
  } else {
    if (next_spawn_at_ > now) next = std::min(next, next_spawn_at_);
    if (awaitingReadiness()) next = std::min(next, now + kReadyPoll);
  }
  for (const WorkerProc& p : procs_)
    if (p.state == SlotState::Draining && !p.killed) next = std::min(next, p.kill_at);
  return std::max(next, now + 1);
}

void Master::runDeadlines(Millis now) {
  if (now >= next_janitor_) {
    janitor(now);
    next_janitor_ = now + kJanitorTick;
  }
  if (stopping_) {
    if (!stop_now_ && now >= stop_deadline_ && liveWorkers() > 0) {
      LOG_ERROR("shutdown: grace of %s ran out; killing %d worker(s)",
                config::goDurationString(config_->shutdown_grace).c_str(), liveWorkers());
      stop_now_ = true;
      exit_code_ = 1;
      signalWorkers(SIGKILL);
    }
    return;
  }
  for (size_t i = 0; i < procs_.size(); ++i) {
    WorkerProc& p = procs_[i];
    if (p.state == SlotState::Draining && !p.killed && now >= p.kill_at) {
      LOG_WARN("worker %zu (pid %d) of generation %u still draining after the grace; killing it", i, p.pid,
               p.generation);
      kill(p.pid, SIGKILL);
      p.killed = true;
    }
  }
  reconcile(now);
}

// ------------------------------------------------------------------ workers

void Master::refreshReadiness() {
  for (size_t slot = 0; slot < procs_.size(); ++slot) {
    WorkerProc& p = procs_[slot];
    if (p.state == SlotState::Free || p.ready) continue;
    auto s = static_cast<shm::WorkerSlot>(slot);
    p.ready = segment_->slots().pid(s) == p.pid && segment_->slots().lastHeartbeat(s) > 0;
  }
}

bool Master::awaitingReadiness() const {
  bool old_running = false;
  bool unready = false;
  for (const WorkerProc& p : procs_) {
    if (p.state != SlotState::Running) continue;
    if (p.generation != generation_)
      old_running = true;
    else if (!p.ready)
      unready = true;
  }
  return old_running && unready;
}

int Master::liveWorkers() const {
  return static_cast<int>(
      std::count_if(procs_.begin(), procs_.end(), [](const WorkerProc& p) { return p.state != SlotState::Free; }));
}

// Brings the current generation to config.workers running processes, and
// drains old-generation workers as their replacements come up.
void Master::reconcile(Millis now) {
  if (stopping_) return;
  refreshReadiness();
  int current = 0;
  int current_ready = 0;
  int old_running = 0;
  for (const WorkerProc& p : procs_) {
    if (p.state != SlotState::Running) continue;
    if (p.generation != generation_) {
      ++old_running;
    } else {
      ++current;
      if (p.ready) ++current_ready;
    }
  }
  if (!config_->cluster.empty() && agent_pid_ == 0 && now >= agent_start_at_) spawnAgent(now);
  for (size_t slot = 0; slot < procs_.size() && current < config_->workers && now >= next_spawn_at_; ++slot) {
    if (procs_[slot].state != SlotState::Free) continue;
    if (!spawn(static_cast<shm::WorkerSlot>(slot), now)) break;
    ++current;
  }
  // Oldest generation first: after quick successive reloads the newest old
  // generation is the closest to the current configuration.
  int allowed_old = std::max(0, config_->workers - current_ready);
  std::vector<shm::WorkerSlot> old;
  for (size_t slot = 0; slot < procs_.size(); ++slot)
    if (procs_[slot].state == SlotState::Running && procs_[slot].generation != generation_)
      old.push_back(static_cast<shm::WorkerSlot>(slot));
  std::stable_sort(old.begin(), old.end(),
                   [&](shm::WorkerSlot a, shm::WorkerSlot b) { return procs_[a].generation < procs_[b].generation; });
  for (size_t i = 0; i < old.size() && old_running > allowed_old; ++i, --old_running)
    drain(old[i], now, kDrainKillMargin);
}

bool Master::spawn(shm::WorkerSlot slot, Millis now) {
  worker::WorkerContext context = workerContext(slot);
  int control[2] = {-1, -1};
  pid_t pid = socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, control) == 0 ? fork() : -1;
  if (pid < 0) {
    LOG_ERROR("fork worker %u: %s", slot, std::strerror(errno));
    for (int fd : control)
      if (fd >= 0) close(fd);
    backoff_ = backoff_ ? std::min(backoff_ * 2, kBackoffMax) : kBackoffFirst;
    next_spawn_at_ = now + backoff_;
    return false;
  }
  if (pid == 0) {
    context.control_fd = control[1];
    context.close_fds.push_back(control[0]);
    worker::runWorkerProcess(context);
  }
  close(control[1]);
  WorkerProc& p = procs_[slot];
  p = WorkerProc{};
  p.control_fd = control[0];
  p.state = SlotState::Running;
  p.pid = pid;
  p.generation = generation_;
  p.started_at = now;
  LOG_INFO("worker %u started pid %d", slot, static_cast<int>(pid));
  return true;
}

worker::WorkerContext Master::workerContext(shm::WorkerSlot slot) const {
  worker::WorkerContext context;
  context.config = config_;
  if (config_->admin_listen.empty() && !admin_listeners_.empty()) {
    // An admin listener passed by the service manager (LISTEN_FDNAMES
    // "admin"): the public one stops serving /_room/ as with -admin-listen.
    auto passed = std::make_shared<config::Config>(*config_);
    passed->admin_listen = admin_listeners_.front().display;
    context.config = passed;
  }
  context.segment = segment_.get();
  context.slot = slot;
  context.generation = generation_;
  context.master_pid = static_cast<int>(master_pid_);
  for (const BoundListener& l : listeners_) context.listen_fds.push_back(l.fd);
  for (const BoundListener& l : admin_listeners_) context.admin_listen_fds.push_back(l.fd);
  // The daemon's starter waits for the master only; the state dir's lock is
  // the master's alone.
  if (daemon_ready_fd_ >= 0) context.close_fds.push_back(daemon_ready_fd_);
  if (state_lock_fd_ >= 0) context.close_fds.push_back(state_lock_fd_);
  for (const WorkerProc& p : procs_)
    if (p.control_fd >= 0) context.close_fds.push_back(p.control_fd);
  context.drop_privileges = [run_as = run_as_](std::string* error) { return dropPrivileges(run_as, error); };
  return context;
}

void Master::drain(shm::WorkerSlot slot, Millis now, Millis margin) {
  WorkerProc& p = procs_[slot];
  p.state = SlotState::Draining;
  p.kill_at = now + config_->shutdown_grace + margin;
  kill(p.pid, SIGTERM);
}

void Master::signalWorkers(int signo) {
  for (const WorkerProc& p : procs_)
    if (p.state != SlotState::Free && p.pid > 0) kill(p.pid, signo);
}

void Master::reapChildren(Millis now) {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    if (pid == agent_pid_) {
      agent_pid_ = 0;
      if (!stopping_) {
        const bool quick = now - agent_started_at_ < kQuickDeath;
        agent_start_at_ = quick ? now + kJanitorTick : now;
        if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
          LOG_WARN("cluster agent (pid %d) %s; starting another", static_cast<int>(pid), describeExit(status).c_str());
      }
      continue;
    }
    for (size_t slot = 0; slot < procs_.size(); ++slot) {
      if (procs_[slot].state != SlotState::Free && procs_[slot].pid == pid) {
        onWorkerExit(static_cast<shm::WorkerSlot>(slot), status, now);
        break;
      }
    }
  }
}

void Master::onWorkerExit(shm::WorkerSlot slot, int status, Millis now) {
  WorkerProc p = procs_[slot];
  procs_[slot] = WorkerProc{};
  if (p.control_fd >= 0) close(p.control_fd);
  // Its page slots whose requests the origin may still be serving stay
  // counted for as long as the origin may take to answer.
  shm::ReclaimReport r = segment_->reclaimDeadWorker(slot, now + config_->upstream_timeout);
  bool expected = p.state == SlotState::Draining || stopping_;
  bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::string what = describeExit(status);
  auto level = expected && clean ? log::Level::Info : log::Level::Warn;
  const std::string quarantine =
      r.quarantined > 0 ? " (" + std::to_string(r.quarantined) + " in quarantine for " +
                              config::goDurationString(config_->upstream_timeout) + ": the origin may still serve them)"
                        : std::string();
  log::write(level,
             "worker %u (pid %d) %s; reclaimed %lld page slots%s, %lld tickets, %lld asset slots, %lld pass holds, "
             "%lld long-lived connections",
             slot, static_cast<int>(p.pid), what.c_str(), static_cast<long long>(r.page_slots), quarantine.c_str(),
             static_cast<long long>(r.tickets_finished), static_cast<long long>(r.asset_slots),
             static_cast<long long>(r.pass_holds), static_cast<long long>(r.long_lived_slots));

  if (stopping_) {
    if (!clean) exit_code_ = 1;
    return;
  }
  if (p.state == SlotState::Draining) {
    if (p.generation != generation_) {
      bool remaining = std::any_of(procs_.begin(), procs_.end(), [&](const WorkerProc& q) {
        return q.state != SlotState::Free && q.generation == p.generation;
      });
      if (!remaining) LOG_INFO("generation %u drained", p.generation);
    }
    return;
  }
  // A running worker died on its own: replace it, backing off when it keeps
  // dying at startup so a broken worker cannot turn the master into a fork loop.
  segment_->stats().count(shm::Counter::WorkerRestartsTotal);
  if (now - p.started_at < kQuickDeath) {
    backoff_ = backoff_ ? std::min(backoff_ * 2, kBackoffMax) : kBackoffFirst;
    next_spawn_at_ = now + backoff_;
    LOG_WARN("worker %u died %lld ms after start; next start in %lld ms", slot,
             static_cast<long long>(now - p.started_at), static_cast<long long>(backoff_));
  } else {
    backoff_ = 0;
    next_spawn_at_ = now;
  }
}

// ------------------------------------------------------------------ cluster agent

void Master::spawnAgent(Millis now) {
  cluster::AgentContext context;
  context.config = config_;
  context.segment = segment_.get();
  context.master_pid = static_cast<int>(master_pid_);
  for (const BoundListener& l : listeners_) context.close_fds.push_back(l.fd);
  for (const BoundListener& l : admin_listeners_) context.close_fds.push_back(l.fd);
  if (daemon_ready_fd_ >= 0) context.close_fds.push_back(daemon_ready_fd_);
  if (state_lock_fd_ >= 0) context.close_fds.push_back(state_lock_fd_);
  for (const WorkerProc& p : procs_)
    if (p.control_fd >= 0) context.close_fds.push_back(p.control_fd);
  context.drop_privileges = [run_as = run_as_](std::string* error) { return dropPrivileges(run_as, error); };
  pid_t pid = fork();
  if (pid < 0) {
    LOG_ERROR("fork cluster agent: %s", std::strerror(errno));
    agent_start_at_ = now + kJanitorTick;
    return;
  }
  if (pid == 0) cluster::runAgentProcess(context);
  agent_pid_ = pid;
  agent_started_at_ = now;
  LOG_INFO("cluster agent started pid %d for %s (room %s, host %s)", static_cast<int>(pid), config_->cluster.c_str(),
           config_->cluster_room.c_str(), cluster::hostName(segment_->cluster().hostId()).c_str());
}

// A full stop: the agent gives the host's reservation back, then goes.
void Master::stopAgent() {
  if (agent_pid_ == 0) return;
  kill(agent_pid_, SIGINT);
  for (int i = 0; i < 100; ++i) {
    int status = 0;
    if (waitpid(agent_pid_, &status, WNOHANG) == agent_pid_) {
      agent_pid_ = 0;
      return;
    }
    usleep(10'000);
  }
  kill(agent_pid_, SIGKILL);
  waitpid(agent_pid_, nullptr, 0);
  agent_pid_ = 0;
}

// ------------------------------------------------------------------ events

void Master::beginStop(Millis now) {
  if (stopping_) {
    if (!stop_now_) {
      LOG_WARN("second stop signal: killing %d worker(s) now", liveWorkers());
      stop_now_ = true;
      exit_code_ = 1;
      signalWorkers(SIGKILL);
    }
    return;
  }
  LOG_INFO("draining...");
  systemd::notify("STOPPING=1");
  stopping_ = true;
  stop_deadline_ = now + config_->shutdown_grace + kStopKillMargin;
  // Workers already draining after a reload were told once; a second SIGTERM
  // could mean "stop now" to them, so they only get the stop deadline.
  for (size_t slot = 0; slot < procs_.size(); ++slot)
    if (procs_[slot].state == SlotState::Running) drain(static_cast<shm::WorkerSlot>(slot), now, kStopKillMargin);
}

void Master::reload(Millis now) {
  systemd::notify("RELOADING=1\n" + systemd::monotonicUsecField());
  struct Ready {
    ~Ready() { systemd::notify("READY=1"); }
  } ready_when_done;
  config::LoadResult result;
  // Load from the start directory, so relative names resolve as they did at
  // startup even in a daemon that has since moved to "/".
  bool moved = config_->daemon && !start_dir_.empty() && chdir(start_dir_.c_str()) == 0;
  try {
    result = config::load(args_, env_);
  } catch (const std::exception& e) {
    result.errors.push_back(e.what());
  }
  if (moved && chdir("/") != 0) LOG_WARN("chdir /: %s", std::strerror(errno));
  if (result.ok() && (result.action != config::Action::Run || !result.config))
    result.errors.push_back("the command line does not start a server");
  if (!result.ok()) {
    for (const std::string& error : result.errors) LOG_ERROR("reload refused: %s", error.c_str());
    return;
  }
  std::string error;
  if (!checkAccessLog(*result.config, &error)) {
    LOG_ERROR("reload refused: %s", error.c_str());
    return;
  }
  try {
    segment_->checkHeader();  // a new generation only ever maps a segment of this binary's layout
  } catch (const std::exception& e) {
    LOG_ERROR("reload refused: %s", e.what());
    return;
  }
  std::vector<std::string> notes;
  config::ConfigPtr fresh = mergeReloadedConfig(*config_, *result.config, segment_->geometry().worker_slots, &notes);
  for (const std::string& note : notes) LOG_WARN("%s", note.c_str());
  if (fresh->error_log != config_->error_log) {
    if (log::openErrorLog(fresh->error_log)) {
      LOG_INFO("error log now %s", fresh->error_log.empty() ? "stderr" : fresh->error_log.c_str());
    } else {
      LOG_ERROR("reload: -error-log %s: %s; keeping the current error log", fresh->error_log.c_str(),
                std::strerror(errno));
      auto kept = std::make_shared<config::Config>(*fresh);
      kept->error_log = config_->error_log;
      fresh = kept;
    }
  }
  // A cap set at run time (POST /_room/cap) survives unless the file changed cap.
  if (fresh->cap != segment_->pages().configuredCap()) {
    if (fresh->cluster.empty()) {
      segment_->pages().setCap(fresh->cap);
    } else {
      segment_->cluster().setCap(fresh->cap);  // the agent takes it to every host
      segment_->cluster().pushOnNextRound(shm::ClusterLine::kPushCap);
    }
    segment_->pages().setConfiguredCap(fresh->cap);
  }
  adaptiveOnReload(*fresh);
  if (!fresh->cluster.empty())
    segment_->cluster().configure(true, fresh->cluster_fail == "open", fresh->cluster_lease);
  // A mode set by POST /_room/mode survives unless the file changed mode.
  if (applyRoomControl(*segment_, *fresh) && !fresh->cluster.empty())
    segment_->cluster().pushOnNextRound(shm::ClusterLine::kPushMode);
  // A longer -max-queue needs a larger ticket ring: grown now, before the
  // new generation starts, with everyone's place.
  const shm::Geometry have = segment_->geometry();
  shm::Geometry want = largerGeometry(
      have, shm::computeGeometry(fresh->max_queue, fresh->cap, fresh->workers, fresh->asset_users_max));
  want.worker_slots = have.worker_slots;
  if (want.ring_size != have.ring_size || want.client_table_size != have.client_table_size) {
    std::string why;
    const Millis started = monotonicMs();
    if (growLive(want, &why)) {
      LOG_INFO("reload: segment grown from ring %u to ring %u, %lld waiting kept in order, in %lld ms", have.ring_size,
               want.ring_size, static_cast<long long>(segment_->tickets().liveQueueDepth()),
               static_cast<long long>(monotonicMs() - started));
    } else {
      LOG_WARN("reload: max-queue %lld needs a larger segment, which cannot be made now (%s); keeping max-queue %lld",
               static_cast<long long>(fresh->max_queue), why.c_str(), static_cast<long long>(config_->max_queue));
      auto kept = std::make_shared<config::Config>(*fresh);
      kept->max_queue = config_->max_queue;
      fresh = kept;
    }
  }
  config_ = fresh;
  ++generation_;
  raiseFileLimit(*config_);
  segment_->setLongLivedCap(fresh->long_lived_cap);
  segment_->stats().setGeneration(generation_);
  segment_->stats().count(shm::Counter::ReloadsTotal);
  log::setGeneration(generation_);
  LOG_INFO("reload accepted: generation %u", generation_);
  // The agent reads its settings at start: the next one has the new ones.
  if (agent_pid_ != 0) kill(agent_pid_, SIGTERM);
  backoff_ = 0;
  next_spawn_at_ = now;
  next_reap_ = std::min(next_reap_, now + config_->reaper);
  reconcile(now);
}

// SIGUSR2: the binary at the path Concert was started with takes over this
// process (upgrade.h). Checked first; any failure leaves this one serving.
void Master::upgrade(Millis now) {
  LOG_INFO("binary upgrade: checking %s", exe_path_.c_str());
  std::string output;
  if (!checkNewBinary(exe_path_, args_, segment_->fd(), &output)) {
    for (char& c : output)
      if (c == '\n') c = ';';
    LOG_ERROR("binary upgrade refused, the running binary keeps serving: %s",
              output.empty() ? "the new binary failed its check" : output.c_str());
    return;
  }
  Handover h;
  h.segment_fd = segment_->fd();
  h.eventfds = segment_->eventFds();
  for (const BoundListener& l : listeners_) h.listeners.push_back(l.fd);
  for (const BoundListener& l : admin_listeners_) h.admin_listeners.push_back(l.fd);
  for (size_t slot = 0; slot < procs_.size(); ++slot) {
    const WorkerProc& p = procs_[slot];
    if (p.state == SlotState::Free) continue;
    h.workers.push_back(Handover::Worker{static_cast<uint32_t>(slot), p.pid, p.generation, p.child,
                                         p.state == SlotState::Draining, p.control_fd});
  }
  h.generation = generation_;
  h.agent_pid = agent_pid_;
  if (config_->admit_secret_generated) h.secret_fd = secretMemfd(config_->admit_secret);
  systemd::notify("RELOADING=1\n" + systemd::monotonicUsecField());
  LOG_INFO("binary upgrade: executing %s; generation %u serves until the next one is up", exe_path_.c_str(),
           generation_);
  disarmAlarm();
  const std::string why = execWithHandover(exe_path_, args_, h);
  if (h.secret_fd >= 0) close(h.secret_fd);
  LOG_ERROR("binary upgrade: cannot execute %s: %s; the running binary keeps serving", exe_path_.c_str(),
            why.c_str());
  systemd::notify("READY=1");
  next_janitor_ = std::min(next_janitor_, now + kJanitorTick);
}

// A reload that wants a larger segment: every process that maps it is
// parked between two of its events (common/control.h; the cluster agent is
// stopped and started again after), the segment is copied in order into one
// of the larger geometry (shm::Segment::copyInto, every slot's holds with
// it), and each process moves its view to the copy. A worker that does not
// park within a second, or a previous run's worker (no control channel),
// leaves everything as it was.
bool Master::growLive(const shm::Geometry& target, std::string* why) {
  constexpr Millis kParkWithin = 1'000;
  for (const WorkerProc& p : procs_) {
    if (p.state != SlotState::Free && p.control_fd < 0) {
      *why = "workers of a previous run still use it";
      return false;
    }
  }
  if (agent_pid_ != 0) {
    kill(agent_pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 200 && waitpid(agent_pid_, &status, WNOHANG) == 0; ++i) usleep(10'000);
    if (kill(agent_pid_, 0) == 0) {
      kill(agent_pid_, SIGKILL);
      waitpid(agent_pid_, &status, 0);
    }
    agent_pid_ = 0;
    agent_start_at_ = 0;
  }
  std::vector<size_t> asked;
  for (size_t slot = 0; slot < procs_.size(); ++slot) {
    if (procs_[slot].state == SlotState::Free) continue;
    // An answer left over from a grow given up on is not this one's.
    common::Control stale{};
    int passed = -1;
    while (common::receiveControl(procs_[slot].control_fd, &stale, &passed, 0) == 1)
      if (passed >= 0) close(passed);
    if (common::sendControl(procs_[slot].control_fd, common::Control::Park)) asked.push_back(slot);
  }
  std::vector<size_t> parked;
  auto release = [&](common::Control word, int fd) {
    // Given up on: every worker asked goes on, also one that parks late.
    for (size_t slot : word == common::Control::Go ? asked : parked)
      common::sendControl(procs_[slot].control_fd, word, fd);
  };
  const Millis deadline = monotonicMs() + kParkWithin;
  for (size_t slot : asked) {
    common::Control answer{};
    int passed = -1;
    const int got = common::receiveControl(procs_[slot].control_fd, &answer, &passed,
                                           static_cast<int>(std::max<Millis>(0, deadline - monotonicMs())));
    if (passed >= 0) close(passed);
    if (got == 1 && answer == common::Control::Parked) {
      parked.push_back(slot);
    } else if (got != 0) {  // 0: it died; its words stay as it left them and come along
      release(common::Control::Go, -1);
      *why = "worker " + std::to_string(slot) + " did not park within a second";
      return false;
    }
  }
  std::unique_ptr<shm::Segment> grown;
  try {
    grown = config_->state_dir.empty() ? shm::Segment::create(target, 1, 1, 1)
                                       : newStateSegment(config_->state_dir, target, why);
  } catch (const std::exception& e) {
    *why = e.what();
  }
  if (!grown || !segment_->copyInto(*grown, why) ||
      (!config_->state_dir.empty() && !placeStateSegment(config_->state_dir, why))) {
    if (!config_->state_dir.empty()) discardStateSegment(config_->state_dir);
    release(common::Control::Go, -1);
    return false;
  }
  segment_->moveTo(std::move(grown));
  release(common::Control::Move, segment_->fd());
  return true;
}

// Workers of a previous run whose master died (not this process's
// children): gone once their pid is, or once their heartbeat stopped.
void Master::watchForeignWorkers(Millis now) {
  for (size_t slot = 0; slot < procs_.size(); ++slot) {
    const WorkerProc& p = procs_[slot];
    if (p.state == SlotState::Free || p.child) continue;
    const bool alive = processRunning(p.pid);
    const Millis silent = now - segment_->slots().lastHeartbeat(static_cast<shm::WorkerSlot>(slot));
    if (alive && silent <= kHeartbeatTimeout) continue;
    onWorkerExit(static_cast<shm::WorkerSlot>(slot), 0, now);
  }
}

void Master::reopenLogs() {
  if (!log::reopenErrorLog()) LOG_ERROR("reopen error log: %s", std::strerror(errno));
  signalWorkers(SIGUSR1);
  LOG_INFO("reopened log files");
}

// Once a janitor tick: what the origin did since the last one goes to the
// advisor, and to -adaptive while it runs (in open mode only: elsewhere the
// cap does not decide who goes in), whose change of the cap is logged,
// counted and published with what both learned.
void Master::watchOrigin(Millis now, const shm::StatsSnapshot& stats) {
  const shm::HistogramSnapshot pages = segment_->histograms().merged(shm::Histogram::PageFirstByte);
  const OriginTotals totals{pages.count(), pages.sum_micros, stats.page_errors_total, now};
  const OriginTotals seen = std::exchange(origin_seen_, totals);
  if (seen.at == 0 || now <= seen.at) return;
  OriginWindow window;
  window.length = now - seen.at;
  window.pages = totals.pages - seen.pages;
  window.first_byte_us = totals.first_byte_us - seen.first_byte_us;
  window.errors = totals.errors - seen.errors;
  window.cap = static_cast<int32_t>(stats.cap);
  window.in_flight = stats.occupancy;
  window.limited = stats.live_queue_depth > 0 || stats.occupancy >= stats.cap;
  advisor_.observe(window);

  const bool wanted = config_->adaptive && config_->cluster.empty();
  if (!wanted) {
    adaptive_.reset();
  } else if (segment_->capacity().adaptiveStopped()) {
    if (adaptive_) LOG_INFO("adaptive cap stopped: the cap was set at run time (%lld)", static_cast<long long>(stats.cap));
    adaptive_.reset();
  } else if (!adaptive_ || adaptive_->cap() != stats.cap) {
    // Started, resumed, or the cap moved under it (a reload that changed
    // cap): it goes on from the cap there is.
    adaptive_ = std::make_unique<AdaptiveCap>(static_cast<int32_t>(stats.cap), config_->cap_min,
                                              config_->adaptiveCeiling());
    if (adaptive_->cap() != stats.cap && segment_->pages().replaceCap(static_cast<int32_t>(stats.cap), adaptive_->cap()))
      LOG_INFO("adaptive cap %lld -> %d: within -cap-min %d and -cap-max %d", static_cast<long long>(stats.cap),
               adaptive_->cap(), config_->cap_min, config_->adaptiveCeiling());
  } else if (segment_->modes().mode() == shm::RoomMode::Open) {
    const AdaptiveCap::Change change = adaptive_->observe(window);
    if (!change.why.empty()) {
      if (segment_->pages().replaceCap(static_cast<int32_t>(stats.cap), change.cap)) {
        LOG_INFO("adaptive cap %lld -> %d: %s", static_cast<long long>(stats.cap), change.cap, change.why.c_str());
        segment_->stats().count(shm::Counter::AdaptiveChangesTotal);
      }
    }
  }

  shm::CapacityReading reading;
  reading.adaptive = adaptive_ != nullptr;
  if (adaptive_) {
    reading.base_latency_us = adaptive_->baseLatencyUs();
    reading.origin_queue = adaptive_->originQueue();
  }
  const CapacityAdvisor::Advice advice = advisor_.advice();
  reading.recommended_cap = advice.cap;
  reading.knee_latency_us = static_cast<int64_t>(advice.base_latency_us);
  reading.peak_throughput = advice.peak_throughput;
  if (!config_->origin_status.empty()) {
    // The origin says how many processes it has: those plus one, so that
    // one request always waits at its door and none of them idles.
    const OriginStatus status = fetchOriginStatus(config_->origin_status_url, kOriginStatusTimeout);
    if (status.error != origin_status_error_) {
      if (status.ok)
        LOG_INFO("-origin-status %s: read again", config_->origin_status.c_str());
      else
        LOG_WARN("-origin-status %s: %s", config_->origin_status.c_str(), status.error.c_str());
      origin_status_error_ = status.error;
    }
    if (status.ok) {
      reading.origin_active = status.active;
      reading.origin_total = status.total;
      reading.origin_listen_queue = status.listen_queue;
      reading.origin_max_children_reached = status.max_children_reached;
      if (status.total > 0) reading.recommended_cap = status.total + 1;
    }
  }
  segment_->capacity().publish(reading);
}

// A reload that says -adaptive resumes it after a runtime cap stopped it;
// one that does not stops it.
void Master::adaptiveOnReload(const config::Config& fresh) {
  if (!fresh.adaptive || !fresh.cluster.empty()) {
    if (adaptive_) LOG_INFO("adaptive cap stopped: the configuration no longer says adaptive");
    adaptive_.reset();
    return;
  }
  if (segment_->capacity().adaptiveStopped()) {
    segment_->capacity().resumeAdaptive();
    LOG_INFO("adaptive cap resumes from cap %d", segment_->pages().cap());
  }
  // New bounds: it starts again from the cap there is.
  if (fresh.cap_min != config_->cap_min || fresh.adaptiveCeiling() != config_->adaptiveCeiling()) adaptive_.reset();
}

void Master::janitor(Millis now) {
  // Every tick: abandoned first tickets and missed turns (their limits are
  // seconds); every -reaper: the TTL as well.
  shm::SweepLimits limits;
  limits.first_poll = config_->first_poll_grace;
  limits.claim_window = config_->claim_window;
  const bool reap = now >= next_reap_;
  if (reap) {
    limits.ttl = config_->token_ttl;
    next_reap_ = now + config_->reaper;
  }
  if (const int64_t back = segment_->pages().endQuarantine(now); back > 0)
    LOG_INFO("%lld page slots of ended requests back in use", static_cast<long long>(back));
  const shm::SweepReport swept = segment_->tickets().sweep(now, limits);
  if (swept.expired > 0) LOG_INFO("reaper evicted %lld expired tickets", static_cast<long long>(swept.expired));
  if (swept.ghosts > 0)
    LOG_INFO("%lld tickets abandoned: never seen after the first answer", static_cast<long long>(swept.ghosts));
  if (swept.missed > 0)
    LOG_INFO("%lld turns missed: not taken within the claim window", static_cast<long long>(swept.missed));
  // With -cluster the line is the engine's: no block of the ring to open.
  const shm::SaleTick sale = config_->cluster.empty() ? segment_->tickets().saleTick(unixMs()) : shm::SaleTick{};
  if (sale.open && sale.first != logged_block_) {
    logged_block_ = sale.first;
    LOG_INFO("pre-queue open: arrivals take random places in tickets %llu and on",
             static_cast<unsigned long long>(sale.first));
  }
  if (sale.closed)
    LOG_INFO("pre-queue closed: %lld visitors hold their shuffled places", static_cast<long long>(sale.placed));
  if (now >= next_sweep_) {
    segment_->passes().sweep(now, config_->admit_ttl);
    next_sweep_ = now + std::max<Millis>(config_->admit_ttl / 2, kMinPassSweep);
  }
  // The dashboard's history (shm/history.h): this process is its only writer.
  const shm::StatsSnapshot stats = segment_->stats().snapshot(now);
  segment_->history().record(history_.next(time(nullptr), stats,
                                           segment_->histograms().merged(shm::Histogram::QueueWait),
                                           segment_->histograms().merged(shm::Histogram::UpstreamResponse)));
  watchOrigin(now, stats);
  refreshReadiness();
  watchForeignWorkers(now);
  for (size_t slot = 0; slot < procs_.size(); ++slot) {
    WorkerProc& p = procs_[slot];
    if (p.state == SlotState::Free || p.killed) continue;
    Millis silent =
        p.ready ? now - segment_->slots().lastHeartbeat(static_cast<shm::WorkerSlot>(slot)) : now - p.started_at;
    if (silent > kHeartbeatTimeout) {
      LOG_ERROR("worker %zu (pid %d) %s for %lld ms; killing it", slot, p.pid,
                p.ready ? "sent no heartbeat" : "has not become ready", static_cast<long long>(silent));
      kill(p.pid, SIGKILL);
      p.killed = true;
    }
  }
}

}  // namespace

int runMaster(config::ConfigPtr config, std::vector<std::string> args, config::Environment env) {
  Master master(std::move(config), std::move(args), std::move(env));
  return master.run();
}

}  // namespace concert::master
