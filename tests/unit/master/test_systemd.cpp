// systemd integration (src/master/systemd.h). Socket activation hands the
// listeners over at fds 3.., so every activation case runs in a forked
// child that moves its sockets there, sets LISTEN_* for itself and writes
// what inheritedListeners() saw to a pipe. Readiness datagrams go to real
// AF_UNIX datagram sockets, bound to a path and to an abstract name.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "master/systemd.h"

using concert::master::systemd::inheritedListeners;
using concert::master::systemd::InheritedListeners;
using concert::master::systemd::listenerDisplay;
using concert::master::systemd::monotonicUsecField;
using concert::master::systemd::notify;

namespace {

using Env = std::vector<std::pair<std::string, std::string>>;
const char* const kSelf = "<self>";  // a LISTEN_PID value the child replaces by its own pid

int tcpSocket(int type, bool listening) {
  int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in in4{};
  in4.sin_family = AF_INET;
  in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&in4), sizeof in4) == 0);
  if (listening) REQUIRE(listen(fd, 16) == 0);
  return fd;
}

int listeningTcp() {
  return tcpSocket(SOCK_STREAM, true);
}

int boundPort(int fd) {
  sockaddr_in in4{};
  socklen_t len = sizeof in4;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&in4), &len) == 0);
  return ntohs(in4.sin_port);
}

std::string join(const std::vector<int>& fds) {
  std::string out;
  for (int fd : fds) out += (out.empty() ? "" : ",") + std::to_string(fd);
  return out;
}

bool flagsSet(int fd) {
  return (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0 && (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0;
}

// What the child reports: "pub=3 admin=4 error= env=unset flags=ok".
std::string describe(const InheritedListeners& got) {
  bool env_left = getenv("LISTEN_PID") || getenv("LISTEN_FDS") || getenv("LISTEN_FDNAMES");
  bool flags_ok = true;
  for (int fd : got.pub) flags_ok = flags_ok && flagsSet(fd);
  for (int fd : got.admin) flags_ok = flags_ok && flagsSet(fd);
  return "pub=" + join(got.pub) + " admin=" + join(got.admin) + " error=" + got.error +
         " env=" + (env_left ? "set" : "unset") + " flags=" + (flags_ok ? "ok" : "bad");
}

// Forks; the child moves `fds` to 3, 4, ..., closes the fds after them,
// sets `env` (kSelf becomes its own pid) and reports
// describe(inheritedListeners()). Returns the report.
std::string activate(const std::vector<int>& fds, const Env& env) {
  int pipe_fds[2];
  REQUIRE(pipe2(pipe_fds, O_CLOEXEC) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Out of the way first, so moving one fd never overwrites another.
    int out = fcntl(pipe_fds[1], F_DUPFD_CLOEXEC, 100);
    std::vector<int> high;
    for (int fd : fds) high.push_back(fcntl(fd, F_DUPFD_CLOEXEC, 110));
    for (size_t i = 0; i < high.size(); ++i)
      if (dup2(high[i], 3 + static_cast<int>(i)) < 0) _exit(2);
    for (int fd = 3 + static_cast<int>(high.size()); fd < 100; ++fd) close(fd);
    for (const auto& [name, value] : env)
      setenv(name.c_str(), value == kSelf ? std::to_string(getpid()).c_str() : value.c_str(), 1);
    std::string report = describe(inheritedListeners());
    ssize_t n = write(out, report.data(), report.size());
    _exit(n == static_cast<ssize_t>(report.size()) ? 0 : 3);
  }
  close(pipe_fds[1]);
  std::string report;
  char buf[512];
  ssize_t n;
  while ((n = read(pipe_fds[0], buf, sizeof buf)) > 0) report.append(buf, static_cast<size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return report;
}

struct Fds {
  std::vector<int> fds;
  ~Fds() {
    for (int fd : fds) close(fd);
  }
};

// An AF_UNIX datagram socket bound to a path in a fresh temp directory, or
// to an abstract name; NOTIFY_SOCKET names it while the object lives.
struct NotifyReceiver {
  int fd = -1;
  std::string dir;
  std::string path;

  explicit NotifyReceiver(bool abstract) {
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    socklen_t len = 0;
    std::string env;
    if (abstract) {
      std::string name = "concert-test-notify-" + std::to_string(getpid());
      std::memcpy(addr.sun_path + 1, name.data(), name.size());
      len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
      env = "@" + name;
    } else {
      char tmpl[] = "/tmp/concert-notify-XXXXXX";
      REQUIRE(mkdtemp(tmpl) != nullptr);
      dir = tmpl;
      path = dir + "/notify";
      std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
      len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
      env = path;
    }
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0);
    setenv("NOTIFY_SOCKET", env.c_str(), 1);
  }
  ~NotifyReceiver() {
    unsetenv("NOTIFY_SOCKET");
    close(fd);
    if (!path.empty()) unlink(path.c_str());
    if (!dir.empty()) rmdir(dir.c_str());
  }
  // The next datagram, "" when none is waiting.
  std::string receive() {
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  }
};

long long monotonicUsec() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<long long>(now.tv_sec) * 1000000LL + now.tv_nsec / 1000;
}

}  // namespace

