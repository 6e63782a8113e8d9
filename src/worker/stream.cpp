// Edge-triggered sockets with gathered writes; see stream.h.
#include "worker/stream.h"

#include "worker/ring.h"

#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace concert::worker {

namespace {

// false when the socket refused one of the options.
bool enableKeepAlive(int fd) {
  int one = 1;
  int idle = kKeepAliveIdleSeconds;
  int interval = kKeepAliveIntervalSeconds;
  int count = kKeepAliveProbes;
  bool ok = setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) == 0;
  ok = setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) == 0 && ok;
  ok = setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval) == 0 && ok;
  return setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count) == 0 && ok;
}

}  // namespace

bool setConnectionOptions(int fd) {
  int one = 1;  // messages are written whole; small ones must not wait for Nagle
  const bool nodelay = setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0;
  return enableKeepAlive(fd) && nodelay;
}

namespace {

constexpr size_t kReadChunk = 16 * 1024;  // free space ensured before a read
constexpr size_t kMaxRead = 64 * 1024;    // most bytes taken in one read

// The streams written since the last flush, and the event that flushes them
// at the end of the loop iteration. One event loop per worker process.
struct FlushQueue {
  event_base* base = nullptr;
  event* ev = nullptr;
  std::vector<Stream*> dirty;
  bool flushing = false;
  size_t streams = 0;  // alive; the last one to go releases the event
};

// Buffers start as one 16 KiB block from a small per-thread free list:
// connections that go idle give their blocks back (Stream::trim) and the
// next request takes one again without touching malloc. A buffer that needs
// more grows a block at a time (never by doubling), to what it holds; the
// input of a stream that reads at most kSmall ahead (a connection waiting
// in line) starts at kSmall.
constexpr size_t kBlock = 16 * 1024;
constexpr size_t kSmall = 4 * 1024;
constexpr size_t kMaxFreeBlocks = 256;

struct BlockList {
  std::vector<char*> free;
  ~BlockList() {
    for (char* b : free) std::free(b);
  }
};

BlockList& blocks() {
  thread_local BlockList list;
  return list;
}

char* takeBlock() {
  BlockList& list = blocks();
  if (list.free.empty()) return static_cast<char*>(std::malloc(kBlock));
  char* b = list.free.back();
  list.free.pop_back();
  return b;
}

void giveBlock(char* b, size_t cap) {
  BlockList& list = blocks();
  if (cap == kBlock && list.free.size() < kMaxFreeBlocks)
    list.free.push_back(b);
  else
    std::free(b);
}

FlushQueue& flushQueue() {
  static FlushQueue queue;
  return queue;
}

void onFlush(evutil_socket_t, short, void*) {
  Stream::flushAll();
}

// The flush event of `base`'s loop, made active for the end of this
// iteration (a no-op while the flush runs: it looks at everything queued).
void activateFlush(event_base* base) {
  FlushQueue& q = flushQueue();
  if (q.base != base) {
    if (q.ev) event_free(q.ev);
    q.base = base;
    q.ev = event_new(base, -1, 0, &onFlush, nullptr);
    q.dirty.clear();
  }
  if (!q.flushing && q.ev) event_active(q.ev, EV_TIMEOUT, 0);
}

void forgetFlushLoop() {
  FlushQueue& q = flushQueue();
  if (q.ev) event_free(q.ev);
  q.ev = nullptr;
  q.base = nullptr;
  q.dirty.clear();
}

std::string tlsErrorText(const char* context) {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return context;
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

// The io_uring of this process (see stream.h). Receives take one of
// kRingBuffers buffers of kRingBufferSize bytes, which the owner's input
// copies at once and gives back; they are touched when the ring starts, so
// the process's memory does not grow with the connections that use them.
// A receive that finds every buffer taken (more connections became
// readable at once than there are buffers: 2.5 % of receives with 64 under
// 100 busy connections) goes out again, so there are enough for a busy
// worker's batch.
constexpr unsigned kRingEntries = 1024;
constexpr unsigned kRingBuffers = 128;
constexpr unsigned kRingBufferSize = 8 * 1024;
constexpr uint16_t kBufferGroup = 0;
// The kernel finishes a socket operation in this process's context the next
// time it enters the kernel, without an interrupt when it is running; the
// flag tells when such work is waiting. (Deferring that work to
// io_uring_enter alone, IORING_SETUP_DEFER_TASKRUN, signals the eventfd
// 15-35 ms late on 6.18 (bench/uring_eventfd_latency.c): no use for a loop
// that sleeps in epoll_wait.)
constexpr unsigned kRingFlags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG |
                                IORING_SETUP_SUBMIT_ALL | IORING_SETUP_CQSIZE;

struct Ring {
  io_uring uring{};
  bool running = false;
  event_base* base = nullptr;
  event* ev = nullptr;  // the eventfd: work or completions waiting
  int efd = -1;
  io_uring_buf_ring* buffers = nullptr;
  char* memory = nullptr;
  std::vector<RingOp*> all;    // every operation record made
  std::vector<RingOp*> spare;  // those free to reuse
};

Ring& ring() {
  static Ring r;
  return r;
}

std::string errnoText(const char* call, int err) {
  return std::string(call) + ": " + std::strerror(err);
}

// A ring with kRingFlags, and the operations the streams use.
bool setUpRing(io_uring* uring, std::string* error) {
  io_uring_params params{};
  params.flags = kRingFlags;
  params.cq_entries = 4 * kRingEntries;
  int rc = io_uring_queue_init_params(kRingEntries, uring, &params);
  if (rc < 0) {
    *error = errnoText("io_uring_setup", -rc);
    return false;
  }
  const char* missing = nullptr;
  if (!(params.features & IORING_FEAT_FAST_POLL) || !(params.features & IORING_FEAT_NODROP)) missing = "poll-driven sockets";
  io_uring_probe* probe = io_uring_get_probe_ring(uring);
  if (!probe) {
    missing = "the operation probe";
  } else {
    for (int op : {IORING_OP_RECV, IORING_OP_SEND, IORING_OP_ASYNC_CANCEL, IORING_OP_ACCEPT, IORING_OP_CLOSE})
      if (!io_uring_opcode_supported(probe, op)) missing = "recv, send, accept, close or cancel";
    io_uring_free_probe(probe);
  }
  if (missing) {
    *error = std::string("the kernel's io_uring lacks ") + missing;
    io_uring_queue_exit(uring);
    return false;
  }
  return true;
}

io_uring_sqe* takeSqe() {
  Ring& r = ring();
  io_uring_sqe* sqe = io_uring_get_sqe(&r.uring);
  if (!sqe) {  // a full submission queue goes out early
    io_uring_submit(&r.uring);
    sqe = io_uring_get_sqe(&r.uring);
  }
  return sqe;
}

bool ringWorkWaiting() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return IO_URING_READ_ONCE(*ring().uring.sq.kflags) & IORING_SQ_TASKRUN;
}

// Submits what was prepared and runs the work waiting in the kernel. The
// eventfd stays quiet meanwhile: the completions this posts (a send that
// went out at once) need no loop turn woken for them, and the caller looks
// at the ring again right after (ringPending).
void enterRing() {
  Ring& r = ring();
  io_uring_cq_eventfd_toggle(&r.uring, false);
  io_uring_submit_and_get_events(&r.uring);
  io_uring_cq_eventfd_toggle(&r.uring, true);
}

bool ringPending() {
  return io_uring_cq_ready(&ring().uring) || ringWorkWaiting();
}

void giveBackBuffer(unsigned id) {
  Ring& r = ring();
  io_uring_buf_ring_add(r.buffers, r.memory + static_cast<size_t>(id) * kRingBufferSize, kRingBufferSize,
                        static_cast<unsigned short>(id), io_uring_buf_ring_mask(kRingBuffers), 0);
  io_uring_buf_ring_advance(r.buffers, 1);
}

RingOp* newOp(Stream* stream, bool send) {
  Ring& r = ring();
  RingOp* op;
  if (r.spare.empty()) {
    op = new RingOp;
    r.all.push_back(op);
  } else {
    op = r.spare.back();
    r.spare.pop_back();
  }
  op->stream = stream;
  op->send = send;
  return op;
}

void freeOp(RingOp* op) {
  op->bytes.release();
  op->stream = nullptr;
  op->done = nullptr;
  op->owner = nullptr;
  ring().spare.push_back(op);
}

}  // namespace

