// A non-blocking socket with its own input and output buffers: the data
// path's replacement for libevent bufferevents, built to spend as few system
// calls per request as possible.
//
// Each socket is registered with epoll once, edge-triggered, for reading,
// writing and peer close (one epoll_ctl when it opens, none per request).
// Reads go straight into the input buffer; a short read means the socket is
// drained (a TCP socket returns less than asked only when it has no more), so
// no extra read is spent waiting for EAGAIN. Writes are gathered: write()
// appends to the output buffer and marks the stream dirty, and one flush at
// the end of the current loop iteration sends everything each socket got
// (response head and body in a single send()). A send that does not take
// everything leaves the rest for the next EPOLLOUT edge.
//
// Level-triggered behaviour is emulated where the owner needs it: reading
// stops while the input holds the read limit and resumes by itself when the
// owner consumes input (consume(), writeFrom()) or re-enables reading.
//
// Callbacks mirror bufferevent's: read (new input), write (output drained to
// the low-water mark), event (kEof, kError, kConnected, kTimeout). A callback
// may close or destroy the stream it was called from; the stream notices and
// touches nothing afterwards.
//
// TLS (client side, toward HTTPS origins) runs over the same socket through
// OpenSSL's SSL_read/SSL_write; the handshake completes before kConnected.
//
// With the process's io_uring running (startRing, -io-uring), plain TCP
// streams skip epoll: each keeps one recv in flight whose bytes land in a
// buffer the kernel picks from a ring shared by every stream when they
// arrive (an idle connection holds none), and the end-of-iteration flush
// queues one send per dirty stream; the flush submits everything prepared in
// the iteration with one io_uring_enter (a stream's close too, and the
// listeners' accepts: acceptor.h). Completions come back through the
// ring's eventfd, watched by the loop. The bytes of a send in flight belong
// to its operation record, which outlives a stream closed meanwhile. TLS
// streams stay on epoll readiness (OpenSSL drives their socket itself), and
// so does an outgoing connection until it is established.
#pragma once

#include <event2/event.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "common/clock.h"

namespace concert::worker {

struct RingOp;

// TCP keep-alive on client and origin sockets: a peer that vanished without
// a FIN (a phone that lost its network, a crashed host) is found after about
// 60 + 10 x 5 seconds of silence instead of holding its slots forever.
constexpr int kKeepAliveIdleSeconds = 60;
constexpr int kKeepAliveIntervalSeconds = 10;
constexpr int kKeepAliveProbes = 5;
// TCP_NODELAY and keep-alive, on client and origin connections; a
// listening socket with them hands them down to every connection it
// accepts (Linux), which then needs no call of its own.
bool setConnectionOptions(int fd);

// Contiguous bytes with a consumed prefix: data() .. data()+size() is unread.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  size_t size() const { return end_ - begin_; }
  bool empty() const { return end_ == begin_; }
  const char* data() const { return buf_ + begin_; }

  void append(const void* data, size_t len);
  void append(std::string_view s) { append(s.data(), s.size()); }
  void appendChunkHeader(size_t len);  // "<hex>\r\n"
  void drain(size_t len);
  void clear() { begin_ = end_ = 0; }
  void swap(Buffer& other);
  void release();  // clear and give the memory back
  void shrink();   // a few bytes in a larger buffer: into a small one

  // At least `len` writable bytes after the data; commit() what was filled.
  // `small`: an empty buffer may start below a whole block.
  char* reserve(size_t len, bool small = false);
  void commit(size_t len) { end_ += len; }
  size_t spare() const { return cap_ - end_; }

 private:
  char* buf_ = nullptr;
  size_t cap_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
};

class Stream {
 public:
  enum Event : short { kEof = 1, kError = 2, kConnected = 4, kTimeout = 8 };
  using DataCallback = void (*)(Stream& stream, void* arg);
  using EventCallback = void (*)(Stream& stream, short events, void* arg);

  static constexpr size_t kDefaultReadLimit = 256 * 1024;

  explicit Stream(event_base* base);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // An accepted socket: made non-blocking and registered. false: fd closed.
  bool attach(int fd);
  // A new non-blocking connection to `addr`; kConnected (after the TLS
  // handshake when `ssl` is given, which the stream then owns) or
  // kError/kTimeout follows. false with *error when it cannot even start.
  bool connect(const sockaddr* addr, socklen_t len, SSL* ssl, Millis timeout, std::string* error);
  // Closes the socket and drops both buffers; no callback runs afterwards.
  void close();

  void setCallbacks(DataCallback read, DataCallback write, EventCallback event, void* arg);
  // Reading stops while the input holds `limit` bytes (0: no limit); a
  // higher limit resumes it at once.
  void setReadLimit(size_t limit);
  void setWriteLowWater(size_t low) { low_water_ = low; }
  void enableRead();
  void disableRead() { read_enabled_ = false; }

  // Input: look at input(), then consume() what was used.
  const Buffer& input() const { return in_; }
  void consume(size_t len);
  void consumeAll() { consume(in_.size()); }

