// Value parsers for configuration text (see parse.h). Everything here is
// pure and allocation-light; no process state is touched, so the master can
// run them again on SIGHUP while workers keep serving.
#include "config/parse.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

namespace concert::config {

namespace {

std::string quoted(std::string_view text) {
  std::string out = "\"";
  out.append(text);
  out += '"';
  return out;
}

bool isDigit(char c) {
  return c >= '0' && c <= '9';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// Go's unitMap, in nanoseconds. Both micro signs are accepted, as in Go.
std::optional<uint64_t> durationUnit(std::string_view unit) {
  if (unit == "ns") return 1;
  if (unit == "us" || unit == "\xC2\xB5s" || unit == "\xCE\xBCs") return 1'000;
  if (unit == "ms") return 1'000'000;
  if (unit == "s") return 1'000'000'000;
  if (unit == "m") return 60'000'000'000ULL;
  if (unit == "h") return 3'600'000'000'000ULL;
  return std::nullopt;
}

constexpr uint64_t kDurationLimit = uint64_t{1} << 63;

}  // namespace

Parsed<bool> parseBool(std::string_view text) {
  if (text == "1" || text == "t" || text == "T" || text == "TRUE" || text == "true" || text == "True")
    return {true, {}};
  if (text == "0" || text == "f" || text == "F" || text == "FALSE" || text == "false" || text == "False")
    return {false, {}};
  return Parsed<bool>::fail("expected a boolean (true or false), got " + quoted(text));
}

Parsed<int64_t> parseInt(std::string_view text) {
  std::string_view digits = text;
  bool negative = false;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) {
    negative = digits.front() == '-';
    digits.remove_prefix(1);
  }
  if (digits.empty()) return Parsed<int64_t>::fail("expected an integer, got " + quoted(text));
  // Accumulate as a negative number so that INT64_MIN is representable.
  int64_t value = 0;
  for (char c : digits) {
    if (!isDigit(c)) return Parsed<int64_t>::fail("expected an integer, got " + quoted(text));
    int digit = c - '0';
    if (value < (std::numeric_limits<int64_t>::min() + digit) / 10)
      return Parsed<int64_t>::fail("integer out of range: " + std::string(text));
    value = value * 10 - digit;
  }
  if (!negative) {
    if (value == std::numeric_limits<int64_t>::min())
      return Parsed<int64_t>::fail("integer out of range: " + std::string(text));
    value = -value;
  }
  return {value, {}};
}

Parsed<double> parseFloat(std::string_view text) {
  std::string copy(text);
  if (copy.empty() || copy.front() == ' ' || copy.front() == '\t')
    return Parsed<double>::fail("expected a number, got " + quoted(text));
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || errno == ERANGE || !std::isfinite(value))
    return Parsed<double>::fail("expected a number, got " + quoted(text));
  return {value, {}};
}