RingOp* newRingOp(RingOp::Done done, void* owner) {
  RingOp* op = newOp(nullptr, false);
  op->done = done;
  op->owner = owner;
  return op;
}

void freeRingOp(RingOp* op) {
  freeOp(op);
}

io_uring_sqe* ringSqe() {
  return takeSqe();
}

void ringSubmitSoon() {
  if (ring().running) activateFlush(ring().base);
}

// ------------------------------------------------------------------ Buffer

Buffer::~Buffer() {
  release();
}

void Buffer::swap(Buffer& other) {
  std::swap(buf_, other.buf_);
  std::swap(cap_, other.cap_);
  std::swap(begin_, other.begin_);
  std::swap(end_, other.end_);
}

void Buffer::release() {
  if (buf_) giveBlock(buf_, cap_);
  buf_ = nullptr;
  cap_ = begin_ = end_ = 0;
}

void Buffer::shrink() {
  const size_t used = size();
  if (used == 0) {
    release();
    return;
  }
  if (cap_ <= kSmall || used > kSmall) return;
  char* small = static_cast<char*>(std::malloc(kSmall));
  if (!small) return;
  std::memcpy(small, buf_ + begin_, used);
  giveBlock(buf_, cap_);
  buf_ = small;
  cap_ = kSmall;
  begin_ = 0;
  end_ = used;
}

