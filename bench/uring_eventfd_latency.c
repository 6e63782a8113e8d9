// How long after a socket becomes readable an io_uring's registered eventfd
// wakes an epoll_wait, for a ring set up with the given flags: the delay a
// loop that sleeps in epoll_wait (as Concert's workers do) adds to every
// receive it has in the ring.
//
// A receive on one end of a TCP connection over loopback is in the ring; a
// thread writes a byte to the other end every 100 ms; the main thread sleeps
// in epoll_wait on the eventfd (edge-triggered) and prints the time from the
// write to its return, and whether the completion was already there. With
// cooperative task work the wait returns EINTR (n=-1) when the kernel wants
// to finish the receive, and the eventfd fires on the next one.
//
// Built with the bench programs:
//   uring_eventfd_latency          SINGLE_ISSUER | COOP_TASKRUN | TASKRUN_FLAG (Concert's ring)
//   uring_eventfd_latency defer    SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <liburing.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int sender = -1;
static volatile double sent_at;

static double nowUs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void* writer(void* arg) {
  (void)arg;
  for (int i = 0; i < 5; ++i) {
    usleep(100000);
    sent_at = nowUs();
    if (write(sender, "x", 1) != 1) return NULL;
  }
  return NULL;
}

int main(int argc, char** argv) {
  const int defer = argc > 1 && strcmp(argv[1], "defer") == 0;
  struct io_uring_params params;
  memset(&params, 0, sizeof params);
  params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_TASKRUN_FLAG |
                 (defer ? IORING_SETUP_DEFER_TASKRUN : IORING_SETUP_COOP_TASKRUN);
  struct io_uring ring;
  int rc = io_uring_queue_init_params(64, &ring, &params);
  if (rc < 0) {
    fprintf(stderr, "io_uring_setup: %s\n", strerror(-rc));
    return 1;
  }
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(listener, (struct sockaddr*)&addr, sizeof addr) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, (struct sockaddr*)&addr, &len) != 0)
    return 1;
  sender = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(sender, (struct sockaddr*)&addr, len) != 0) return 1;
  int receiver = accept(listener, NULL, NULL);

  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  io_uring_register_eventfd(&ring, efd);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN | EPOLLET};
  epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev);

  pthread_t thread;
  pthread_create(&thread, NULL, writer, NULL);
  char buf[64];
  printf("%s task work\n", defer ? "deferred" : "cooperative");
  for (int i = 0; i < 5; ++i) {
    struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_recv(sqe, receiver, buf, sizeof buf, 0);
    io_uring_submit_and_get_events(&ring);
    int n;
    // An EINTR return is the kernel asking to finish the receive; the
    // eventfd fires on the next wait.
    while ((n = epoll_wait(ep, &ev, 1, 1000)) < 0) {
    }
    const double woke = nowUs();
    io_uring_submit_and_get_events(&ring);
    printf("  eventfd after %8.0f us, completion there: %u\n", woke - sent_at, io_uring_cq_ready(&ring));
    struct io_uring_cqe* cqe;
    while (io_uring_peek_cqe(&ring, &cqe) == 0) io_uring_cqe_seen(&ring, cqe);
  }
  pthread_join(thread, NULL);
  return 0;
}
