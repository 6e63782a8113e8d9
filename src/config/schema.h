// The one table of every configuration setting. A setting's flag name is
// also its YAML key; its environment variable, type, default, range,
// reload behaviour and help line live here and nowhere else. The loader,
// `--help`, the README table, conf/concert.yaml (by test) and the reload
// diff all read this table, so they cannot drift apart.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "config/config.h"

namespace concert::config {

enum class ValueType {
  String,
  Bool,
  Int,       // decimal integer within [min, max]
  Float,     // finite number >= 0
  Duration,  // Go syntax; min/max in milliseconds
  ByteSize,  // "64MB"; min/max in bytes
  Url,       // the -upstream URL
  PathList,  // comma list of "/exact" and "/prefix/*" rules
  CidrList,  // comma list of IPv4/IPv6 addresses and CIDR ranges
  Workers,   // "auto" or min..max
};

enum class Reload {
  Live,           // a SIGHUP applies the new value
  Restart,        // a SIGHUP keeps the old value and logs that a restart is needed
  RestartToGrow,  // a SIGHUP may lower it, never raise it above the value started with
};

// Where the parsed value lands in Config.
using SettingTarget = std::variant<std::string Config::*, bool Config::*, int32_t Config::*, int64_t Config::*,
                                   double Config::*, PathList Config::*, CidrList Config::*,
                                   Upstream Config::*>;

struct Setting {
  std::string_view name;  // flag name without dashes, = YAML key
  std::string_view env;   // CONCERT_* variable
  ValueType type;
  std::string_view default_text;  // parsed like any other value; "" = empty
  int64_t min;                    // Int/Workers/ByteSize: value; Duration: ms
  int64_t max;
  bool zero_allowed;  // 0 is accepted outside [min, max] (off / built-in default)
  Reload reload;
  std::string_view group;  // heading in --help
  std::string_view help;   // one line
  SettingTarget target;
  // Extra rule for one value beyond type and range ("" when fine).
  std::string (*check)(std::string_view value);
};

// Environment-only settings (never flags, never YAML keys).
struct Secret {
  std::string_view env;
  std::string_view default_text;  // "" = empty
  std::string_view help;
};

std::span<const Setting> settings();
std::span<const Secret> secrets();
const Setting* findSetting(std::string_view name);

// "1 to 2147483647", "0 (off) or 1m0s to 24h0m0s", "auto or 1 to 64", ...
// ("" when any value of the type is fine).
std::string rangeText(const Setting& setting);

// "restart", "live", "restart to grow".
std::string_view reloadText(Reload reload);

// The setting's current value in `config`, written as an operator would
// write it (durations Go-style, sizes "64MB", lists "/a,/b/*").
std::string valueText(const Setting& setting, const Config& config);

// The README's configuration table (between the config-table markers).
std::string markdownTable();

}  // namespace concert::config