char* Buffer::reserve(size_t len, bool small) {
  if (cap_ - end_ >= len) return buf_ + end_;
  const size_t used = size();
  if (begin_ > 0 && cap_ - used >= len) {  // room enough once the unread bytes move to the front
    std::memmove(buf_, buf_ + begin_, used);
    begin_ = 0;
    end_ = used;
    return buf_ + end_;
  }
  const size_t need = used + len;
  const size_t cap = small && cap_ == 0 && need <= kSmall ? kSmall : (need + kBlock - 1) / kBlock * kBlock;
  char* grown = cap == kBlock ? takeBlock() : static_cast<char*>(std::malloc(cap));
  if (!grown) throw std::bad_alloc();
  if (used) std::memcpy(grown, buf_ + begin_, used);
  if (buf_) giveBlock(buf_, cap_);
  buf_ = grown;
  cap_ = cap;
  begin_ = 0;
  end_ = used;
  return buf_ + end_;
}

void Buffer::append(const void* data, size_t len) {
  if (len == 0) return;
  std::memcpy(reserve(len), data, len);
  end_ += len;
}

void Buffer::appendChunkHeader(size_t len) {
  char text[24];
  int n = 0;
  static constexpr char kHex[] = "0123456789abcdef";
  char digits[16];
  do {
    digits[n++] = kHex[len & 0xf];
    len >>= 4;
  } while (len);
  int at = 0;
  while (n) text[at++] = digits[--n];
  text[at++] = '\r';
  text[at++] = '\n';
  append(text, static_cast<size_t>(at));
}

void Buffer::drain(size_t len) {
  begin_ += std::min(len, size());
  if (begin_ == end_) begin_ = end_ = 0;
}

// ------------------------------------------------------------------ Stream

Stream::Stream(event_base* base) : base_(base) {
  ++flushQueue().streams;
}

Stream::~Stream() {
  close();
  if (destroyed_) *destroyed_ = true;
  FlushQueue& q = flushQueue();
  // No stream left on this loop: forget it, so that a later loop (a new
  // event_base, perhaps at the same address) gets an event of its own. With
  // the ring running the flush also submits operations that are not a
  // stream's (a listener's accept, its cancellation): the event stays until
  // the ring stops.
  if (--q.streams == 0 && !q.flushing && !ring().running) forgetFlushLoop();
}

void Stream::setCallbacks(DataCallback read, DataCallback write, EventCallback event, void* arg) {
  read_cb_ = read;
  write_cb_ = write;
  event_cb_ = event;
  arg_ = arg;
}

bool Stream::registerEvent() {
  ev_ = event_new(base_, fd_, EV_READ | EV_WRITE | EV_CLOSED | EV_ET | EV_PERSIST, &Stream::onEvent, this);
  return ev_ && event_add(ev_, nullptr) == 0;
}

bool Stream::attach(int fd) {
  // Accepted sockets are non-blocking and close-on-exec already (acceptor.h).
  fd_ = fd;
  connected_ = true;
  if (ringRunning()) {
    ring_ = true;
    armRecv();
    return true;
  }
  if (!registerEvent()) {
    close();
    return false;
  }
  return true;
}

bool Stream::connect(const sockaddr* addr, socklen_t len, SSL* ssl, Millis timeout, std::string* error) {
  ssl_ = ssl;
  fd_ = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    error->assign("socket: ").append(std::strerror(errno));
    close();
    return false;
  }
  setConnectionOptions(fd_);
  if (::connect(fd_, addr, len) < 0 && errno != EINPROGRESS) {
    error->assign("connect: ").append(std::strerror(errno));
    close();
    return false;
  }
  connecting_ = true;
  if (!registerEvent()) {
    error->assign("cannot watch the connection");
    close();
    return false;
  }
  connect_timer_ = evtimer_new(base_, &Stream::onConnectTimeout, this);
  if (connect_timer_) {
    timeval tv{static_cast<time_t>(timeout / 1000), static_cast<suseconds_t>((timeout % 1000) * 1000)};
    evtimer_add(connect_timer_, &tv);
  }
  return true;
}