// A port of Go's time.ParseDuration, so that every duration an operator
// copies from the original's documentation means the same thing here.
Parsed<int64_t> parseGoDurationNs(std::string_view text) {
  auto invalid = [&] {
    return Parsed<int64_t>::fail("invalid duration " + quoted(text) + " (examples: 500ms, 30s, 5m, 1h30m)");
  };
  auto overflow = [&] { return Parsed<int64_t>::fail("duration out of range: " + quoted(text)); };
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (s == "0") return {0, {}};
  if (s.empty()) return invalid();
  uint64_t total = 0;
  while (!s.empty()) {
    if (!(s.front() == '.' || isDigit(s.front()))) return invalid();
    uint64_t whole = 0;
    size_t before = s.size();
    while (!s.empty() && isDigit(s.front())) {
      if (whole > (kDurationLimit - 1) / 10) return overflow();
      whole = whole * 10 + static_cast<uint64_t>(s.front() - '0');
      if (whole > kDurationLimit) return overflow();
      s.remove_prefix(1);
    }
    bool have_whole = s.size() != before;
    uint64_t fraction = 0;
    double scale = 1;
    bool have_fraction = false;
    if (!s.empty() && s.front() == '.') {
      s.remove_prefix(1);
      size_t fraction_start = s.size();
      bool saturated = false;
      while (!s.empty() && isDigit(s.front())) {
        if (!saturated) {
          if (fraction > (std::numeric_limits<int64_t>::max() - 9) / 10) {
            saturated = true;  // further digits cannot change the value
          } else {
            fraction = fraction * 10 + static_cast<uint64_t>(s.front() - '0');
            scale *= 10;
          }
        }
        s.remove_prefix(1);
      }
      have_fraction = s.size() != fraction_start;
    }
    if (!have_whole && !have_fraction) return invalid();
    size_t unit_len = 0;
    while (unit_len < s.size() && s[unit_len] != '.' && !isDigit(s[unit_len])) ++unit_len;
    if (unit_len == 0)
      return Parsed<int64_t>::fail("missing unit in duration " + quoted(text) + " (ns, us, ms, s, m, h)");
    std::optional<uint64_t> unit = durationUnit(s.substr(0, unit_len));
    if (!unit) return Parsed<int64_t>::fail("unknown unit in duration " + quoted(text) + " (ns, us, ms, s, m, h)");
    s.remove_prefix(unit_len);
    if (whole > kDurationLimit / *unit) return overflow();
    whole *= *unit;
    if (fraction > 0) {
      whole += static_cast<uint64_t>(static_cast<double>(fraction) * (static_cast<double>(*unit) / scale));
      if (whole > kDurationLimit) return overflow();
    }
    total += whole;
    if (total > kDurationLimit) return overflow();
  }
  if (negative) {
    if (total == kDurationLimit) return {std::numeric_limits<int64_t>::min(), {}};
    return {-static_cast<int64_t>(total), {}};
  }
  if (total > kDurationLimit - 1) return overflow();
  return {static_cast<int64_t>(total), {}};
}

Parsed<Millis> parseDurationMs(std::string_view text) {
  Parsed<int64_t> ns = parseGoDurationNs(text);
  if (!ns.ok()) return Parsed<Millis>::fail(ns.error);
  return {*ns.value / 1'000'000, {}};
}

Parsed<int64_t> parseByteSize(std::string_view text) {
  auto invalid = [&] {
    return Parsed<int64_t>::fail("expected a size in bytes (e.g. 1024, 512KB, 64MB, 1GB), got " + quoted(text));
  };
  size_t digits = 0;
  while (digits < text.size() && isDigit(text[digits])) ++digits;
  if (digits == 0) return invalid();
  std::string_view suffix = text.substr(digits);
  int shift = 0;
  if (suffix.empty() || equalsIgnoreCase(suffix, "b")) {
    shift = 0;
  } else if (equalsIgnoreCase(suffix, "k") || equalsIgnoreCase(suffix, "kb") || equalsIgnoreCase(suffix, "kib")) {
    shift = 10;
  } else if (equalsIgnoreCase(suffix, "m") || equalsIgnoreCase(suffix, "mb") || equalsIgnoreCase(suffix, "mib")) {
    shift = 20;
  } else if (equalsIgnoreCase(suffix, "g") || equalsIgnoreCase(suffix, "gb") || equalsIgnoreCase(suffix, "gib")) {
    shift = 30;
  } else {
    return invalid();
  }
  Parsed<int64_t> number = parseInt(text.substr(0, digits));
  if (!number.ok() || *number.value > (std::numeric_limits<int64_t>::max() >> shift))
    return Parsed<int64_t>::fail("size out of range: " + quoted(text));
  return {*number.value << shift, {}};
}

