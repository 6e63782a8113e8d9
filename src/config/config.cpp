// Config helpers that need no schema: Go's duration spelling, used by
// /_room/stats (token_ttl "5m0s"), the startup log line and --help.
#include "config/config.h"

namespace concert::config {

// time.Duration.String() for whole milliseconds: below one second "500ms"
// (or "0s"); from one second on "1h2m3.5s" with the trailing zeros of the
// seconds' fraction dropped and every larger unit present once it starts.
std::string goDurationString(Millis ms) {
  if (ms == 0) return "0s";
  bool negative = ms < 0;
  uint64_t u = negative ? uint64_t{0} - static_cast<uint64_t>(ms) : static_cast<uint64_t>(ms);
  std::string out = negative ? "-" : "";
  if (u < 1000) return out + std::to_string(u) + "ms";

  std::string seconds = std::to_string((u / 1000) % 60);
  uint64_t fraction = u % 1000;
  if (fraction != 0) {
    std::string digits = std::to_string(fraction);
    digits.insert(0, 3 - digits.size(), '0');
    while (digits.back() == '0') digits.pop_back();
    seconds += "." + digits;
  }
  uint64_t minutes = u / 60'000;
  if (minutes == 0) return out + seconds + "s";
  uint64_t hours = minutes / 60;
  if (hours == 0) return out + std::to_string(minutes) + "m" + seconds + "s";
  return out + std::to_string(hours) + "h" + std::to_string(minutes % 60) + "m" + seconds + "s";
}

}  // namespace concert::config
