// The origin's status page; see origin_status.h.
#include "master/origin_status.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace concert::master {

namespace {

constexpr size_t kMaxBody = 64 * 1024;

struct Field {
  std::string_view name;
  int64_t OriginStatus::*value;
};
constexpr Field kFields[] = {
    {"active processes", &OriginStatus::active},
    {"total processes", &OriginStatus::total},
    {"listen queue", &OriginStatus::listen_queue},
    {"max children reached", &OriginStatus::max_children_reached},
};

OriginStatus failed(std::string why) {
  OriginStatus s;
  s.error = std::move(why);
  return s;
}

// Waits for `events` on fd until `deadline`; false on timeout or error.
bool waitFor(int fd, short events, Millis deadline) {
  for (;;) {
    const Millis left = deadline - monotonicMs();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(left));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

}  // namespace

OriginStatus parseOriginStatus(std::string_view body) {
  OriginStatus s;
  bool any = false;
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, false);
  if (json.is_object()) {
    for (const Field& f : kFields) {
      auto it = json.find(std::string(f.name));
      if (it != json.end() && it->is_number_integer()) {
        s.*f.value = it->get<int64_t>();
        any = true;
      }
    }
  } else {
    // "name:   value" lines.
    size_t from = 0;
    while (from < body.size()) {
      size_t to = body.find('\n', from);
      if (to == std::string_view::npos) to = body.size();
      std::string_view line = body.substr(from, to - from);
      from = to + 1;
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      const std::string_view name = line.substr(0, colon);
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
      while (!value.empty() && (value.back() == '\r' || value.back() == ' ')) value.remove_suffix(1);
      for (const Field& f : kFields) {
        if (name != f.name || value.empty() || value.size() > 18) continue;
        int64_t n = 0;
        bool digits = true;
        for (char c : value) {
          if (c < '0' || c > '9') digits = false;
          n = n * 10 + (c - '0');
        }
        if (!digits) continue;
        s.*f.value = n;
        any = true;
      }
    }
  }
  if (!any) return failed("the page names none of: active processes, total processes, listen queue");
  s.ok = true;
  return s;
}

OriginStatus fetchOriginStatus(const config::Upstream& url, Millis timeout) {
  const Millis deadline = monotonicMs() + timeout;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(url.port);
  if (getaddrinfo(url.host.c_str(), port.c_str(), &hints, &found) != 0 || !found)
    return failed("not an address: " + url.host);
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(found);
    return failed(std::string("socket: ") + std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  const int rc = connect(fd, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (rc < 0 && errno != EINPROGRESS) return failed(std::string("connect: ") + std::strerror(errno));
  if (!waitFor(fd, POLLOUT, deadline)) return failed("connect: timed out");
  int error = 0;
  socklen_t len = sizeof error;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) < 0 || error != 0)
    return failed(std::string("connect: ") + std::strerror(error ? error : errno));

  std::string target = url.path.empty() ? "/" : url.path;
  target += url.query.empty() ? "?json" : "?" + url.query;
  const std::string request = "GET " + target + " HTTP/1.0\r\nHost: " + url.host_port +
                              "\r\nUser-Agent: concert\r\nAccept: application/json\r\nConnection: close\r\n\r\n";
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!waitFor(fd, POLLOUT, deadline)) return failed("send: timed out");
    } else {
      return failed(std::string("send: ") + std::strerror(errno));
    }
  }
  std::string response;
  char buf[8192];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      response.append(buf, static_cast<size_t>(n));
      if (response.size() > kMaxBody) return failed("the page is over 64 KiB");
    } else if (n == 0) {
      break;
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!waitFor(fd, POLLIN, deadline)) return failed("no answer in time");
    } else {
      return failed(std::string("recv: ") + std::strerror(errno));
    }
  }
  if (response.compare(0, 9, "HTTP/1.1 ") != 0 && response.compare(0, 9, "HTTP/1.0 ") != 0)
    return failed("not an HTTP response");
  if (response.compare(9, 3, "200") != 0) return failed("answered " + response.substr(9, 3));
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) return failed("no end of the response head");
  return parseOriginStatus(std::string_view(response).substr(body + 4));
}

}  // namespace concert::master