void Stream::close() {
  if (ring_) cancelOps();
  if (dirty_) {
    dirty_ = false;
    for (Stream*& s : flushQueue().dirty)
      if (s == this) s = nullptr;
  }
  if (ev_) {
    event_free(ev_);
    ev_ = nullptr;
  }
  if (connect_timer_) {
    event_free(connect_timer_);
    connect_timer_ = nullptr;
  }
  if (ssl_) {
    SSL_free(ssl_);
    ssl_ = nullptr;
  }
  if (fd_ >= 0) {
    // On the ring the close goes out with the iteration's other operations.
    io_uring_sqe* sqe = ring_ && ringRunning() ? takeSqe() : nullptr;
    if (sqe) {
      io_uring_prep_close(sqe, fd_);
      io_uring_sqe_set_data64(sqe, 0);
      activateFlush(ring().base);
    } else {
      ::close(fd_);
    }
    fd_ = -1;
  }
  in_.release();
  out_.release();
  connecting_ = handshaking_ = connected_ = false;
  read_enabled_ = false;
  ring_ = unread_ = eof_pending_ = ring_full_ = false;
}

void Stream::enableRead() {
  if (read_enabled_ || fd_ < 0 || eof_) return;
  read_enabled_ = true;
  if (ring_) {
    // What arrived while reading was off is announced in this loop
    // iteration, as an edge would be.
    if (unread_ || eof_pending_) {
      if (!ev_) ev_ = event_new(base_, -1, 0, &Stream::onEvent, this);
      if (ev_) event_active(ev_, EV_READ, 0);
    } else {
      armRecv();
    }
    return;
  }
  // The edge that announced pending bytes may have passed while reading was
  // off: read them in this loop iteration.
  if (readable_ && !connecting_ && !handshaking_) event_active(ev_, EV_READ, 0);
}

void Stream::consume(size_t len) {
  const bool was_full = in_.size() >= read_limit_;
  in_.drain(len);
  if (ring_) {
    if (was_full) armRecv();
    return;
  }
  if (was_full && in_.size() < read_limit_ && readable_ && read_enabled_ && ev_) event_active(ev_, EV_READ, 0);
}

// Where `len` more output bytes go: behind the bytes of the send in flight
// while its block has room for them, so that a connection whose peer reads
// slowly keeps one block, not two (they go out when that send completes;
// the bytes in flight do not move), else the output.
Buffer& Stream::outputFor(size_t len) {
  if (send_op_ && out_.empty() && send_op_->bytes.spare() >= len) return send_op_->bytes;
  return out_;
}

void Stream::wrote() {
  if (send_op_) sending_ = send_op_->bytes.size();
  markDirty();
}

constexpr size_t kChunkFraming = 16 + 2 + 2;  // hex digits of a size_t, CRLF, CRLF

void Stream::write(const void* data, size_t len) {
  if (fd_ < 0 || len == 0) return;
  outputFor(len).append(data, len);
  wrote();
}

void Stream::writeChunkHeader(size_t len) {
  if (fd_ < 0) return;
  outputFor(kChunkFraming).appendChunkHeader(len);
  wrote();
}

void Stream::writeChunk(const void* data, size_t len) {
  if (fd_ < 0 || len == 0) return;
  Buffer& out = outputFor(len + kChunkFraming);
  out.appendChunkHeader(len);
  out.append(data, len);
  out.append("\r\n", 2);
  wrote();
}

void Stream::writeFrom(Stream& source, size_t len) {
  len = std::min(len, source.in_.size());
  write(source.in_.data(), len);
  source.consume(len);
}

void Stream::trim() {
  in_.shrink();
  if (out_.empty()) out_.release();
}

void Stream::setReadLimit(size_t limit) {
  const bool was_full = in_.size() >= read_limit_;
  read_limit_ = limit ? limit : SIZE_MAX;
  if (ring_) {
    if (was_full) armRecv();
    return;
  }
  if (was_full && in_.size() < read_limit_ && readable_ && read_enabled_ && ev_) event_active(ev_, EV_READ, 0);
}

// A system call on both paths: the ring runs a shutdown in a kernel worker
// thread, where it could come after a close submitted behind it, and a
// close with the FIN not yet sent may reset the connection before the peer
// has read the response.
void Stream::shutdownWrite() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

void Stream::markDirty() {
  if (dirty_) return;
  dirty_ = true;
  activateFlush(base_);
  flushQueue().dirty.push_back(this);
}

