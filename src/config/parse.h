// Value parsers shared by every configuration source. A flag, a CONCERT_*
// variable and a YAML scalar all arrive as text and go through the same
// function, so `-cap 5`, `CONCERT_CAPACITY=5` and `cap: 5` can never be
// read differently. Each parser is pure: it returns the value or an error
// message without the setting's name (the loader adds name and source).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "config/config.h"

namespace concert::config {

// Either a value or the reason the text was refused.
template <typename T>
struct Parsed {
  std::optional<T> value;
  std::string error;
  bool ok() const { return value.has_value(); }
  static Parsed fail(std::string message) { return Parsed{std::nullopt, std::move(message)}; }
};

// strconv.ParseBool: 1 t T TRUE true True 0 f F FALSE false False.
Parsed<bool> parseBool(std::string_view text);

// A decimal integer with an optional sign; refuses anything that does not
// fit in 64 bits instead of wrapping.
Parsed<int64_t> parseInt(std::string_view text);

// A finite decimal number.
Parsed<double> parseFloat(std::string_view text);

// Go's time.ParseDuration ("300ms", "-1.5h", "2h45m", "0"), in nanoseconds.
Parsed<int64_t> parseGoDurationNs(std::string_view text);

// A duration in milliseconds (nanoseconds truncated toward zero).
Parsed<Millis> parseDurationMs(std::string_view text);

// Bytes: "1024", "512KB", "64MB", "1GB" (also K/M/G, KiB/MiB/GiB, any case;
// all 1024-based).
Parsed<int64_t> parseByteSize(std::string_view text);

// The -upstream URL: http or https, a host, an optional port (default 80 or
// 443), an optional base path and query. The error is the original's text:
//   invalid -upstream "ftp://x": must look like http://host:port
Parsed<Upstream> parseUpstream(std::string_view text);

// The -listen address, split as Go's net.SplitHostPort splits it: ":8080",
// "host:8080", "[::1]:8080". Stricter than Go: the port is 1 to 5 digits up
// to 65535, and the host has no spaces or control characters and, in
// brackets, is not empty. Errors are Go's where Go has one:
//   missing port in address / too many colons in address / invalid port "x"
struct ListenAddress {
  std::string host;  // "" = every address; IPv6 literal without brackets
  std::string port;  // decimal, "0" = let the kernel choose
};
Parsed<ListenAddress> parseListenAddress(std::string_view text);

// A path list as -bypass, -assets and -asset-public take it: comma
// separated, entries trimmed, empty entries skipped, entries not starting
// with '/' skipped with a warning each, "/x/*" a prefix rule for "/x/".
// Rules that can never be right on their own are errors here: "/*", paths
// reserved by Concert (/queue/status, /_room, /_room/...) and a prefix rule
// that would capture /queue/status. Duplicates and overlaps between rules
// (within one list or across lists) are the loader's cross-check.
struct PathListParse {
  PathList rules;
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
};
PathListParse parsePathList(std::string_view text);

// Text of a rule as an operator writes it: "/static/*" or "/robots.txt".
std::string pathRuleText(const PathRule& rule);

// Text of a path list as an operator writes it: "/a,/b/*".
std::string pathListText(const PathList& list);

// -admit-rate: "N/s" or "N/m", N a whole number from 1 to 1000000; "" is no
// limit (interval 0).
struct AdmitRateSpec {
  int64_t count = 0;        // admissions ...
  int64_t per_ms = 0;       // ... per this many milliseconds (1000 or 60000)
  int64_t interval_ns = 0;  // between two admissions; 0 = no limit
};
Parsed<AdmitRateSpec> parseAdmitRate(std::string_view text);

// -priority-classes: class names separated by commas, highest priority
// first; "" is none (off). Each name is an HTTP token of at most 32
// characters, not "none" (which clears a class, Concert-Priority); names
// are compared without case, so no two may differ only in case; at most
// kMaxPriorityClasses. Surrounding spaces are trimmed, empty names refused.
inline constexpr size_t kMaxPriorityClasses = 7;
inline constexpr size_t kMaxPriorityClassChars = 32;
Parsed<std::vector<std::string>> parsePriorityClasses(std::string_view text);
// -event-start: an RFC 3339 time, "2026-12-24T18:00:00Z" or with an offset
// ("+01:00") and optional fractions of a second, as Unix milliseconds; ""
// is no sale (0).
Parsed<int64_t> parseRfc3339Ms(std::string_view text);

// -cluster: "redis://host:port[/db]" (port 1 to 65535, default 6379; db 0
// to 15, default 0; host a name, an IPv4 address or a bracketed IPv6
// address), or "redis+sentinel://host:port,host:port,.../master[/db]": one
// or more Redis Sentinels, separated by commas (each like the host above,
// port default 26379), then the name they monitor the engine by (one word,
// no '@', '?', '#' or ','), then the db as above. "" is off (host "" and
// no sentinels).
Parsed<ClusterUrl> parseClusterUrl(std::string_view text);

// Byte count in the largest exact unit: 67108864 -> "64MB", 1000 -> "1000".
std::string byteSizeString(int64_t bytes);

}  // namespace concert::config
