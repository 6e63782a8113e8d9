// Binding the listening sockets (see listener.h for the lifetime rules).
// Errors read like Go's net.Listen ones ("listen tcp ADDR: bind: ..."),
// which is what operators of the original grep for.
#include "master/listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "config/parse.h"

namespace concert::master {
namespace {

constexpr int kBacklog = 4096;  // the kernel clamps it to net.core.somaxconn

std::string addressText(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    std::string text;  // appended piecewise: GCC 12 warns (-Wrestrict) on "[" + std::string
    text.append("[").append(host).append("]:").append(std::to_string(ntohs(in6->sin6_port)));
    return text;
  }
  const auto* in4 = reinterpret_cast<const sockaddr_in*>(sa);
  inet_ntop(AF_INET, &in4->sin_addr, host, sizeof host);
  return std::string(host) + ":" + std::to_string(ntohs(in4->sin_port));
}

// One socket bound to `sa`. Returns the fd, or -1 with `error` set and
// `family_unsupported` telling the caller a fallback family may work.
int bindOne(const sockaddr* sa, socklen_t len, bool dual_stack, const std::string& spec, std::string* error,
            bool* family_unsupported) {
  *family_unsupported = false;
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *family_unsupported = errno == EAFNOSUPPORT || errno == EPROTONOSUPPORT;
    *error = "listen tcp " + spec + ": socket: " + std::strerror(errno);
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (dual_stack) {
    int zero = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  }
  if (bind(fd, sa, len) != 0) {
    int err = errno;
    *family_unsupported = err == EADDRNOTAVAIL || err == EAFNOSUPPORT;
    *error = "listen tcp " + spec + ": bind: " + std::strerror(err);
    close(fd);
    return -1;
  }
  if (listen(fd, kBacklog) != 0) {
    *error = "listen tcp " + spec + ": listen: " + std::strerror(errno);
    close(fd);
    return -1;
  }
  return fd;
}

BoundListener describe(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return BoundListener{fd, addressText(reinterpret_cast<sockaddr*>(&ss))};
}

}  // namespace

ListenResult bindListeners(const std::string& spec) {
  ListenResult result;
  config::Parsed<config::ListenAddress> parsed = config::parseListenAddress(spec);
  if (!parsed.ok()) {
    result.error = "listen tcp " + spec + ": " + parsed.error;
    return result;
  }
  const config::ListenAddress& address = *parsed.value;
  uint16_t port = static_cast<uint16_t>(std::stoi(address.port));
  bool family_unsupported = false;

  if (address.host.empty()) {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    in6.sin6_addr = in6addr_any;
    in6.sin6_port = htons(port);
    int fd = bindOne(reinterpret_cast<sockaddr*>(&in6), sizeof in6, true, spec, &result.error, &family_unsupported);
    if (fd < 0 && family_unsupported) {
      sockaddr_in in4{};
      in4.sin_family = AF_INET;
      in4.sin_addr.s_addr = htonl(INADDR_ANY);
      in4.sin_port = htons(port);
      fd = bindOne(reinterpret_cast<sockaddr*>(&in4), sizeof in4, false, spec, &result.error, &family_unsupported);
    }
    if (fd >= 0) {
      result.error.clear();
      result.listeners.push_back(describe(fd));
    }
    return result;
  }

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(address.host.c_str(), address.port.c_str(), &hints, &found);
  if (rc != 0) {
    result.error = "listen tcp " + spec + ": lookup " + address.host + ": " + gai_strerror(rc);
    return result;
  }
  // The first address that binds wins, like Go's net.Listen for a name.
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    int fd = bindOne(ai->ai_addr, ai->ai_addrlen, false, spec, &result.error, &family_unsupported);
    if (fd >= 0) {
      result.error.clear();
      result.listeners.push_back(describe(fd));
      break;
    }
  }
  freeaddrinfo(found);
  return result;
}

void closeListeners(std::vector<BoundListener>* listeners) {
  for (BoundListener& l : *listeners)
    if (l.fd >= 0) close(l.fd);
  listeners->clear();
}

}  // namespace concert::master