void Stream::flushAll() {
  FlushQueue& q = flushQueue();
  q.flushing = true;
  // Indexing, not iterators: a write callback may add streams to the list,
  // and close() nulls the entry of a stream that goes away.
  for (size_t i = 0; i < q.dirty.size(); ++i) {
    Stream* s = q.dirty[i];
    if (!s) continue;
    q.dirty[i] = nullptr;
    s->dirty_ = false;
    if (!s->connecting_ && !s->handshaking_) s->flushOutput();
  }
  q.dirty.clear();
  q.flushing = false;
  Ring& r = ring();
  if (!r.running) return;
  // The one io_uring_enter of the iteration: the sends just prepared, the
  // receives armed and the cancellations queued since the last one.
  if (io_uring_sq_ready(&r.uring) || ringWorkWaiting()) enterRing();
  if (ringPending()) event_active(r.ev, EV_TIMEOUT, 0);
}

// ------------------------------------------------------------------ events

void Stream::onEvent(evutil_socket_t, short what, void* arg) {
  static_cast<Stream*>(arg)->handle(what);
}

void Stream::onConnectTimeout(evutil_socket_t, short, void* arg) {
  auto* s = static_cast<Stream*>(arg);
  if (!s->connecting_ && !s->handshaking_) return;
  s->error_reason_ = "dial timeout";
  s->read_enabled_ = false;
  s->connecting_ = s->handshaking_ = false;
  s->notifyEvent(kTimeout);
}

void Stream::handle(short what) {
  ++events_handled_;
  if (fd_ < 0) return;
  if (connecting_) {
    finishConnect();
    return;
  }
  if (handshaking_) {
    handshake();
    return;
  }
  if (ring_) {
    announce();
    return;
  }
  if (what & EV_CLOSED) peer_closed_ = true;
  if (what & (EV_READ | EV_CLOSED)) readable_ = true;
  if (!out_.empty() && !flushOutput()) return;
  if (readable_ && read_enabled_) readInput();
}

void Stream::finishConnect() {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
  connecting_ = false;
  if (err) {
    fail(err);
    notifyEvent(kError);
    return;
  }
  if (ssl_) {
    SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_set_fd(ssl_, fd_);
    SSL_set_connect_state(ssl_);
    handshaking_ = true;
    handshake();
    return;
  }
  established();
}

// TCP (and TLS) is up: stop the dial timer, tell the owner, send what was
// written meanwhile.
void Stream::established() {
  connected_ = true;
  if (connect_timer_) evtimer_del(connect_timer_);
  if (!ssl_ && ringRunning()) useRing();
  if (!notifyEvent(kConnected)) return;
  if (!out_.empty()) flushOutput();
}

void Stream::handshake() {
  ERR_clear_error();
  int rc = SSL_do_handshake(ssl_);
  if (rc == 1) {
    handshaking_ = false;
    established();
    return;
  }
  int e = SSL_get_error(ssl_, rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;
  handshaking_ = false;
  fail(e == SSL_ERROR_SYSCALL && errno ? errno : 0, "TLS handshake failed");
  notifyEvent(kError);
}

void Stream::fail(int err, const char* tls_context) {
  if (tls_context) {
    error_reason_ = tlsErrorText(tls_context);
    if (error_reason_ == tls_context && err) error_reason_ = std::strerror(err);
  } else {
    error_reason_ = err ? std::strerror(err) : "connection error";
  }
  errno = err;
  read_enabled_ = false;
  readable_ = false;
  out_.clear();
}

void Stream::readInput() {
  // Each read is handed to the owner before the next one, so what a stream
  // buffers stays near one read beyond the owner's own limits.
  while (read_enabled_ && readable_ && in_.size() < read_limit_) {
    // Never past the read limit: what a stream holds unread is bounded by it.
    const size_t wanted = std::min(kReadChunk, read_limit_ - in_.size());
    char* at = in_.reserve(wanted, read_limit_ <= kSmall);
    const size_t room = std::min({in_.spare(), kMaxRead, read_limit_ - in_.size()});
    ssize_t n;
    if (ssl_) {
      ERR_clear_error();
      int rc = SSL_read(ssl_, at, static_cast<int>(room));
      if (rc > 0) {
        n = rc;
      } else {
        int e = SSL_get_error(ssl_, rc);
        if (e == SSL_ERROR_WANT_READ) {
          readable_ = false;
          return;
        }
        if (e == SSL_ERROR_WANT_WRITE) return;  // the next EPOLLOUT edge retries
        if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0) ||
            (e == SSL_ERROR_SSL && ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
          // A close without close_notify ends the stream like a TCP FIN:
          // the framing of the message tells whether anything was cut.
          ERR_clear_error();
          n = 0;
        } else {
          fail(e == SSL_ERROR_SYSCALL ? errno : 0, "TLS read failed");
          notifyEvent(kError);
          return;
        }
      }
    } else {
      n = ::read(fd_, at, room);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          readable_ = false;
          return;
        }
        fail(errno);
        notifyEvent(kError);
        return;
      }
    }
    if (n == 0) {
      eof_ = true;
      readable_ = false;
      read_enabled_ = false;
      notifyEvent(kEof);
      return;
    }
    in_.commit(static_cast<size_t>(n));
    // A short read drained the socket; unless the peer has closed (then the
    // FIN is read too), the next bytes bring a new edge.
    if (!ssl_ && static_cast<size_t>(n) < room && !peer_closed_) readable_ = false;
    if (!notifyRead()) return;
  }
}