  // Output, sent at the end of this loop iteration.
  void write(const void* data, size_t len);
  void write(std::string_view s) { write(s.data(), s.size()); }
  void writeChunkHeader(size_t len);
  void writeChunk(const void* data, size_t len);  // "<hex>\r\n" data "\r\n"; nothing when len is 0
  void writeChunk(std::string_view s) { writeChunk(s.data(), s.size()); }
  void writeFrom(Stream& source, size_t len);  // moves source input to this output
  size_t pendingOutput() const { return out_.size() + sending_; }
  // Since when the output has been waiting for the peer to take more: set
  // when a flush leaves bytes behind, moved on by every flush that sends
  // some, 0 when nothing is stuck (the send timeout's clock).
  Millis stalledSince() const { return pendingOutput() == 0 ? 0 : stalled_since_; }
  // Gives back the memory of empty buffers (an idle keep-alive connection
  // then costs no buffer space until its next request), and moves a few
  // unread bytes out of a whole block (a connection waiting in line).
  void trim();

  // Stops sending (FIN) once the output is flushed; the caller checks
  // pendingOutput() == 0 first.
  void shutdownWrite();

  int fd() const { return fd_; }
  bool isOpen() const { return fd_ >= 0; }
  bool connected() const { return connected_; }
  // Why the last kError happened: errno text or the TLS library's message.
  const std::string& errorReason() const { return error_reason_; }

  // Sends the output of every stream written since the last flush; runs by
  // itself at the end of the loop iteration.
  static void flushAll();
  // Socket events handled by this process's streams so far (-busy-poll
  // watches it to tell a loop turn with work from an empty one).
  static uint64_t eventsHandled() { return events_handled_; }

  // Sets up this process's io_uring (once, after fork, before its first
  // stream); plain TCP streams opened afterwards use it. false with *error
  // when the kernel refuses it (too old, or forbidden by seccomp): streams
  // then stay on epoll.
  static bool startRing(event_base* base, std::string* error);
  // Whether this kernel lets a process set up the ring startRing needs (the
  // master asks before it forks its workers).
  static bool ringAvailable(std::string* error);
  static bool ringRunning();
  // Closes the ring (a worker taking itself apart, after its streams).
  static void stopRing();

 private:
  static void onEvent(evutil_socket_t fd, short what, void* arg);
  static void onConnectTimeout(evutil_socket_t, short, void* arg);
  static void onRing(evutil_socket_t, short what, void*);
  static void reapRing();
  static void complete(RingOp* op, int res, unsigned flags);

  bool registerEvent();
  void useRing();  // moves an established plain TCP stream off epoll onto the ring
  void armRecv();
  void prepareRecv();
  void announce();
  void received(int res);
  void submitSend();
  void sent(RingOp* op, int res);
  void cancelOps();
  void ringFull();
  void handle(short what);
  void handshake();
  void finishConnect();
  void established();
  void readInput();
  bool flushOutput();  // false when the stream was closed or destroyed meanwhile
  void markDirty();
  Buffer& outputFor(size_t len);
  void wrote();  // after appending output
  void fail(int err, const char* tls_context = nullptr);
  // Runs a callback; false when the stream was destroyed or closed by it.
  template <typename Call>
  bool invoke(Call call);
  bool notifyRead();
  bool notifyWrite();
  bool notifyEvent(short events);

  event_base* base_;
  event* ev_ = nullptr;
  event* connect_timer_ = nullptr;
  int fd_ = -1;
  SSL* ssl_ = nullptr;
  Buffer in_;
  Buffer out_;
  DataCallback read_cb_ = nullptr;
  DataCallback write_cb_ = nullptr;
  EventCallback event_cb_ = nullptr;
  void* arg_ = nullptr;
  size_t read_limit_ = kDefaultReadLimit;
  size_t low_water_ = 0;
  bool read_enabled_ = true;
  bool readable_ = false;     // an EPOLLIN edge arrived and the socket may hold more
  bool peer_closed_ = false;  // EPOLLRDHUP seen: read until EOF
  bool eof_ = false;
  bool connecting_ = false;
  bool handshaking_ = false;
  bool connected_ = false;
  bool dirty_ = false;         // queued for the end-of-iteration flush
  Millis stalled_since_ = 0;   // see stalledSince()
  bool* destroyed_ = nullptr;  // set by the destructor for a callback still on the stack
  std::string error_reason_;
  bool ring_ = false;          // reads and writes go through the io_uring
  RingOp* recv_op_ = nullptr;  // the recv in flight
  RingOp* send_op_ = nullptr;  // the send in flight; it owns the bytes being sent
  size_t sending_ = 0;         // bytes of the send in flight not yet confirmed
  bool unread_ = false;        // input received while reading was off, not yet announced
  bool eof_pending_ = false;   // the peer's FIN arrived while reading was off
  bool ring_full_ = false;     // no room in the ring for an operation: kError in this iteration
  static inline uint64_t events_handled_ = 0;
};

}  // namespace concert::worker
