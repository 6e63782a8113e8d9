// The forwarding-header reader and writer; the rules are in client_address.h.
#include "http/client_address.h"

#include <arpa/inet.h>
#include <cstring>
#include <netinet/in.h>

namespace concert::http {

namespace {

bool isOws(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trimOws(std::string_view s) {
  while (!s.empty() && isOws(s.front())) s.remove_prefix(1);
  while (!s.empty() && isOws(s.back())) s.remove_suffix(1);
  return s;
}

bool isTokenChar(char c) {
  static constexpr std::string_view kPunct = "!#$%&'*+-.^_`|~";
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         kPunct.find(c) != std::string_view::npos;
}

// Calls fn(item) for every non-empty, trimmed, comma separated item of a
// list header value, honouring quoted strings (a comma inside quotes does
// not split).
template <typename Fn>
void forEachListItem(std::string_view value, Fn&& fn) {
  size_t start = 0;
  bool quoted = false;
  for (size_t i = 0; i <= value.size(); ++i) {
    if (i < value.size()) {
      const char c = value[i];
      if (quoted && c == '\\') {
        ++i;
        continue;
      }
      if (c == '"') quoted = !quoted;
      if (quoted || c != ',') continue;
    }
    std::string_view item = trimOws(value.substr(start, i - start));
    if (!item.empty()) fn(item);
    start = i + 1;
  }
}

// A Forwarded parameter value: a token, or a quoted-string unescaped.
std::string unquote(std::string_view v) {
  if (v.size() < 2 || v.front() != '"' || v.back() != '"') return std::string(v);
  std::string out;
  for (size_t i = 1; i + 1 < v.size(); ++i) {
    if (v[i] == '\\' && i + 2 < v.size()) ++i;
    out += v[i];
  }
  return out;
}

struct ForwardedElement {
  std::optional<std::string> for_node, proto, host;
};

// One element "for=a;proto=https;host=x" (parameter names without case;
// the first of each name counts).
ForwardedElement parseElement(std::string_view element) {
  ForwardedElement out;
  size_t start = 0;
  bool quoted = false;
  for (size_t i = 0; i <= element.size(); ++i) {
    if (i < element.size()) {
      const char c = element[i];
      if (quoted && c == '\\') {
        ++i;
        continue;
      }
      if (c == '"') quoted = !quoted;
      if (quoted || c != ';') continue;
    }
    std::string_view pair = trimOws(element.substr(start, i - start));
    start = i + 1;
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = trimOws(pair.substr(0, eq));
    std::string value = unquote(trimOws(pair.substr(eq + 1)));
    std::optional<std::string>* slot = equalsIgnoreCase(name, "for")     ? &out.for_node
                                       : equalsIgnoreCase(name, "proto") ? &out.proto
                                       : equalsIgnoreCase(name, "host")  ? &out.host
                                                                         : nullptr;
    if (slot && !*slot) *slot = std::move(value);
  }
  return out;
}

// The left-most list item of every `name` line, or nullopt.
std::optional<std::string> firstListItem(const Headers& headers, std::string_view name) {
  std::optional<std::string> out;
  for (const Header& h : headers) {
    if (!equalsIgnoreCase(h.name, name)) continue;
    forEachListItem(h.value, [&](std::string_view item) {
      if (!out) out = std::string(item);
    });
    if (out) break;
  }
  return out;
}

// A Forwarded value: bare when it is a token, else a quoted-string.
std::string forwardedValue(std::string_view v) {
  bool token = !v.empty();
  for (char c : v) token = token && isTokenChar(c);
  if (token) return std::string(v);
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

// A hop as a Forwarded node: IPv6 in brackets (RFC 7239, section 6),
// "unknown" for an element that named no client.
std::string forwardedNode(std::string_view hop) {
  if (hop.empty()) return "unknown";
  const bool bare_v6 = hop.front() != '[' && hop.find(':') != hop.rfind(':');
  if (bare_v6 && parseNode(hop)) return forwardedValue(std::string("[").append(hop).append("]"));
  return forwardedValue(hop);
}

}  // namespace

std::optional<config::IpAddress> parseNode(std::string_view node) {
  if (node.empty()) return std::nullopt;
  if (node.front() == '[') {
    const size_t close = node.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    const std::string_view rest = node.substr(close + 1);
    if (!rest.empty() && (rest.front() != ':' || rest.size() < 2)) return std::nullopt;
    for (char c : rest.substr(rest.empty() ? 0 : 1))
      if (c < '0' || c > '9') return std::nullopt;
    std::optional<config::IpAddress> a = config::parseIpAddress(node.substr(1, close - 1));
    if (a && !a->v6 && node.substr(1, close - 1).find(':') == std::string_view::npos) return std::nullopt;
    return a;
  }
  const size_t colon = node.find(':');
  if (colon != std::string_view::npos && colon == node.rfind(':')) {
    // IPv4 with a port: "192.0.2.1:8080".
    const std::string_view port = node.substr(colon + 1);
    if (port.empty()) return std::nullopt;
    for (char c : port)
      if (c < '0' || c > '9') return std::nullopt;
    std::optional<config::IpAddress> a = config::parseIpAddress(node.substr(0, colon));
    return a && !a->v6 ? a : std::nullopt;
  }
  return config::parseIpAddress(node);
}

IncomingForwarding readForwarding(const Headers& headers) {
  IncomingForwarding in;
  bool have_xff = false;
  for (const Header& h : headers) {
    if (!equalsIgnoreCase(h.name, "X-Forwarded-For")) continue;
    have_xff = true;
    forEachListItem(h.value, [&](std::string_view item) { in.hops.emplace_back(item); });
  }
  in.proto = firstListItem(headers, "X-Forwarded-Proto");
  in.host = firstListItem(headers, "X-Forwarded-Host");

  std::optional<std::string> f_proto, f_host;
  for (const Header& h : headers) {
    if (!equalsIgnoreCase(h.name, "Forwarded")) continue;
    forEachListItem(h.value, [&](std::string_view item) {
      ForwardedElement e = parseElement(item);
      if (!have_xff) {
        in.from_forwarded = true;
        in.hops.push_back(e.for_node.value_or(std::string()));
      }
      if (!f_proto && e.proto && !e.proto->empty()) f_proto = std::move(e.proto);
      if (!f_host && e.host && !e.host->empty()) f_host = std::move(e.host);
    });
  }
  if (!in.proto) in.proto = std::move(f_proto);
  if (!in.host) in.host = std::move(f_host);
  return in;
}

config::IpAddress walkChain(const std::vector<std::string>& hops, const config::IpAddress& peer,
                            const config::CidrList& trusted) {
  config::IpAddress current = peer;
  if (!config::cidrListContains(trusted, current)) return current;
  for (size_t i = hops.size(); i-- > 0;) {
    std::optional<config::IpAddress> next = parseNode(hops[i]);
    if (!next) return current;
    current = *next;
    if (!config::cidrListContains(trusted, current)) return current;
  }
  return current;
}

ClientIdentity identifyClient(const Request& request, const config::CidrList& trusted) {
  ClientIdentity who;
  who.https = request.tls;
  who.address = config::parseIpAddress(request.peer_ip);
  if (!who.address || !config::cidrListContains(trusted, *who.address)) {
    who.ip = request.peer_ip;
    return who;
  }
  who.peer_trusted = true;
  const IncomingForwarding in = readForwarding(request.headers);
  who.address = walkChain(in.hops, *who.address, trusted);
  who.ip = config::ipAddressText(*who.address);
  if (in.proto && equalsIgnoreCase(*in.proto, "https")) who.https = true;
  return who;
}

std::array<uint8_t, 16> clientKey(const config::IpAddress& address) {
  std::array<uint8_t, 16> key{};
  if (address.v6) {
    std::copy(address.bytes.begin(), address.bytes.begin() + 8, key.begin());
  } else {
    key[10] = 0xff;
    key[11] = 0xff;
    std::copy(address.bytes.begin(), address.bytes.begin() + 4, key.begin() + 12);
  }
  return key;
}

std::string clientKeyText(const uint8_t key[16]) {
  char buf[INET6_ADDRSTRLEN] = "";
  in6_addr a6{};
  std::memcpy(a6.s6_addr, key, 16);
  if (IN6_IS_ADDR_V4MAPPED(&a6)) {
    inet_ntop(AF_INET, &a6.s6_addr[12], buf, sizeof buf);
    return buf;
  }
  inet_ntop(AF_INET6, &a6, buf, sizeof buf);
  return std::string(buf) + "/64";
}

std::string socketAddressText(const sockaddr* address) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (address->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, buf, sizeof buf);
  } else if (address->sa_family == AF_INET6) {
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(address);
    if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr))
      inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], buf, sizeof buf);
    else
      inet_ntop(AF_INET6, &a6->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

OutgoingForwarding outgoingForwarding(const Request& request) {
  OutgoingForwarding out;
  IncomingForwarding in;
  if (request.peer_trusted) in = readForwarding(request.headers);

  for (const std::string& hop : in.hops) {
    std::optional<config::IpAddress> a = in.from_forwarded ? parseNode(hop) : std::nullopt;
    out.x_forwarded_for += a ? config::ipAddressText(*a) : hop.empty() ? std::string("unknown") : hop;
    out.x_forwarded_for += ", ";
  }
  out.x_forwarded_for += request.peer_ip;

  out.x_forwarded_proto = in.proto ? *in.proto : request.tls ? "https" : "http";
  if (in.host)
    out.x_forwarded_host = *in.host;
  else if (hasHeader(request.headers, "Host"))
    out.x_forwarded_host = std::string(findHeader(request.headers, "Host"));

  // The first element describes the client; each later one a proxy.
  std::string& f = out.forwarded;
  f.append("for=").append(forwardedNode(in.hops.empty() ? std::string_view(request.peer_ip) : in.hops.front()));
  if (out.x_forwarded_host && !out.x_forwarded_host->empty())
    f.append(";host=").append(forwardedValue(*out.x_forwarded_host));
  f.append(";proto=").append(forwardedValue(out.x_forwarded_proto));
  for (size_t i = 1; i < in.hops.size(); ++i) f.append(", for=").append(forwardedNode(in.hops[i]));
  if (!in.hops.empty()) f.append(", for=").append(forwardedNode(request.peer_ip));
  return out;
}

}  // namespace concert::http
