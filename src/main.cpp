// concert: argv -> configuration -> master (or -t, -version, --help, -invite).
#include <cstdio>
#include <string>
#include <vector>

#include "admission/room_pass.h"
#include "common/clock.h"
#include "common/log.h"
#include "config/loader.h"
#include "master/master.h"
#include "master/upgrade.h"

namespace {

// concert -invite DURATION: one single-use invitation, alone on stdout.
int printInvitation(const concert::config::LoadResult& result) {
  const concert::config::Config& config = *result.config;
  if (config.admit_secret_generated) {
    std::fprintf(stderr,
                 "concert: -invite needs CONCERT_ADMIT_SECRET (at least 32 bytes), the secret the running Concert "
                 "checks invitations with; a random one would make the invitation worthless\n");
    return 1;
  }
  std::optional<std::string> token =
      concert::admission::mintInvitation(config.admit_secret, concert::unixSeconds(), result.invite_ttl / 1000);
  if (!token) {
    std::fprintf(stderr, "concert: -invite: no random bytes for the invitation\n");
    return 1;
  }
  std::printf("%s\n", token->c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  concert::config::Environment env = concert::config::currentEnvironment();
  concert::config::LoadResult result = concert::config::load(args, env);

  switch (result.action) {
    case concert::config::Action::Version: std::printf("concert %s\n", CONCERT_VERSION); return 0;
    case concert::config::Action::Help: std::fputs(concert::config::helpText().c_str(), stdout); return 0;
    case concert::config::Action::TestConfig:
    case concert::config::Action::Invite:
    case concert::config::Action::Run: break;
  }

  if (!result.ok()) {
    for (const std::string& error : result.errors) std::fprintf(stderr, "concert: %s\n", error.c_str());
    if (result.action == concert::config::Action::TestConfig)
      std::fprintf(stderr, "concert: configuration has %zu error(s)\n", result.errors.size());
    return 1;
  }
  if (result.action == concert::config::Action::Invite) return printInvitation(result);
  if (result.action == concert::config::Action::TestConfig) {
    // Run by a master before it hands its segment to this binary (SIGUSR2).
    std::string refused;
    if (!concert::master::checkHandedSegment(&refused)) {
      std::fprintf(stderr, "concert: %s\n", refused.c_str());
      return 1;
    }
    for (const std::string& warning : result.warnings) std::fprintf(stderr, "concert: warning: %s\n", warning.c_str());
    std::printf("configuration ok\n");
    return 0;
  }
  for (const std::string& warning : result.warnings) LOG_WARN("%s", warning.c_str());
  return concert::master::runMaster(result.config, std::move(args), std::move(env));
}
