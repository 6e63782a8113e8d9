// Acceptor (src/worker/acceptor.h) over a real listening socket, on both
// data paths: connections accepted with their peer's address, disable()
// leaving connections in the backlog for someone else, enable() taking them
// again (also while a cancellation is still under way), an acceptor
// destroyed with its accept armed, and running out of descriptors reported
// once instead of spinning.
#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "test_loop.h"
#include "worker/acceptor.h"

using namespace concert::worker;

namespace {

struct Listener {
  int fd = -1;
  sockaddr_in addr{};
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    REQUIRE(listen(fd, 128) == 0);
  }
  ~Listener() { close(fd); }
  // A blocking client connection; the kernel completes the handshake from
  // the backlog whether anybody accepts or not.
  int connectOne() const {
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(c >= 0);
    REQUIRE(connect(c, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
    return c;
  }
  // Takes what waits in the backlog directly.
  int drainBacklog() const {
    int n = 0;
    for (int fd2; (fd2 = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC)) >= 0; ++n) close(fd2);
    return n;
  }
};

struct Recorder {
  std::vector<int> fds;
  std::vector<int> errors;
  int settled = 0;
  bool loopback_peers = true;
  Acceptor* disable_on_accept = nullptr;
  ~Recorder() {
    for (int fd : fds) close(fd);
  }
  static Acceptor::Callbacks callbacks() {
    return {
        [](Acceptor& from, int fd, sockaddr* addr, void* arg) {
          auto* r = static_cast<Recorder*>(arg);
          r->fds.push_back(fd);
          const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
          if (addr->sa_family != AF_INET || in->sin_addr.s_addr != htonl(INADDR_LOOPBACK)) r->loopback_peers = false;
          if (r->disable_on_accept == &from) from.disable();
        },
        [](Acceptor&, int err, void* arg) { static_cast<Recorder*>(arg)->errors.push_back(err); },
        [](Acceptor&, void* arg) { ++static_cast<Recorder*>(arg)->settled; },
    };
  }
};

std::vector<int> connectMany(const Listener& l, int n) {
  std::vector<int> clients;
  for (int i = 0; i < n; ++i) clients.push_back(l.connectOne());
  return clients;
}

void closeAll(std::vector<int>& fds) {
  for (int fd : fds) close(fd);
  fds.clear();
}

// A loop, a listening socket and an acceptor on it (tag 0) that records
// what it is told.
struct Rig {
  Loop loop;
  Listener l;
  Recorder r;
  Acceptor a{loop.base, l.fd, 0, Recorder::callbacks(), &r};
  // Started, with its first accept submitted.
  void start() {
    REQUIRE(a.start());
    turns(5);
  }
  void turns(int n) {
    loop.runUntil([] { return false; }, n);
  }
};

}  // namespace

TEST_CASE("an acceptor hands over every connection with its peer's address") {
  Loop loop;
  Listener l;
  Recorder r;
  Acceptor a(loop.base, l.fd, 7, Recorder::callbacks(), &r);
  REQUIRE(a.start());
  CHECK(a.onRing() == loop.ring);
  CHECK(a.tag() == 7);
  std::vector<int> clients = connectMany(l, 20);
  loop.runUntil([&] { return r.fds.size() == 20; });
  CHECK(r.fds.size() == 20);
  CHECK(r.loopback_peers);
  CHECK(r.errors.empty());
  CHECK_FALSE(a.settled());
  closeAll(clients);
}

TEST_CASE_FIXTURE(Rig, "a disabled acceptor leaves connections in the backlog and takes them again when enabled") {
  start();
  a.disable();
  loop.runUntil([&] { return a.settled(); });
  CHECK(a.settled());
  CHECK(r.settled == (loop.ring ? 1 : 0));  // epoll: nothing is in flight to settle
  std::vector<int> clients = connectMany(l, 5);
  turns(50);
  CHECK(r.fds.empty());
  CHECK(l.drainBacklog() == 5);  // still there for another worker

  std::vector<int> more = connectMany(l, 3);
  a.enable();
  loop.runUntil([&] { return r.fds.size() == 3; });
  CHECK(r.fds.size() == 3);
  CHECK_FALSE(a.settled());
  closeAll(clients);
  closeAll(more);
}

