// Socket activation and readiness notification (see systemd.h).
#include "master/systemd.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace concert::master::systemd {
namespace {

constexpr int kFirstFd = 3;        // the first fd after stdin, stdout and stderr
constexpr long kMaxFds = 1 << 16;  // far beyond any socket unit; guards 3+n against overflow

std::optional<std::string> takeEnv(const char* name) {
  const char* value = std::getenv(name);
  std::optional<std::string> copy;
  if (value != nullptr) copy = value;
  unsetenv(name);
  return copy;
}

// A decimal number made of digits only, nothing else.
std::optional<long> parseCount(const std::string& text) {
  long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < 0) return std::nullopt;
  return value;
}

std::vector<std::string> splitNames(const std::string& text) {
  std::vector<std::string> names;
  size_t start = 0;
  for (;;) {
    size_t colon = text.find(':', start);
    names.push_back(text.substr(start, colon - start));
    if (colon == std::string::npos) return names;
    start = colon + 1;
  }
}

bool isListeningStream(int fd) {
  int type = 0;
  int listening = 0;
  socklen_t len = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return false;
  len = sizeof listening;
  return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening != 0;
}

bool makeCloexecNonblocking(int fd) {
  int fd_flags = fcntl(fd, F_GETFD);
  int fl_flags = fcntl(fd, F_GETFL);
  return fd_flags >= 0 && fl_flags >= 0 && fcntl(fd, F_SETFD, fd_flags | FD_CLOEXEC) == 0 &&
         fcntl(fd, F_SETFL, fl_flags | O_NONBLOCK) == 0;
}

InheritedListeners failed(std::string error) {
  InheritedListeners result;
  result.error = std::move(error);
  return result;
}

std::string unixText(const sockaddr_un* un, socklen_t len) {
  size_t path_len = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
  if (path_len == 0) return "unix:";
  if (un->sun_path[0] == '\0') return "unix:@" + std::string(un->sun_path + 1, path_len - 1);
  return "unix:" + std::string(un->sun_path, strnlen(un->sun_path, path_len));
}

}  // namespace

InheritedListeners inheritedListeners() {
  std::optional<std::string> pid_text = takeEnv("LISTEN_PID");
  std::optional<std::string> fds_text = takeEnv("LISTEN_FDS");
  std::optional<std::string> names_text = takeEnv("LISTEN_FDNAMES");

  std::optional<long> pid = pid_text ? parseCount(*pid_text) : std::nullopt;
  if (!pid || *pid != getpid() || !fds_text) return {};
  std::optional<long> count = parseCount(*fds_text);
  if (!count || *count > kMaxFds) return failed("LISTEN_FDS: invalid count \"" + *fds_text + "\"");
  if (*count == 0) return {};

  std::vector<std::string> names;
  if (names_text) {
    names = splitNames(*names_text);
    if (static_cast<long>(names.size()) != *count)
      return failed("LISTEN_FDNAMES: " + std::to_string(names.size()) + " names for " + std::to_string(*count) +
                    " descriptors");
  }

  InheritedListeners result;
  for (int i = 0; i < *count; ++i) {
    int fd = kFirstFd + i;
    if (!isListeningStream(fd))
      return failed("LISTEN_FDS: fd " + std::to_string(fd) + " is not a listening stream socket");
    if (!makeCloexecNonblocking(fd))
      return failed("LISTEN_FDS: fd " + std::to_string(fd) + ": fcntl: " + std::strerror(errno));
    bool admin = !names.empty() && names[static_cast<size_t>(i)] == "admin";
    (admin ? result.admin : result.pub).push_back(fd);
  }
  return result;
}

std::string listenerDisplay(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "fd " + std::to_string(fd);
  char host[INET6_ADDRSTRLEN] = {};
  switch (ss.ss_family) {
    case AF_INET: {
      const auto* in4 = reinterpret_cast<const sockaddr_in*>(&ss);
      inet_ntop(AF_INET, &in4->sin_addr, host, sizeof host);
      return std::string(host) + ":" + std::to_string(ntohs(in4->sin_port));
    }
    case AF_INET6: {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
      inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
      std::string text;  // appended piecewise: GCC 12 warns (-Wrestrict) on "[" + std::string
      text.append("[").append(host).append("]:").append(std::to_string(ntohs(in6->sin6_port)));
      return text;
    }
    case AF_UNIX: return unixText(reinterpret_cast<const sockaddr_un*>(&ss), len);
    default: return "fd " + std::to_string(fd);
  }
}

bool notify(const std::string& state) noexcept {
  const char* target = std::getenv("NOTIFY_SOCKET");
  if (target == nullptr || (target[0] != '/' && target[0] != '@')) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  size_t len = std::strlen(target);
  bool abstract = target[0] == '@';
  // A path needs its terminating NUL inside sun_path; an abstract name is
  // exactly as long as the address length says.
  if (len > sizeof addr.sun_path || (!abstract && len == sizeof addr.sun_path)) return false;
  std::memcpy(addr.sun_path, target, len);
  if (abstract) addr.sun_path[0] = '\0';
  auto addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len + (abstract ? 0 : 1));

  int saved_errno = errno;
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ssize_t sent = -1;
  if (fd >= 0) {
    do {
      sent = sendto(fd, state.data(), state.size(), MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
                    addr_len);
    } while (sent < 0 && errno == EINTR);
    close(fd);
  }
  errno = saved_errno;
  return sent >= 0 && static_cast<size_t>(sent) == state.size();
}

std::string monotonicUsecField() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  long long usec = static_cast<long long>(now.tv_sec) * 1000000LL + now.tv_nsec / 1000;
  return "MONOTONIC_USEC=" + std::to_string(usec);
}

}  // namespace concert::master::systemd
