// Accepts on the ring or on epoll; see acceptor.h.
#include "worker/acceptor.h"

#include <unistd.h>

#include <cerrno>

#include "worker/ring.h"

namespace concert::worker {

Acceptor::Acceptor(event_base* base, int fd, int tag, Callbacks callbacks, void* arg)
    : base_(base), fd_(fd), tag_(tag), callbacks_(callbacks), arg_(arg) {}

Acceptor::~Acceptor() {
  if (listener_) evconnlistener_free(listener_);
  if (op_ && Stream::ringRunning()) {
    // The completions still to come close what they carry and free the record.
    op_->owner = nullptr;
    if (!cancelling_) {
      if (io_uring_sqe* sqe = ringSqe()) {
        io_uring_prep_cancel(sqe, op_, 0);
        io_uring_sqe_set_data64(sqe, 0);
        ringSubmitSoon();
      }
    }
  }
}

bool Acceptor::start() {
  evutil_make_socket_nonblocking(fd_);
  enabled_ = true;
  if (Stream::ringRunning()) {
    ring_ = true;
    arm();
    return true;
  }
  // 0: the socket listens already (the master set the backlog).
  listener_ = evconnlistener_new(base_, &Acceptor::onListener, this, 0, 0, fd_);
  if (!listener_) return false;
  evconnlistener_set_error_cb(listener_, &Acceptor::onListenerError);
  return true;
}

void Acceptor::enable() {
  enabled_ = true;
  if (!ring_) {
    if (listener_) evconnlistener_enable(listener_);
    return;
  }
  // A cancelled accept still in flight is armed again once it ends.
  if (!op_) arm();
}

void Acceptor::disable() {
  enabled_ = false;
  if (!ring_) {
    if (listener_) evconnlistener_disable(listener_);
    return;
  }
  if (!op_ || cancelling_) return;
  io_uring_sqe* sqe = ringSqe();
  if (!sqe) return;  // the accept ends with the ring; what it accepts meanwhile is refused by the owner
  io_uring_prep_cancel(sqe, op_, 0);
  io_uring_sqe_set_data64(sqe, 0);
  cancelling_ = true;
  ringSubmitSoon();
}

void Acceptor::arm() {
  io_uring_sqe* sqe = ringSqe();
  if (!sqe) {
    enabled_ = false;
    callbacks_.failed(*this, ENOBUFS, arg_);
    return;
  }
  op_ = newRingOp(&Acceptor::onCompletion, this);
  cancelling_ = false;
  op_->peer_len = sizeof op_->peer;
  io_uring_prep_accept(sqe, fd_, reinterpret_cast<sockaddr*>(&op_->peer), &op_->peer_len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
  io_uring_sqe_set_data(sqe, op_);
  ringSubmitSoon();
}

void Acceptor::onCompletion(RingOp* op, int res, unsigned) {
  auto* self = static_cast<Acceptor*>(op->owner);
  sockaddr_storage peer = op->peer;
  freeRingOp(op);
  if (self) {
    self->op_ = nullptr;
    self->completed(res, reinterpret_cast<sockaddr*>(&peer));
  } else if (res >= 0) {
    ::close(res);  // accepted for an owner that is gone
  }
}

void Acceptor::completed(int res, sockaddr* peer) {
  if (res >= 0) callbacks_.accepted(*this, res, peer, arg_);
  // The callback may have disabled accepting, or disabled and enabled it
  // again (which armed a new accept already).
  if (op_) return;
  const bool failure = res < 0 && res != -ECANCELED && res != -ECONNABORTED && res != -EINTR && res != -EAGAIN;
  if (failure && enabled_) {
    enabled_ = false;  // until the owner enables it again
    callbacks_.failed(*this, -res, arg_);
    if (!enabled_ && !op_) callbacks_.settled(*this, arg_);
    return;
  }
  if (enabled_) {
    arm();  // the next connection
  } else {
    callbacks_.settled(*this, arg_);
  }
}

void Acceptor::onListener(evconnlistener*, evutil_socket_t fd, sockaddr* addr, int, void* arg) {
  auto* self = static_cast<Acceptor*>(arg);
  self->callbacks_.accepted(*self, fd, addr, self->arg_);
}

void Acceptor::onListenerError(evconnlistener*, void* arg) {
  auto* self = static_cast<Acceptor*>(arg);
  const int err = EVUTIL_SOCKET_ERROR();
  if (err == EAGAIN || err == EINTR || err == ECONNABORTED) return;
  // As on the ring: off until enabled again (the socket stays readable, so
  // a listener left on would fail again at once).
  self->disable();
  self->callbacks_.failed(*self, err, self->arg_);
}

}  // namespace concert::worker
