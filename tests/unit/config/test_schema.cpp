// The schema table against everything generated from or checked against
// it: conf/concert.yaml, the README table, man/concert.8, and the YAML
// error fixtures in tests/fixtures/config/ (one file per error, first line
// "# expect: <substring of the error>").
#include <doctest/doctest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "config/loader.h"
#include "config/schema.h"
#include "helpers.h"

using namespace concert::config;
using namespace concert::config::testing;

namespace {

const std::string kRoot = CONCERT_SOURCE_ROOT;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The deliberate differences between conf/concert.yaml and the built-in
// defaults: a small cap so that `make run` shows the queue quickly, and the
// state dir an installed Concert keeps its line in (`make run` and the
// tests pass -state-dir "").
constexpr std::string_view kDemoKey = "cap";
constexpr std::string_view kDemoValue = "5";
constexpr std::string_view kStateKey = "state-dir";
constexpr std::string_view kStateValue = "/run/concert";

}  // namespace

TEST_CASE("the schema is well formed") {
  std::set<std::string_view> names;
  std::set<std::string_view> envs;
  for (const Setting& s : settings()) {
    INFO(s.name);
    CHECK(names.insert(s.name).second);
    CHECK(envs.insert(s.env).second);
    CHECK(s.env.rfind("CONCERT_", 0) == 0);
    CHECK_FALSE(s.help.empty());
    CHECK_FALSE(s.group.empty());
    CHECK(s.name.find('=') == std::string_view::npos);
    // The default must itself be valid: a load with nothing set uses it.
    Environment env{{"CONCERT_ADMIT_SECRET", kSecret}};
    LoadResult r = run({"-" + std::string(s.name) + "=" + std::string(s.default_text)}, env);
    CHECK_MESSAGE(r.ok(), joined(r.errors));
  }
  for (const char* special : {"c", "config", "t", "test-config", "version", "h", "help"})
    CHECK(findSetting(special) == nullptr);
  CHECK(findSetting("cap")->env == "CONCERT_CAPACITY");
  CHECK(findSetting("html")->env == "CONCERT_HTML_FILE");
  CHECK(findSetting("pass")->env == "CONCERT_PASS_DURATION");
  CHECK(findSetting("workers")->reload == Reload::RestartToGrow);
  for (const char* restart : {"listen", "asset-users-max", "asset-cap", "daemon", "pid-file", "user", "state-dir"})
    CHECK_MESSAGE(findSetting(restart)->reload == Reload::Restart, restart);
  CHECK(findSetting("cap")->reload == Reload::Live);
  CHECK(findSetting("max-queue")->reload == Reload::Live);  // a longer one grows the segment in place
  CHECK(findSetting("queue-hold")->reload == Reload::Live);
  CHECK(findSetting("queue-hold")->group == "Waiting room");
  CHECK(rangeText(*findSetting("queue-hold")) == "0 or 1ms to 1h0m0s");
}