Parsed<Upstream> parseUpstream(std::string_view text) {
  auto invalid = [&] {
    return Parsed<Upstream>::fail("invalid -upstream " + quoted(text) + ": must look like http://host:port");
  };
  Upstream up;
  up.raw = std::string(text);
  size_t sep = text.find("://");
  if (sep == std::string_view::npos) return invalid();
  std::string_view scheme = text.substr(0, sep);
  if (equalsIgnoreCase(scheme, "https")) {
    up.https = true;
    up.port = 443;
  } else if (equalsIgnoreCase(scheme, "http")) {
    up.https = false;
    up.port = 80;
  } else {
    return invalid();
  }
  std::string_view rest = text.substr(sep + 3);
  size_t authority_end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, authority_end);
  rest = authority_end == std::string_view::npos ? std::string_view{} : rest.substr(authority_end);
  // Credentials in the upstream URL would never be sent (the proxy does not
  // add Authorization), so refusing them is kinder than ignoring them.
  if (authority.empty() || authority.find('@') != std::string_view::npos) return invalid();

  std::string_view host;
  std::string_view port_text;
  if (authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos || close == 1) return invalid();
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return invalid();
      port_text = after.substr(1);
      if (port_text.empty()) return invalid();
    }
    for (char c : host)
      if (!(isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.' || c == '%'))
        return invalid();
  } else {
    size_t colon = authority.rfind(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return invalid();
    }
    if (host.empty() || host.find(':') != std::string_view::npos) return invalid();
    for (char c : host)
      if (!(isDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '.' || c == '_'))
        return invalid();
  }
  if (!port_text.empty()) {
    Parsed<int64_t> port = parseInt(port_text);
    if (!port.ok() || !isDigit(port_text.front()) || *port.value < 1 || *port.value > 65535) return invalid();
    up.port = static_cast<uint16_t>(*port.value);
  }
  up.host = std::string(host);
  // What Go puts in Host when preserve-host is off: the URL's host as written.
  up.host_port = std::string(authority);

  size_t fragment = rest.find('#');
  if (fragment != std::string_view::npos) rest = rest.substr(0, fragment);
  size_t query = rest.find('?');
  std::string_view path = rest.substr(0, query);
  if (query != std::string_view::npos) up.query = std::string(rest.substr(query + 1));
  for (char c : path)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return invalid();
  for (char c : up.query)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return invalid();
  up.path = path == "/" ? std::string() : std::string(path);
  return {std::move(up), {}};
}

Parsed<ListenAddress> parseListenAddress(std::string_view text) {
  using Result = Parsed<ListenAddress>;
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || text.substr(close + 1, 1) != ":")
      return Result::fail("missing port in address");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    if (host.empty()) return Result::fail("empty host in brackets");
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return Result::fail("missing port in address");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return Result::fail("too many colons in address");
  }
  for (char c : host)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return Result::fail("invalid host " + quoted(host));
  bool digits = !port.empty() && port.size() <= 5 && std::all_of(port.begin(), port.end(), isDigit);
  if (!digits || std::stoi(std::string(port)) > 65535) return Result::fail("invalid port " + quoted(port));
  return {ListenAddress{std::string(host), std::string(port)}, {}};
}

namespace {

// The visitors' own endpoints outside /_room/: no rule may take them over.
constexpr const char* kReservedPaths[] = {"/queue/status", "/queue/events"};

bool isReservedPath(std::string_view path) {
  for (const char* reserved : kReservedPaths)
    if (path == reserved) return true;
  return false;
}

// The first reserved path a prefix rule would capture, or nullptr.
const char* reservedPathUnder(std::string_view prefix) {
  for (const char* reserved : kReservedPaths)
    if (std::string_view(reserved).substr(0, prefix.size()) == prefix) return reserved;
  return nullptr;
}

}  // namespace

