// The master's signal plumbing. Handlers only record what arrived in
// sig_atomic_t flags; every signal the master handles stays blocked except
// while the loop sleeps in sigsuspend(), so a flag can never be set between
// the loop's check and its sleep (no lost wake-ups, no races with the loop's
// own state). The loop reads and clears the flags in a fixed order.
#pragma once

#include <csignal>

namespace concert::master {

struct SignalFlags {
  volatile sig_atomic_t child = 0;   // SIGCHLD: reap
  volatile sig_atomic_t stop = 0;    // SIGTERM/SIGINT: how many arrived (2nd = stop now)
  volatile sig_atomic_t reload = 0;  // SIGHUP
  volatile sig_atomic_t reopen = 0;  // SIGUSR1
  volatile sig_atomic_t upgrade = 0; // SIGUSR2: re-execute the binary
  volatile sig_atomic_t alarm = 0;   // SIGALRM: a deadline (janitor, back-off, drain) is due
};

extern SignalFlags g_signals;

// Installs the handlers, blocks the handled signals and ignores SIGPIPE.
// Master only, once, before the first fork; a worker undoes it
// (worker::runWorkerProcess).
void installMasterSignals();

// The mask to sleep with in sigsuspend(): the previous mask minus the
// handled signals.
const sigset_t& masterWaitMask();

// Before the master re-executes itself: the timer outlives exec. The
// handled signals stay blocked across it, so one that arrives meanwhile
// stays pending until the new image has its handlers.
void disarmAlarm();

// Arms a one-shot SIGALRM `ms` from now (at least 1 ms).
void armAlarm(long ms);

}  // namespace concert::master
