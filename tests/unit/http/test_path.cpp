// Dot-segment removal on the raw request path (http/path.h) and the parser
// applying it: routing and forwarding see the same path.
#include <doctest/doctest.h>

#include <string>

#include "config/config.h"
#include "http/parser.h"
#include "http/path.h"
#include "http/router.h"

using namespace concert;
using namespace concert::http;

namespace {

// The normalised path, "=" when unchanged, "ABOVE" / "NOTABS" for errors.
std::string norm(std::string_view raw) {
  std::string out = "untouched";
  switch (normalisePath(raw, out)) {
    case PathNormalisation::Unchanged: REQUIRE(out == "untouched"); return "=";
    case PathNormalisation::Normalised: return out;
    case PathNormalisation::AboveRoot: return "ABOVE";
    case PathNormalisation::NotAbsolute: return "NOTABS";
  }
  return "?";
}

struct Head {
  int error = 0;  // 0: accepted
  std::string raw_path, path, query, target;
};

Head parse(const std::string& target) {
  MessageParser p(MessageParser::Kind::Request);
  std::string text = "GET " + target + " HTTP/1.1\r\nHost: h\r\n\r\n";
  size_t consumed = 0;
  ParseStatus s = p.feedHead(text.data(), text.size(), &consumed);
  if (s == ParseStatus::Error) return {p.errorStatus(), "", "", "", ""};
  REQUIRE(s == ParseStatus::HeadDone);
  const Request& r = p.request();
  return {0, r.raw_path, r.path, r.query, r.target};
}

}  // namespace

TEST_CASE("dot-segments: literal, encoded, mixed case") {
  CHECK(dotSegment(".") == DotSegment::Dot);
  CHECK(dotSegment("%2e") == DotSegment::Dot);
  CHECK(dotSegment("%2E") == DotSegment::Dot);
  CHECK(dotSegment("..") == DotSegment::DotDot);
  CHECK(dotSegment("%2e%2e") == DotSegment::DotDot);
  CHECK(dotSegment("%2E%2e") == DotSegment::DotDot);
  CHECK(dotSegment(".%2e") == DotSegment::DotDot);
  CHECK(dotSegment("%2E.") == DotSegment::DotDot);
  for (const char* plain : {"", "...", ".a", "a.", "%2e%2e%2e", "..%2e", "%2", "%2f", "%2ea", "%e2", "%252e", "%2F"})
    CHECK_MESSAGE(dotSegment(plain) == DotSegment::None, plain);
  CHECK(dotSegment("%2e", false) == DotSegment::None);
  CHECK(dotSegment(".%2e", false) == DotSegment::None);
  CHECK(dotSegment("..", false) == DotSegment::DotDot);
}

TEST_CASE("already-normal paths are left alone and not copied") {
  for (const char* raw : {"/", "/a", "/a/b/c", "/a/b/", "/static/x.css", "/a//b", "//", "/...", "/.a/..b/c..", "/a%20b",
                          "/a%2Fb", "/a%2F..", "/%2e%2e%2e", "/a.b/c.", "/%00", "/a%252e%252e/b"})
    CHECK_MESSAGE(norm(raw) == "=", raw);
}

TEST_CASE("literal dot-segments are removed (RFC 3986 5.2.4)") {
  CHECK(norm("/a/./b") == "/a/b");
  CHECK(norm("/./a") == "/a");
  CHECK(norm("/a/b/../c") == "/a/c");
  CHECK(norm("/static/../checkout") == "/checkout");
  CHECK(norm("/static/./x.css") == "/static/x.css");
  CHECK(norm("/a/b/c/../../d") == "/a/d");
  CHECK(norm("/a/../b/../c") == "/c");
  CHECK(norm("/a/./././b") == "/a/b");
}

TEST_CASE("a trailing . or .. leaves a trailing slash") {
  CHECK(norm("/a/b/..") == "/a/");
  CHECK(norm("/a/b/../") == "/a/");
  CHECK(norm("/a/b/.") == "/a/b/");
  CHECK(norm("/a/b/./") == "/a/b/");
  CHECK(norm("/a/..") == "/");
  CHECK(norm("/.") == "/");
  CHECK(norm("/./") == "/");
  CHECK(norm("/a/%2e%2e") == "/");
}

TEST_CASE("percent-encoded dots count as dots, in any case and mix") {
  CHECK(norm("/static/%2e%2e/checkout") == "/checkout");
  CHECK(norm("/static/%2E%2E/checkout") == "/checkout");
  CHECK(norm("/static/%2E%2e/checkout") == "/checkout");
  CHECK(norm("/static/.%2e/checkout") == "/checkout");
  CHECK(norm("/static/%2E./checkout") == "/checkout");
  CHECK(norm("/static/%2e/x.css") == "/static/x.css");
  CHECK(norm("/static/%2E/x.css") == "/static/x.css");
}