PathListParse parsePathList(std::string_view text) {
  PathListParse out;
  while (true) {
    size_t comma = text.find(',');
    std::string_view entry = trim(text.substr(0, comma));
    if (!entry.empty()) {
      if (entry.front() != '/') {
        out.warnings.push_back("ignoring " + quoted(entry) + ": path entries must start with '/'");
      } else {
        PathRule rule;
        if (entry.size() >= 2 && entry.substr(entry.size() - 2) == "/*") {
          rule.prefix = true;
          rule.path = std::string(entry.substr(0, entry.size() - 1));  // keep the '/'
        } else {
          rule.path = std::string(entry);
        }
        const std::string shown(entry);
        if (rule.prefix && rule.path == "/") {
          out.errors.push_back(quoted(shown) + " would capture every path");
        } else if (isReservedPath(rule.path) || rule.path == "/_room" || rule.path.rfind("/_room/", 0) == 0) {
          out.errors.push_back(quoted(shown) + " is reserved by concert");
        } else if (const char* captured = rule.prefix ? reservedPathUnder(rule.path) : nullptr) {
          out.errors.push_back(quoted(shown) + " would capture " + captured + ", which is reserved by concert");
        } else {
          out.rules.push_back(std::move(rule));
        }
      }
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

std::string pathRuleText(const PathRule& rule) {
  return rule.prefix ? rule.path + "*" : rule.path;
}

std::string pathListText(const PathList& list) {
  std::string out;
  for (const PathRule& rule : list) {
    if (!out.empty()) out += ',';
    out += pathRuleText(rule);
  }
  return out;
}

std::string byteSizeString(int64_t bytes) {
  if (bytes != 0) {
    if (bytes % (int64_t{1} << 30) == 0) return std::to_string(bytes >> 30) + "GB";
    if (bytes % (int64_t{1} << 20) == 0) return std::to_string(bytes >> 20) + "MB";
    if (bytes % (int64_t{1} << 10) == 0) return std::to_string(bytes >> 10) + "KB";
  }
  return std::to_string(bytes);
}

Parsed<AdmitRateSpec> parseAdmitRate(std::string_view text) {
  AdmitRateSpec spec;
  if (text.empty()) return Parsed<AdmitRateSpec>{spec, {}};
  constexpr int64_t kMaxCount = 1'000'000;
  const std::string usage = "must be N/s or N/m with N from 1 to " + std::to_string(kMaxCount) + ", e.g. 10/s";
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos || slash + 2 != text.size()) return Parsed<AdmitRateSpec>::fail(usage);
  const char unit = text.back();
  if (unit != 's' && unit != 'm') return Parsed<AdmitRateSpec>::fail(usage);
  const std::string_view digits = text.substr(0, slash);
  if (digits.empty() || digits.size() > 7 || digits.find_first_not_of("0123456789") != std::string_view::npos)
    return Parsed<AdmitRateSpec>::fail(usage);
  spec.count = std::stoll(std::string(digits));
  if (spec.count < 1 || spec.count > kMaxCount) return Parsed<AdmitRateSpec>::fail(usage);
  spec.per_ms = unit == 's' ? 1000 : 60'000;
  spec.interval_ns = spec.per_ms * 1'000'000 / spec.count;
  return Parsed<AdmitRateSpec>{spec, {}};
}

namespace {

// A decimal from 0 to `max` (at most five digits); -1 otherwise.
int64_t smallNumber(std::string_view digits, int64_t max) {
  if (digits.empty() || digits.size() > 5 || digits.find_first_not_of("0123456789") != std::string_view::npos)
    return -1;
  int64_t n = std::stoll(std::string(digits));
  return n > max ? -1 : n;
}

// "host", "host:port", "[v6]" or "[v6]:port", the port 1 to 65535 or
// `default_port` when not given; nullopt when malformed.
std::optional<ClusterEndpoint> parseEndpoint(std::string_view text, uint16_t default_port) {
  std::string_view host = text, port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = text.substr(1, close - 1);
    std::string_view after = text.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':' || after.size() == 1) return std::nullopt;
      port = after.substr(1);
    }
  } else if (size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (port.empty()) return std::nullopt;
  }
  if (host.empty() || host.find_first_of(" @/?#,") != std::string_view::npos) return std::nullopt;
  ClusterEndpoint out{std::string(host), default_port};
  if (!port.empty()) {
    int64_t p = smallNumber(port, 65535);
    if (p < 1) return std::nullopt;
    out.port = static_cast<uint16_t>(p);
  }
  return out;
}