TEST_CASE("activation: named fds split into public and admin listeners, flags set, environment cleared") {
  Fds s{{listeningTcp(), listeningTcp()}};
  CHECK(activate(s.fds, {{"LISTEN_PID", kSelf}, {"LISTEN_FDS", "2"}, {"LISTEN_FDNAMES", "public:admin"}}) ==
        "pub=3 admin=4 error= env=unset flags=ok");
  CHECK(activate(s.fds, {{"LISTEN_PID", kSelf}, {"LISTEN_FDS", "2"}, {"LISTEN_FDNAMES", "admin:http"}}) ==
        "pub=4 admin=3 error= env=unset flags=ok");
}

TEST_CASE("activation: any name but admin is public; without names every fd is public") {
  Fds s{{listeningTcp(), listeningTcp(), listeningTcp()}};
  CHECK(activate(s.fds, {{"LISTEN_PID", kSelf}, {"LISTEN_FDS", "3"}, {"LISTEN_FDNAMES", "http:concert.socket:"}}) ==
        "pub=3,4,5 admin= error= env=unset flags=ok");
  CHECK(activate(s.fds, {{"LISTEN_PID", kSelf}, {"LISTEN_FDS", "3"}}) == "pub=3,4,5 admin= error= env=unset flags=ok");
  CHECK(activate(s.fds, {{"LISTEN_PID", kSelf}, {"LISTEN_FDS", "1"}, {"LISTEN_FDNAMES", "public"}}) ==
        "pub=3 admin= error= env=unset flags=ok");
}

TEST_CASE("activation: fds meant for another process are ignored, and the environment is cleared anyway") {
  Fds s{{listeningTcp(), listeningTcp()}};
  std::string parent = std::to_string(getpid());  // the child's parent: not the child
  CHECK(activate(s.fds, {{"LISTEN_PID", parent}, {"LISTEN_FDS", "2"}, {"LISTEN_FDNAMES", "public:admin"}}) ==
        "pub= admin= error= env=unset flags=ok");
  CHECK(activate(s.fds, {{"LISTEN_PID", "junk"}, {"LISTEN_FDS", "2"}}) == "pub= admin= error= env=unset flags=ok");
  CHECK(activate(s.fds, {{"LISTEN_FDS", "2"}, {"LISTEN_FDNAMES", "public:admin"}}) ==
        "pub= admin= error= env=unset flags=ok");
  CHECK(activate(s.fds, {{"LISTEN_PID", kSelf}, {"LISTEN_FDS", "0"}}) == "pub= admin= error= env=unset flags=ok");
}

TEST_CASE("activation: an fd that is not a listening stream socket is an error naming it") {
  int pipe_fds[2];
  REQUIRE(pipe2(pipe_fds, O_CLOEXEC) == 0);
  Fds s{{listeningTcp(), pipe_fds[0], pipe_fds[1], tcpSocket(SOCK_STREAM, false), tcpSocket(SOCK_DGRAM, false)}};
  Env env{{"LISTEN_PID", kSelf}, {"LISTEN_FDS", "2"}, {"LISTEN_FDNAMES", "public:admin"}};
  CHECK(activate({s.fds[0], s.fds[1]}, env) ==
        "pub= admin= error=LISTEN_FDS: fd 4 is not a listening stream socket env=unset flags=ok");
  // bound but not listening, and a datagram socket
  CHECK(activate({s.fds[3], s.fds[0]}, env) ==
        "pub= admin= error=LISTEN_FDS: fd 3 is not a listening stream socket env=unset flags=ok");
  CHECK(activate({s.fds[0], s.fds[4]}, env) ==
        "pub= admin= error=LISTEN_FDS: fd 4 is not a listening stream socket env=unset flags=ok");
  // more fds announced than handed over: fd 5 is not open
  CHECK(activate({s.fds[0], s.fds[0]}, {{"LISTEN_PID", kSelf}, {"LISTEN_FDS", "3"}}) ==
        "pub= admin= error=LISTEN_FDS: fd 5 is not a listening stream socket env=unset flags=ok");
}

TEST_CASE("activation: malformed LISTEN_FDS or LISTEN_FDNAMES is an error") {
  Fds s{{listeningTcp(), listeningTcp()}};
  CHECK(activate(s.fds, {{"LISTEN_PID", kSelf}, {"LISTEN_FDS", "two"}}) ==
        "pub= admin= error=LISTEN_FDS: invalid count \"two\" env=unset flags=ok");
  CHECK(activate(s.fds, {{"LISTEN_PID", kSelf}, {"LISTEN_FDS", "-1"}}) ==
        "pub= admin= error=LISTEN_FDS: invalid count \"-1\" env=unset flags=ok");
  CHECK(activate(s.fds, {{"LISTEN_PID", kSelf}, {"LISTEN_FDS", "2"}, {"LISTEN_FDNAMES", "admin"}}) ==
        "pub= admin= error=LISTEN_FDNAMES: 1 names for 2 descriptors env=unset flags=ok");
}