TEST_CASE("climbing above the root is an error") {
  CHECK(norm("/..") == "ABOVE");
  CHECK(norm("/../") == "ABOVE");
  CHECK(norm("/../a") == "ABOVE");
  CHECK(norm("/a/../../b") == "ABOVE");
  CHECK(norm("/%2e%2e/x") == "ABOVE");
  CHECK(norm("/%2E./x") == "ABOVE");
  CHECK(norm("/./../x") == "ABOVE");
  CHECK(norm("/a/./../..") == "ABOVE");
}

TEST_CASE("empty segments are kept and count as segments") {
  CHECK(norm("//./a") == "//a");
  CHECK(norm("/a//../b") == "/a/b");
  CHECK(norm("//..") == "/");
  CHECK(norm("/a//.") == "/a//");
  CHECK(norm("//a/../b") == "//b");
}

TEST_CASE("other escapes are kept as sent: %2F is not a separator, nothing is decoded") {
  CHECK(norm("/a%2Fb/../c") == "/c");
  CHECK(norm("/x/a%2F..%2Fb/./c") == "/x/a%2F..%2Fb/c");
  CHECK(norm("/a%20b/./c%3f") == "/a%20b/c%3f");
  CHECK(norm("/%41/./%00") == "/%41/%00");
  CHECK(norm("/a/%2e%2e%2F") == "=");  // one segment "%2e%2e%2F": not a dot-segment
}

TEST_CASE("not an origin-form path") {
  CHECK(norm("") == "NOTABS");
  CHECK(norm("a/../b") == "NOTABS");
  CHECK(norm("../a") == "NOTABS");
}

TEST_CASE("hasDotSegment") {
  CHECK(hasDotSegment("/a/./b"));
  CHECK(hasDotSegment("/a/%2E%2e"));
  CHECK_FALSE(hasDotSegment("/a/%2E%2e", false));
  CHECK(hasDotSegment("/a/..", false));
  CHECK_FALSE(hasDotSegment("/a/b..c/"));
  CHECK_FALSE(hasDotSegment("/"));
}

TEST_CASE("the parser hands on one path: raw_path normalised, path its decoded form, query untouched") {
  Head h = parse("/static/../checkout?next=/a/../b&x=%2e%2e");
  REQUIRE(h.error == 0);
  CHECK(h.raw_path == "/checkout");
  CHECK(h.path == "/checkout");
  CHECK(h.query == "next=/a/../b&x=%2e%2e");
  CHECK(h.target == "/static/../checkout?next=/a/../b&x=%2e%2e");  // as sent, for the access log

  h = parse("/static/%2E%2e/a%20b");
  REQUIRE(h.error == 0);
  CHECK(h.raw_path == "/a%20b");
  CHECK(h.path == "/a b");

  h = parse("/static/./x.css");
  REQUIRE(h.error == 0);
  CHECK(h.raw_path == "/static/x.css");
  CHECK(h.path == "/static/x.css");

  h = parse("/a/b/..");
  REQUIRE(h.error == 0);
  CHECK(h.raw_path == "/a/");

  h = parse("http://example.com/x/./y/../z?q=1");
  REQUIRE(h.error == 0);
  CHECK(h.raw_path == "/x/z");
  CHECK(h.query == "q=1");

  // A query alone is never normalised.
  h = parse("/?../..");
  REQUIRE(h.error == 0);
  CHECK(h.raw_path == "/");
  CHECK(h.query == "../..");
}

TEST_CASE("the parser refuses a path above the root with 400") {
  CHECK(parse("/..").error == 400);
  CHECK(parse("/../etc/passwd").error == 400);
  CHECK(parse("/a/../../b").error == 400);
  CHECK(parse("/%2e%2e/x").error == 400);
  CHECK(parse("/%2E%2e/x?y=1").error == 400);
  CHECK(parse("http://example.com/../x").error == 400);
  // A malformed escape is refused even where a ".." would remove it.
  CHECK(parse("/a%zz/../b").error == 400);
}

TEST_CASE("%2F and %00 behave as before: forwarded as sent, decoded for routing") {
  Head h = parse("/a%2Fb");
  REQUIRE(h.error == 0);
  CHECK(h.raw_path == "/a%2Fb");
  CHECK(h.path == "/a/b");

  h = parse("/a%2fb/./c");
  REQUIRE(h.error == 0);
  CHECK(h.raw_path == "/a%2fb/c");
  CHECK(h.path == "/a/b/c");

  h = parse("/a%00b");
  REQUIRE(h.error == 0);
  CHECK(h.raw_path == "/a%00b");
  CHECK(h.path == std::string("/a\0b", 4));

  h = parse("/x%2F.hidden");
  REQUIRE(h.error == 0);
  CHECK(h.path == "/x/.hidden");
}

