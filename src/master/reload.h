// Reload policy, master only: which parts of a freshly loaded Config a
// running instance may take over. Pure functions, no process state.
//
// What is restart-only comes from the schema table (config/schema.h), the
// one place every setting is described: a Reload::Restart setting that
// changed keeps its running value and produces one note; a
// Reload::RestartToGrow setting (workers) may shrink but not grow beyond
// what the shared segment was sized for (two generations side by side in
// worker_slots). Values are compared in their operator-facing text form, so
// an effective value counts (a cap change that moves a derived asset-cap is
// reported as an asset-cap change).
//
// Secrets are environment-only and the environment is the one the master
// started with, so they only "change" when the running secret was generated:
// the running secret is always kept, so passes issued before a reload stay
// valid after it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"

namespace concert::master {

// Returns the Config the new generation runs with; `notes` gets one line per
// kept setting: "reload: <key> changed; restart required, keeping <old value>".
config::ConfigPtr mergeReloadedConfig(const config::Config& running, const config::Config& fresh, uint32_t worker_slots,
                                      std::vector<std::string>* notes);

}  // namespace concert::master
