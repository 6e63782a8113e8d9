// Reload policy (see reload.h).
#include "master/reload.h"

#include <memory>

#include "config/schema.h"

namespace concert::master {
namespace {

std::string shown(std::string value) {
  return value.empty() ? "\"\"" : value;
}

void restoreRunning(const config::Setting& setting, const config::Config& running, config::Config* merged) {
  std::visit([&](auto member) { merged->*member = running.*member; }, setting.target);
}

}  // namespace

config::ConfigPtr mergeReloadedConfig(const config::Config& running, const config::Config& fresh, uint32_t worker_slots,
                                      std::vector<std::string>* notes) {
  auto merged = std::make_shared<config::Config>(fresh);
  for (const config::Setting& setting : config::settings()) {
    if (setting.reload == config::Reload::Live) continue;
    std::string before = config::valueText(setting, running);
    if (config::valueText(setting, fresh) == before) continue;
    if (setting.reload == config::Reload::RestartToGrow) {
      // Only -workers is restart-to-grow: the segment has worker_slots for two
      // generations side by side, so a generation may use up to half of them.
      if (static_cast<uint32_t>(fresh.workers) * 2 <= worker_slots) continue;
      notes->push_back("reload: " + std::string(setting.name) + " changed; restart required to grow beyond " +
                       std::to_string(worker_slots / 2) + ", keeping " + shown(before));
    } else {
      // A derived asset cap moves with -cap; say so, or the note looks spurious.
      bool derived = setting.name == "asset-cap" && running.asset_cap_derived;
      notes->push_back("reload: " + std::string(setting.name) + " changed; restart required, keeping " + shown(before) +
                       (derived ? " (derived from cap x asset-user-cap-h2)" : ""));
    }
    restoreRunning(setting, running, merged.get());
  }
  // The derived flag travels with the effective asset cap it describes.
  merged->asset_cap_derived =
      merged->asset_cap == running.asset_cap ? running.asset_cap_derived : fresh.asset_cap_derived;
  // -cluster is restart-only: its parsed address stays with the running one.
  merged->cluster_url = running.cluster_url;
  merged->admit_secret = running.admit_secret;
  merged->admit_secret_generated = running.admit_secret_generated;
  merged->admit_secret_in_state_dir = running.admit_secret_in_state_dir;
  merged->admin_token = running.admin_token;
  return merged;
}

}  // namespace concert::master