TEST_CASE("every flag of the original and every later addition is in the schema") {
  const std::pair<const char*, const char*> expected[] = {
      {"listen", "CONCERT_LISTEN"},
      {"upstream", "CONCERT_UPSTREAM"},
      {"cap", "CONCERT_CAPACITY"},
      {"adaptive", "CONCERT_ADAPTIVE"},
      {"cap-min", "CONCERT_CAP_MIN"},
      {"cap-max", "CONCERT_CAP_MAX"},
      {"origin-status", "CONCERT_ORIGIN_STATUS"},
      {"max-queue", "CONCERT_MAX_QUEUE"},
      {"reaper", "CONCERT_REAPER"},
      {"token-ttl", "CONCERT_TOKEN_TTL"},
      {"secure-cookie", "CONCERT_SECURE_COOKIE"},
      {"cookie-path", "CONCERT_COOKIE_PATH"},
      {"cookie-domain", "CONCERT_COOKIE_DOMAIN"},
      {"preserve-host", "CONCERT_PRESERVE_HOST"},
      {"bypass", "CONCERT_BYPASS"},
      {"html", "CONCERT_HTML_FILE"},
      {"skip-url", "CONCERT_SKIP_URL"},
      {"rate", "CONCERT_RATE"},
      {"surge", "CONCERT_SURGE"},
      {"pass", "CONCERT_PASS_DURATION"},
      {"upstream-timeout", "CONCERT_UPSTREAM_TIMEOUT"},
      {"api-json", "CONCERT_API_JSON"},
      {"retry-after", "CONCERT_RETRY_AFTER"},
      {"assets", "CONCERT_ASSETS"},
      {"asset-public", "CONCERT_ASSET_PUBLIC"},
      {"asset-cap", "CONCERT_ASSET_CAP"},
      {"asset-wait", "CONCERT_ASSET_WAIT"},
      {"asset-user-cap-h1", "CONCERT_ASSET_USER_CAP_H1"},
      {"asset-user-cap-h2", "CONCERT_ASSET_USER_CAP_H2"},
      {"asset-user-wait", "CONCERT_ASSET_USER_WAIT"},
      {"admit-ttl", "CONCERT_ADMIT_TTL"},
      {"client-proto-header", "CONCERT_CLIENT_PROTO_HEADER"},
      {"access-log", "CONCERT_ACCESS_LOG"},
      {"workers", "CONCERT_WORKERS"},
      {"daemon", "CONCERT_DAEMON"},
      {"pid-file", "CONCERT_PID_FILE"},
      {"user", "CONCERT_USER"},
      {"error-log", "CONCERT_ERROR_LOG"},
      {"access-log-file", "CONCERT_ACCESS_LOG_FILE"},
      {"shutdown-grace", "CONCERT_SHUTDOWN_GRACE"},
      {"max-body", "CONCERT_MAX_BODY"},
      {"asset-users-max", "CONCERT_ASSET_USERS_MAX"},
      {"queue-hold", "CONCERT_QUEUE_HOLD"},
      {"claim-window", "CONCERT_CLAIM_WINDOW"},
      {"first-poll-grace", "CONCERT_FIRST_POLL_GRACE"},
      {"busy-poll", "CONCERT_BUSY_POLL"},
      {"io-uring", "CONCERT_IO_URING"},
      {"max-connections", "CONCERT_MAX_CONNECTIONS"},
      {"client-header-timeout", "CONCERT_CLIENT_HEADER_TIMEOUT"},
      {"client-body-timeout", "CONCERT_CLIENT_BODY_TIMEOUT"},
      {"send-timeout", "CONCERT_SEND_TIMEOUT"},
      {"keepalive-timeout", "CONCERT_KEEPALIVE_TIMEOUT"},
      {"tunnel-timeout", "CONCERT_TUNNEL_TIMEOUT"},
      {"upstream-read-timeout", "CONCERT_UPSTREAM_READ_TIMEOUT"},
      {"long-lived", "CONCERT_LONG_LIVED"},
      {"long-lived-cap", "CONCERT_LONG_LIVED_CAP"},
      {"session-hold", "CONCERT_SESSION_HOLD"},
      {"newcomer-share", "CONCERT_NEWCOMER_SHARE"},
      {"queue-status", "CONCERT_QUEUE_STATUS"},
      {"crawler-agents", "CONCERT_CRAWLER_AGENTS"},
      {"trusted-proxies", "CONCERT_TRUSTED_PROXIES"},
      {"bypass-cidrs", "CONCERT_BYPASS_CIDRS"},
      {"proxy-protocol", "CONCERT_PROXY_PROTOCOL"},
      {"max-tickets-per-client", "CONCERT_MAX_TICKETS_PER_CLIENT"},
      {"abuse-threshold", "CONCERT_ABUSE_THRESHOLD"},
      {"abuse-ban", "CONCERT_ABUSE_BAN"},
      {"abuse-allow", "CONCERT_ABUSE_ALLOW"},
      {"admin-listen", "CONCERT_ADMIN_LISTEN"},
      {"mode", "CONCERT_MODE"},
      {"maintenance-html", "CONCERT_MAINTENANCE_HTML"},
      {"admit-rate", "CONCERT_ADMIT_RATE"},
      {"admit-burst", "CONCERT_ADMIT_BURST"},
      {"priority-classes", "CONCERT_PRIORITY_CLASSES"},
      {"event-start", "CONCERT_EVENT_START"},
      {"prequeue", "CONCERT_PREQUEUE"},
      {"shuffle-prequeue", "CONCERT_SHUFFLE_PREQUEUE"},
      {"cluster", "CONCERT_CLUSTER"},
      {"cluster-room", "CONCERT_CLUSTER_ROOM"},
      {"cluster-lease", "CONCERT_CLUSTER_LEASE"},
      {"cluster-lease-ttl", "CONCERT_CLUSTER_LEASE_TTL"},
      {"cluster-fail", "CONCERT_CLUSTER_FAIL"},
      {"state-dir", "CONCERT_STATE_DIR"},
  };
  for (const auto& entry : expected) {
    const char* name = entry.first;
    const char* env = entry.second;
    INFO(name);
    const Setting* s = findSetting(name);
    REQUIRE(s != nullptr);
    CHECK(s->env == env);
  }
  CHECK(settings().size() == std::size(expected));
}

