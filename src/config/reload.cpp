// planReload (see reload.h): compares the running and the freshly loaded
// Config setting by setting through the schema table, in the operator's
// spelling of each value, and copies restart-only values back.
#include "config/reload.h"

#include <algorithm>

#include "config/schema.h"

namespace concert::config {

namespace {

void copySetting(const Setting& setting, const Config& from, Config& to) {
  std::visit([&](auto member) { to.*member = from.*member; }, setting.target);
}

}  // namespace

bool ReloadPlan::changes(std::string_view key) const {
  return std::any_of(changed.begin(), changed.end(), [&](const std::string& line) {
    return line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ':';
  });
}

ReloadPlan planReload(const Config& running, const Config& next, int started_workers) {
  ReloadPlan plan;
  auto merged = std::make_shared<Config>(next);
  for (const Setting& s : settings()) {
    std::string before = valueText(s, running);
    std::string after = valueText(s, next);
    bool differs = before != after;
    if (s.name == "html") differs = differs || running.html_template != next.html_template;
    if (!differs) continue;
    const std::string key(s.name);
    if (s.reload == Reload::Restart) {
      copySetting(s, running, *merged);
      if (s.name == "asset-cap") merged->asset_cap_derived = running.asset_cap_derived;
      std::string what = key + ": " + after;
      if (s.name == "asset-cap" && next.asset_cap_derived) what += " (derived from cap x asset-user-cap-h2)";
      plan.needs_restart.push_back(what + " needs a restart; keeping " + before);
    } else if (s.reload == Reload::RestartToGrow && next.workers > started_workers) {
      merged->workers = started_workers;
      plan.needs_restart.push_back(key + ": " + after + " needs a restart (started with " +
                                   std::to_string(started_workers) + "); using " + std::to_string(started_workers));
      if (running.workers != started_workers)
        plan.changed.push_back(key + ": " + before + " -> " + std::to_string(started_workers));
    } else if (s.name == "html" && before == after) {
      plan.changed.push_back(key + ": " + after + " (contents changed)");
    } else {
      plan.changed.push_back(key + ": " + before + " -> " + after);
    }
  }
  // A random secret would be drawn again by every load; keep the one the
  // running passes were minted with.
  if (running.admit_secret_generated && next.admit_secret_generated) merged->admit_secret = running.admit_secret;
  plan.config = std::move(merged);
  return plan;
}

}  // namespace concert::config
