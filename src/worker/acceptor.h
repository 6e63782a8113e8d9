// A listening socket's accepts, on whichever data path the worker runs.
//
// With the process's io_uring running (Stream::startRing), one accept stays
// in flight on the socket and goes out again with the loop's next
// submission once it completes; the connection and its peer's address come
// back as a completion, reaped with the streams' ones, so a new connection
// costs no system call of its own. Otherwise libevent's listener accepts on
// epoll.
//
// Not a multishot accept: the ring waits on a listening socket as an
// exclusive waiter, and the kernel hands each connection to the first
// waiter in the socket's queue. A multishot accept keeps its place there,
// so the worker that armed first would take every connection; an accept
// armed again after each connection goes to the back of the queue, and
// the workers take turns (a worker that is busy re-arms later and takes
// fewer). On epoll every worker is woken and the first to call accept()
// wins.
//
// disable() stops accepting: connections stay in the listen backlog for
// another worker. On the ring that cancels the accept, and until the
// cancellation completes the kernel may still hand over a connection it
// accepted before: it reaches the accept callback like any other, and
// settled() tells when none can come any more. The error callback gets what
// stopped accepting on its own (EMFILE, ENFILE, ENOMEM); accepting is then
// off until enable().
#pragma once

#include <event2/event.h>
#include <event2/listener.h>
#include <sys/socket.h>

namespace concert::worker {

struct RingOp;

class Acceptor {
 public:
  struct Callbacks {
    void (*accepted)(Acceptor& from, int fd, sockaddr* addr, void* arg);
    void (*failed)(Acceptor& from, int err, void* arg);
    void (*settled)(Acceptor& from, void* arg);  // disabled, and nothing more can be accepted
  };

  // `fd` listens already; `tag` is the owner's name for it.
  Acceptor(event_base* base, int fd, int tag, Callbacks callbacks, void* arg);
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  // Starts accepting; false when libevent cannot watch the socket.
  bool start();
  void enable();
  void disable();
  // Disabled with no accept in flight.
  bool settled() const { return !enabled_ && !op_; }
  bool onRing() const { return ring_; }
  int fd() const { return fd_; }
  int tag() const { return tag_; }

 private:
  static void onListener(evconnlistener*, evutil_socket_t fd, sockaddr* addr, int len, void* arg);
  static void onListenerError(evconnlistener*, void* arg);
  static void onCompletion(RingOp* op, int res, unsigned flags);
  void arm();
  void completed(int res, sockaddr* peer);

  event_base* base_;
  int fd_;
  int tag_;
  Callbacks callbacks_;
  void* arg_;
  evconnlistener* listener_ = nullptr;
  bool ring_ = false;
  bool enabled_ = false;
  RingOp* op_ = nullptr;     // the accept in flight
  bool cancelling_ = false;  // its cancellation is queued
};

}  // namespace concert::worker
