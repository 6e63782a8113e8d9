// Buffer and Stream (src/worker/stream.h) over real sockets and a real
// libevent loop: edge-triggered reads emulating level-triggered ones, the
// read limit and its resumption, gathered writes, EOF after data, errors,
// connects, a stream destroyed from inside its own callback, and buffers
// that grow a block at a time from the pool and shrink when little is left.
// Every Stream case runs twice: on epoll, and with the process's io_uring
// running (skipped with a message where the kernel refuses io_uring).
#include <doctest/doctest.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "worker/stream.h"
#include "test_loop.h"

using namespace concert::worker;

namespace {

struct Pair {
  int ours = -1;
  int theirs = -1;
  Pair() {
    int fds[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0);
    ours = fds[0];
    theirs = fds[1];
  }
  ~Pair() {
    if (theirs >= 0) close(theirs);
  }
  std::string readTheirs() {
    std::string out;
    char buf[65536];
    ssize_t n;
    while ((n = read(theirs, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }
};

struct Recorder {
  std::string data;
  short events = 0;
  int reads = 0;
  int writes = 0;
  size_t consume_at_most = SIZE_MAX;  // per read callback
  static void onRead(Stream& s, void* arg) {
    auto* r = static_cast<Recorder*>(arg);
    ++r->reads;
    size_t n = std::min(s.input().size(), r->consume_at_most);
    r->data.append(s.input().data(), n);
    s.consume(n);
  }
  static void onWrite(Stream&, void* arg) { ++static_cast<Recorder*>(arg)->writes; }
  static void onEvent(Stream&, short events, void* arg) { static_cast<Recorder*>(arg)->events |= events; }
};

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
  return s;
}

}  // namespace

TEST_CASE("Buffer: append, drain, compaction and chunk headers") {
  Buffer b;
  CHECK(b.empty());
  b.append("hello world");
  b.drain(6);
  CHECK(std::string(b.data(), b.size()) == "world");
  // Reserving more than the spare space keeps the unread bytes in order.
  char* at = b.reserve(100000);
  std::memset(at, 'x', 100000);
  b.commit(100000);
  CHECK(b.size() == 100005);
  CHECK(std::string(b.data(), 5) == "world");
  b.drain(b.size());
  CHECK(b.empty());
  b.appendChunkHeader(0);
  b.appendChunkHeader(255);
  b.appendChunkHeader(0x1a2b3c);
  CHECK(std::string(b.data(), b.size()) == "0\r\nff\r\n1a2b3c\r\n");
  b.release();
  CHECK(b.empty());
}

TEST_CASE("Stream: reads arrive, writes are gathered into one flush") {
  Loop loop;
  Pair pair;
  Recorder rec;
  Stream s(loop.base);
  REQUIRE(s.attach(pair.ours));
  s.setCallbacks(&Recorder::onRead, &Recorder::onWrite, &Recorder::onEvent, &rec);
  REQUIRE(write(pair.theirs, "GET / HTTP/1.1\r\n\r\n", 18) == 18);
  loop.runUntil([&] { return rec.data.size() == 18; });
  CHECK(rec.data == "GET / HTTP/1.1\r\n\r\n");
  s.write("HTTP/1.1 200 OK\r\n");
  s.write("Content-Length: 2\r\n\r\n");
  s.write("ok");
  CHECK(s.pendingOutput() > 0);  // nothing is sent before the loop turns
  loop.runUntil([&] { return s.pendingOutput() == 0; });
  CHECK(pair.readTheirs() == "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  CHECK(rec.writes >= 1);
  CHECK(rec.events == 0);
}

TEST_CASE("Stream: a read limit pauses reading and consuming resumes it without a new edge") {
  Loop loop;
  Pair pair;
  Recorder rec;
  rec.consume_at_most = 0;  // the owner holds everything at first
  Stream s(loop.base);
  REQUIRE(s.attach(pair.ours));
  s.setReadLimit(32 * 1024);
  s.setCallbacks(&Recorder::onRead, nullptr, &Recorder::onEvent, &rec);
  const std::string sent = pattern(200 * 1024);
  size_t written = 0;
  // Fill until the socket pair refuses more: the stream must stop at its limit.
  loop.runUntil(
      [&] {
        ssize_t n = write(pair.theirs, sent.data() + written, sent.size() - written);
        if (n > 0) written += static_cast<size_t>(n);
        return s.input().size() >= 32 * 1024;
      },
      5000);
  loop.runUntil([] { return false; }, 50);  // more turns read nothing more
  CHECK(s.input().size() >= 32 * 1024);
  CHECK(s.input().size() < 32 * 1024 + 128 * 1024);
  // Now the owner consumes: every byte must still arrive, in order, though
  // the edges for the bytes already queued were reported long ago.
  rec.consume_at_most = SIZE_MAX;
  rec.data.assign(s.input().data(), s.input().size());
  s.consumeAll();
  loop.runUntil(
      [&] {
        if (written < sent.size()) {
          ssize_t n = write(pair.theirs, sent.data() + written, sent.size() - written);
          if (n > 0) written += static_cast<size_t>(n);
        }
        return rec.data.size() == sent.size();
      },
      20000);
  CHECK(rec.data.size() == sent.size());
  CHECK(rec.data == sent);
}

TEST_CASE("Stream: disabled reading keeps the bytes until it is enabled again") {
  Loop loop;
  Pair pair;
  Recorder rec;
  Stream s(loop.base);
  REQUIRE(s.attach(pair.ours));
  s.setCallbacks(&Recorder::onRead, nullptr, &Recorder::onEvent, &rec);
  s.disableRead();
  REQUIRE(write(pair.theirs, "abc", 3) == 3);
  loop.runUntil([] { return false; }, 20);
  CHECK(rec.data.empty());
  s.enableRead();
  loop.runUntil([&] { return rec.data == "abc"; });
  CHECK(rec.data == "abc");
}

TEST_CASE("Stream: data then FIN gives the data first, then kEof") {
  Loop loop;
  Pair pair;
  Recorder rec;
  Stream s(loop.base);
  REQUIRE(s.attach(pair.ours));
  s.setCallbacks(&Recorder::onRead, nullptr, &Recorder::onEvent, &rec);
  REQUIRE(write(pair.theirs, "last words", 10) == 10);
  shutdown(pair.theirs, SHUT_WR);
  loop.runUntil([&] { return rec.events != 0; });
  CHECK(rec.data == "last words");
  CHECK((rec.events & Stream::kEof) != 0);
}

TEST_CASE("Stream: writing to a peer that is gone reports kError with a reason") {
  Loop loop;
  Pair pair;
  Recorder rec;
  Stream s(loop.base);
  REQUIRE(s.attach(pair.ours));
  s.setCallbacks(&Recorder::onRead, nullptr, &Recorder::onEvent, &rec);
  close(pair.theirs);
  pair.theirs = -1;
  s.write("anyone there?");
  loop.runUntil([&] { return (rec.events & (Stream::kError | Stream::kEof)) != 0; });
  CHECK((rec.events & (Stream::kError | Stream::kEof)) != 0);
  if (rec.events & Stream::kError) CHECK(!s.errorReason().empty());
}

TEST_CASE("Stream: a callback may destroy its own stream") {
  Loop loop;
  Pair pair;
  struct Owner {
    std::unique_ptr<Stream> stream;
    int calls = 0;
  } owner;
  owner.stream = std::make_unique<Stream>(loop.base);
  REQUIRE(owner.stream->attach(pair.ours));
  owner.stream->setCallbacks(
      [](Stream&, void* arg) {
        auto* o = static_cast<Owner*>(arg);
        ++o->calls;
        o->stream.reset();  // the stream is freed while its read callback runs
      },
      nullptr, nullptr, &owner);
  owner.stream->write("pending output is dropped with it");
  REQUIRE(write(pair.theirs, "x", 1) == 1);
  loop.runUntil([&] { return owner.calls > 0; });
  loop.runUntil([] { return false; }, 20);  // the flush must not touch the freed stream
  CHECK(owner.calls == 1);
  CHECK(!owner.stream);
}

TEST_CASE("Stream: connect succeeds against a listener and fails against a closed port") {
  Loop loop;
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(listener, 8) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);

  Recorder ok;
  Stream good(loop.base);
  std::string error;
  REQUIRE(good.connect(reinterpret_cast<sockaddr*>(&addr), sizeof addr, nullptr, 5000, &error));
  good.setCallbacks(&Recorder::onRead, nullptr, &Recorder::onEvent, &ok);
  good.write("queued before the connect completes");
  loop.runUntil([&] { return ok.events != 0 && good.pendingOutput() == 0; });
  CHECK((ok.events & Stream::kConnected) != 0);
  CHECK(good.connected());
  int accepted = accept(listener, nullptr, nullptr);
  REQUIRE(accepted >= 0);
  char buf[64] = {};
  ssize_t n = read(accepted, buf, sizeof buf);
  CHECK(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0) == "queued before the connect completes");
  close(accepted);

