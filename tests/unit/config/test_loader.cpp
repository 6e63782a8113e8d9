// The loader: sources and precedence, command-line syntax, every validation
// rule of the original, Concert's additional settings, error formats per
// source, and derived values.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <limits>

#include "config/loader.h"
#include "config/schema.h"
#include "helpers.h"

using namespace concert::config;
using namespace concert::config::testing;

namespace {

Environment withSecret(Environment env = {}) {
  env.emplace("CONCERT_ADMIT_SECRET", kSecret);
  return env;
}

// Loads with one flag and expects an error naming that flag.
void expectFlagError(const std::string& flag, const std::string& value, std::string_view needle = {}) {
  LoadResult r = run({"-" + flag, value}, withSecret());
  INFO("-", flag, " ", value, " => ", joined(r.errors));
  CHECK_FALSE(r.ok());
  CHECK(r.config == nullptr);
  CHECK(contains(r.errors, "-" + flag + " (flag): "));
  if (!needle.empty()) CHECK(contains(r.errors, needle));
}

const Config& expectFlagOk(LoadResult& holder, const std::string& flag, const std::string& value) {
  holder = run({"-" + flag, value}, withSecret());
  INFO("-", flag, " ", value);
  return okConfig(holder);
}

}  // namespace

TEST_CASE("TestParseConfig_Defaults: every default holds with no env") {
  LoadResult r = run({});
  const Config& c = okConfig(r);
  CHECK(r.action == Action::Run);
  CHECK(c.listen == ":8080");
  CHECK(c.workers >= 1);
  CHECK(c.workers <= 64);
  CHECK_FALSE(c.daemon);
  CHECK(c.pid_file.empty());
  CHECK(c.user.empty());
  CHECK(c.error_log.empty());
  CHECK(c.access_log_file.empty());
  CHECK(c.shutdown_grace == 30'000);
  CHECK(c.max_body == 64LL << 20);
  CHECK(c.upstream.raw == "http://127.0.0.1:3000");
  CHECK(c.upstream.host == "127.0.0.1");
  CHECK(c.upstream.port == 3000);
  CHECK(c.upstream_timeout == 30'000);
  CHECK(c.preserve_host);
  CHECK(c.cap == 500);
  CHECK(c.max_queue == 10'000);
  CHECK(c.reaper == 30'000);
  CHECK(c.token_ttl == 300'000);
  CHECK_FALSE(c.secure_cookie);
  CHECK(c.cookie_path == "/");
  CHECK(c.cookie_domain.empty());
  CHECK(c.html_file.empty());
  CHECK(c.html_template.empty());
  CHECK(c.skip_url.empty());
  CHECK(c.rate == 0);
  CHECK(c.surge == 0);
  CHECK(c.pass_duration == 0);
  CHECK(c.api_json);
  CHECK(c.retry_after == 5);
  CHECK(c.access_log);
  REQUIRE(c.bypass.size() == 1);
  CHECK(c.bypass[0].path == "/favicon.ico");
  CHECK_FALSE(c.bypass[0].prefix);
  CHECK(c.assets.empty());
  CHECK(c.asset_public.empty());
  CHECK(c.asset_cap == 500 * 128);
  CHECK(c.asset_cap_derived);
  CHECK(c.asset_wait == 2'000);
  CHECK(c.asset_user_cap_h1 == 8);
  CHECK(c.asset_user_cap_h2 == 128);
  CHECK(c.asset_user_wait == 2'000);
  CHECK(c.admit_ttl == 600'000);
  CHECK(c.client_proto_header.empty());
  CHECK(c.asset_users_max == 65536);
  CHECK(c.admit_secret.size() == 32);
  CHECK(c.admit_secret_generated);
  CHECK(c.admin_token.empty());
  CHECK(c.config_file.empty());
  CHECK(contains(r.warnings,
                 "CONCERT_ADMIT_SECRET is not set: using a random secret; admission passes reset on restart and are "
                 "not shared across instances"));
}

TEST_CASE("the schema's defaults agree with Config's initialisers") {
  LoadResult r = run({}, withSecret());
  const Config& loaded = okConfig(r);
  Config plain;
  for (const Setting& s : settings()) {
    // Resolved at load, or (bypass) a list the struct leaves empty.
    if (s.name == "workers" || s.name == "asset-cap" || s.name == "upstream" || s.name == "bypass") continue;
    INFO(s.name);
    CHECK(valueText(s, loaded) == valueText(s, plain));
  }
}

TEST_CASE("random secrets differ between loads") {
  LoadResult a = run({});
  LoadResult b = run({});
  CHECK(okConfig(a).admit_secret != okConfig(b).admit_secret);
}

TEST_CASE("TestParseConfig_EnvOverridesDefaults") {
  LoadResult r = run({}, {{"CONCERT_UPSTREAM", "http://origin.internal:9000"},
                          {"CONCERT_CAPACITY", "42"},
                          {"CONCERT_REAPER", "10s"},
                          {"CONCERT_API_JSON", "false"},
                          {"CONCERT_ADMIN_TOKEN", "admin-token"},
                          {"CONCERT_ASSET_USER_CAP_H2", "64"},
                          {"CONCERT_ADMIT_SECRET", kSecret}});
  const Config& c = okConfig(r);
  CHECK(c.upstream.host == "origin.internal");
  CHECK(c.upstream.port == 9000);
  CHECK(c.cap == 42);
  CHECK(c.reaper == 10'000);
  CHECK_FALSE(c.api_json);
  CHECK(c.admin_token == "admin-token");
  CHECK(c.asset_user_cap_h2 == 64);
  CHECK(c.admit_secret == kSecret);
  CHECK_FALSE(c.admit_secret_generated);
  CHECK(c.asset_cap == 42 * 64);
  CHECK_FALSE(contains(r.warnings, "CONCERT_ADMIT_SECRET"));
}

TEST_CASE("every setting is read from its environment variable") {
  for (const Setting& s : settings()) {
    std::string value = std::string(s.default_text);
    if (s.type == ValueType::Int) value = std::to_string(s.min == std::numeric_limits<int32_t>::min() ? 9 : s.max);
    if (s.type == ValueType::Bool) value = s.default_text == "true" ? "false" : "true";
    if (s.type == ValueType::Duration) value = s.max < 3'600'000 ? "500ms" : "1h";  // in range, not the default
    if (s.type == ValueType::Duration && value == s.default_text) value = "2h";
    if (s.type == ValueType::String) continue;  // covered by the cases below and the error-format tests
    if (s.type == ValueType::Url) value = "http://10.0.0.1:81";
    if (s.type == ValueType::PathList) value = "/env-" + std::string(s.name);
    if (s.type == ValueType::CidrList) value = "10.9.0.0/16,2001:db8::/32";
    if (s.type == ValueType::Workers) value = "3";
    if (s.type == ValueType::ByteSize) value = "3KB";
    if (s.type == ValueType::Float) value = "2.5";
    // -proxy-protocol is only valid with a trusted proxy to send the header.
    Environment base = s.name == "proxy-protocol" ? withSecret({{"CONCERT_TRUSTED_PROXIES", "127.0.0.1"}}) : withSecret();
    Environment env = base;
    env[std::string(s.env)] = value;
    LoadResult r = run({}, env);
    INFO(s.env, "=", value);
    const Config& c = okConfig(r);
    LoadResult flag = run({"-" + std::string(s.name) + "=" + value}, base);
    CHECK(valueText(s, c) == valueText(s, okConfig(flag)));
    CHECK(valueText(s, c) != valueText(s, okConfig(run({}, base))));
  }
  LoadResult strings = run({}, withSecret({{"CONCERT_LISTEN", "127.0.0.1:9"},
                                           {"CONCERT_PID_FILE", "/run/c.pid"},
                                           {"CONCERT_USER", "www-data"},
                                           {"CONCERT_COOKIE_PATH", "/shop"},
                                           {"CONCERT_COOKIE_DOMAIN", "example.com"},
                                           {"CONCERT_SKIP_URL", "/skip"},
                                           {"CONCERT_CLIENT_PROTO_HEADER", "X-Client-Proto"},
                                           {"CONCERT_ACCESS_LOG_FILE", "/var/log/a.log"},
                                           {"CONCERT_ERROR_LOG", "/var/log/e.log"},
                                           {"CONCERT_MODE", "pause"},
                                           {"CONCERT_ADMIT_RATE", "10/s"}}));
  const Config& c = okConfig(strings);
  CHECK(c.mode == "pause");
  CHECK(c.admit_rate == "10/s");
  CHECK(c.listen == "127.0.0.1:9");
  CHECK(c.pid_file == "/run/c.pid");
  CHECK(c.user == "www-data");
  CHECK(c.cookie_path == "/shop");
  CHECK(c.cookie_domain == "example.com");
  CHECK(c.skip_url == "/skip");
  CHECK(c.client_proto_header == "X-Client-Proto");
  CHECK(c.access_log_file == "/var/log/a.log");
  CHECK(c.error_log == "/var/log/e.log");
}

TEST_CASE("TestParseConfig_FlagBeatsEnv and the whole precedence order") {
  TempDir dir;
  std::string file = dir.write("c.yaml", "cap: 11\nmax-queue: 12\nretry-after: 13\n");
  Environment env = withSecret({{"CONCERT_CAPACITY", "42"}, {"CONCERT_MAX_QUEUE", "22"}});

  LoadResult r = run({"-cap", "7", "-c", file}, env);
  const Config& c = okConfig(r);
  CHECK(c.cap == 7);                // flag > env > file
  CHECK(c.max_queue == 22);         // env > file
  CHECK(c.retry_after == 13);       // file > default
  CHECK(c.asset_user_cap_h1 == 8);  // default
  CHECK(c.config_file == file);

  LoadResult no_env = run({"-c", file, "-max-queue", "5"}, withSecret());
  CHECK(okConfig(no_env).max_queue == 5);  // flag > file
  CHECK(okConfig(no_env).cap == 11);

  // The position of -c on the line does not matter.
  LoadResult late = run({"-cap", "8", "--config", file}, withSecret());
  CHECK(okConfig(late).cap == 8);
  LoadResult eq = run({"--config=" + file}, withSecret());
  CHECK(okConfig(eq).cap == 11);
}

TEST_CASE("an empty environment variable counts as unset") {
  LoadResult r = run({}, withSecret({{"CONCERT_CAPACITY", ""}, {"CONCERT_COOKIE_PATH", ""}}));
  CHECK(okConfig(r).cap == 500);
  CHECK(okConfig(r).cookie_path == "/");
  LoadResult s = run({}, {{"CONCERT_ADMIT_SECRET", ""}});
  CHECK(okConfig(s).admit_secret_generated);
}

TEST_CASE("TestParseConfig_VersionSkipsValidation") {
  for (const char* flag : {"-version", "--version", "-version=true"}) {
    LoadResult r = run({"-upstream", "::garbage::", "-cap", "0", flag, "-no-such-flag", "stray"},
                       {{"CONCERT_CAPACITY", "abc"}, {"CONCERT_ADMIT_SECRET", "short"}});
    INFO(flag);
    CHECK(r.action == Action::Version);
    CHECK(r.errors.empty());
    CHECK(r.warnings.empty());
  }
  // A value that happens to read "-version" belongs to the flag before it.
  LoadResult value = run({"-html", "-version"}, withSecret());
  CHECK(value.action == Action::Run);
  CHECK(contains(value.errors, "-html (flag): cannot read \""));
  CHECK(contains(value.errors, "/-version\": "));
}

TEST_CASE("help is answered without validation") {
  for (const char* flag : {"-h", "-help", "--help", "--h"}) {
    LoadResult r = run({"-cap", "0", flag, "-bogus"});
    INFO(flag);
    CHECK(r.action == Action::Help);
    CHECK(r.errors.empty());
  }
  CHECK(run({"-help", "-version"}).action == Action::Help);
  CHECK(run({"-version", "-t"}).action == Action::Version);
  CHECK(run({"-t", "--help"}).action == Action::Help);
  CHECK(run({"-version", "-help"}).action == Action::Version);
}

TEST_CASE("helpText lists every setting with its env var and default") {
  std::string help = helpText();
  CHECK(help.rfind("usage: concert", 0) == 0);
  for (const Setting& s : settings()) {
    INFO(s.name);
    CHECK(help.find("  -" + std::string(s.name) + "\n") + help.find("  -" + std::string(s.name) + " ") !=
          2 * std::string::npos);
    CHECK(help.find(std::string(s.env)) != std::string::npos);
    CHECK(help.find(std::string(s.help)) != std::string::npos);
  }
  for (const Secret& s : secrets()) CHECK(help.find(std::string(s.env)) != std::string::npos);
  for (const char* special : {"-c, --config FILE", "-t, --test-config", "-invite DURATION", "-version", "--help"})
    CHECK(help.find(special) != std::string::npos);
}

TEST_CASE("-invite DURATION selects Invite with its lifetime; a bad duration is named") {
  LoadResult ok = run({"-invite", "48h"});
  CHECK(ok.action == Action::Invite);
  CHECK(ok.invite_ttl == 48 * 3600 * 1000);
  CHECK(run({"-invite=90s"}).invite_ttl == 90 * 1000);
  for (const char* bad : {"soon", "0s", "500ms", "9000h"}) {
    LoadResult r = run({"-invite", bad});
    INFO(bad);
    REQUIRE_FALSE(r.errors.empty());
    CHECK(r.errors[0].rfind("-invite (flag): must be a duration from 1s to 8760h", 0) == 0);
  }
  CHECK_FALSE(run({"-invite"}).ok());
}

TEST_CASE("-t and --test-config select TestConfig") {
  CHECK(run({"-t"}, withSecret()).action == Action::TestConfig);
  CHECK(run({"--test-config"}, withSecret()).action == Action::TestConfig);
  CHECK(run({"-t=false"}, withSecret()).action == Action::Run);
  LoadResult bad = run({"-t", "-cap", "0"}, withSecret());
  CHECK(bad.action == Action::TestConfig);
  CHECK_FALSE(bad.ok());
}

TEST_CASE("TestParseConfig_UnknownFlag") {
  LoadResult r = run({"-no-such-flag", "1"}, withSecret());
  CHECK_FALSE(r.ok());
  CHECK(contains(r.errors, "-no-such-flag (flag): unknown flag"));
  CHECK(contains(r.errors, "unexpected argument \"1\""));
  CHECK(contains(run({"--capp", "5"}, withSecret()).errors, "--capp (flag): unknown flag (did you mean --cap?)"));
  CHECK(contains(run({"-admit-secret", kSecret}, withSecret()).errors, "CONCERT_ADMIT_SECRET only"));
  CHECK(contains(run({"-admin-token", "x"}, withSecret()).errors, "CONCERT_ADMIN_TOKEN only"));
  CHECK(contains(run({"stray"}, withSecret()).errors, "unexpected argument \"stray\""));
  CHECK(contains(run({"-"}, withSecret()).errors, "unexpected argument \"-\""));
  CHECK(contains(run({"---cap", "5"}, withSecret()).errors, "unexpected argument \"---cap\""));
  CHECK(contains(run({"--", "-cap", "5"}, withSecret()).errors, "unexpected argument \"-cap\""));
}

TEST_CASE("flag syntax: one or two dashes, -f v and -f=v, bare booleans") {
  LoadResult r = run({"--cap", "9", "-max-queue=3", "--retry-after=2", "-daemon", "-cookie-path", "/x",
                      "-api-json=false", "--secure-cookie", "-preserve-host=0"},
                     withSecret());
  const Config& c = okConfig(r);
  CHECK(c.cap == 9);
  CHECK(c.max_queue == 3);
  CHECK(c.retry_after == 2);
  CHECK(c.daemon);
  CHECK(c.cookie_path == "/x");
  CHECK_FALSE(c.api_json);
  CHECK(c.secure_cookie);
  CHECK_FALSE(c.preserve_host);

  // A bare boolean never takes the next argument.
  LoadResult next = run({"-daemon", "false"}, withSecret());
  CHECK(contains(next.errors, "unexpected argument \"false\""));

  // A value may start with a dash or contain '='.
  LoadResult dash = run({"-skip-url", "/a=b", "-cookie-domain=x=y"}, withSecret());
  CHECK(contains(dash.errors, "-cookie-domain (flag)") == false);
  CHECK(okConfig(dash).skip_url == "/a=b");
  CHECK(okConfig(dash).cookie_domain == "x=y");

  // The last occurrence of a flag wins, as with Go's flag package.
  CHECK(okConfig(run({"-cap", "3", "-cap", "4"}, withSecret())).cap == 4);

  CHECK(contains(run({"-cap"}, withSecret()).errors, "-cap (flag): missing value"));
  CHECK(contains(run({"-c"}, withSecret()).errors, "-c (flag): missing value"));
  CHECK(contains(run({"-c="}, withSecret()).errors, "-c (flag): empty file name"));
  CHECK(contains(run({"-daemon=maybe"}, withSecret()).errors, "-daemon (flag): expected a boolean"));
  CHECK(contains(run({"-version=maybe", "-cap", "1"}, withSecret()).errors, "-version (flag): expected a boolean"));
}

TEST_CASE("TestParseConfig_Invalid: the original's invalid cases") {
  expectFlagError("upstream", "not a url", "invalid -upstream \"not a url\": must look like http://host:port");
  expectFlagError("upstream", "ftp://example.com", "must look like http://host:port");
  expectFlagError("upstream", "http://", "must look like http://host:port");
  expectFlagError("cap", "0", "-cap (flag): must be between 1 and 2147483647, got 0");
  expectFlagError("cap", "-5", "must be between 1 and 2147483647, got -5");
  expectFlagError("cap", "3000000000", "must be between 1 and 2147483647, got 3000000000");
  expectFlagError("cap", "99999999999999999999", "must be between 1 and 2147483647");
  expectFlagError("cap", "ten", "expected an integer, got \"ten\"");
  expectFlagError("asset-cap", "-1", "must be between 0 and 2147483647, got -1");
  expectFlagError("asset-user-cap-h1", "0");
  expectFlagError("asset-user-cap-h2", "0");
  expectFlagError("asset-wait", "-1s", "must not be negative");
  expectFlagError("asset-user-wait", "-1s", "must not be negative");
  expectFlagError("admit-ttl", "5s", "must be at least 30s, got 5s");
  expectFlagError("bypass", "/*", "would capture every path");
  expectFlagError("assets", "/_room/*", "is reserved by concert");
  expectFlagError("asset-public", "/queue/status", "is reserved by concert");
  LoadResult twice = run({"-bypass", "/x", "-assets", "/x"}, withSecret());
  CHECK(contains(twice.errors, "-assets (flag): \"/x\" is already listed in -bypass"));
}

TEST_CASE("TestParseConfig_ShortSecretRejected") {
  LoadResult r = run({}, {{"CONCERT_ADMIT_SECRET", "too-short"}});
  CHECK_FALSE(r.ok());
  CHECK(contains(r.errors, "CONCERT_ADMIT_SECRET must be at least 32 bytes"));
  LoadResult exact = run({}, {{"CONCERT_ADMIT_SECRET", std::string(32, 'k')}});
  CHECK(okConfig(exact).admit_secret == std::string(32, 'k'));
}

TEST_CASE("-cluster: a redis URL, the room, the lease, and the shared secret it needs") {
  LoadResult off = run({}, withSecret());
  CHECK(okConfig(off).cluster.empty());
  CHECK(okConfig(off).cluster_url.host.empty());
  CHECK(okConfig(off).cluster_room == "concert");
  CHECK(okConfig(off).cluster_lease == 4);
  CHECK(okConfig(off).cluster_lease_ttl == 10'000);
  CHECK(okConfig(off).cluster_fail == "open");

  LoadResult on = run({"-cluster", "redis://10.0.0.5:6380/2", "-cluster-room", "shop-1", "-cluster-lease", "8",
                       "-cluster-lease-ttl", "5s", "-cluster-fail", "closed"},
                      withSecret());
  const Config& c = okConfig(on);
  CHECK(c.cluster_url.host == "10.0.0.5");
  CHECK(c.cluster_url.port == 6380);
  CHECK(c.cluster_url.db == 2);
  CHECK(c.cluster_room == "shop-1");
  CHECK(c.cluster_lease == 8);
  CHECK(c.cluster_lease_ttl == 5'000);
  CHECK(c.cluster_fail == "closed");
  LoadResult defaults = run({"-cluster", "redis://cache.internal"}, withSecret());
  CHECK(okConfig(defaults).cluster_url.port == 6379);
  CHECK(okConfig(defaults).cluster_url.db == 0);
  LoadResult v6 = run({"-cluster", "redis://[::1]:7000"}, withSecret());
  CHECK(okConfig(v6).cluster_url.host == "::1");
  CHECK(okConfig(v6).cluster_url.port == 7000);

  for (const char* bad : {"10.0.0.5:6379", "http://10.0.0.5", "redis://", "redis://:6379", "redis://h:0",
                          "redis://h:99999", "redis://h:x", "redis://h/16", "redis://h/x", "redis://u@h"})
    expectFlagError("cluster", bad, "redis://host:port");
  expectFlagError("cluster-fail", "maybe", "open or closed");
  expectFlagError("cluster-room", "a b", "letters, digits");
  expectFlagError("cluster-lease", "0");
  expectFlagError("cluster-lease-ttl", "100ms");

  // Tickets and passes must mean the same on every host: no random secret.
  LoadResult generated = run({"-cluster", "redis://127.0.0.1:6379"}, {});
  CHECK_FALSE(generated.ok());
  CHECK(contains(generated.errors, "-cluster (flag): needs CONCERT_ADMIT_SECRET"));
}

TEST_CASE("-cluster: a redis+sentinel URL lists the sentinels in order and names the master") {
  LoadResult three =
      run({"-cluster", "redis+sentinel://10.0.0.1:26379,10.0.0.2:26380,sentinel-3/mymaster"}, withSecret());
  const ClusterUrl& url = okConfig(three).cluster_url;
  CHECK(url.viaSentinels());
  CHECK(url.host.empty());
  CHECK(url.master == "mymaster");
  CHECK(url.db == 0);
  REQUIRE(url.sentinels.size() == 3);
  CHECK(url.sentinels[0].host == "10.0.0.1");
  CHECK(url.sentinels[0].port == 26379);
  CHECK(url.sentinels[1].host == "10.0.0.2");
  CHECK(url.sentinels[1].port == 26380);
  CHECK(url.sentinels[2].host == "sentinel-3");
  CHECK(url.sentinels[2].port == 26379);  // the sentinels' default port

  LoadResult one = run({"-cluster", "redis+sentinel://[::1]:5000/shop.redis-1/3"}, withSecret());
  const ClusterUrl& v6 = okConfig(one).cluster_url;
  REQUIRE(v6.sentinels.size() == 1);
  CHECK(v6.sentinels[0].host == "::1");
  CHECK(v6.sentinels[0].port == 5000);
  CHECK(v6.master == "shop.redis-1");
  CHECK(v6.db == 3);

  // The same from the file and the environment.
  TempDir dir;
  const std::string file = dir.write("c.yaml", "cluster: \"redis+sentinel://a:1,b:2/m\"\n");
  LoadResult yaml = run({"-c", file}, withSecret());
  CHECK(okConfig(yaml).cluster_url.master == "m");
  CHECK(okConfig(yaml).cluster_url.sentinels.size() == 2);
  Environment env = withSecret();
  env["CONCERT_CLUSTER"] = "redis+sentinel://a:1/m";
  CHECK(okConfig(run({}, env)).cluster_url.sentinels.size() == 1);

  // A redis:// URL has no sentinels.
  LoadResult plain = run({"-cluster", "redis://10.0.0.5"}, withSecret());
  CHECK_FALSE(okConfig(plain).cluster_url.viaSentinels());

  for (const char* bad : {"redis+sentinel://", "redis+sentinel:///mymaster"})
    expectFlagError("cluster", bad, "no sentinel listed");
  for (const char* bad : {"redis+sentinel://h1:26379,h2:26379", "redis+sentinel://h1:26379/", "redis+sentinel://h1//2"})
    expectFlagError("cluster", bad, "no master name");
  for (const char* bad :
       {"redis+sentinel://h1:0/m", "redis+sentinel://h1:65536/m", "redis+sentinel://h1:x/m", "redis+sentinel://h1:/m",
        "redis+sentinel://h1,,h2/m", "redis+sentinel://h1,/m", "redis+sentinel://u@h1/m", "redis+sentinel://[::1/m"})
    expectFlagError("cluster", bad, "is not a host with a port from 1 to 65535");
  expectFlagError("cluster", "redis+sentinel://h1/m/16", "(db 0 to 15)");
  expectFlagError("cluster", "redis+sentinel://h1/m/x", "(db 0 to 15)");
  expectFlagError("cluster", "redis+sentinel://h1/m/", "(db 0 to 15)");
  expectFlagError("cluster", "redis+sentinel://h1/m?db=1", "the master name is one word");
  expectFlagError("cluster", "sentinel://h1/m", "redis+sentinel://host:port,host:port,.../master");
}

TEST_CASE("TestNormalize_ClampsRetryAfter") {
  LoadResult r;
  CHECK(expectFlagOk(r, "retry-after", "0").retry_after == 1);
  CHECK(expectFlagOk(r, "retry-after", "-7").retry_after == 1);
  CHECK(expectFlagOk(r, "retry-after", "1").retry_after == 1);
  CHECK(expectFlagOk(r, "retry-after", "30").retry_after == 30);
  expectFlagError("retry-after", "3000000000");
}

TEST_CASE("TestEffectiveAssetCap") {
  LoadResult a = run({"-cap", "1200", "-asset-user-cap-h2", "200"}, withSecret());
  CHECK(okConfig(a).asset_cap == 240'000);
  CHECK(okConfig(a).asset_cap_derived);
  LoadResult b = run({"-asset-cap", "7"}, withSecret());
  CHECK(okConfig(b).asset_cap == 7);
  CHECK_FALSE(okConfig(b).asset_cap_derived);
  LoadResult c = run({"-cap", "2147483647"}, withSecret());
  CHECK(okConfig(c).asset_cap == std::numeric_limits<int32_t>::max());
  CHECK(okConfig(c).asset_cap_derived);
}

TEST_CASE("room settings: reaper, token-ttl, pass, max-queue") {
  LoadResult r;
  CHECK(expectFlagOk(r, "reaper", "0").reaper == 300'000);
  CHECK(expectFlagOk(r, "reaper", "5s").reaper == 5'000);
  CHECK(expectFlagOk(r, "reaper", "24h").reaper == 86'400'000);
  expectFlagError("reaper", "4s", "must be 0 or between 5s and 24h0m0s, got 4s");
  expectFlagError("reaper", "25h");
  expectFlagError("reaper", "1ns");
  expectFlagError("reaper", "-1s");
  expectFlagError("reaper", "soon", "invalid duration \"soon\"");

  CHECK(expectFlagOk(r, "token-ttl", "0").token_ttl == 300'000);
  CHECK(expectFlagOk(r, "token-ttl", "30s").token_ttl == 30'000);
  CHECK(expectFlagOk(r, "token-ttl", "24h").token_ttl == 86'400'000);
  expectFlagError("token-ttl", "29s");
  expectFlagError("token-ttl", "-1s");
  expectFlagError("token-ttl", "25h");

  CHECK(expectFlagOk(r, "pass", "0").pass_duration == 0);
  CHECK(expectFlagOk(r, "pass", "1m").pass_duration == 60'000);
  CHECK(expectFlagOk(r, "pass", "24h").pass_duration == 86'400'000);
  expectFlagError("pass", "59s");
  expectFlagError("pass", "24h1s");
  expectFlagError("pass", "-1m");

  CHECK(expectFlagOk(r, "max-queue", "0").max_queue == 0);
  CHECK(expectFlagOk(r, "max-queue", "1000000").max_queue == 1'000'000);
  expectFlagError("max-queue", "-1");
}

TEST_CASE("queue-hold: default off, Go durations up to 1h, flag, environment and file") {
  LoadResult r;
  CHECK(okConfig(run({}, withSecret())).queue_hold == 0);
  CHECK(expectFlagOk(r, "queue-hold", "0").queue_hold == 0);
  CHECK(expectFlagOk(r, "queue-hold", "1ms").queue_hold == 1);
  CHECK(expectFlagOk(r, "queue-hold", "2.5s").queue_hold == 2'500);
  CHECK(expectFlagOk(r, "queue-hold", "1h").queue_hold == 3'600'000);
  expectFlagError("queue-hold", "1h0m0.001s",
                  "-queue-hold (flag): must be 0 or between 1ms and 1h0m0s, got 1h0m0.001s");
  expectFlagError("queue-hold", "2h", "must be 0 or between 1ms and 1h0m0s, got 2h");
  expectFlagError("queue-hold", "-1s", "must be 0 or between 1ms and 1h0m0s");
  expectFlagError("queue-hold", "500us", "must be 0 or between 1ms and 1h0m0s");
  expectFlagError("queue-hold", "5", "-queue-hold (flag)");
  expectFlagError("queue-hold", "soon", "invalid duration \"soon\"");

  LoadResult env = run({}, withSecret({{"CONCERT_QUEUE_HOLD", "5s"}}));
  CHECK(okConfig(env).queue_hold == 5'000);
  LoadResult bad_env = run({}, withSecret({{"CONCERT_QUEUE_HOLD", "90m"}}));
  CHECK_FALSE(bad_env.ok());
  CHECK(contains(bad_env.errors, "CONCERT_QUEUE_HOLD"));
  CHECK(contains(bad_env.errors, "must be 0 or between 1ms and 1h0m0s, got 90m"));
  // Precedence: flag over environment.
  CHECK(okConfig(run({"-queue-hold", "2s"}, withSecret({{"CONCERT_QUEUE_HOLD", "5s"}}))).queue_hold == 2'000);

  TempDir dir;
  std::string file = dir.write("c.yaml", "cap: 3\nqueue-hold: 750ms\n");
  CHECK(okConfig(run({"-c", file}, withSecret())).queue_hold == 750);
  std::string wrong = dir.write("w.yaml", "queue-hold: 3h\n");
  LoadResult from_file = run({"-c", wrong}, withSecret());
  CHECK_FALSE(from_file.ok());
  CHECK(contains(from_file.errors, wrong + ":1: queue-hold"));
  CHECK(contains(from_file.errors, "must be 0 or between 1ms and 1h0m0s, got 3h"));
}

TEST_CASE("contract settings: workers, grace, max-body, timeouts") {
  LoadResult r;
  CHECK(expectFlagOk(r, "workers", "1").workers == 1);
  CHECK(expectFlagOk(r, "workers", "64").workers == 64);
  int cpus = expectFlagOk(r, "workers", "auto").workers;
  CHECK(cpus >= 1);
  CHECK(cpus <= 64);
  expectFlagError("workers", "0", "between 1 and 64");
  expectFlagError("workers", "65", "between 1 and 64");
  expectFlagError("workers", "many", "expected auto or an integer");

  CHECK(expectFlagOk(r, "shutdown-grace", "0").shutdown_grace == 0);
  CHECK(expectFlagOk(r, "shutdown-grace", "1m").shutdown_grace == 60'000);
  expectFlagError("shutdown-grace", "-1s", "must not be negative");

  CHECK(expectFlagOk(r, "max-body", "1").max_body == 1);
  CHECK(expectFlagOk(r, "max-body", "512KB").max_body == 512 * 1024);
  CHECK(expectFlagOk(r, "max-body", "1GB").max_body == 1LL << 30);
  expectFlagError("max-body", "0", "must be at least 1");
  expectFlagError("max-body", "lots", "expected a size in bytes");

  CHECK(expectFlagOk(r, "upstream-timeout", "1ms").upstream_timeout == 1);
  CHECK(expectFlagOk(r, "upstream-timeout", "90s").upstream_timeout == 90'000);
  expectFlagError("upstream-timeout", "0");
  expectFlagError("upstream-timeout", "-1s");
  expectFlagError("upstream-timeout", "500us");

  CHECK(expectFlagOk(r, "asset-users-max", "1").asset_users_max == 1);
  CHECK(expectFlagOk(r, "asset-users-max", "16777216").asset_users_max == 16'777'216);
  expectFlagError("asset-users-max", "0");
  expectFlagError("asset-users-max", "16777217");

  CHECK(expectFlagOk(r, "asset-wait", "0").asset_wait == 0);
  CHECK(expectFlagOk(r, "asset-user-wait", "50ms").asset_user_wait == 50);
  CHECK(expectFlagOk(r, "admit-ttl", "30s").admit_ttl == 30'000);
}

TEST_CASE("string settings with rules: listen, cookies, skip-url, header, rate") {
  LoadResult r;
  for (const char* ok : {":8080", "127.0.0.1:0", "[::1]:8080", "localhost:80", "0.0.0.0:65535"})
    CHECK(expectFlagOk(r, "listen", ok).listen == ok);
  for (const char* bad : {"8080", "127.0.0.1", ":http", ":65536", "::1:80", "[]:80", "host: 80", ":"})
    expectFlagError("listen", bad, "must look like [host]:port");

  CHECK(expectFlagOk(r, "cookie-path", "/app").cookie_path == "/app");
  expectFlagError("cookie-path", "app", "must start with '/'");
  expectFlagError("cookie-path", "/a;Secure", "must not contain");
  expectFlagError("cookie-domain", "a.com; HttpOnly", "must not contain");

  CHECK(expectFlagOk(r, "skip-url", "https://pay.example/skip?x=1").skip_url == "https://pay.example/skip?x=1");
  CHECK(expectFlagOk(r, "skip-url", "/skip").skip_url == "/skip");
  expectFlagError("skip-url", "ftp://pay.example", "must be an http(s) URL or a path");
  expectFlagError("skip-url", "javascript:alert(1)", "must be an http(s) URL or a path");
  expectFlagError("skip-url", "/x\"+alert(1)+\"", "must not contain");

  CHECK(expectFlagOk(r, "client-proto-header", "X-Client-Proto").client_proto_header == "X-Client-Proto");
  expectFlagError("client-proto-header", "X Client", "must be an HTTP header name");

  CHECK(expectFlagOk(r, "rate", "0.5").rate == 0.5);
  CHECK(expectFlagOk(r, "surge", "0.01").surge == 0.01);
  expectFlagError("rate", "-1", "must not be negative");
  expectFlagError("surge", "cheap", "expected a number");
}

TEST_CASE("-html loads the waiting page; empty keeps the built-in page") {
  TempDir dir;
  std::string page = dir.write("room.html", "<p>{{.Position}}</p>");
  LoadResult r;
  const Config& c = expectFlagOk(r, "html", page);
  CHECK(c.html_file == page);
  CHECK(c.html_template == "<p>{{.Position}}</p>");
  expectFlagError("html", dir.path() + "/missing.html", "cannot read");
  expectFlagError("html", dir.path(), "not a regular file");
  LoadResult env = run({}, withSecret({{"CONCERT_HTML_FILE", dir.path() + "/nope.html"}}));
  CHECK(contains(env.errors, "CONCERT_HTML_FILE (env): cannot read"));
}

TEST_CASE("-html: every placeholder must be one Concert fills; -t names the others and their lines") {
  TempDir dir;
  const std::string known =
      "<html lang=\"{{.Lang}}\"><title>{{.Text.Title}}</title>\n<p>{{.Position}} {{ .ETA }} {{.SkipURL}}</p>\n"
      "<script>var T = {{.Strings}};</script>\n";
  LoadResult ok;
  CHECK(expectFlagOk(ok, "html", dir.write("ok.html", known)).html_template == known);

  std::string bad =
      dir.write("bad.html", "<p>{{.Position}}</p>\n<p>{{.Positon}}</p>\n\n<b>{{.Text.Nope}} {{.Lang}}</b>\n");
  LoadResult r = run({"-html", bad}, withSecret());
  CHECK_FALSE(r.ok());
  INFO(joined(r.errors));
  REQUIRE(r.errors.size() == 2);
  CHECK(r.errors[0] == "-html (flag): \"" + bad +
                           "\" line 2: unknown placeholder {{.Positon}} (known: {{.Position}}, {{.SkipURL}}, "
                           "{{.Lang}}, {{.ETA}}, {{.Strings}}, {{.StartsIn}}, {{.SaleStarts}}, {{.Text.NAME}})");
  CHECK(r.errors[1].starts_with("-html (flag): \"" + bad + "\" line 4: unknown placeholder {{.Text.Nope}} (known: "));

  std::string unclosed = dir.write("unclosed.html", "<p>{{.Position}}</p>\n<p>{{.Position</p>\n");
  LoadResult u = run({}, withSecret({{"CONCERT_HTML_FILE", unclosed}}));
  CHECK_FALSE(u.ok());
  CHECK(contains(u.errors, "CONCERT_HTML_FILE (env): \"" + unclosed + "\" line 2: unclosed {{"));

  // The page shipped in html/ (the starting point for -html) passes as it is.
  LoadResult shipped;
  expectFlagOk(shipped, "html", std::string(CONCERT_SOURCE_ROOT) + "/html/waiting_room.html");
}

TEST_CASE("path lists: conflicts across lists, overlaps, warnings, prefixes") {
  LoadResult ok = run({"-bypass", "/webhooks/*, /robots.txt", "-assets", "/static/*", "-asset-public", "/pub/*,/a.css"},
                      withSecret());
  const Config& c = okConfig(ok);
  CHECK(c.bypass.size() == 2);
  CHECK(c.bypass[0].prefix);
  CHECK(c.bypass[0].path == "/webhooks/");
  CHECK(c.assets.at(0).path == "/static/");
  CHECK(c.asset_public.size() == 2);

  LoadResult overlap = run({"-bypass", "/static/*", "-assets", "/static/app.js"}, withSecret());
  CHECK(contains(overlap.errors, "-assets (flag): \"/static/app.js\" overlaps \"/static/*\" in -bypass"));
  LoadResult reverse = run({"-bypass", "/static/app.js", "-assets", "/static/*"}, withSecret());
  CHECK(contains(reverse.errors, "-assets (flag): \"/static/*\" overlaps \"/static/app.js\" in -bypass"));
  LoadResult nested = run({"-assets", "/a/*,/a/b/*"}, withSecret());
  CHECK(contains(nested.errors, "overlaps \"/a/*\" in -assets"));
  LoadResult queue = run({"-assets", "/queue/*"}, withSecret());
  CHECK(contains(queue.errors, "-assets (flag): \"/queue/*\" would capture /queue/status"));
  LoadResult same_list = run({"-assets", "/x,/x"}, withSecret());
  CHECK(contains(same_list.errors, "\"/x\" is already listed in -assets"));
  LoadResult default_clash = run({"-asset-public", "/favicon.ico"}, withSecret());
  CHECK(contains(default_clash.errors, "-asset-public (flag): \"/favicon.ico\" is already listed in -bypass"));
  // An exact rule next to a prefix of the same name is no overlap: "/static/*" never matches "/static".
  CHECK(run({"-bypass", "/static", "-assets", "/static/*"}, withSecret()).ok());

  LoadResult dropped = run({"-bypass", "/a, b, ,/c"}, withSecret());
  CHECK(okConfig(dropped).bypass.size() == 2);
  CHECK(contains(dropped.warnings, "-bypass (flag): ignoring \"b\": path entries must start with '/'"));

  LoadResult cleared = run({"-bypass", ""}, withSecret());
  CHECK(okConfig(cleared).bypass.empty());
}

TEST_CASE("YAML: keys, lists, nulls and the error format FILE:LINE: key: message") {
  TempDir dir;
  std::string good = dir.write("good.yaml",
                               "# comment\n"
                               "cap: 12\n"
                               "bypass:\n"
                               "  - /favicon.ico\n"
                               "  - /webhooks/*\n"
                               "assets: \"/static/*,/js/*\"\n"
                               "cookie-domain:\n"
                               "daemon: true\n"
                               "token-ttl: 1m\n"
                               "max-body: 1MB\n"
                               "workers: 2\n");
  LoadResult r = run({"-c", good}, withSecret());
  const Config& c = okConfig(r);
  CHECK(c.cap == 12);
  CHECK(c.bypass.size() == 2);
  CHECK(c.bypass[1].path == "/webhooks/");
  CHECK(c.assets.size() == 2);
  CHECK(c.cookie_domain.empty());
  CHECK(c.daemon);
  CHECK(c.token_ttl == 60'000);
  CHECK(c.max_body == 1 << 20);
  CHECK(c.workers == 2);

  std::string bad = dir.write("bad.yaml", "cap: 12\n\nmax-queue: -1\nnope: 1\n");
  LoadResult e = run({"-c", bad}, withSecret());
  CHECK(contains(e.errors, bad + ":3: max-queue: must be between 0 and 1073741824, got -1"));
  CHECK(contains(e.errors, bad + ":4: nope: unknown setting"));

  LoadResult empty = run({"-c", dir.write("empty.yaml", "")}, withSecret());
  CHECK(okConfig(empty).cap == 500);
  LoadResult comments = run({"-c", dir.write("comments.yaml", "# nothing set\n")}, withSecret());
  CHECK(comments.ok());

  LoadResult missing = run({"-c", dir.path() + "/absent.yaml"}, withSecret());
  CHECK(contains(missing.errors, dir.path() + "/absent.yaml: cannot read configuration file"));
}

TEST_CASE("each source names itself in errors") {
  TempDir dir;
  std::string file = dir.write("c.yaml", "cap: 0\n");
  LoadResult r = run({"-c", file, "-cap", "0"}, withSecret({{"CONCERT_CAPACITY", "0"}}));
  CHECK(contains(r.errors, "-cap (flag): must be between 1 and 2147483647, got 0"));
  CHECK(contains(r.errors, "CONCERT_CAPACITY (env): must be between 1 and 2147483647, got 0"));
  CHECK(contains(r.errors, file + ":1: cap: must be between 1 and 2147483647, got 0"));
  CHECK(r.errors.size() == 3);
}

TEST_CASE("a broken lower-precedence value is an error even when overridden") {
  LoadResult env = run({"-cap", "5"}, withSecret({{"CONCERT_CAPACITY", "abc"}}));
  CHECK_FALSE(env.ok());
  CHECK(contains(env.errors, "CONCERT_CAPACITY (env): expected an integer, got \"abc\""));
  LoadResult durations = run({}, withSecret({{"CONCERT_REAPER", "fast"}}));
  CHECK(contains(durations.errors, "CONCERT_REAPER (env): invalid duration \"fast\""));
  LoadResult booleans = run({}, withSecret({{"CONCERT_API_JSON", "nope"}}));
  CHECK(contains(booleans.errors, "CONCERT_API_JSON (env): expected a boolean"));
}

TEST_CASE("all errors are reported at once") {
  TempDir dir;
  std::string file = dir.write("c.yaml", "reaper: 1s\nunknown-key: 1\n");
  LoadResult r = run({"-c", file, "-cap", "0", "-upstream", "ftp://x", "-bogus", "-bypass", "/*"},
                     {{"CONCERT_ADMIT_TTL", "1s"}, {"CONCERT_ADMIT_SECRET", "short"}});
  INFO(joined(r.errors));
  CHECK(r.errors.size() == 8);
  CHECK(contains(r.errors, "-cap (flag)"));
  CHECK(contains(r.errors, "-upstream (flag)"));
  CHECK(contains(r.errors, "-bogus (flag): unknown flag"));
  CHECK(contains(r.errors, "-bypass (flag)"));
  CHECK(contains(r.errors, "CONCERT_ADMIT_TTL (env)"));
  CHECK(contains(r.errors, "CONCERT_ADMIT_SECRET must be at least 32 bytes"));
  CHECK(contains(r.errors, file + ":1: reaper"));
  CHECK(contains(r.errors, file + ":2: unknown-key: unknown setting"));
  CHECK(r.config == nullptr);
}

TEST_CASE("unknown CONCERT_ variables are reported as warnings") {
  LoadResult r = run({}, withSecret({{"CONCERT_CAPACTY", "5"}, {"HOME", "/root"}}));
  CHECK(r.ok());
  CHECK(contains(r.warnings, "CONCERT_CAPACTY (env): not a concert setting; ignored"));
  CHECK_FALSE(contains(r.warnings, "HOME"));
}

TEST_CASE("currentEnvironment reflects the process environment") {
  setenv("CONCERT_CONFIG_TEST_MARKER", "a=b", 1);
  Environment env = currentEnvironment();
  CHECK(env.at("CONCERT_CONFIG_TEST_MARKER") == "a=b");
  unsetenv("CONCERT_CONFIG_TEST_MARKER");
}

TEST_CASE("relative file names are made absolute against the starting directory") {
  TempDir dir;
  dir.write("c.yaml", "cap: 9\n");
  dir.write("page.html", "page");
  char old[4096];
  REQUIRE(getcwd(old, sizeof old) != nullptr);
  REQUIRE(chdir(dir.path().c_str()) == 0);
  LoadResult r = run({"-c", "c.yaml", "-html", "page.html", "-pid-file", "run/c.pid", "-error-log", "e.log",
                      "-access-log-file", "/abs/a.log"},
                     withSecret());
  REQUIRE(chdir(old) == 0);
  const Config& c = okConfig(r);
  CHECK(c.cap == 9);
  CHECK(c.config_file == dir.path() + "/c.yaml");
  CHECK(c.html_file == dir.path() + "/page.html");
  CHECK(c.html_template == "page");
  CHECK(c.pid_file == dir.path() + "/run/c.pid");
  CHECK(c.error_log == dir.path() + "/e.log");
  CHECK(c.access_log_file == "/abs/a.log");
}

TEST_CASE("-mode: the four modes, and -t names the setting for anything else") {
  for (const char* mode : {"open", "pause", "reject", "passthrough"}) {
    LoadResult r;
    CHECK(expectFlagOk(r, "mode", mode).mode == mode);
  }
  LoadResult defaults = run({}, withSecret());
  CHECK(okConfig(defaults).mode == "open");
  expectFlagError("mode", "closed", "-mode (flag): must be open, pause, reject or passthrough, got \"closed\"");
  expectFlagError("mode", "Open", "must be open, pause, reject or passthrough");
  LoadResult env = run({}, withSecret({{"CONCERT_MODE", "paused"}}));
  CHECK(contains(env.errors, "CONCERT_MODE (env): must be open, pause, reject or passthrough"));
}

TEST_CASE("-admit-rate N/s or N/m and -admit-burst: the interval, the burst's default, the errors") {
  LoadResult off = run({}, withSecret());
  CHECK(okConfig(off).admit_interval_ns == 0);
  CHECK(okConfig(off).admit_burst_tokens == 0);
  LoadResult r;
  const Config& per_second = expectFlagOk(r, "admit-rate", "10/s");
  CHECK(per_second.admit_interval_ns == 100'000'000);
  CHECK(per_second.admit_burst_tokens == 10);  // one second's worth
  LoadResult m;
  const Config& per_minute = expectFlagOk(m, "admit-rate", "30/m");
  CHECK(per_minute.admit_interval_ns == 2'000'000'000);
  CHECK(per_minute.admit_burst_tokens == 1);  // half a token a second: at least 1
  LoadResult b = run({"-admit-rate", "120/m", "-admit-burst", "7"}, withSecret());
  CHECK(okConfig(b).admit_interval_ns == 500'000'000);
  CHECK(okConfig(b).admit_burst_tokens == 7);
  LoadResult big;
  CHECK(expectFlagOk(big, "admit-rate", "1000000/s").admit_interval_ns == 1000);
  for (const char* bad : {"10", "10/h", "0/s", "-1/s", "1.5/s", "/s", "10/sec", "2000000/s", " 10/s", "ten/s"})
    expectFlagError("admit-rate", bad, "must be N/s or N/m");
  expectFlagError("admit-burst", "-1", "-admit-burst (flag)");
  expectFlagError("admit-burst", "2000000", "-admit-burst (flag)");
  LoadResult env = run({}, withSecret({{"CONCERT_ADMIT_RATE", "fast"}}));
  CHECK(contains(env.errors, "CONCERT_ADMIT_RATE (env): must be N/s or N/m"));
}

TEST_CASE("-priority-classes: the names in order, or an error naming the setting") {
  LoadResult off = run({}, withSecret());
  CHECK(okConfig(off).priority_class_list.empty());
  LoadResult r;
  CHECK(expectFlagOk(r, "priority-classes", "staff,checkout").priority_class_list ==
        std::vector<std::string>{"staff", "checkout"});
  CHECK(expectFlagOk(r, "priority-classes", " staff , Check-Out ").priority_class_list ==
        std::vector<std::string>{"staff", "Check-Out"});
  CHECK(expectFlagOk(r, "priority-classes", "a,b,c,d,e,f,g").priority_class_list.size() == 7);
  CHECK(expectFlagOk(r, "priority-classes", "").priority_class_list.empty());
  expectFlagError("priority-classes", "a,b,c,d,e,f,g,h", "more than 7 classes");
  expectFlagError("priority-classes", "staff,Staff", "listed twice");
  expectFlagError("priority-classes", "staff,,checkout", "empty class name");
  expectFlagError("priority-classes", "staff,", "empty class name");
  expectFlagError("priority-classes", "st aff", "must be a token");
  expectFlagError("priority-classes", "staff;ttl=5", "must be a token");
  expectFlagError("priority-classes", "none", "\"none\" cannot be a class");
  expectFlagError("priority-classes", std::string(33, 'x'), "longer than 32");
  LoadResult env = run({}, withSecret({{"CONCERT_PRIORITY_CLASSES", "a,a"}}));
  CHECK(contains(env.errors, "CONCERT_PRIORITY_CLASSES (env): class \"a\" is listed twice"));
}

TEST_CASE("-maintenance-html loads the page with the placeholders of the room's other pages") {
  TempDir dir;
  const std::string page = dir.write("m.html", "<html lang=\"{{.Lang}}\"><h1>{{.Text.MaintenanceTitle}}</h1></html>\n");
  LoadResult r;
  const Config& c = expectFlagOk(r, "maintenance-html", page);
  CHECK(c.maintenance_template.find("{{.Text.MaintenanceTitle}}") != std::string::npos);
  LoadResult defaults = run({}, withSecret());
  CHECK(okConfig(defaults).maintenance_template.empty());
  expectFlagError("maintenance-html", dir.path() + "/missing.html", "cannot read");
  const std::string bad = dir.write("bad.html", "<p>ok</p>\n<p>{{.Position}}</p>\n");
  expectFlagError("maintenance-html", bad,
                  "line 2: unknown placeholder {{.Position}} (known: {{.Lang}}, {{.Text.NAME}})");
  // The page shipped (built from html/notice.html, installed as maintenance.html) passes as it is.
  LoadResult shipped;
  expectFlagOk(shipped, "maintenance-html", std::string(CONCERT_BUILD_ROOT) + "/html/maintenance.html");
}

TEST_CASE("-event-start (RFC 3339), -prequeue and -shuffle-prequeue: values, defaults, errors naming the setting") {
  LoadResult off = run({}, withSecret());
  CHECK(okConfig(off).event_start_ms == 0);
  CHECK(okConfig(off).prequeue == 0);
  CHECK(okConfig(off).shuffle_prequeue);
  LoadResult z;
  CHECK(expectFlagOk(z, "event-start", "2026-12-24T18:00:00Z").event_start_ms == 1'798'135'200'000);
  LoadResult offset;
  CHECK(expectFlagOk(offset, "event-start", "2026-12-24T19:00:00.250+01:00").event_start_ms == 1'798'135'200'250);
  LoadResult west;
  CHECK(expectFlagOk(west, "event-start", "2026-12-24T13:00:00-05:00").event_start_ms == 1'798'135'200'000);
  LoadResult leap;
  CHECK(expectFlagOk(leap, "event-start", "2028-02-29t00:00:00z").event_start_ms == 1'835'395'200'000);
  LoadResult both =
      run({"-event-start", "2026-12-24T18:00:00Z", "-prequeue", "15m", "-shuffle-prequeue=false"}, withSecret());
  CHECK(okConfig(both).prequeue == 15 * 60 * 1000);
  CHECK_FALSE(okConfig(both).shuffle_prequeue);
  for (const char* bad : {"tomorrow", "2026-12-24", "2026-12-24T18:00:00", "2026-12-24 18:00Z", "2026-13-01T00:00:00Z",
                          "2027-02-29T00:00:00Z", "2026-12-24T24:00:00Z", "2026-12-24T18:00:00+1:00",
                          "2026-12-24T18:00:00Z ", "1969-12-31T23:59:59Z"})
    expectFlagError("event-start", bad, "-event-start (flag): must be an RFC 3339 time");
  LoadResult env = run({}, withSecret({{"CONCERT_EVENT_START", "at noon"}}));
  CHECK(contains(env.errors, "CONCERT_EVENT_START (env): must be an RFC 3339 time"));
  expectFlagError("prequeue", "soon", "-prequeue (flag)");
  LoadResult shuffle = run({}, withSecret({{"CONCERT_SHUFFLE_PREQUEUE", "maybe"}}));
  CHECK(contains(shuffle.errors, "CONCERT_SHUFFLE_PREQUEUE (env): "));
}

TEST_CASE("YAML: state_dir is the state dir's key too; with the secret unset, the state dir makes and keeps it") {
  TempDir dir;
  const std::string state = dir.path() + "/state";
  std::string file = dir.write("state.yaml", "state_dir: " + state + "\n");
  LoadResult r = run({"-c", file}, withSecret());
  CHECK(okConfig(r).state_dir == state);
  std::string both = dir.write("both.yaml", "state_dir: /a\nstate-dir: /b\n");
  CHECK_FALSE(run({"-c", both}, withSecret()).ok());

  // No CONCERT_ADMIT_SECRET: made in the state dir (0600) and read back the same on the next load.
  LoadResult first = run({"-state-dir", state}, {});
  const Config& a = okConfig(first);
  CHECK(a.admit_secret_in_state_dir);
  CHECK_FALSE(a.admit_secret_generated);
  struct stat st {};
  REQUIRE(::stat((state + "/admit-secret").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  LoadResult second = run({"-state-dir", state}, {});
  CHECK(okConfig(second).admit_secret == a.admit_secret);
  CHECK(a.admit_secret.size() >= 32);
}
