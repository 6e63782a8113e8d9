// concert: argv -> configuration -> master (or -t, -version, --help).
#include <cstdio>
#include <string>
#include <vector>

#include "common/log.h"
#include "config/loader.h"
#include "master/master.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  concert::config::Environment env = concert::config::currentEnvironment();
  concert::config::LoadResult result = concert::config::load(args, env);

  switch (result.action) {
    case concert::config::Action::Version: std::printf("concert %s\n", CONCERT_VERSION); return 0;
    case concert::config::Action::Help: std::fputs(concert::config::helpText().c_str(), stdout); return 0;
    case concert::config::Action::TestConfig:
    case concert::config::Action::Run: break;
  }

  if (!result.ok()) {
    for (const std::string& error : result.errors) std::fprintf(stderr, "concert: %s\n", error.c_str());
    if (result.action == concert::config::Action::TestConfig)
      std::fprintf(stderr, "concert: configuration has %zu error(s)\n", result.errors.size());
    return 1;
  }
  if (result.action == concert::config::Action::TestConfig) {
    for (const std::string& warning : result.warnings) std::fprintf(stderr, "concert: warning: %s\n", warning.c_str());
    std::printf("configuration ok\n");
    return 0;
  }
  for (const std::string& warning : result.warnings) LOG_WARN("%s", warning.c_str());
  return concert::master::runMaster(result.config, std::move(args), std::move(env));
}
