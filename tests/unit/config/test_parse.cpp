// Edge cases of the value parsers (config/parse.h) and goDurationString.
#include <doctest/doctest.h>

#include <limits>

#include "config/config.h"
#include "config/parse.h"

using namespace concert::config;

namespace {

int64_t ns(std::string_view text) {
  Parsed<int64_t> v = parseGoDurationNs(text);
  REQUIRE_MESSAGE(v.ok(), text, ": ", v.error);
  return *v.value;
}

bool durationFails(std::string_view text) {
  return !parseGoDurationNs(text).ok();
}

}  // namespace

TEST_CASE("durations follow Go's time.ParseDuration") {
  CHECK(ns("0") == 0);
  CHECK(ns("+0") == 0);
  CHECK(ns("-0") == 0);
  CHECK(ns("0s") == 0);
  CHECK(ns("500ms") == 500'000'000);
  CHECK(ns("30s") == 30'000'000'000);
  CHECK(ns("5m") == 300'000'000'000);
  CHECK(ns("1h30m") == 5'400'000'000'000);
  CHECK(ns("1.5h") == 5'400'000'000'000);
  CHECK(ns(".5s") == 500'000'000);
  CHECK(ns("1.s") == 1'000'000'000);
  CHECK(ns("-1.5s") == -1'500'000'000);
  CHECK(ns("1ns") == 1);
  CHECK(ns("1us") == 1'000);
  CHECK(ns("1\xC2\xB5s") == 1'000);  // U+00B5 micro sign
  CHECK(ns("1\xCE\xBCs") == 1'000);  // U+03BC Greek mu
  CHECK(ns("2h45m30.5s") == 9'930'500'000'000);
  CHECK(ns("1m1m") == 120'000'000'000);  // Go sums repeated units
  CHECK(ns("2562047h47m16.854775807s") == std::numeric_limits<int64_t>::max());
  CHECK(ns("-2562047h47m16.854775808s") == std::numeric_limits<int64_t>::min());

  CHECK(durationFails(""));
  CHECK(durationFails("5"));   // missing unit
  CHECK(durationFails("5x"));  // unknown unit
  CHECK(durationFails("s"));
  CHECK(durationFails("."));
  CHECK(durationFails(".s"));
  CHECK(durationFails("-"));
  CHECK(durationFails("1h 30m"));
  CHECK(durationFails(" 5s"));
  CHECK(durationFails("5s "));
  CHECK(durationFails("5S"));
  CHECK(durationFails("1d"));
  CHECK(durationFails("abc"));
  CHECK(durationFails("9223372036854775808ns"));
  CHECK(durationFails("2562048h"));
  CHECK(durationFails("99999999999999999999s"));
  CHECK(parseGoDurationNs("5").error.find("missing unit") != std::string::npos);
  CHECK(parseGoDurationNs("5y").error.find("unknown unit") != std::string::npos);
}

TEST_CASE("durations in milliseconds truncate toward zero") {
  CHECK(*parseDurationMs("1.5s").value == 1500);
  CHECK(*parseDurationMs("999us").value == 0);
  CHECK(*parseDurationMs("10m").value == 600'000);
  CHECK_FALSE(parseDurationMs("x").ok());
}

TEST_CASE("goDurationString matches Go's Duration.String") {
  CHECK(goDurationString(0) == "0s");
  CHECK(goDurationString(1) == "1ms");
  CHECK(goDurationString(500) == "500ms");
  CHECK(goDurationString(999) == "999ms");
  CHECK(goDurationString(1000) == "1s");
  CHECK(goDurationString(1500) == "1.5s");
  CHECK(goDurationString(1050) == "1.05s");
  CHECK(goDurationString(1001) == "1.001s");
  CHECK(goDurationString(30'000) == "30s");
  CHECK(goDurationString(60'000) == "1m0s");
  CHECK(goDurationString(300'000) == "5m0s");
  CHECK(goDurationString(600'000) == "10m0s");
  CHECK(goDurationString(90'500) == "1m30.5s");
  CHECK(goDurationString(3'600'000) == "1h0m0s");
  CHECK(goDurationString(5'400'000) == "1h30m0s");
  CHECK(goDurationString(86'400'000) == "24h0m0s");
  CHECK(goDurationString(3'600'000 + 500) == "1h0m0.5s");
  CHECK(goDurationString(-1500) == "-1.5s");
  CHECK(goDurationString(-5) == "-5ms");
  CHECK(goDurationString(std::numeric_limits<int64_t>::min()).front() == '-');
}

TEST_CASE("booleans accept exactly strconv.ParseBool's spellings") {
  for (const char* t : {"1", "t", "T", "TRUE", "true", "True"}) CHECK(*parseBool(t).value);
  for (const char* f : {"0", "f", "F", "FALSE", "false", "False"}) CHECK_FALSE(*parseBool(f).value);
  for (const char* bad : {"", "yes", "no", "on", "off", "tRUE", "2", " true"}) CHECK_FALSE(parseBool(bad).ok());
}

TEST_CASE("integers are decimal and never wrap") {
  CHECK(*parseInt("0").value == 0);
  CHECK(*parseInt("+7").value == 7);
  CHECK(*parseInt("-5").value == -5);
  CHECK(*parseInt("3000000000").value == 3'000'000'000);
  CHECK(*parseInt("9223372036854775807").value == std::numeric_limits<int64_t>::max());
  CHECK(*parseInt("-9223372036854775808").value == std::numeric_limits<int64_t>::min());
  CHECK_FALSE(parseInt("9223372036854775808").ok());
  CHECK_FALSE(parseInt("-9223372036854775809").ok());
  CHECK_FALSE(parseInt("99999999999999999999999").ok());
  for (const char* bad : {"", "-", "+", "1.5", "1e3", "0x10", " 1", "1 ", "abc", "1_000"})
    CHECK_MESSAGE(!parseInt(bad).ok(), bad);
}

TEST_CASE("floats must be finite numbers") {
  CHECK(*parseFloat("0").value == 0);
  CHECK(*parseFloat("0.25").value == 0.25);
  CHECK(*parseFloat("1e3").value == 1000);
  for (const char* bad : {"", "abc", "1.5x", "inf", "nan", " 1", "1e999"}) CHECK_MESSAGE(!parseFloat(bad).ok(), bad);
}

TEST_CASE("byte sizes are 1024-based with optional B") {
  CHECK(*parseByteSize("1024").value == 1024);
  CHECK(*parseByteSize("1B").value == 1);
  CHECK(*parseByteSize("512KB").value == 512 * 1024);
  CHECK(*parseByteSize("512k").value == 512 * 1024);
  CHECK(*parseByteSize("64MB").value == 64LL << 20);
  CHECK(*parseByteSize("64M").value == 64LL << 20);
  CHECK(*parseByteSize("64mb").value == 64LL << 20);
  CHECK(*parseByteSize("2MiB").value == 2LL << 20);
  CHECK(*parseByteSize("1GB").value == 1LL << 30);
  CHECK(*parseByteSize("0").value == 0);
  for (const char* bad : {"", "MB", "-1", "1.5MB", "1TB", "1 MB", "64MBs", "x"})
    CHECK_MESSAGE(!parseByteSize(bad).ok(), bad);
  CHECK_FALSE(parseByteSize("99999999999GB").ok());
  CHECK(byteSizeString(64LL << 20) == "64MB");
  CHECK(byteSizeString(512 * 1024) == "512KB");
  CHECK(byteSizeString(1LL << 30) == "1GB");
  CHECK(byteSizeString(1000) == "1000");
  CHECK(byteSizeString(0) == "0");
}

TEST_CASE("upstream URLs fill every Upstream field") {
  Upstream u = *parseUpstream("http://127.0.0.1:3000").value;
  CHECK(u.raw == "http://127.0.0.1:3000");
  CHECK_FALSE(u.https);
  CHECK(u.host == "127.0.0.1");
  CHECK(u.port == 3000);
  CHECK(u.host_port == "127.0.0.1:3000");
  CHECK(u.path == "");
  CHECK(u.query == "");

  u = *parseUpstream("https://origin.example/base?x=1&y=2").value;
  CHECK(u.https);
  CHECK(u.host == "origin.example");
  CHECK(u.port == 443);
  CHECK(u.host_port == "origin.example");
  CHECK(u.path == "/base");
  CHECK(u.query == "x=1&y=2");

  u = *parseUpstream("http://[::1]:8081/").value;
  CHECK(u.host == "::1");
  CHECK(u.port == 8081);
  CHECK(u.host_port == "[::1]:8081");
  CHECK(u.path == "");

  u = *parseUpstream("HTTP://Example.COM").value;
  CHECK(u.port == 80);
  CHECK(u.host == "Example.COM");

  u = *parseUpstream("http://h:1/a/b/#frag").value;
  CHECK(u.path == "/a/b/");
  CHECK(u.query == "");

  for (const char* bad :
       {"", "not a url", "127.0.0.1:3000", "ftp://example.com", "http://", "http:///x", "http://:80",
        "http://host:", "http://host:0", "http://host:65536", "http://host:80x", "http://user:pw@host", "http://ho st",
        "http://[::1", "http://[]:80", "http://::1:80", "http://[::1]x", "//host:80", "http://host/a b"})
    CHECK_MESSAGE(!parseUpstream(bad).ok(), bad);
  CHECK(parseUpstream("ftp://x").error == "invalid -upstream \"ftp://x\": must look like http://host:port");
}

TEST_CASE("listen addresses split like Go's, with Go's errors") {
  Parsed<ListenAddress> a = parseListenAddress(":8080");
  REQUIRE(a.ok());
  CHECK(a.value->host == "");
  CHECK(a.value->port == "8080");
  a = parseListenAddress("[::1]:0");
  REQUIRE(a.ok());
  CHECK(a.value->host == "::1");
  CHECK(a.value->port == "0");
  CHECK(parseListenAddress("localhost:80").value->host == "localhost");

  CHECK(parseListenAddress("8080").error == "missing port in address");
  CHECK(parseListenAddress("[::1]").error == "missing port in address");
  CHECK(parseListenAddress("[::1]]:80").error == "missing port in address");
  CHECK(parseListenAddress("::1:80").error == "too many colons in address");
  CHECK(parseListenAddress(":http").error == "invalid port \"http\"");
  CHECK(parseListenAddress(":65536").error == "invalid port \"65536\"");
  CHECK(parseListenAddress(":000080").error == "invalid port \"000080\"");
  CHECK(parseListenAddress(":").error == "invalid port \"\"");
  CHECK(parseListenAddress("[]:80").error == "empty host in brackets");
  CHECK(parseListenAddress("a b:80").error == "invalid host \"a b\"");
}

TEST_CASE("path lists follow the original's rules") {
  PathListParse p = parsePathList(" /favicon.ico , /static/* ,, relative, /robots.txt,");
  REQUIRE(p.errors.empty());
  REQUIRE(p.rules.size() == 3);
  CHECK(p.rules[0].path == "/favicon.ico");
  CHECK_FALSE(p.rules[0].prefix);
  CHECK(p.rules[1].path == "/static/");
  CHECK(p.rules[1].prefix);
  CHECK(p.rules[2].path == "/robots.txt");
  REQUIRE(p.warnings.size() == 1);
  CHECK(p.warnings[0].find("\"relative\"") != std::string::npos);
  CHECK(pathListText(p.rules) == "/favicon.ico,/static/*,/robots.txt");

  CHECK(p.rules[1].matches("/static/"));
  CHECK(p.rules[1].matches("/static/a.css"));
  CHECK(p.rules[1].matches("/static/x/y"));
  CHECK_FALSE(p.rules[1].matches("/static"));
  CHECK_FALSE(p.rules[1].matches("/staticfoo"));
  CHECK(p.rules[0].matches("/favicon.ico"));
  CHECK_FALSE(p.rules[0].matches("/favicon.ico/x"));

  CHECK(parsePathList("").rules.empty());
  CHECK(parsePathList(" , ,").rules.empty());
  CHECK(parsePathList("/static*").rules.at(0).prefix == false);  // only "/*" makes a prefix rule

  CHECK(parsePathList("/*").errors.at(0).find("would capture every path") != std::string::npos);
  CHECK(parsePathList("/queue/status").errors.at(0).find("is reserved by concert") != std::string::npos);
  CHECK(parsePathList("/queue/events").errors.at(0).find("is reserved by concert") != std::string::npos);
  CHECK(parsePathList("/queue/*").errors.at(0).find("would capture /queue/status") != std::string::npos);
  CHECK(parsePathList("/queue/e*").errors.empty());  // "/queue/e*" is the exact path /queue/e*
  CHECK(parsePathList("/queue/ev/*").errors.empty());
  CHECK(parsePathList("/_room").errors.at(0).find("is reserved by concert") != std::string::npos);
  CHECK(parsePathList("/_room/*").errors.at(0).find("is reserved by concert") != std::string::npos);
  CHECK(parsePathList("/_room/stats").errors.at(0).find("is reserved by concert") != std::string::npos);
  CHECK(parsePathList("/queue/*").errors.at(0).find("/queue/status") != std::string::npos);
  CHECK(parsePathList("/queue").errors.empty());
  CHECK(parsePathList("/_roomy").errors.empty());
  CHECK(parsePathList("/queue/status/x").errors.empty());
  CHECK(parsePathList("/*,/_room,/a").errors.size() == 2);
}
