// The settings table (see schema.h) and the text generated from it. Adding
// a setting means one row here plus its field in Config; the loader, --help,
// the README table and the conf/concert.yaml test pick it up from the row.
#include "config/schema.h"

#include <netdb.h>

#include <charconv>
#include <limits>

#include "config/parse.h"

namespace concert::config {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kSecond = 1000;
constexpr int64_t kMinute = 60 * kSecond;
constexpr int64_t kHour = 60 * kMinute;

bool isControlOrSpace(char c) {
  return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f;
}

std::string checkListen(std::string_view value) {
  if (parseListenAddress(value).ok()) return {};
  return "must look like [host]:port, e.g. :8080, 127.0.0.1:8080 or [::1]:8080";
}

std::string checkAdminListen(std::string_view value) {
  return value.empty() ? std::string() : checkListen(value);
}

// Cookie attribute values are written into Set-Cookie verbatim; a ';' or a
// space would let the setting inject attributes.
std::string checkCookieAttribute(std::string_view value) {
  for (char c : value)
    if (isControlOrSpace(c) || c == ';' || c == ',') return "must not contain spaces, control characters, ';' or ','";
  return {};
}

std::string checkCookiePath(std::string_view value) {
  if (value.empty() || value.front() != '/') return "must start with '/'";
  return checkCookieAttribute(value);
}

// The origin's status page is read by the master: plain HTTP to an address.
std::string checkOriginStatus(std::string_view value) {
  if (value.empty()) return {};
  Parsed<Upstream> url = parseUpstream(value);
  if (!url.ok()) return "must look like http://127.0.0.1:8380/fpm-status";
  if (url.value->https) return "must be http: the master reads it without TLS";
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (getaddrinfo(url.value->host.c_str(), nullptr, &hints, &found) != 0) return "must name its host by address";
  freeaddrinfo(found);
  return {};
}

// The skip URL ends up inside the waiting page's HTML and script.
std::string checkSkipUrl(std::string_view raw) {
  if (raw.empty()) return {};
  // {{.Ticket}} becomes a base64url reference (letters, digits, - and _).
  constexpr std::string_view kTicket = "{{.Ticket}}";
  std::string expanded;
  for (size_t from = 0;;) {
    const size_t at = raw.find(kTicket, from);
    expanded.append(raw.substr(from, at == std::string_view::npos ? std::string_view::npos : at - from));
    if (at == std::string_view::npos) break;
    expanded += 't';
    from = at + kTicket.size();
  }
  std::string_view value = expanded;
  for (char c : value)
    if (isControlOrSpace(c) || c == '"' || c == '\'' || c == '\\' || c == '<' || c == '>' || c == '`')
      return "must not contain spaces, quotes, backslashes or angle brackets";
  if (value.front() == '/') return {};
  if (value.rfind("http://", 0) == 0 || value.rfind("https://", 0) == 0) {
    if (parseUpstream(value).ok()) return {};
  }
  return "must be an http(s) URL or a path starting with '/'";
}

// A share of freed slots: a number from 0 to 1.
std::string checkShare(std::string_view value) {
  double v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec == std::errc() && end == value.data() + value.size() && v > 1) return "must be between 0 and 1";
  return {};
}

std::string checkQueueStatus(std::string_view value) {
  if (value == "200" || value == "429" || value == "503") return {};
  return "must be 200, 429 or 503";
}

// Comma-separated User-Agent substrings; each is matched without case.
std::string checkAgentList(std::string_view value) {
  for (char c : value)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "must not contain control characters";
  return {};
}

std::string checkHeaderName(std::string_view value) {
  static constexpr std::string_view kTokenPunct = "!#$%&'*+-.^_`|~";
  for (char c : value) {
    bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              kTokenPunct.find(c) != std::string_view::npos;
    if (!ok) return "must be an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)";
  }
  return {};
}

std::string checkClusterUrl(std::string_view value) {
  return parseClusterUrl(value).error;
}

std::string checkClusterFail(std::string_view value) {
  if (value == "open" || value == "closed") return {};
  return "must be open or closed";
}

