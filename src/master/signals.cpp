// Signal handlers of the master (see signals.h): async-signal-safe flag
// setters only; all work happens in the master loop.
#include "master/signals.h"

#include <sys/time.h>

namespace concert::master {
namespace {

constexpr int kHandled[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM};

sigset_t g_wait_mask;

void onSignal(int signo) {
  switch (signo) {
    case SIGCHLD: g_signals.child = 1; break;
    case SIGTERM:
    case SIGINT: g_signals.stop = g_signals.stop + 1; break;
    case SIGHUP: g_signals.reload = 1; break;
    case SIGUSR1: g_signals.reopen = 1; break;
    case SIGUSR2: g_signals.upgrade = 1; break;
    case SIGALRM: g_signals.alarm = 1; break;
    default: break;
  }
}

}  // namespace

SignalFlags g_signals;

void installMasterSignals() {
  sigset_t handled;
  sigemptyset(&handled);
  for (int signo : kHandled) sigaddset(&handled, signo);
  sigprocmask(SIG_BLOCK, &handled, &g_wait_mask);
  for (int signo : kHandled) sigdelset(&g_wait_mask, signo);

  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sa.sa_mask = handled;  // handlers never nest, so the counters need no atomics
  sa.sa_flags = SA_RESTART;
  for (int signo : kHandled) sigaction(signo, &sa, nullptr);

  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, nullptr);
}

const sigset_t& masterWaitMask() {
  return g_wait_mask;
}

void disarmAlarm() {
  itimerval off{};
  setitimer(ITIMER_REAL, &off, nullptr);
}

void armAlarm(long ms) {
  if (ms < 1) ms = 1;
  itimerval timer{};
  timer.it_value.tv_sec = ms / 1000;
  timer.it_value.tv_usec = (ms % 1000) * 1000;
  setitimer(ITIMER_REAL, &timer, nullptr);
}

}  // namespace concert::master