bool Stream::flushOutput() {
  if (fd_ < 0) return false;
  if (connecting_ || handshaking_) return true;
  if (ring_) {
    submitSend();
    prepareRecv();
    return true;
  }
  bool wrote = false;
  while (!out_.empty()) {
    ssize_t n;
    const size_t size = out_.size();
    if (ssl_) {
      ERR_clear_error();
      int rc = SSL_write(ssl_, out_.data(), static_cast<int>(std::min<size_t>(size, INT_MAX)));
      if (rc <= 0) {
        int e = SSL_get_error(ssl_, rc);
        if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) break;
        fail(e == SSL_ERROR_SYSCALL ? errno : 0, "TLS write failed");
        return notifyEvent(kError);
      }
      n = rc;
    } else {
      n = ::send(fd_, out_.data(), size, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        fail(errno);
        return notifyEvent(kError);
      }
    }
    out_.drain(static_cast<size_t>(n));
    wrote = true;
    // The socket took less than offered: its buffer is full, and the next
    // EPOLLOUT edge says when there is room again.
    if (!ssl_ && static_cast<size_t>(n) < size) break;
  }
  // Only a flush that leaves bytes behind reads the clock.
  if (out_.empty())
    stalled_since_ = 0;
  else if (wrote || stalled_since_ == 0)
    stalled_since_ = monotonicMs();
  if (wrote && out_.size() <= low_water_) return notifyWrite();
  return true;
}

// ------------------------------------------------------------------ io_uring

bool Stream::ringAvailable(std::string* error) {
  io_uring uring;
  if (!setUpRing(&uring, error)) return false;
  io_uring_queue_exit(&uring);
  return true;
}

bool Stream::ringRunning() {
  return ring().running;
}

bool Stream::startRing(event_base* base, std::string* error) {
  Ring& r = ring();
  if (r.running) return true;
  if (!setUpRing(&r.uring, error)) return false;
  const size_t ring_bytes = kRingBuffers * sizeof(io_uring_buf);
  void* ring_memory = nullptr;
  if (posix_memalign(&ring_memory, static_cast<size_t>(sysconf(_SC_PAGESIZE)), ring_bytes) != 0) {
    *error = "no memory for the receive buffers";
    io_uring_queue_exit(&r.uring);
    return false;
  }
  r.buffers = static_cast<io_uring_buf_ring*>(ring_memory);
  io_uring_buf_ring_init(r.buffers);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uintptr_t>(r.buffers);
  reg.ring_entries = kRingBuffers;
  reg.bgid = kBufferGroup;
  int rc = io_uring_register_buf_ring(&r.uring, &reg, 0);
  r.memory = static_cast<char*>(std::malloc(static_cast<size_t>(kRingBuffers) * kRingBufferSize));
  r.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (rc < 0 || !r.memory || r.efd < 0) {
    *error = rc < 0 ? errnoText("io_uring_register_buf_ring", -rc) : errnoText("eventfd", errno);
  } else if ((rc = io_uring_register_eventfd(&r.uring, r.efd)) < 0) {
    *error = errnoText("io_uring_register_eventfd", -rc);
  } else {
    // Edge-triggered and never read: every completion the kernel posts
    // while the loop sleeps is an edge. (A socket that becomes ready wakes
    // the loop's epoll_wait with EINTR; the kernel finishes the operation on
    // the way out and the next epoll_wait sees the edge.)
    r.ev = event_new(base, r.efd, EV_READ | EV_ET | EV_PERSIST, &Stream::onRing, nullptr);
    if (r.ev && event_add(r.ev, nullptr) == 0) {
      std::memset(r.memory, 0, static_cast<size_t>(kRingBuffers) * kRingBufferSize);
      for (unsigned id = 0; id < kRingBuffers; ++id) giveBackBuffer(id);
      r.base = base;
      r.running = true;
      return true;
    }
    *error = "cannot watch the io_uring eventfd";
    if (r.ev) event_free(r.ev);
    r.ev = nullptr;
  }
  io_uring_queue_exit(&r.uring);
  if (r.efd >= 0) ::close(r.efd);
  r.efd = -1;
  std::free(r.memory);
  r.memory = nullptr;
  std::free(r.buffers);
  r.buffers = nullptr;
  return false;
}