std::string checkClusterRoom(std::string_view value) {
  if (value.empty() || value.size() > 64) return "must be 1 to 64 characters";
  for (char c : value)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' && c != ':')
      return "must be letters, digits and -_.: only";
  return {};
}

std::string checkMode(std::string_view value) {
  if (value == "open" || value == "pause" || value == "reject" || value == "passthrough") return {};
  return "must be open, pause, reject or passthrough";
}

std::string checkIoUring(std::string_view value) {
  if (value == "auto" || value == "on" || value == "off") return {};
  return "must be auto, on or off";
}

std::string checkAdmitRate(std::string_view value) {
  return parseAdmitRate(value).error;
}

std::string checkEventStart(std::string_view value) {
  return parseRfc3339Ms(value).error;
}

constexpr std::string_view kNet = "Network and processes";
constexpr std::string_view kOrigin = "Origin";
constexpr std::string_view kClients = "Clients";
constexpr std::string_view kRoom = "Waiting room";
constexpr std::string_view kAssets = "Asset tier";
constexpr std::string_view kLogs = "Logging";
constexpr std::string_view kCluster = "Several hosts";

using VT = ValueType;
using R = Reload;

const Setting kSettings[] = {
    // -- network and processes
    {"listen", "CONCERT_LISTEN", VT::String, ":8080", 0, 0, false, R::Restart, kNet,
     "address to listen on, [host]:port", &Config::listen, checkListen},
    {"admin-listen", "CONCERT_ADMIN_LISTEN", VT::String, "", 0, 0, false, R::Restart, kNet,
     "serve the /_room/ endpoints (but healthz) on this address only, without the admin token; empty = on the "
     "public listener, admin endpoints behind CONCERT_ADMIN_TOKEN",
     &Config::admin_listen, checkAdminListen},
    {"workers", "CONCERT_WORKERS", VT::Workers, "auto", 1, 64, false, R::RestartToGrow, kNet,
     "worker processes; auto = one per CPU", &Config::workers, nullptr},
    {"daemon", "CONCERT_DAEMON", VT::Bool, "false", 0, 0, false, R::Restart, kNet,
     "detach from the terminal (double fork, setsid, stdio to /dev/null)", &Config::daemon, nullptr},
    {"pid-file", "CONCERT_PID_FILE", VT::String, "", 0, 0, false, R::Restart, kNet,
     "write the master's pid to this file; removed on exit", &Config::pid_file, nullptr},
    {"state-dir", "CONCERT_STATE_DIR", VT::String, "", 0, 0, false, R::Restart, kNet,
     "keep the waiting line here (the shared segment, and a generated admit secret when CONCERT_ADMIT_SECRET is "
     "unset), so that a restart, a crash or a binary upgrade keeps every visitor's place; a tmpfs such as "
     "/run/concert; empty = the line lives only as long as the process",
     &Config::state_dir, nullptr},
    {"user", "CONCERT_USER", VT::String, "", 0, 0, false, R::Restart, kNet,
     "when started as root, drop to this user (and its group) after binding", &Config::user, nullptr},
    {"shutdown-grace", "CONCERT_SHUTDOWN_GRACE", VT::Duration, "30s", 0, kInt64Max, false, R::Live, kNet,
     "how long in-flight requests may finish on SIGTERM/SIGINT or when a generation drains", &Config::shutdown_grace,
     nullptr},
    {"busy-poll", "CONCERT_BUSY_POLL", VT::Duration, "0", 1, kSecond, true, R::Live, kNet,
     "after handling socket events a worker polls without sleeping for up to this long (for a dedicated proxy "
     "host; 0 = sleep at once)",
     &Config::busy_poll, nullptr},
    {"io-uring", "CONCERT_IO_URING", VT::String, "auto", 0, 0, false, R::Restart, kNet,
     "the workers' socket reads, writes and their wake-ups: on = batched through io_uring (Linux 6.1 or later), "
     "off = epoll, auto = io_uring when the kernel allows it (a container's seccomp profile may not), else epoll",
     &Config::io_uring, checkIoUring},
    {"max-connections", "CONCERT_MAX_CONNECTIONS", VT::Int, "10000", 1, 1 << 24, false, R::Live, kNet,
     "client connections per worker; at the limit a worker stops accepting until one closes", &Config::max_connections,
     nullptr},
    {"client-header-timeout", "CONCERT_CLIENT_HEADER_TIMEOUT", VT::Duration, "10s", 1, 24 * kHour, false, R::Live, kNet,
     "how long a client may take to send a request head (then the connection is closed)",
     &Config::client_header_timeout, nullptr},
    {"client-body-timeout", "CONCERT_CLIENT_BODY_TIMEOUT", VT::Duration, "30s", 1, 24 * kHour, false, R::Live, kNet,
     "longest gap between two reads of a request body (then 408 and the connection is closed)",
     &Config::client_body_timeout, nullptr},
    {"send-timeout", "CONCERT_SEND_TIMEOUT", VT::Duration, "60s", 1, 24 * kHour, false, R::Live, kNet,
     "how long a client may accept no response bytes (then the connection is closed)", &Config::send_timeout,
     nullptr},
    {"keepalive-timeout", "CONCERT_KEEPALIVE_TIMEOUT", VT::Duration, "75s", 1, 24 * kHour, false, R::Live, kNet,
     "how long an idle keep-alive client connection stays open", &Config::keepalive_timeout, nullptr},
    {"tunnel-timeout", "CONCERT_TUNNEL_TIMEOUT", VT::Duration, "1h", 1, 7 * 24 * kHour, false, R::Live, kNet,
     "an upgraded tunnel or proxied event stream with no traffic either way for this long is closed",
     &Config::tunnel_timeout, nullptr},

    // -- origin
    {"upstream", "CONCERT_UPSTREAM", VT::Url, "http://127.0.0.1:3000", 0, 0, false, R::Live, kOrigin,
     "origin URL, http://host:port (https too, with an optional base path)", &Config::upstream, nullptr},
    {"upstream-timeout", "CONCERT_UPSTREAM_TIMEOUT", VT::Duration, "30s", 1, kInt64Max, false, R::Live, kOrigin,
     "how long the origin may take to send response headers (then 504)", &Config::upstream_timeout, nullptr},
    {"upstream-read-timeout", "CONCERT_UPSTREAM_READ_TIMEOUT", VT::Duration, "60s", 1, 24 * kHour, false, R::Live,
     kOrigin, "how long the origin may send no response bytes after its headers (then the response is cut off)",
     &Config::upstream_read_timeout, nullptr},
    {"preserve-host", "CONCERT_PRESERVE_HOST", VT::Bool, "true", 0, 0, false, R::Live, kOrigin,
     "forward the client's Host header (false: send the upstream's host)", &Config::preserve_host, nullptr},
    {"max-body", "CONCERT_MAX_BODY", VT::ByteSize, "64MB", 1, kInt64Max, false, R::Live, kOrigin,
     "largest request body forwarded (K/M/G suffixes, 1024-based); larger gets 413", &Config::max_body, nullptr},

    // -- clients
    {"trusted-proxies", "CONCERT_TRUSTED_PROXIES", VT::CidrList, "", 0, 0, false, R::Live, kClients,
     "front proxies (CIDR list, IPv4 and IPv6): from these peers the client address, scheme and host are taken "
     "from X-Forwarded-For/-Proto/-Host or Forwarded; from any other peer those headers are replaced",
     &Config::trusted_proxies, nullptr},
    {"bypass-cidrs", "CONCERT_BYPASS_CIDRS", VT::CidrList, "", 0, 0, false, R::Live, kClients,
     "clients (CIDR list, the address after -trusted-proxies) proxied without queueing or any limit, e.g. "
     "monitoring",
     &Config::bypass_cidrs, nullptr},
    {"proxy-protocol", "CONCERT_PROXY_PROTOCOL", VT::Bool, "false", 0, 0, false, R::Live, kClients,
     "every connection must come from -trusted-proxies and start with a PROXY protocol v1 or v2 header, whose "
     "source address then stands for the peer; any other connection is closed unanswered",
     &Config::proxy_protocol, nullptr},
    {"max-tickets-per-client", "CONCERT_MAX_TICKETS_PER_CLIENT", VT::Int, "0", 0, 1 << 30, false, R::Live,
     kClients,
     "live tickets one client (an IPv4 address or an IPv6 /64) may hold; over it 429 + Retry-After, no ticket "
     "(0 = unlimited)",
     &Config::max_tickets_per_client, nullptr},
    {"abuse-threshold", "CONCERT_ABUSE_THRESHOLD", VT::Int, "0", 0, 1 << 20, false, R::Live, kClients,
     "strikes within 10 minutes that ban a client: forged pass or wrong admin token 5, refused by "
     "-max-tickets-per-client or with 400/413/414/431 1 (0 = off)",
     &Config::abuse_threshold, nullptr},
    {"abuse-ban", "CONCERT_ABUSE_BAN", VT::Duration, "10m", 1 * kSecond, 24 * kHour, false, R::Live, kClients,
     "how long a first ban lasts (every request 403, its tickets leave the line); doubles on each repeat, at "
     "most 24h",
     &Config::abuse_ban, nullptr},
    {"abuse-allow", "CONCERT_ABUSE_ALLOW", VT::CidrList, "", 0, 0, false, R::Live, kClients,
     "clients (CIDR list) never struck, banned or held to -max-tickets-per-client",
     &Config::abuse_allow, nullptr},

    // -- waiting room
    {"cap", "CONCERT_CAPACITY", VT::Int, "500", 1, kInt32Max, false, R::Live, kRoom,
     "page requests the origin sees at once (with -adaptive: the starting value)", &Config::cap, nullptr},
    {"adaptive", "CONCERT_ADAPTIVE", VT::Bool, "false", 0, 0, false, R::Live, kRoom,
     "move the cap to the origin's knee, found from its time to first byte and errors on page requests; a runtime "
     "cap (POST /_room/cap) stops it until a reload that says adaptive",
     &Config::adaptive, nullptr},
    {"cap-min", "CONCERT_CAP_MIN", VT::Int, "1", 1, kInt32Max, false, R::Live, kRoom,
     "-adaptive never sets the cap below this", &Config::cap_min, nullptr},
    {"cap-max", "CONCERT_CAP_MAX", VT::Int, "0", 1, kInt32Max, true, R::Live, kRoom,
     "-adaptive never sets the cap above this (0 = 4 x cap)", &Config::cap_max, nullptr},
    {"origin-status", "CONCERT_ORIGIN_STATUS", VT::String, "", 0, 0, false, R::Live, kRoom,
     "the origin's status page (PHP-FPM's pm.status_path, by address), read each second for the capacity advisor",
     &Config::origin_status, checkOriginStatus},
    {"max-queue", "CONCERT_MAX_QUEUE", VT::Int, "10000", 0, 1 << 30, false, R::Live, kRoom,
     "waiting visitors before new arrivals get 503 (0 = unlimited); sizes the ticket ring", &Config::max_queue,
     nullptr},
    {"reaper", "CONCERT_REAPER", VT::Duration, "30s", 5 * kSecond, 24 * kHour, true, R::Live, kRoom,
     "how often abandoned tickets are swept (0 = 5m)", &Config::reaper, nullptr},
    {"token-ttl", "CONCERT_TOKEN_TTL", VT::Duration, "0", 30 * kSecond, 24 * kHour, true, R::Live, kRoom,
     "a waiting ticket not seen for this long is abandoned (0 = 5m)", &Config::token_ttl, nullptr},
    {"queue-hold", "CONCERT_QUEUE_HOLD", VT::Duration, "0", 1, kHour, true, R::Live, kRoom,
     "hold a page request that has to queue on its connection up to this long; admitted in FIFO order if its turn "
     "comes, else answered with the waiting room (0 = answer at once)",
     &Config::queue_hold, nullptr},
    {"claim-window", "CONCERT_CLAIM_WINDOW", VT::Duration, "10s", kSecond, kHour, false, R::Live, kRoom,
     "a visitor whose turn came and who has not taken it within this stops holding up the line; coming back "
     "before the token TTL, it goes in at the next free slot",
     &Config::claim_window, nullptr},
    {"first-poll-grace", "CONCERT_FIRST_POLL_GRACE", VT::Duration, "15s", kSecond, kHour, false, R::Live, kRoom,
     "a ticket whose holder never comes back (no poll, no request with its cookie) is abandoned after this",
     &Config::first_poll_grace, nullptr},
    {"long-lived", "CONCERT_LONG_LIVED", VT::PathList, "", 0, 0, false, R::Live, kRoom,
     "WebSocket and event-stream paths: admitted like pages, then counted against -long-lived-cap instead of cap "
     "once the origin's 101 or event-stream head arrives",
     &Config::long_lived, nullptr},
    {"long-lived-cap", "CONCERT_LONG_LIVED_CAP", VT::Int, "10000", 1, kInt32Max, false, R::Live, kRoom,
     "open long-lived connections at once, all workers (over it 503)", &Config::long_lived_cap, nullptr},
    {"session-hold", "CONCERT_SESSION_HOLD", VT::Duration, "15s", 1, kHour, false, R::Live, kRoom,
     "a page request with a valid concert_admit pass is never sent to the waiting page: with no slot free it is "
     "held, ahead of the line, up to this long (then 503)",
     &Config::session_hold, nullptr},
    {"newcomer-share", "CONCERT_NEWCOMER_SHARE", VT::Float, "0.2", 0, 0, false, R::Live, kRoom,
     "while sessions and the line both wait, at least this share of freed slots goes to the line (0 to 1)",
     &Config::newcomer_share, checkShare},
    {"queue-status", "CONCERT_QUEUE_STATUS", VT::Int, "200", 200, 503, false, R::Live, kRoom,
     "status of the waiting page for browsers: 200, 429 or 503", &Config::queue_status, checkQueueStatus},
    {"crawler-agents", "CONCERT_CRAWLER_AGENTS", VT::String, std::string_view(kDefaultCrawlerAgents), 0, 0, false,
     R::Live, kRoom,
     "User-Agent substrings (comma separated, any case) of crawlers: when they would queue they get 503 + "
     "Retry-After, no ticket",
     &Config::crawler_agents, checkAgentList},
    {"secure-cookie", "CONCERT_SECURE_COOKIE", VT::Bool, "false", 0, 0, false, R::Live, kRoom,
     "mark every cookie Secure", &Config::secure_cookie, nullptr},
    {"cookie-path", "CONCERT_COOKIE_PATH", VT::String, "/", 0, 0, false, R::Live, kRoom,
     "Path attribute of every cookie", &Config::cookie_path, checkCookiePath},
    {"cookie-domain", "CONCERT_COOKIE_DOMAIN", VT::String, "", 0, 0, false, R::Live, kRoom,
     "Domain attribute of every cookie (empty = none)", &Config::cookie_domain, checkCookieAttribute},
    {"html", "CONCERT_HTML_FILE", VT::String, "", 0, 0, false, R::Live, kRoom,
     "custom waiting page template with {{.Position}}, {{.SkipURL}}, {{.Lang}}, {{.ETA}}, {{.Strings}}, "
     "{{.StartsIn}}, {{.SaleStarts}}, {{.Text.NAME}}; any other placeholder is an error (empty = built in)",
     &Config::html_file, nullptr},
    {"skip-url", "CONCERT_SKIP_URL", VT::String, "", 0, 0, false, R::Live, kRoom,
     "skip-the-line link on the waiting page, shown only when -rate > 0; {{.Ticket}} in it becomes a signed "
     "reference to the visitor's ticket for /_room/promote and /queue/promote", &Config::skip_url, checkSkipUrl},
    {"rate", "CONCERT_RATE", VT::Float, "0", 0, 0, false, R::Live, kRoom,
     "price per queue position shown on the waiting page (0 = no pricing)", &Config::rate, nullptr},
    {"surge", "CONCERT_SURGE", VT::Float, "0", 0, 0, false, R::Live, kRoom,
     "extra price per position for every ticket in the queue", &Config::surge, nullptr},
    {"pass", "CONCERT_PASS_DURATION", VT::Duration, "0", kMinute, 24 * kHour, true, R::Live, kRoom,
     "lifetime of the room_pass a promotion grants (0 = it admits once, at the head of the line)",
     &Config::pass_duration, nullptr},
    {"priority-classes", "CONCERT_PRIORITY_CLASSES", VT::String, "", 0, 0, false, R::Live, kRoom,
     "classes the origin may grant with Concert-Priority: <class>[; ttl=<seconds>], comma separated, highest "
     "first (at most 7 tokens; empty = off)",
     &Config::priority_classes, [](std::string_view value) { return parsePriorityClasses(value).error; }},
    {"api-json", "CONCERT_API_JSON", VT::Bool, "true", 0, 0, false, R::Live, kRoom,
     "answer non-browser clients with JSON 429/503 instead of the waiting page", &Config::api_json, nullptr},
    {"retry-after", "CONCERT_RETRY_AFTER", VT::Int, "5", std::numeric_limits<int32_t>::min(), kInt32Max, false, R::Live,
     kRoom, "Retry-After seconds on 429/503 (values below 1 become 1)", &Config::retry_after, nullptr},
    {"mode", "CONCERT_MODE", VT::String, "open", 0, 0, false, R::Live, kRoom,
     "room mode: open, pause (nobody new admitted, places kept), reject (maintenance page for visitors without a "
     "session) or passthrough (no cap, would-be queueing counted); POST /_room/mode changes it until the file does",
     &Config::mode, checkMode},
    {"maintenance-html", "CONCERT_MAINTENANCE_HTML", VT::String, "", 0, 0, false, R::Live, kRoom,
     "custom maintenance page for -mode reject, with {{.Lang}} and {{.Text.NAME}} (empty = built in)",
     &Config::maintenance_html_file, nullptr},
    {"admit-rate", "CONCERT_ADMIT_RATE", VT::String, "", 0, 0, false, R::Live, kRoom,
     "at most this many admissions of visitors without a session, N/s or N/m, on top of cap (empty = no limit)",
     &Config::admit_rate, checkAdmitRate},
    {"admit-burst", "CONCERT_ADMIT_BURST", VT::Int, "0", 1, 1000000, true, R::Live, kRoom,
     "admissions -admit-rate allows at once after a quiet spell (0 = one second's worth, at least 1)",
     &Config::admit_burst, nullptr},
    // -- scheduled sale
    {"event-start", "CONCERT_EVENT_START", VT::String, "", 0, 0, false, R::Live, kRoom,
     "a scheduled sale's start, an RFC 3339 time such as 2026-12-24T18:00:00Z (empty = no sale)", &Config::event_start,
     checkEventStart},
    {"prequeue", "CONCERT_PREQUEUE", VT::Duration, "0", 1, 30 * 24 * kHour, true, R::Live, kRoom,
     "from this long before -event-start until it, nobody is admitted and arrivals get tickets; the waiting page "
     "counts down to the start (0 = no pre-queue)",
     &Config::prequeue, nullptr},
    {"shuffle-prequeue", "CONCERT_SHUFFLE_PREQUEUE", VT::Bool, "true", 0, 0, false, R::Live, kRoom,
     "the pre-queue's arrivals go in, from the start, in an order shuffled once at random (false: in arrival "
     "order); later arrivals queue behind them",
     &Config::shuffle_prequeue, nullptr},

    // -- asset tier
    {"bypass", "CONCERT_BYPASS", VT::PathList, "/favicon.ico", 0, 0, false, R::Live, kAssets,
     "paths proxied without queueing or any limit (\"/exact\" or \"/prefix/*\", comma separated)", &Config::bypass,
     nullptr},
    {"assets", "CONCERT_ASSETS", VT::PathList, "", 0, 0, false, R::Live, kAssets,
     "private asset paths: need an admission pass, never queue", &Config::assets, nullptr},
    {"asset-public", "CONCERT_ASSET_PUBLIC", VT::PathList, "", 0, 0, false, R::Live, kAssets,
     "public asset paths: no pass needed, share the global asset limit", &Config::asset_public, nullptr},
    {"asset-cap", "CONCERT_ASSET_CAP", VT::Int, "0", 0, kInt32Max, false, R::Restart, kAssets,
     "asset requests at once, all visitors (0 = cap x asset-user-cap-h2)", &Config::asset_cap, nullptr},
    {"asset-wait", "CONCERT_ASSET_WAIT", VT::Duration, "2s", 0, kInt64Max, false, R::Live, kAssets,
     "how long an asset request waits for the global limit (then 503)", &Config::asset_wait, nullptr},
    {"asset-user-cap-h1", "CONCERT_ASSET_USER_CAP_H1", VT::Int, "8", 1, kInt32Max, false, R::Live, kAssets,
     "asset requests at once per pass over HTTP/1.x", &Config::asset_user_cap_h1, nullptr},
    {"asset-user-cap-h2", "CONCERT_ASSET_USER_CAP_H2", VT::Int, "128", 1, kInt32Max, false, R::Live, kAssets,
     "asset requests at once per pass over HTTP/2 or HTTP/3", &Config::asset_user_cap_h2, nullptr},
    {"asset-user-wait", "CONCERT_ASSET_USER_WAIT", VT::Duration, "2s", 0, kInt64Max, false, R::Live, kAssets,
     "how long an asset request waits for its pass's limit (then 429)", &Config::asset_user_wait, nullptr},
    {"admit-ttl", "CONCERT_ADMIT_TTL", VT::Duration, "10m", 30 * kSecond, kInt64Max, false, R::Live, kAssets,
     "lifetime of the concert_admit pass; refreshed past half-life", &Config::admit_ttl, nullptr},
    {"client-proto-header", "CONCERT_CLIENT_PROTO_HEADER", VT::String, "", 0, 0, false, R::Live, kAssets,
     "request header carrying the client's protocol from a front proxy (e.g. X-Client-Proto)",
     &Config::client_proto_header, checkHeaderName},
    {"asset-users-max", "CONCERT_ASSET_USERS_MAX", VT::Int, "65536", 1, 16777216, false, R::Restart, kAssets,
     "passes tracked at once for the per-pass asset limits (shared pass table size)", &Config::asset_users_max,
     nullptr},

    // -- several hosts
    {"cluster", "CONCERT_CLUSTER", VT::String, "", 0, 0, false, R::Restart, kCluster,
     "redis://host:port[/db] or redis+sentinel://host:port,host:port,.../master[/db]: share one line and one cap "
     "with every host that names the same engine and room (empty = this host alone)",
     &Config::cluster, checkClusterUrl},
    {"cluster-room", "CONCERT_CLUSTER_ROOM", VT::String, "concert", 0, 0, false, R::Restart, kCluster,
     "the room's key prefix in the engine: hosts with the same prefix share one line", &Config::cluster_room,
     checkClusterRoom},
    {"cluster-lease", "CONCERT_CLUSTER_LEASE", VT::Int, "4", 1, 10000, false, R::Live, kCluster,
     "slots a host reserves from the global cap at a time", &Config::cluster_lease, nullptr},
    {"cluster-lease-ttl", "CONCERT_CLUSTER_LEASE_TTL", VT::Duration, "10s", 1000, kHour, false, R::Live, kCluster,
     "a host that stops renewing its reservations loses them after this long", &Config::cluster_lease_ttl, nullptr},
    {"cluster-fail", "CONCERT_CLUSTER_FAIL", VT::String, "open", 0, 0, false, R::Live, kCluster,
     "engine unreachable: open (each host admits up to cap / hosts on its own) or closed (no new admissions)",
     &Config::cluster_fail, checkClusterFail},
    // -- logging
    {"access-log", "CONCERT_ACCESS_LOG", VT::Bool, "true", 0, 0, false, R::Live, kLogs, "write the access log",
     &Config::access_log, nullptr},
    {"access-log-file", "CONCERT_ACCESS_LOG_FILE", VT::String, "", 0, 0, false, R::Live, kLogs,
     "access log file (empty = stdout); reopened on SIGUSR1", &Config::access_log_file, nullptr},
    {"error-log", "CONCERT_ERROR_LOG", VT::String, "", 0, 0, false, R::Live, kLogs,
     "error and lifecycle log file (empty = stderr); reopened on SIGUSR1", &Config::error_log, nullptr},
};

