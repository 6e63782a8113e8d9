// A parsed HTTP/1.x request head, as the data path hands it to the router,
// the guards and the local handlers. Header names keep the client's spelling;
// lookups are case-insensitive. The body is never part of this: it streams.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace concert::http {

struct Header {
  std::string name;
  std::string value;
};
using Headers = std::vector<Header>;

bool equalsIgnoreCase(std::string_view a, std::string_view b);

// First value of `name`, or "" (use hasHeader to tell empty from absent).
std::string_view findHeader(const Headers& headers, std::string_view name);
bool hasHeader(const Headers& headers, std::string_view name);
// Every value of `name` joined with "," (Accept classification, Cookie).
std::string joinHeader(const Headers& headers, std::string_view name, std::string_view sep = ",");
// The raw value of `name` in a query string ("a=1&limit=20"): "" for a bare
// "name", nullopt when absent. No percent-decoding (the admin endpoints'
// parameters are numbers).
std::optional<std::string_view> queryValue(std::string_view query, std::string_view name);

struct Request {
  std::string method;    // as sent, e.g. "GET"
  std::string target;    // request-target as sent: "/a/./%2e%2e/b%20c?x=1"
  std::string path;      // raw_path percent-decoded: "/b c" (routing and guards match this)
  std::string raw_path;  // path as sent without its dot-segments, query removed: "/b%20c" (forwarded)
  std::string query;     // after '?', "" when none
  int http_major = 1;
  int http_minor = 1;
  Headers headers;
  std::string peer_ip;  // TCP peer address of the client connection
  bool tls = false;     // the client connection to Concert is TLS
  // Who the client is, set at dispatch by identifyClient (http/client_address.h):
  std::string client_ip;       // peer_ip, or the client a trusted proxy names ("" before dispatch)
  bool peer_trusted = false;   // peer_ip is in -trusted-proxies: its forwarding headers are believed
  bool client_https = false;   // the client used https: tls, or a trusted proxy says so
  // The client as the per-client limits and bans know it (abuse.h): set at
  // dispatch, or from the peer for a head refused before dispatch.
  bool client_keyed = false;             // client_key is set (the client is an IP address)
  std::array<uint8_t, 16> client_key{};  // http::clientKey of the client address
  bool abuse_exempt = false;             // -abuse-allow or -bypass-cidrs: never struck, banned or limited
  bool admin_listener = false;           // arrived on -admin-listen: the admin endpoints need no token

  int64_t content_length = -1;  // -1: none
  bool chunked = false;
  bool keep_alive = true;  // after this request, per version and Connection
  bool expect_continue = false;
  bool upgrade = false;  // Connection: upgrade + Upgrade: present

  std::string_view header(std::string_view name) const { return findHeader(headers, name); }
  bool hasBody() const { return chunked || content_length > 0; }
  // Keeps only what the access line needs (Referer, User-Agent) and gives
  // the rest's memory back: a request that waits long (an event stream)
  // holds no more than that.
  void keepForLog();
};

}  // namespace concert::http