TEST_CASE("activation: nothing to do in this process leaves fds alone and clears the environment") {
  setenv("LISTEN_FDS", "2", 1);
  setenv("LISTEN_FDNAMES", "public:admin", 1);
  InheritedListeners got = inheritedListeners();
  CHECK(got.ok());
  CHECK(got.pub.empty());
  CHECK(got.admin.empty());
  CHECK(getenv("LISTEN_FDS") == nullptr);
  CHECK(getenv("LISTEN_FDNAMES") == nullptr);
}

TEST_CASE("listenerDisplay: IPv4, IPv6, unix paths and abstract names") {
  Fds s{{listeningTcp()}};
  CHECK(listenerDisplay(s.fds[0]) == "127.0.0.1:" + std::to_string(boundPort(s.fds[0])));

  int v6 = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (v6 >= 0) {
    s.fds.push_back(v6);
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    in6.sin6_addr = in6addr_any;
    if (bind(v6, reinterpret_cast<sockaddr*>(&in6), sizeof in6) == 0) {
      socklen_t len = sizeof in6;
      REQUIRE(getsockname(v6, reinterpret_cast<sockaddr*>(&in6), &len) == 0);
      CHECK(listenerDisplay(v6) == "[::]:" + std::to_string(ntohs(in6.sin6_port)));
    }
  }

  NotifyReceiver path(false);
  CHECK(listenerDisplay(path.fd) == "unix:" + path.path);
  {
    NotifyReceiver abstract(true);
    CHECK(listenerDisplay(abstract.fd) == "unix:@concert-test-notify-" + std::to_string(getpid()));
  }
  int unnamed = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  s.fds.push_back(unnamed);
  CHECK(listenerDisplay(unnamed) == "unix:");
  CHECK(listenerDisplay(-1) == "fd -1");
}

TEST_CASE("notify: one datagram to a socket path") {
  NotifyReceiver receiver(false);
  CHECK(notify("READY=1"));
  CHECK(receiver.receive() == "READY=1");
  std::string reloading = "RELOADING=1\n" + monotonicUsecField();
  CHECK(notify(reloading));
  CHECK(receiver.receive() == reloading);
  CHECK(notify("STATUS=3 workers, 120 waiting"));
  CHECK(notify("STOPPING=1"));
  CHECK(receiver.receive() == "STATUS=3 workers, 120 waiting");
  CHECK(receiver.receive() == "STOPPING=1");
  CHECK(receiver.receive().empty());
}

TEST_CASE("notify: an abstract name ('@' first) uses the exact address length") {
  NotifyReceiver receiver(true);
  CHECK(notify("READY=1"));
  CHECK(receiver.receive() == "READY=1");
}

TEST_CASE("notify: false without a usable NOTIFY_SOCKET, errno untouched") {
  unsetenv("NOTIFY_SOCKET");
  CHECK_FALSE(notify("READY=1"));
  setenv("NOTIFY_SOCKET", "", 1);
  CHECK_FALSE(notify("READY=1"));
  setenv("NOTIFY_SOCKET", "relative/notify", 1);
  CHECK_FALSE(notify("READY=1"));
  setenv("NOTIFY_SOCKET", ("/" + std::string(200, 'x')).c_str(), 1);
  CHECK_FALSE(notify("READY=1"));
  setenv("NOTIFY_SOCKET", "/nonexistent/concert/notify", 1);
  errno = EDOM;
  CHECK_FALSE(notify("READY=1"));
  CHECK(errno == EDOM);
  setenv("NOTIFY_SOCKET", "@concert-test-nobody-listens", 1);
  CHECK_FALSE(notify("READY=1"));
  unsetenv("NOTIFY_SOCKET");
}

TEST_CASE("notify: never blocks on a receiver that does not read") {
  NotifyReceiver receiver(false);
  int sent = 0;
  int refused = 0;
  for (int i = 0; i < 5000; ++i) (notify("STATUS=" + std::to_string(i)) ? sent : refused)++;
  CHECK(sent > 0);
  CHECK(refused > 0);
  CHECK(receiver.receive() == "STATUS=0");
}

TEST_CASE("monotonicUsecField: CLOCK_MONOTONIC in microseconds") {
  long long before = monotonicUsec();
  std::string field = monotonicUsecField();
  long long after = monotonicUsec();
  REQUIRE(field.rfind("MONOTONIC_USEC=", 0) == 0);
  std::string digits = field.substr(std::strlen("MONOTONIC_USEC="));
  REQUIRE(!digits.empty());
  CHECK(digits.find_first_not_of("0123456789") == std::string::npos);
  long long value = std::stoll(digits);
  CHECK(value >= before);
  CHECK(value <= after);
}