TEST_CASE("a dot-segment that %2F would make is refused, since routing decodes %2F and forwarding does not") {
  CHECK(parse("/static%2F..%2Fcheckout").error == 400);
  CHECK(parse("/static/..%2Fcheckout").error == 400);
  CHECK(parse("/static%2F%2e%2e%2Fcheckout").error == 400);
  CHECK(parse("/a%2F.").error == 400);
  // %25 hides a dot from an origin that decodes once: not a dot-segment.
  Head h = parse("/static/%252e%252e/checkout");
  REQUIRE(h.error == 0);
  CHECK(h.raw_path == "/static/%252e%252e/checkout");
  CHECK(h.path == "/static/%2e%2e/checkout");
}

TEST_CASE("hasHiddenDotSegment reads '\\' as a separator and ignores ;parameters") {
  CHECK(hasHiddenDotSegment("/static/..;/checkout"));
  CHECK(hasHiddenDotSegment("/static/..;jsessionid=1/checkout"));
  CHECK(hasHiddenDotSegment("/static/.;x"));
  CHECK(hasHiddenDotSegment("/static\\..\\checkout"));
  CHECK(hasHiddenDotSegment("/static/..\\checkout"));
  CHECK(hasHiddenDotSegment("/static/x/.."));
  CHECK_FALSE(hasHiddenDotSegment("/static/a;b/c"));
  CHECK_FALSE(hasHiddenDotSegment("/static/...;/c"));
  CHECK_FALSE(hasHiddenDotSegment("/static/.hidden\\x"));
  CHECK_FALSE(hasHiddenDotSegment("/a\\b;c=..d"));
  CHECK_FALSE(hasHiddenDotSegment("/"));
}

TEST_CASE("a dot-segment that a backslash or ;parameters would make is refused") {
  for (const char* target : {"/static/..;/checkout", "/static/..;a=b/checkout", "/static/%2e%2e;/checkout",
                             "/static/.%2E;x/checkout", "/static%5C..%5Ccheckout", "/static%5c..%5ccheckout",
                             "/static/..%5Ccheckout", "/static\\..\\checkout", "/static/..\\checkout",
                             "/static/..;"}) {
    CHECK_MESSAGE(parse(target).error == 400, target);
  }
  // Parameters and backslashes elsewhere are the origin's business.
  Head h = parse("/shop;jsessionid=1/item%5Cx");
  REQUIRE(h.error == 0);
  CHECK(h.raw_path == "/shop;jsessionid=1/item%5Cx");
  CHECK(h.path == "/shop;jsessionid=1/item\\x");
}

TEST_CASE("a kept-alive parser normalises every head on its own") {
  MessageParser p(MessageParser::Kind::Request);
  const std::string heads[] = {"GET /a/../b HTTP/1.1\r\nHost: h\r\n\r\n", "GET /c/d HTTP/1.1\r\nHost: h\r\n\r\n",
                               "GET /e/./f/.. HTTP/1.1\r\nHost: h\r\n\r\n"};
  const char* want[] = {"/b", "/c/d", "/e/"};
  for (int i = 0; i < 3; ++i) {
    p.reset();
    size_t consumed = 0;
    REQUIRE(p.feedHead(heads[i].data(), heads[i].size(), &consumed) == ParseStatus::HeadDone);
    CHECK(p.request().raw_path == want[i]);
    CHECK(p.request().path == want[i]);
  }
}

TEST_CASE("every prefix rule is matched against the normalised path") {
  config::Config c;
  c.bypass = {{"/webhooks/", true}};
  c.assets = {{"/assets/", true}};
  c.asset_public = {{"/static/", true}};
  c.long_lived = {{"/ws/", true}};
  auto routed = [&](const std::string& target) {
    Head h = parse(target);
    REQUIRE(h.error == 0);
    return route(c, "GET", h.path);
  };
  for (const char* rule : {"/webhooks", "/assets", "/static", "/ws"}) {
    for (const char* climb :
         {"/../checkout", "/%2e%2e/checkout", "/%2E./checkout", "/.%2e/checkout", "/x/../../checkout"}) {
      std::string target = std::string(rule) + climb;
      CHECK_MESSAGE(routed(target) == Route::Page, target);
    }
  }
  CHECK(routed("/static/./x.css") == Route::PublicAsset);
  CHECK(routed("/static/%2e/x.css") == Route::PublicAsset);
  CHECK(routed("/checkout/../static/x.css") == Route::PublicAsset);
  CHECK(routed("/assets/a/../b.js") == Route::PrivateAsset);
  CHECK(routed("/x/../webhooks/y") == Route::Bypass);
  CHECK(routed("/ws/./chat") == Route::LongLived);
  CHECK(routed("/static/..") == Route::Page);  // "/": a page
  CHECK(routed("/x/../_room/stats") == Route::Stats);
  CHECK(routed("/_room/stats/.") == Route::Page);  // "/_room/stats/", as a trailing slash always was
}