TEST_CASE("conf/concert.yaml ships every key with its default") {
  const std::string path = kRoot + "/conf/concert.yaml";
  YAML::Node root = YAML::LoadFile(path);
  REQUIRE(root.IsMap());
  std::set<std::string> keys;
  for (const auto& entry : root) keys.insert(entry.first.Scalar());
  for (const Setting& s : settings()) {
    const std::string name(s.name);
    INFO(name);
    REQUIRE(keys.count(name) == 1);
    const YAML::Node value = root[name];
    REQUIRE(value.IsScalar());
    if (s.name == kDemoKey) {
      CHECK(value.Scalar() == kDemoValue);
    } else if (s.name == kStateKey) {
      CHECK(value.Scalar() == kStateValue);
    } else {
      CHECK(value.Scalar() == s.default_text);
    }
  }
  CHECK(keys.size() == settings().size());

  // The exception is documented in the file, next to the value.
  std::string text = slurp(path);
  CHECK(text.find("cap: 5") != std::string::npos);
  CHECK(text.find("built-in default 500") != std::string::npos);

  LoadResult r = run({"-c", path}, {{"CONCERT_ADMIT_SECRET", kSecret}});
  INFO(joined(r.errors));
  REQUIRE(r.ok());
  CHECK(r.warnings.empty());
  LoadResult defaults = run({}, {{"CONCERT_ADMIT_SECRET", kSecret}});
  for (const Setting& s : settings()) {
    if (s.name == kDemoKey || s.name == kStateKey || s.name == "asset-cap") continue;  // asset-cap: derived from cap
    INFO(s.name);
    CHECK(valueText(s, *r.config) == valueText(s, *defaults.config));
  }
  CHECK(r.config->cap == 5);
}

TEST_CASE("README.md's configuration table is generated from the schema") {
  const std::string readme = slurp(kRoot + "/README.md");
  const std::string begin = "<!-- config-table:begin -->\n";
  const std::string end = "<!-- config-table:end -->";
  size_t from = readme.find(begin);
  size_t to = readme.find(end);
  REQUIRE(from != std::string::npos);
  REQUIRE(to != std::string::npos);
  from += begin.size();
  REQUIRE(to >= from);
  std::string block = readme.substr(from, to - from);
  // Regenerate with markdownTable() when this fails.
  CHECK(block == markdownTable());
}

TEST_CASE("the markdown table has one row per setting and secret") {
  std::string table = markdownTable();
  size_t rows = static_cast<size_t>(std::count(table.begin(), table.end(), '\n'));
  CHECK(rows == 2 + settings().size() + secrets().size());
  for (const Setting& s : settings()) {
    CHECK(table.find("| `-" + std::string(s.name) + "` | `" + std::string(s.env) + "` |") != std::string::npos);
  }
  CHECK(table.find("`CONCERT_ADMIT_SECRET`") != std::string::npos);
  CHECK(table.find("`CONCERT_ADMIN_TOKEN`") != std::string::npos);
}

TEST_CASE("man/concert.8 mentions every flag (when the man page exists)") {
  const std::string path = kRoot + "/man/concert.8";
  if (!std::filesystem::exists(path)) {
    MESSAGE("man/concert.8 is not there yet; skipped");
    return;
  }
  const std::string man = slurp(path);
  // mdoc writes a flag as "Fl cap", man(7) as "\-cap"; either way the name
  // must end there ("-cap" inside "-asset-user-cap-h1" does not count).
  const auto mentions = [&](const std::string& name) {
    for (const std::string lead : {"Fl ", "\\-"}) {
      for (size_t at = man.find(lead + name); at != std::string::npos; at = man.find(lead + name, at + 1)) {
        size_t end = at + lead.size() + name.size();
        char next = end < man.size() ? man[end] : ' ';
        bool name_char = (next >= 'a' && next <= 'z') || (next >= '0' && next <= '9') || next == '-';
        if (!name_char) return true;
      }
    }
    return false;
  };
  for (const Setting& s : settings())
    CHECK_MESSAGE(mentions(std::string(s.name)), "man/concert.8 does not mention -", s.name);
}

TEST_CASE("every YAML fixture in tests/fixtures/config fails with its expected error") {
  const std::string dir = kRoot + "/tests/fixtures/config";
  REQUIRE(std::filesystem::is_directory(dir));
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".yaml") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  CHECK(files.size() >= 20);
  for (const std::string& file : files) {
    const std::string text = slurp(file);
    const std::string marker = "# expect: ";
    INFO(file);
    REQUIRE(text.rfind(marker, 0) == 0);
    std::string expect = text.substr(marker.size(), text.find('\n') - marker.size());
    REQUIRE_FALSE(expect.empty());
    LoadResult r = run({"-c", file}, {{"CONCERT_ADMIT_SECRET", kSecret}});
    INFO(joined(r.errors));
    CHECK_FALSE(r.ok());
    CHECK(contains(r.errors, expect));
    // Every error from a file names the file (and, where there is one, the line).
    for (const std::string& e : r.errors) CHECK(e.rfind(file + ":", 0) == 0);
  }
}