const Secret kSecrets[] = {
    {"CONCERT_ADMIT_SECRET", "random",
     "key for the concert_admit pass, at least 32 bytes (unset: random, passes reset on restart)"},
    {"CONCERT_ADMIN_TOKEN", "", "bearer token for the admin endpoints: /_room/cap, queue, mode, promote, report, the dashboard (unset: they answer 404)"},
    {"CONCERT_PROMOTE_SECRET", "",
     "key a payment page signs /queue/promote links with, at least 32 bytes (unset: /queue/promote answers 403)"},
};

std::string numberText(int64_t value, ValueType type) {
  if (type == ValueType::Duration) return goDurationString(value);
  if (type == ValueType::ByteSize) return byteSizeString(value);
  return std::to_string(value);
}

std::string floatText(double value) {
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, result.ptr);
}

std::string markdownCell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::span<const Setting> settings() {
  return kSettings;
}
std::span<const Secret> secrets() {
  return kSecrets;
}

const Setting* findSetting(std::string_view name) {
  for (const Setting& setting : kSettings)
    if (setting.name == name) return &setting;
  return nullptr;
}

std::string rangeText(const Setting& s) {
  switch (s.type) {
    case ValueType::Workers: return "auto or " + std::to_string(s.min) + " to " + std::to_string(s.max);
    case ValueType::Float: return "0 or more";
    case ValueType::Int:
    case ValueType::Duration:
    case ValueType::ByteSize: {
      if (s.type == ValueType::Int && s.min == std::numeric_limits<int32_t>::min()) return {};
      std::string out = s.zero_allowed ? "0 or " : "";
      if (s.max == kInt64Max) {
        if (s.min == 0) return "0 or more";
        return out + "at least " + numberText(s.min, s.type);
      }
      return out + numberText(s.min, s.type) + " to " + numberText(s.max, s.type);
    }
    case ValueType::String:
    case ValueType::Bool:
    case ValueType::Url:
    case ValueType::PathList:
    case ValueType::CidrList: return {};
  }
  return {};
}