// redis+sentinel://host:port,host:port,.../master[/db] (the part after the scheme).
Parsed<ClusterUrl> parseSentinelUrl(std::string_view rest) {
  const std::string usage =
      "must be redis+sentinel://host:port,host:port,.../master[/db], e.g. "
      "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster";
  ClusterUrl url;
  const size_t slash = rest.find('/');
  const std::string_view hosts = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  if (hosts.empty()) return Parsed<ClusterUrl>::fail(usage + " (no sentinel listed)");
  for (size_t from = 0; from <= hosts.size();) {
    size_t comma = std::min(hosts.find(',', from), hosts.size());
    std::optional<ClusterEndpoint> sentinel = parseEndpoint(hosts.substr(from, comma - from), 26379);
    if (!sentinel)
      return Parsed<ClusterUrl>::fail(usage + " (\"" + std::string(hosts.substr(from, comma - from)) +
                                      "\" is not a host with a port from 1 to 65535)");
    url.sentinels.push_back(std::move(*sentinel));
    from = comma + 1;
  }
  std::string_view db;
  if (size_t second = path.find('/'); second != std::string_view::npos) {
    db = path.substr(second + 1);
    path = path.substr(0, second);
    if (db.empty()) return Parsed<ClusterUrl>::fail(usage + " (db 0 to 15)");
  }
  if (path.empty()) return Parsed<ClusterUrl>::fail(usage + " (no master name after the sentinels)");
  for (char c : path)
    if (static_cast<unsigned char>(c) <= ' ' || std::string_view("@?#,").find(c) != std::string_view::npos)
      return Parsed<ClusterUrl>::fail(usage + " (the master name is one word)");
  url.master = std::string(path);
  if (!db.empty()) {
    int64_t d = smallNumber(db, 15);
    if (d < 0) return Parsed<ClusterUrl>::fail(usage + " (db 0 to 15)");
    url.db = static_cast<int>(d);
  }
  return Parsed<ClusterUrl>{url, {}};
}

}  // namespace

Parsed<ClusterUrl> parseClusterUrl(std::string_view text) {
  ClusterUrl url;
  if (text.empty()) return Parsed<ClusterUrl>{url, {}};
  const std::string usage =
      "must be redis://host:port[/db], e.g. redis://10.0.0.5:6379/0, or "
      "redis+sentinel://host:port,host:port,.../master[/db]";
  constexpr std::string_view kScheme = "redis://";
  constexpr std::string_view kSentinelScheme = "redis+sentinel://";
  if (text.substr(0, kSentinelScheme.size()) == kSentinelScheme)
    return parseSentinelUrl(text.substr(kSentinelScheme.size()));
  if (text.substr(0, kScheme.size()) != kScheme) return Parsed<ClusterUrl>::fail(usage);
  std::string_view rest = text.substr(kScheme.size());
  std::string_view db;
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  std::optional<ClusterEndpoint> engine = parseEndpoint(rest, 6379);
  if (!engine) return Parsed<ClusterUrl>::fail(usage);
  url.host = std::move(engine->host);
  url.port = engine->port;
  if (!db.empty()) {
    int64_t d = smallNumber(db, 15);
    if (d < 0) return Parsed<ClusterUrl>::fail(usage + " (db 0 to 15)");
    url.db = static_cast<int>(d);
  }
  return Parsed<ClusterUrl>{url, {}};
}