void Stream::stopRing() {
  Ring& r = ring();
  if (!r.running) return;
  event_free(r.ev);
  r.ev = nullptr;
  io_uring_submit(&r.uring);      // closes of streams that went last
  io_uring_queue_exit(&r.uring);  // cancels what is still in flight
  ::close(r.efd);
  r.efd = -1;
  std::free(r.memory);
  r.memory = nullptr;
  std::free(r.buffers);
  r.buffers = nullptr;
  for (RingOp* op : r.all) delete op;
  r.all.clear();
  r.spare.clear();
  r.base = nullptr;
  r.running = false;
  if (flushQueue().streams == 0) forgetFlushLoop();
}

void Stream::onRing(evutil_socket_t, short, void*) {
  Ring& r = ring();
  if (io_uring_sq_ready(&r.uring) || ringWorkWaiting()) enterRing();
  reapRing();
  if (r.running && ringPending()) event_active(r.ev, EV_TIMEOUT, 0);
}

// Hands every completion to its operation's stream; completions that
// callbacks cause meanwhile are reaped in the same loop iteration.
void Stream::reapRing() {
  Ring& r = ring();
  constexpr unsigned kBatch = 64;
  struct Done {
    uint64_t data;
    int res;
    unsigned flags;
  } done[kBatch];
  for (;;) {
    unsigned n = 0;
    unsigned head;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&r.uring, head, cqe) {
      done[n++] = {cqe->user_data, cqe->res, cqe->flags};
      if (n == kBatch) break;
    }
    if (n == 0) break;
    io_uring_cq_advance(&r.uring, n);
    for (unsigned i = 0; i < n; ++i) {
      if (done[i].data == 0) continue;  // a cancellation
      ++events_handled_;
      complete(reinterpret_cast<RingOp*>(static_cast<uintptr_t>(done[i].data)), done[i].res, done[i].flags);
    }
  }
}

void Stream::complete(RingOp* op, int res, unsigned flags) {
  if (op->done) {
    op->done(op, res, flags);
    return;
  }
  Stream* s = op->stream;
  if (op->send) {
    if (s)
      s->sent(op, res);
    else
      freeOp(op);
    return;
  }
  freeOp(op);
  if (s) s->recv_op_ = nullptr;
  if (flags & IORING_CQE_F_BUFFER) {
    const unsigned id = flags >> IORING_CQE_BUFFER_SHIFT;
    if (s && res > 0) {
      const size_t n = static_cast<size_t>(res);
      std::memcpy(s->in_.reserve(n, s->read_limit_ <= kSmall), ring().memory + static_cast<size_t>(id) * kRingBufferSize, n);
      s->in_.commit(n);
    }
    giveBackBuffer(id);
  }
  if (s) s->received(res);
}

void Stream::useRing() {
  if (ev_) event_free(ev_);
  ev_ = nullptr;
  ring_ = true;
  armRecv();
}

// One receive in flight while reading is on and the input is below the read
// limit. It is prepared with the end-of-iteration flush, so that it asks for
// no more than the limit the owner set by then leaves room for.
void Stream::armRecv() {
  if (!ring_ || recv_op_ || fd_ < 0 || !read_enabled_ || eof_ || eof_pending_ || in_.size() >= read_limit_) return;
  markDirty();
}