TEST_CASE_FIXTURE(Rig, "enabling again before a cancellation completes keeps accepting") {
  start();
  a.disable();
  a.enable();  // the same loop turn: the cancel has not gone out yet
  turns(5);
  std::vector<int> clients = connectMany(l, 4);
  loop.runUntil([&] { return r.fds.size() == 4; });
  CHECK(r.fds.size() == 4);
  CHECK(r.settled == 0);
  closeAll(clients);
}

TEST_CASE_FIXTURE(Rig, "disabling from the accept callback stops after that connection") {
  r.disable_on_accept = &a;
  start();
  std::vector<int> first = connectMany(l, 1);
  loop.runUntil([&] { return a.settled(); });
  REQUIRE(r.fds.size() == 1);
  std::vector<int> later = connectMany(l, 3);
  turns(50);
  CHECK(r.fds.size() == 1);
  CHECK(l.drainBacklog() == 3);
  closeAll(first);
  closeAll(later);
}

TEST_CASE_FIXTURE(Rig, "disabling settles after the loop's last stream is gone") {
  // The flush that submits the cancellation outlives the streams that used it.
  REQUIRE(a.start());
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0);
  {
    Stream s(loop.base);
    REQUIRE(s.attach(fds[0]));
    s.write("x");
    a.disable();  // the cancellation waits for the end-of-iteration flush ...
  }               // ... and the last stream goes first
  loop.runUntil([&] { return a.settled(); });
  CHECK(a.settled());
  close(fds[1]);
}

TEST_CASE("an acceptor destroyed with its accept armed takes no more connections") {
  Loop loop;
  Listener l;
  Recorder r;
  {
    Acceptor a(loop.base, l.fd, 0, Recorder::callbacks(), &r);
    REQUIRE(a.start());
    loop.runUntil([] { return false; }, 5);
  }
  loop.runUntil([] { return false; }, 5);  // the cancellation goes out
  std::vector<int> clients = connectMany(l, 3);
  loop.runUntil([] { return false; }, 50);
  CHECK(r.fds.empty());
  CHECK(l.drainBacklog() == 3);
  closeAll(clients);
}

TEST_CASE("running out of descriptors is reported and accepting waits for enable()") {
  Loop loop;
  Listener l;
  Recorder r;
  Acceptor a(loop.base, l.fd, 0, Recorder::callbacks(), &r);
  // The clients' sockets exist before the limit; they connect after it.
  std::vector<int> clients;
  for (int i = 0; i < 2; ++i) clients.push_back(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
  // No descriptor above the lowest free one. (The ring's accept takes the
  // limit when it is armed: start() comes after the limit.)
  int lowest_free = dup(0);
  REQUIRE(lowest_free >= 0);
  close(lowest_free);
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(lowest_free);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &tight) == 0);
  const bool started = a.start();
  loop.runUntil([] { return false; }, 5);
  for (int c : clients) CHECK(connect(c, reinterpret_cast<const sockaddr*>(&l.addr), sizeof l.addr) == 0);
  loop.runUntil([&] { return !r.errors.empty(); });
  REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
  REQUIRE(started);
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0] == EMFILE);
  CHECK(r.fds.empty());
  loop.runUntil([] { return false; }, 20);
  CHECK(r.errors.size() == 1);  // reported once, not retried in a spin
  CHECK(r.fds.empty());
  a.enable();
  loop.runUntil([&] { return r.fds.size() == 2; });
  CHECK(r.fds.size() == 2);  // nothing was lost from the backlog
  closeAll(clients);
}