std::string_view reloadText(Reload reload) {
  switch (reload) {
    case Reload::Live: return "live";
    case Reload::Restart: return "restart";
    case Reload::RestartToGrow: return "restart to grow";
  }
  return "restart";
}

std::string valueText(const Setting& setting, const Config& config) {
  return std::visit(
      [&](auto member) -> std::string {
        const auto& value = config.*member;
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return value;
        } else if constexpr (std::is_same_v<T, bool>) {
          return value ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return floatText(value);
        } else if constexpr (std::is_same_v<T, PathList>) {
          return pathListText(value);
        } else if constexpr (std::is_same_v<T, CidrList>) {
          return cidrListText(value);
        } else if constexpr (std::is_same_v<T, Upstream>) {
          return value.raw;
        } else {
          return numberText(static_cast<int64_t>(value), setting.type);
        }
      },
      setting.target);
}

std::string markdownTable() {
  std::string out = "| flag | env | default | reload | meaning |\n|---|---|---|---|---|\n";
  for (const Setting& s : kSettings) {
    std::string meaning(s.help);
    std::string range = rangeText(s);
    if (!range.empty()) meaning += " (" + range + ")";
    std::string shown_default =
        s.default_text.empty() ? std::string("empty") : std::string("`").append(s.default_text).append("`");
    out += "| `-" + std::string(s.name) + "` | `" + std::string(s.env) + "` | " + shown_default + " | " +
           std::string(reloadText(s.reload)) + " | " + markdownCell(meaning) + " |\n";
  }
  for (const Secret& secret : kSecrets)
    out += "| (env only) | `" + std::string(secret.env) + "` | " +
           (secret.default_text.empty() ? std::string("empty") : std::string(secret.default_text)) + " | restart | " +
           markdownCell(secret.help) + " |\n";
  return out;
}

}  // namespace concert::config