void Stream::prepareRecv() {
  if (!ring_ || recv_op_ || fd_ < 0 || !read_enabled_ || eof_ || eof_pending_ || in_.size() >= read_limit_) return;
  io_uring_sqe* sqe = takeSqe();
  if (!sqe) {
    ringFull();
    return;
  }
  recv_op_ = newOp(this, false);
  const size_t room = std::min<size_t>(kRingBufferSize, read_limit_ - in_.size());
  io_uring_prep_recv(sqe, fd_, nullptr, room, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = kBufferGroup;
  io_uring_sqe_set_data(sqe, recv_op_);
}

// The ring had no room even after submitting what it held: the stream
// fails, told from the loop like any socket error (never from inside the
// owner's own call that wanted the operation).
void Stream::ringFull() {
  fail(ENOBUFS);
  ring_full_ = true;
  if (!ev_) ev_ = event_new(base_, -1, 0, &Stream::onEvent, this);
  if (ev_) event_active(ev_, EV_READ, 0);
}

// Input (or the end of it) that arrived is told to the owner while reading
// is on; the next receive goes out after the owner has seen it.
void Stream::announce() {
  if (ring_full_) {
    ring_full_ = false;
    notifyEvent(kError);
    return;
  }
  if (!read_enabled_ || fd_ < 0) return;
  if (unread_) {
    unread_ = false;
    if (!notifyRead()) return;
  }
  if (eof_pending_ && read_enabled_) {
    eof_pending_ = false;
    eof_ = true;
    read_enabled_ = false;
    notifyEvent(kEof);
    return;
  }
  armRecv();
}

void Stream::received(int res) {
  if (res == -ENOBUFS || res == -EINTR || res == -EAGAIN) {  // every shared buffer was taken for a moment
    armRecv();
    return;
  }
  if (res < 0) {
    fail(-res);
    notifyEvent(kError);
    return;
  }
  if (res == 0)
    eof_pending_ = true;
  else
    unread_ = true;
  announce();
}

// The output moves into the send's record, where it stays put until the
// completion; what is written meanwhile waits in out_ for the next send.
void Stream::submitSend() {
  if (send_op_ || out_.empty()) return;
  io_uring_sqe* sqe = takeSqe();
  if (!sqe) {
    ringFull();
    return;
  }
  send_op_ = newOp(this, true);
  send_op_->bytes.swap(out_);
  sending_ = send_op_->bytes.size();
  io_uring_prep_send(sqe, fd_, send_op_->bytes.data(), sending_, MSG_NOSIGNAL);
  io_uring_sqe_set_data(sqe, send_op_);
  // The send timeout's clock runs from here until the peer has taken it all.
  if (stalled_since_ == 0) stalled_since_ = monotonicMs();
}

void Stream::sent(RingOp* op, int res) {
  if (res == -EINTR || res == -EAGAIN) res = 0;
  if (res < 0) {
    send_op_ = nullptr;
    sending_ = 0;
    freeOp(op);
    fail(-res);
    notifyEvent(kError);
    return;
  }
  op->bytes.drain(static_cast<size_t>(res));
  if (!op->bytes.empty()) {
    // The socket took part: the rest goes again and completes when the
    // peer makes room.
    sending_ = op->bytes.size();
    if (res > 0) stalled_since_ = monotonicMs();
    io_uring_sqe* sqe = takeSqe();
    if (!sqe) {
      send_op_ = nullptr;
      sending_ = 0;
      freeOp(op);
      ringFull();
      return;
    }
    io_uring_prep_send(sqe, fd_, op->bytes.data(), sending_, MSG_NOSIGNAL);
    io_uring_sqe_set_data(sqe, op);
    activateFlush(base_);
    return;
  }
  send_op_ = nullptr;
  sending_ = 0;
  freeOp(op);
  if (out_.empty()) {
    stalled_since_ = 0;
  } else {
    stalled_since_ = monotonicMs();
    markDirty();
  }
  if (pendingOutput() <= low_water_) notifyWrite();
}

// A closing stream's operations are cancelled; their records (and a send's
// bytes) stay until the completions come back. The socket itself is freed
// by the kernel once no operation holds it any more, so a descriptor number
// reused at once meets none of them.
void Stream::cancelOps() {
  if (!ring().running) {  // the ring went first and took its operations with it
    recv_op_ = send_op_ = nullptr;
    sending_ = 0;
    return;
  }
  for (RingOp** slot : {&recv_op_, &send_op_}) {
    RingOp* op = *slot;
    if (!op) continue;
    *slot = nullptr;
    op->stream = nullptr;
    if (io_uring_sqe* sqe = takeSqe()) {
      io_uring_prep_cancel(sqe, op, 0);
      io_uring_sqe_set_data64(sqe, 0);
    }
  }
  sending_ = 0;
  activateFlush(ring().base);
}

// ------------------------------------------------------------------ callbacks

template <typename Call>
bool Stream::invoke(Call call) {
  bool destroyed = false;
  bool* outer = destroyed_;
  destroyed_ = &destroyed;
  call();
  if (destroyed) {
    if (outer) *outer = true;
    return false;
  }
  destroyed_ = outer;
  return fd_ >= 0;
}

bool Stream::notifyRead() {
  return read_cb_ ? invoke([this] { read_cb_(*this, arg_); }) : fd_ >= 0;
}

bool Stream::notifyWrite() {
  return write_cb_ ? invoke([this] { write_cb_(*this, arg_); }) : fd_ >= 0;
}

bool Stream::notifyEvent(short events) {
  return event_cb_ ? invoke([this, events] { event_cb_(*this, events, arg_); }) : fd_ >= 0;
}

}  // namespace concert::worker
