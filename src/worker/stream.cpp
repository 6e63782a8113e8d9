// Edge-triggered sockets with gathered writes; see stream.h.
#include "worker/stream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace concert::worker {

void enableKeepAlive(int fd) {
  int one = 1;
  int idle = kKeepAliveIdleSeconds;
  int interval = kKeepAliveIntervalSeconds;
  int count = kKeepAliveProbes;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
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

std::string tlsErrorText(const char* context) {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return context;
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

}  // namespace

// ------------------------------------------------------------------ Buffer

Buffer::~Buffer() {
  release();
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
  if (--q.streams == 0 && !q.flushing) {
    // No stream left on this loop: forget it, so that a later loop (a new
    // event_base, perhaps at the same address) gets an event of its own.
    if (q.ev) event_free(q.ev);
    q.ev = nullptr;
    q.base = nullptr;
    q.dirty.clear();
  }
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
  // Sockets from evconnlistener are already non-blocking and close-on-exec.
  fd_ = fd;
  connected_ = true;
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
  int one = 1;  // requests are written whole; small ones must not wait for Nagle
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  enableKeepAlive(fd_);
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
    ::close(fd_);
    fd_ = -1;
  }
  in_.release();
  out_.release();
  connecting_ = handshaking_ = connected_ = false;
  read_enabled_ = false;
}

void Stream::enableRead() {
  if (read_enabled_ || fd_ < 0 || eof_) return;
  read_enabled_ = true;
  // The edge that announced pending bytes may have passed while reading was
  // off: read them in this loop iteration.
  if (readable_ && !connecting_ && !handshaking_) event_active(ev_, EV_READ, 0);
}

void Stream::consume(size_t len) {
  const bool was_full = in_.size() >= read_limit_;
  in_.drain(len);
  if (was_full && in_.size() < read_limit_ && readable_ && read_enabled_ && ev_) event_active(ev_, EV_READ, 0);
}

void Stream::write(const void* data, size_t len) {
  if (fd_ < 0 || len == 0) return;
  out_.append(data, len);
  markDirty();
}

void Stream::writeChunkHeader(size_t len) {
  if (fd_ < 0) return;
  out_.appendChunkHeader(len);
  markDirty();
}

void Stream::writeChunk(const void* data, size_t len) {
  if (fd_ < 0 || len == 0) return;
  out_.appendChunkHeader(len);
  out_.append(data, len);
  out_.append("\r\n", 2);
  markDirty();
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
  if (was_full && in_.size() < read_limit_ && readable_ && read_enabled_ && ev_) event_active(ev_, EV_READ, 0);
}

void Stream::shutdownWrite() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

void Stream::markDirty() {
  if (dirty_) return;
  dirty_ = true;
  FlushQueue& q = flushQueue();
  if (q.base != base_) {
    if (q.ev) event_free(q.ev);
    q.base = base_;
    q.ev = event_new(base_, -1, 0, &onFlush, nullptr);
    q.dirty.clear();
  }
  q.dirty.push_back(this);
  if (!q.flushing && q.ev) event_active(q.ev, EV_TIMEOUT, 0);
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
