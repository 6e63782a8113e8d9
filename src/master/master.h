// The master process: binds the listeners, creates the shared segment,
// forks and supervises the workers, reloads by generations, stops
// gracefully. It never serves HTTP.
#pragma once

#include <string>
#include <vector>

#include "config/loader.h"

namespace concert::master {

// Runs until stopped; returns the process exit status. `args` and `env` are
// kept so that SIGHUP reloads with the same flags and environment and a
// re-read YAML file.
int runMaster(config::ConfigPtr config, std::vector<std::string> args, config::Environment env);

}  // namespace concert::master
