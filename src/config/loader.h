// Loading: command line + CONCERT_* environment + YAML file + defaults,
// through the schema table, into an immutable Config. Every error is
// collected (not just the first) and names the setting and its source:
//   -cap (flag): must be between 1 and 2147483647, got 0
//   CONCERT_CAPACITY (env): ...
//   /etc/concert/concert.yaml:12: cap: ...
#pragma once

#include <map>
#include <string>
#include <vector>

#include "config/config.h"

namespace concert::config {

enum class Action { Run, TestConfig, Version, Help, Invite };

struct LoadResult {
  Action action = Action::Run;
  ConfigPtr config;                   // set when errors is empty (and action != Version/Help)
  std::vector<std::string> errors;    // each names its setting and source
  std::vector<std::string> warnings;  // e.g. the random admit secret notice
  Millis invite_ttl = 0;              // Invite: -invite DURATION, how long the invitation is good for
  bool ok() const { return errors.empty(); }
};

using Environment = std::map<std::string, std::string>;

// The process environment as a map (CONCERT_* and everything else).
Environment currentEnvironment();

// argv[0] is skipped. `env` is consulted for CONCERT_* variables only.
LoadResult load(const std::vector<std::string>& args, const Environment& env);

// Text of `concert --help`, generated from the schema.
std::string helpText();

}  // namespace concert::config
