// planReload: live settings change, restart-only ones are kept and named,
// -workers may shrink but not grow, a generated secret survives.
#include <doctest/doctest.h>

#include "config/reload.h"
#include "helpers.h"

using namespace concert::config;
using namespace concert::config::testing;

namespace {

ConfigPtr loaded(std::vector<std::string> args, Environment env = {{"CONCERT_ADMIT_SECRET", kSecret}}) {
  LoadResult r = run(std::move(args), std::move(env));
  INFO(joined(r.errors));
  REQUIRE(r.ok());
  return r.config;
}

}  // namespace

TEST_CASE("nothing changed: no notes, same values") {
  ConfigPtr a = loaded({"-workers", "2"});
  ConfigPtr b = loaded({"-workers", "2"});
  ReloadPlan plan = planReload(*a, *b, 2);
  CHECK(plan.changed.empty());
  CHECK(plan.needs_restart.empty());
  CHECK(plan.config->cap == 500);
}

TEST_CASE("live settings are applied and listed") {
  ConfigPtr a = loaded({"-workers", "2"});
  ConfigPtr b = loaded({"-workers", "2", "-cap", "50", "-token-ttl", "1m", "-bypass", "/a,/b/*"});
  ReloadPlan plan = planReload(*a, *b, 2);
  CHECK(plan.config->cap == 50);
  CHECK(plan.config->token_ttl == 60'000);
  CHECK(plan.config->bypass.size() == 2);
  CHECK(contains(plan.changed, "cap: 500 -> 50"));
  CHECK(contains(plan.changed, "token-ttl: 5m0s -> 1m0s"));
  CHECK(contains(plan.changed, "bypass: /favicon.ico -> /a,/b/*"));
  CHECK(plan.changes("cap"));
  CHECK_FALSE(plan.changes("ca"));
  CHECK_FALSE(plan.changes("max-queue"));
  // The asset cap derived from the old cap is fixed at start.
  CHECK(plan.needs_restart.size() == 1);
  CHECK(plan.config->asset_cap == 64'000);
}

TEST_CASE("restart-only settings keep their running value") {
  ConfigPtr a = loaded({"-workers", "2"});
  ConfigPtr b = loaded({"-workers", "2", "-listen", ":9090", "-max-queue", "5", "-asset-users-max", "10",
                        "-asset-cap", "9", "-daemon", "-pid-file", "/tmp/x.pid", "-user", "nobody"});
  ReloadPlan plan = planReload(*a, *b, 2);
  CHECK(plan.config->listen == ":8080");
  CHECK(plan.config->max_queue == 10'000);
  CHECK(plan.config->asset_users_max == 65536);
  CHECK(plan.config->asset_cap == 64'000);
  CHECK(plan.config->asset_cap_derived);
  CHECK_FALSE(plan.config->daemon);
  CHECK(plan.config->pid_file.empty());
  CHECK(plan.config->user.empty());
  CHECK(contains(plan.needs_restart, "listen: :9090 needs a restart; keeping :8080"));
  CHECK(plan.needs_restart.size() == 7);
  CHECK(plan.changed.empty());
}

TEST_CASE("a derived asset cap stays fixed when cap changes") {
  ConfigPtr a = loaded({"-workers", "1", "-cap", "10"});
  ConfigPtr b = loaded({"-workers", "1", "-cap", "20"});
  ReloadPlan plan = planReload(*a, *b, 1);
  CHECK(plan.config->cap == 20);
  CHECK(plan.config->asset_cap == 10 * 128);
  CHECK(contains(plan.needs_restart, "asset-cap: 2560 (derived from cap x asset-user-cap-h2) needs a restart; keeping 1280"));
}

TEST_CASE("workers may shrink on reload but not grow past the start") {
  ConfigPtr four = loaded({"-workers", "4"});
  ConfigPtr two = loaded({"-workers", "2"});
  ConfigPtr eight = loaded({"-workers", "8"});

  ReloadPlan shrink = planReload(*four, *two, 4);
  CHECK(shrink.config->workers == 2);
  CHECK(contains(shrink.changed, "workers: 4 -> 2"));
  CHECK(shrink.needs_restart.empty());

  ReloadPlan grow = planReload(*four, *eight, 4);
  CHECK(grow.config->workers == 4);
  CHECK(contains(grow.needs_restart, "workers: 8 needs a restart"));
  CHECK(grow.changed.empty());

  ReloadPlan back_up = planReload(*two, *eight, 4);
  CHECK(back_up.config->workers == 4);
  CHECK(contains(back_up.changed, "workers: 2 -> 4"));
}

TEST_CASE("a generated admission secret survives a reload; a configured one follows the environment") {
  ConfigPtr a = loaded({"-workers", "1"}, {});
  ConfigPtr b = loaded({"-workers", "1"}, {});
  REQUIRE(a->admit_secret != b->admit_secret);
  CHECK(planReload(*a, *b, 1).config->admit_secret == a->admit_secret);

  ConfigPtr fixed = loaded({"-workers", "1"});
  CHECK(planReload(*a, *fixed, 1).config->admit_secret == kSecret);
}

TEST_CASE("a changed waiting-page file is reloaded") {
  TempDir dir;
  std::string page = dir.write("p.html", "one");
  ConfigPtr a = loaded({"-workers", "1", "-html", page});
  dir.write("p.html", "two");
  ConfigPtr b = loaded({"-workers", "1", "-html", page});
  ReloadPlan plan = planReload(*a, *b, 1);
  CHECK(plan.config->html_template == "two");
  CHECK(contains(plan.changed, "html: " + page + " (contents changed)"));
}