  close(listener);  // the port is now closed
  Recorder refused;
  Stream bad(loop.base);
  if (bad.connect(reinterpret_cast<sockaddr*>(&addr), sizeof addr, nullptr, 5000, &error)) {
    bad.setCallbacks(&Recorder::onRead, nullptr, &Recorder::onEvent, &refused);
    loop.runUntil([&] { return refused.events != 0; });
    CHECK((refused.events & Stream::kError) != 0);
    CHECK(!bad.errorReason().empty());
  } else {
    CHECK(!error.empty());
  }
}

TEST_CASE("Stream: stalledSince is set while the peer takes nothing and cleared once all is sent") {
  Loop loop;
  Pair pair;
  Recorder rec;
  Stream s(loop.base);
  REQUIRE(s.attach(pair.ours));
  s.setCallbacks(&Recorder::onRead, &Recorder::onWrite, &Recorder::onEvent, &rec);
  CHECK(s.stalledSince() == 0);
  s.write("small");
  loop.runUntil([&] { return s.pendingOutput() == 0; });
  CHECK(s.stalledSince() == 0);  // sent whole: nothing stuck
  // The peer reads nothing: more than the socket buffers hold stays behind.
  std::string big(8 << 20, 'x');
  const concert::Millis before = concert::monotonicMs();
  s.write(big);
  loop.runUntil([&] { return s.stalledSince() != 0; });
  REQUIRE(s.pendingOutput() > 0);
  CHECK(s.stalledSince() >= before);
  // The peer drains everything: the stall clock stops.
  char buf[1 << 16];
  loop.runUntil(
      [&] {
        while (read(pair.theirs, buf, sizeof buf) > 0) {
        }
        return s.pendingOutput() == 0;
      },
      200000);
  CHECK(s.pendingOutput() == 0);
  CHECK(s.stalledSince() == 0);
}

TEST_CASE("Buffer: grows a 16 KiB block at a time, never by doubling; a released block is taken again") {
  Buffer b;
  b.reserve(100);
  CHECK(b.spare() == 16 * 1024);  // one block from the pool
  const std::string big = pattern(40 * 1024);
  b.append(big);
  CHECK(b.size() + b.spare() == 48 * 1024);  // three blocks for 40 KiB, where doubling would take 64
  b.append(pattern(9 * 1024));
  CHECK(b.size() + b.spare() == 64 * 1024);  // the next block, not 96 KiB
  Buffer one;
  one.reserve(10);
  const char* block = one.data();
  one.release();
  Buffer next;
  next.reserve(10);
  CHECK(next.data() == block);  // the pool gave the same block back
}

TEST_CASE("Buffer: a few bytes left in a whole block move to a small one; none give it back") {
  Buffer b;
  b.append(pattern(10 * 1024));
  b.drain(10 * 1024 - 100);
  b.shrink();
  CHECK(b.size() == 100);
  CHECK(b.size() + b.spare() == 4 * 1024);
  CHECK(std::string(b.data(), b.size()) == pattern(10 * 1024).substr(10 * 1024 - 100));
  b.clear();
  b.shrink();
  CHECK(b.spare() == 0);  // released
  Buffer small;
  small.reserve(100, true);
  CHECK(small.spare() == 4 * 1024);  // a stream that reads little ahead starts small
}

TEST_CASE("Stream: never reads past its limit, even when a read could take more; a higher limit resumes") {
  Loop loop;
  Pair pair;
  Recorder rec;
  rec.consume_at_most = 0;
  Stream s(loop.base);
  REQUIRE(s.attach(pair.ours));
  s.setReadLimit(4 * 1024);
  s.setCallbacks(&Recorder::onRead, nullptr, &Recorder::onEvent, &rec);
  const std::string sent = pattern(64 * 1024);
  REQUIRE(write(pair.theirs, sent.data(), sent.size()) == static_cast<ssize_t>(sent.size()));
  loop.runUntil([&] { return s.input().size() >= 4 * 1024; });
  loop.runUntil([] { return false; }, 50);
  CHECK(s.input().size() == 4 * 1024);
  // Raising the limit reads on at once: no new edge comes for bytes already queued.
  s.setReadLimit(16 * 1024);
  loop.runUntil([&] { return s.input().size() >= 16 * 1024; });
  CHECK(s.input().size() == 16 * 1024);
}

TEST_CASE("Stream: a stream closed with a send stuck in flight leaves the bytes to the operation, not freed memory") {
  Loop loop;
  Pair pair;
  Recorder rec;
  auto s = std::make_unique<Stream>(loop.base);
  REQUIRE(s->attach(pair.ours));
  s->setCallbacks(&Recorder::onRead, &Recorder::onWrite, &Recorder::onEvent, &rec);
  s->write(std::string(8 << 20, 'y'));  // more than the socket pair holds: the peer reads nothing
  loop.runUntil([&] { return s->stalledSince() != 0; });
  REQUIRE(s->pendingOutput() > 0);
  s.reset();
  // The peer reads what was sent, then goes: the cancelled operation's
  // completion finds no stream and touches none.
  loop.runUntil([] { return false; }, 50);
  CHECK(!pair.readTheirs().empty());
  close(pair.theirs);
  pair.theirs = -1;
  loop.runUntil([] { return false; }, 50);
  CHECK(rec.events == 0);
}

TEST_CASE("Stream: a close reaches the peer, also when the loop stops right after it") {
  Loop loop;
  Pair pair;
  Pair other;
  auto s = std::make_unique<Stream>(loop.base);
  REQUIRE(s->attach(pair.ours));
  s->close();
  loop.runUntil([] { return false; }, 5);
  char byte;
  CHECK(read(pair.theirs, &byte, 1) == 0);  // EOF: the socket is closed

  // The last thing before the loop stops: nothing turns the loop again.
  Stream t(loop.base);
  REQUIRE(t.attach(other.ours));
  t.close();
  Stream::stopRing();
  CHECK(read(other.theirs, &byte, 1) == 0);
}
