// What the kernel charges a proxy on this machine, apart from any proxy:
//
//   bare system call      getppid(2) in a loop: entering and leaving the kernel
//   epoll_wait, 0 timeout one socket that is not ready: the poll a busy loop turn costs
//   io_uring_enter        nothing to submit, nothing to wait for: the floor of the
//                         io_uring data path's one enter per loop turn
//   wake-up, two CPUs     two processes on different CPUs pass a byte back and
//                         forth through two pipes; each round trip is two writes,
//                         two reads and two wake-ups of a process sleeping in read
//   wake-up, one CPU      the same with both processes on the first CPU (a
//                         context switch instead of a cross-CPU wake-up)
//
// A wake-up's latency is (round trip - 2 x write - 2 x read) / 2, the reads
// and writes measured alone on pipes that never block; its CPU cost is the
// same with the CPU time both processes spent (getrusage) instead of the
// wall-clock time. Prints one line each, in nanoseconds. Built with the bench programs (build/bench/syscall_cost);
// `syscall_cost [CPU_A CPU_B]` (default 0 1).
#define _GNU_SOURCE
#include <liburing.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double nowNs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) perror("sched_setaffinity");
}

static double cpuNs(const struct rusage* u) {
  return ((double)u->ru_utime.tv_sec + (double)u->ru_stime.tv_sec) * 1e9 +
         ((double)u->ru_utime.tv_usec + (double)u->ru_stime.tv_usec) * 1e3;
}

// Nanoseconds per round trip between this process on cpu_a and a child on
// cpu_b; *cpu: CPU nanoseconds both spent per round trip (warm-up included
// on the child's side, a thousandth of the rounds).
static double pingPong(int cpu_a, int cpu_b, int rounds, double* cpu) {
  int there[2], back[2];
  if (pipe(there) != 0 || pipe(back) != 0) {
    perror("pipe");
    exit(1);
  }
  pid_t child = fork();
  char c = 'x';
  if (child == 0) {
    pin(cpu_b);
    for (int i = 0; i < rounds + 1000; ++i) {
      if (read(there[0], &c, 1) != 1 || write(back[1], &c, 1) != 1) _exit(1);
    }
    _exit(0);
  }
  pin(cpu_a);
  double start = 0;
  struct rusage before, after, child_usage;
  for (int i = 0; i < rounds + 1000; ++i) {
    if (i == 1000) {  // the first thousand warm up
      start = nowNs();
      getrusage(RUSAGE_SELF, &before);
    }
    if (write(there[1], &c, 1) != 1 || read(back[0], &c, 1) != 1) exit(1);
  }
  double ns = (nowNs() - start) / rounds;
  getrusage(RUSAGE_SELF, &after);
  wait4(child, NULL, 0, &child_usage);
  *cpu = (cpuNs(&after) - cpuNs(&before) + cpuNs(&child_usage)) / rounds;
  close(there[0]);
  close(there[1]);
  close(back[0]);
  close(back[1]);
  return ns;
}

int main(int argc, char** argv) {
  int cpu_a = argc > 2 ? atoi(argv[1]) : 0;
  int cpu_b = argc > 2 ? atoi(argv[2]) : 1;
  const int n = 2000000;
  pin(cpu_a);

  double start = nowNs();
  for (int i = 0; i < n; ++i) syscall(SYS_getppid);
  const double bare = (nowNs() - start) / n;

  int ep = epoll_create1(0);
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  struct epoll_event ev = {.events = EPOLLIN};
  epoll_ctl(ep, EPOLL_CTL_ADD, sv[0], &ev);
  start = nowNs();
  for (int i = 0; i < n; ++i) epoll_wait(ep, &ev, 1, 0);
  const double poll0 = (nowNs() - start) / n;

  double enter = -1;
  struct io_uring ring;
  if (io_uring_queue_init(64, &ring, 0) == 0) {
    start = nowNs();
    for (int i = 0; i < n; ++i) syscall(__NR_io_uring_enter, ring.ring_fd, 0, 0, 0, NULL, 0);
    enter = (nowNs() - start) / n;
    io_uring_queue_exit(&ring);
  }

  // A write and a read on a pipe that never blocks: what a ping-pong round
  // spends besides the wake-ups.
  int p[2];
  if (pipe(p) != 0) return 1;
  char c = 'x';
  const int m = 500000;
  start = nowNs();
  for (int i = 0; i < m; ++i) {
    if (write(p[1], &c, 1) != 1 || read(p[0], &c, 1) != 1) return 1;
  }
  const double write_read = (nowNs() - start) / m;

  const int rounds = 100000;
  double cross_cpu, same_cpu;
  const double cross = pingPong(cpu_a, cpu_b, rounds, &cross_cpu);
  const double same = pingPong(cpu_a, cpu_a, rounds, &same_cpu);

  printf("bare system call (getppid)            %8.0f ns\n", bare);
  printf("epoll_wait, timeout 0, nothing ready  %8.0f ns\n", poll0);
  if (enter >= 0)
    printf("io_uring_enter, nothing to do         %8.0f ns\n", enter);
  else
    printf("io_uring_enter                        unavailable\n");
  printf("pipe write + read, no wait            %8.0f ns\n", write_read);
  printf("ping-pong round trip, CPUs %d and %d    %8.0f ns\n", cpu_a, cpu_b, cross);
  printf("  one cross-CPU wake-up, latency       %8.0f ns\n", (cross - 2 * write_read) / 2);
  printf("  CPU of both sides per round trip    %8.0f ns\n", cross_cpu);
  printf("  one cross-CPU wake-up, CPU          %8.0f ns\n", (cross_cpu - 2 * write_read) / 2);
  printf("ping-pong round trip, CPU %d only      %8.0f ns\n", cpu_a, same);
  printf("  one same-CPU switch, latency        %8.0f ns\n", (same - 2 * write_read) / 2);
  printf("  CPU per round trip                  %8.0f ns\n", same_cpu);
  return 0;
}
