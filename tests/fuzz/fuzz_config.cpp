// Fuzz target: the configuration loader (config::load) over a YAML file,
// command-line flags and CONCERT_* variables, all taken from the input.
//
// Input layout, sections separated by NUL bytes: YAML text, then flags (one
// argument per line), then environment lines NAME=VALUE. A plain YAML file
// is therefore a valid seed on its own. The YAML goes through a real file
// (one per fuzzing process) because the loader reads -c FILE itself.
// Properties: load never throws and never crashes (yaml-cpp's exceptions
// must stay inside the loader); a configuration is returned exactly when
// there is no error; every error is a non-empty line; an accepted
// configuration is within the ranges the rest of Concert relies on.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "config/loader.h"
#include "fuzz_target.h"

namespace concert::fuzz {
namespace {

std::vector<std::string> lines(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    out.emplace_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

// One scratch file per process, removed when the process exits normally.
struct ScratchFile {
  std::string path = "/tmp/concert-fuzz-config-" + std::to_string(::getpid()) + ".yaml";
  ~ScratchFile() { ::unlink(path.c_str()); }
};

const std::string& scratchPath() {
  static const ScratchFile file;
  return file.path;
}

void checkRules(const config::PathList& list) {
  for (const config::PathRule& rule : list) {
    FUZZ_ASSERT(!rule.path.empty() && rule.path.front() == '/');
    FUZZ_ASSERT(!rule.matches("/queue/status") && !rule.matches("/_room/stats"));
  }
}

void checkAccepted(const config::Config& c) {
  FUZZ_ASSERT(c.cap >= 1);
  FUZZ_ASSERT(c.workers >= 1 && c.workers <= 64);
  FUZZ_ASSERT(c.max_queue >= 0);
  FUZZ_ASSERT(c.retry_after >= 1);
  FUZZ_ASSERT(c.token_ttl > 0 && c.reaper > 0);
  FUZZ_ASSERT(c.admit_ttl >= 30'000);
  FUZZ_ASSERT(c.asset_cap >= 1 && c.asset_user_cap_h1 >= 1 && c.asset_user_cap_h2 >= 1);
  FUZZ_ASSERT(c.asset_wait >= 0 && c.asset_user_wait >= 0);
  FUZZ_ASSERT(c.asset_users_max >= 1);
  FUZZ_ASSERT(c.max_body >= 1);
  FUZZ_ASSERT(c.shutdown_grace >= 0 && c.upstream_timeout >= 0);
  FUZZ_ASSERT(!c.upstream.host.empty());
  FUZZ_ASSERT(c.admit_secret.size() >= 32);
  checkRules(c.bypass);
  checkRules(c.assets);
  checkRules(c.asset_public);
}

}  // namespace

int fuzzConfig(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  size_t first = input.find('\0');
  std::string_view yaml = input.substr(0, first);
  std::string_view flags, env_text;
  if (first != std::string_view::npos) {
    std::string_view rest = input.substr(first + 1);
    size_t second = rest.find('\0');
    flags = rest.substr(0, second);
    if (second != std::string_view::npos) env_text = rest.substr(second + 1);
  }

  if (FILE* f = std::fopen(scratchPath().c_str(), "wb")) {
    std::fwrite(yaml.data(), 1, yaml.size(), f);
    std::fclose(f);
  }
  std::vector<std::string> args = {"concert", "-c", scratchPath()};
  for (std::string& arg : lines(flags)) args.push_back(std::move(arg));
  config::Environment env;
  for (const std::string& line : lines(env_text)) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }

  config::LoadResult result = config::load(args, env);
  for (const std::string& e : result.errors) FUZZ_ASSERT(!e.empty());
  if (result.action == config::Action::Run || result.action == config::Action::TestConfig) {
    FUZZ_ASSERT(result.ok() == (result.config != nullptr));
    if (result.config) checkAccepted(*result.config);
  }
  return 0;
}

}  // namespace concert::fuzz

CONCERT_FUZZ_ENTRY(fuzzConfig)
