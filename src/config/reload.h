// The reload diff: what a SIGHUP may change. The master loads a complete
// new Config beside the running one (loader.h); planReload() then keeps the
// running value of every setting that cannot change without a restart
// (schema.h: Reload::Restart / RestartToGrow) and says so, and lists what
// does change so the master can log it. Pure function; master only.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace concert::config {

struct ReloadPlan {
  ConfigPtr config;                       // what the new generation runs with
  std::vector<std::string> changed;       // keys applied, e.g. "cap: 500 -> 50"
  std::vector<std::string> needs_restart; // e.g. "listen: :9090 needs a restart; keeping :8080"
  bool changes(std::string_view key) const;  // true when `key` is among the applied changes
};

// `started_workers` is the worker count the master started with (it sized
// the shared worker slots); a reload may lower -workers but not raise it
// above that. A generated admission secret is carried over, so passes
// stay valid across reloads.
ReloadPlan planReload(const Config& running, const Config& next, int started_workers);

}  // namespace concert::config
