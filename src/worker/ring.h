// The process's io_uring as seen by owners of operations other than streams
// (a listener's accept). Streams use it through Stream itself; the
// ring, its submission rules and its completion loop live in stream.cpp.
//
// An operation's user data is its RingOp record. A record with `done` set
// belongs to another owner: its completion goes to `done`, which frees the
// record. An owner that goes away first sets `owner` to nullptr and cancels
// the operation; `done` then cleans up what the completion carries. What the
// kernel writes after the submission (an accept's peer address) lives in
// the record, which outlives its owner.
#pragma once

#include <liburing.h>
#include <sys/socket.h>

#include "worker/stream.h"

namespace concert::worker {

struct RingOp {
  using Done = void (*)(RingOp* op, int res, unsigned flags);
  Stream* stream = nullptr;  // a stream's operation; nullptr once the stream let go
  bool send = false;
  Buffer bytes;  // a send's bytes: they stay where they are until the completion
  Done done = nullptr;
  void* owner = nullptr;
  sockaddr_storage peer{};  // an accept's peer address
  socklen_t peer_len = 0;
};

// A record for another owner's operation.
RingOp* newRingOp(RingOp::Done done, void* owner);
void freeRingOp(RingOp* op);
// A submission entry; when the queue is full what it holds goes out first.
// nullptr only when even that fails.
io_uring_sqe* ringSqe();
// What was prepared goes out with the end-of-iteration flush.
void ringSubmitSoon();

}  // namespace concert::worker