Parsed<std::vector<std::string>> parsePriorityClasses(std::string_view text) {
  using Result = Parsed<std::vector<std::string>>;
  std::vector<std::string> names;
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  if (trim(text).empty()) return Result{names, {}};
  static constexpr std::string_view kTokenPunct = "!#$%&'*+-.^_`|~";
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  for (size_t from = 0; from <= text.size();) {
    size_t to = text.find(',', from);
    if (to == std::string_view::npos) to = text.size();
    const std::string_view name = trim(text.substr(from, to - from));
    from = to + 1;
    if (name.empty()) return Result::fail("has an empty class name (names are separated by single commas)");
    for (char c : name) {
      const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      kTokenPunct.find(c) != std::string_view::npos;
      if (!ok)
        return Result::fail("class \"" + std::string(name) +
                            "\" must be a token (letters, digits and !#$%&'*+-.^_`|~)");
    }
    if (name.size() > kMaxPriorityClassChars)
      return Result::fail("class \"" + std::string(name) + "\" is longer than " +
                          std::to_string(kMaxPriorityClassChars) + " characters");
    if (lower(name) == "none") return Result::fail("\"none\" cannot be a class: Concert-Priority: none clears one");
    for (const std::string& seen : names)
      if (lower(seen) == lower(name))
        return Result::fail("class \"" + std::string(name) + "\" is listed twice (names are compared without case)");
    names.emplace_back(name);
    if (names.size() > kMaxPriorityClasses)
      return Result::fail("has more than " + std::to_string(kMaxPriorityClasses) + " classes");
  }
  return Result{names, {}};
}

Parsed<int64_t> parseRfc3339Ms(std::string_view text) {
  if (text.empty()) return Parsed<int64_t>{0, {}};
  const std::string usage = "must be an RFC 3339 time, e.g. 2026-12-24T18:00:00Z or 2026-12-24T19:00:00+01:00";
  size_t at = 0;
  auto number = [&](size_t digits, int& out) {
    if (at + digits > text.size()) return false;
    out = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char c = text[at + i];
      if (c < '0' || c > '9') return false;
      out = out * 10 + (c - '0');
    }
    at += digits;
    return true;
  };
  auto literal = [&](std::string_view any_of) {
    if (at >= text.size() || any_of.find(text[at]) == std::string_view::npos) return false;
    ++at;
    return true;
  };
  int year, month, day, hour, minute, second;
  if (!number(4, year) || !literal("-") || !number(2, month) || !literal("-") || !number(2, day) || !literal("Tt ") ||
      !number(2, hour) || !literal(":") || !number(2, minute) || !literal(":") || !number(2, second))
    return Parsed<int64_t>::fail(usage);
  int64_t millis = 0;
  if (at < text.size() && text[at] == '.') {
    ++at;
    const size_t from = at;
    int64_t scale = 100;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
      millis += (text[at] - '0') * scale;
      scale /= 10;
      ++at;
    }
    if (at == from) return Parsed<int64_t>::fail(usage);
  }
  int64_t offset_minutes = 0;
  if (literal("Zz")) {
  } else if (at < text.size() && (text[at] == '+' || text[at] == '-')) {
    const int sign = text[at] == '-' ? -1 : 1;
    ++at;
    int oh, om;
    if (!number(2, oh) || !literal(":") || !number(2, om) || oh > 23 || om > 59) return Parsed<int64_t>::fail(usage);
    offset_minutes = sign * (oh * 60 + om);
  } else {
    return Parsed<int64_t>::fail(usage);
  }
  if (at != text.size()) return Parsed<int64_t>::fail(usage);
  static constexpr int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  if (year < 1970 || month < 1 || month > 12 || day < 1 || day > kDays[month - 1] ||
      (month == 2 && day == 29 && !leap) || hour > 23 || minute > 59 || second > 60)
    return Parsed<int64_t>::fail(usage);
  // Days since the epoch (proleptic Gregorian, Howard Hinnant's days_from_civil).
  const int y = year - (month <= 2 ? 1 : 0);
  const int era = y / 400;
  const int yoe = y - era * 400;
  const int doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = int64_t{era} * 146097 + doe - 719468;
  const int64_t seconds = days * 86400 + hour * 3600 + minute * 60 + std::min(second, 59) - offset_minutes * 60;
  if (seconds <= 0) return Parsed<int64_t>::fail(usage);
  return Parsed<int64_t>{seconds * 1000 + millis, {}};
}

}  // namespace concert::config
