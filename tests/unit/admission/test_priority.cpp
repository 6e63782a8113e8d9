// The concert_priority cookie: minting and checking, the binding to one
// concert_admit pass, the class index following -priority-classes, the
// Concert-Priority header rules, the grant the worker adds to a response, and
// the strike for a forged cookie.
#include <doctest/doctest.h>

#include "admission/abuse.h"
#include "admission/pass.h"
#include "admission/priority.h"
#include "admission/session.h"
#include "fixture.h"

using namespace concert;
using namespace concert::admission;
using concert::test::Site;

namespace {

PassId idOf(uint8_t fill) {
  PassId id;
  id.fill(fill);
  return id;
}

config::Config priorityConfig(std::vector<std::string> classes = {"staff", "checkout"}) {
  config::Config c = test::baseConfig(3);
  c.admit_ttl = 600'000;
  c.abuse_threshold = 100;
  for (const std::string& name : classes) c.priority_classes += (c.priority_classes.empty() ? "" : ",") + name;
  c.priority_class_list = std::move(classes);
  return c;
}

http::Request withCookies(const std::string& admit, const std::string& priority) {
  std::string cookie = "cart=3";
  if (!admit.empty()) cookie += "; concert_admit=" + admit;
  if (!priority.empty()) cookie += "; concert_priority=" + priority;
  return test::get("/", {{"Cookie", cookie}});
}

// Flips one bit of the decoded value and re-encodes it.
std::string tampered(const std::string& value, size_t byte) {
  std::string raw = *base64UrlDecode(value);
  raw[byte] = static_cast<char>(raw[byte] ^ 0x01);
  return base64UrlEncode(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
}

}  // namespace

TEST_CASE("priority cookie: a fixed vector pins the format") {
  // Computed independently: base64url(id ‖ expiry BE ‖ "staff" ‖
  // HMAC-SHA256(secret, "concert_priority/v1\0" ‖ id ‖ expiry BE ‖ "staff")[:16]).
  CHECK(mintPriority(test::kTestSecret, idOf(0x11), 2000000000, "staff") ==
        "EREREREREREREREREREREQAAAAB3NZQAc3RhZmYCOUkyrm6rUcLuoFLLogVc");
}

TEST_CASE("priority cookie: round trip keeps pass id, expiry and class") {
  const int64_t now = 1'700'000'000;
  const std::string value = mintPriority(test::kTestSecret, idOf(7), now + 60, "checkout");
  REQUIRE_FALSE(value.empty());
  const CheckedPriority checked = checkPriority(test::kTestSecret, value, now);
  CHECK(checked.check == PassCheck::Valid);
  CHECK(checked.cookie.pass_id == idOf(7));
  CHECK(checked.cookie.expiry == now + 60);
  CHECK(checked.cookie.class_name == "checkout");
  // Expired: genuine, too late (not a forgery).
  CHECK(checkPriority(test::kTestSecret, value, now + 60).check == PassCheck::Expired);
  CHECK(checkPriority(test::kTestSecret, value, now + 6000).check == PassCheck::Expired);
  // Another key: a forgery.
  CHECK(checkPriority("another-secret-0123456789abcdef0123", value, now).check == PassCheck::Forged);
  // No class, nothing to mint.
  CHECK(mintPriority(test::kTestSecret, idOf(7), now + 60, "").empty());
}

TEST_CASE("priority cookie: tampering, truncation and garbage are forgeries") {
  const int64_t now = 1'700'000'000;
  const std::string value = mintPriority(test::kTestSecret, idOf(7), now + 60, "staff");
  const size_t raw_size = base64UrlDecode(value)->size();
  for (size_t byte : {size_t{0}, size_t{15}, size_t{16}, size_t{23}, size_t{24}, raw_size - 17, raw_size - 16,
                      raw_size - 1}) {
    INFO("byte ", byte);
    CHECK(checkPriority(test::kTestSecret, tampered(value, byte), now).check == PassCheck::Forged);
  }
  for (size_t cut = 1; cut < value.size(); cut += 3) {
    INFO("cut ", cut);
    CHECK(checkPriority(test::kTestSecret, value.substr(0, value.size() - cut), now).check == PassCheck::Forged);
  }
  for (const char* garbage : {"", "x", "staff", "====", "not base64!", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})
    CHECK(checkPriority(test::kTestSecret, garbage, now).check == PassCheck::Forged);
  CHECK(checkPriority(test::kTestSecret, value + "A", now).check == PassCheck::Forged);
  CHECK(checkPriority(test::kTestSecret, std::string(4000, 'A'), now).check == PassCheck::Forged);
}

TEST_CASE("priority cookie and concert_admit pass never verify as each other") {
  const int64_t now = 1'700'000'000;
  const std::string admit = mintPass(test::kTestSecret, idOf(3), now + 600);
  CHECK(checkPass(test::kTestSecret, admit, now).check == PassCheck::Valid);
  CHECK(checkPriority(test::kTestSecret, admit, now).check == PassCheck::Forged);
  const std::string priority = mintPriority(test::kTestSecret, idOf(3), now + 600, "staff");
  CHECK(checkPass(test::kTestSecret, priority, now).check == PassCheck::Forged);
  // A concert_admit-style MAC (no label) over a priority payload is not a priority MAC.
  std::string raw = *base64UrlDecode(priority);
  raw.resize(raw.size() - kPassMacBytes);
  uint8_t mac[kPassMacBytes];
  REQUIRE(signBytes(test::kTestSecret, reinterpret_cast<const uint8_t*>(raw.data()), raw.size(), mac));
  raw.append(reinterpret_cast<const char*>(mac), sizeof mac);
  const std::string unlabelled = base64UrlEncode(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
  CHECK(checkPriority(test::kTestSecret, unlabelled, now).check == PassCheck::Forged);
}

TEST_CASE("priorityClass: the index in -priority-classes of a cookie bound to the request's pass") {
  Site room(priorityConfig({"staff", "checkout"}));
  const int64_t now = unixSeconds();
  const AdmitPass mine{idOf(1), now + 600};
  const std::string admit = mintPass(test::kTestSecret, mine.id, mine.expiry);
  const std::string staff = mintPriority(test::kTestSecret, mine.id, now + 60, "staff");
  const std::string checkout = mintPriority(test::kTestSecret, mine.id, now + 60, "checkout");

  CHECK(priorityClass(room.ctx(), withCookies(admit, staff), mine, now) == 0);
  CHECK(priorityClass(room.ctx(), withCookies(admit, checkout), mine, now) == 1);
  CHECK_FALSE(priorityClass(room.ctx(), withCookies(admit, ""), mine, now));
  // Bound to another pass: nothing, whatever pass the request holds.
  const AdmitPass theirs{idOf(2), now + 600};
  const std::string theirs_admit = mintPass(test::kTestSecret, theirs.id, theirs.expiry);
  CHECK_FALSE(priorityClass(room.ctx(), withCookies(theirs_admit, staff), theirs, now));
  // Expired, tampered, garbage: nothing.
  CHECK_FALSE(priorityClass(room.ctx(), withCookies(admit, staff), mine, now + 60));
  CHECK_FALSE(priorityClass(room.ctx(), withCookies(admit, tampered(staff, 20)), mine, now));
  CHECK_FALSE(priorityClass(room.ctx(), withCookies(admit, "garbage"), mine, now));
  // The pass itself presented as a priority cookie: nothing.
  CHECK_FALSE(priorityClass(room.ctx(), withCookies(admit, admit), mine, now));
}

TEST_CASE("priorityClass follows the configured order; a class no longer configured is ignored") {
  const int64_t now = unixSeconds();
  const AdmitPass mine{idOf(1), now + 600};
  const std::string admit = mintPass(test::kTestSecret, mine.id, mine.expiry);
  const std::string staff = mintPriority(test::kTestSecret, mine.id, now + 60, "staff");
  const std::string checkout = mintPriority(test::kTestSecret, mine.id, now + 60, "checkout");

  Site reordered(priorityConfig({"checkout", "vip", "STAFF"}));
  CHECK(priorityClass(reordered.ctx(), withCookies(admit, checkout), mine, now) == 0);
  CHECK(priorityClass(reordered.ctx(), withCookies(admit, staff), mine, now) == 2);  // names compare without case

  Site dropped(priorityConfig({"checkout"}));
  CHECK_FALSE(priorityClass(dropped.ctx(), withCookies(admit, staff), mine, now));
  CHECK(priorityClass(dropped.ctx(), withCookies(admit, checkout), mine, now) == 0);

  Site off(priorityConfig({}));
  CHECK_FALSE(priorityClass(off.ctx(), withCookies(admit, checkout), mine, now));
}

TEST_CASE("Concert-Priority header: class, ttl and the case rules") {
  auto parsed = [](std::string_view v) { return parsePriorityHeader(v); };
  REQUIRE(parsed("staff"));
  CHECK(parsed("staff")->class_name == "staff");
  CHECK_FALSE(parsed("staff")->ttl_seconds);
  REQUIRE(parsed("staff; ttl=60"));
  CHECK(parsed("staff; ttl=60")->ttl_seconds == 60);
  // Spaces around the pieces are fine; the parameter name has no case; the
  // class is kept as sent (matched against the configuration without case).
  REQUIRE(parsed(" Staff ;TTL=60"));
  CHECK(parsed(" Staff ;TTL=60")->class_name == "Staff");
  CHECK(parsed(" Staff ;TTL=60")->ttl_seconds == 60);
  CHECK(parsed("staff;\tttl = 5 ")->ttl_seconds == 5);
  // Other parameters are ignored.
  CHECK(parsed("staff; reason=login; ttl=9")->ttl_seconds == 9);
  CHECK(parsed("staff; flag")->class_name == "staff");
  // Clearing.
  CHECK(parsed("")->class_name.empty());
  CHECK(parsed("  ")->class_name.empty());
  CHECK(parsed("none")->class_name.empty());
  CHECK(parsed("NONE; ttl=5")->class_name.empty());
  // Malformed.
  for (const char* bad : {"staff checkout", "staff,checkout", "\"staff\"", "staff; ttl=", "staff; ttl=0",
                          "staff; ttl=-5", "staff; ttl=1.5", "staff; ttl=ten", "staff; ttl=1234567890",
                          "staff; ttl=5; ttl=6", "staff; ttl", "st@ff", "sta\x01" "ff"}) {
    INFO(bad);
    CHECK_FALSE(parsed(bad));
  }
}

TEST_CASE("grantPriority: a configured class sets a cookie bound to the pass; anything else sets nothing") {
  Site room(priorityConfig({"staff", "checkout"}));
  const int64_t now = unixSeconds();
  const AdmitPass mine{idOf(1), now + 600};
  const std::string admit = mintPass(test::kTestSecret, mine.id, mine.expiry);
  const http::Request request = withCookies(admit, "");

  std::optional<std::string> granted = grantPriority(room.ctx(), request, {}, "Staff; ttl=3600", now);
  REQUIRE(granted);
  CHECK(granted->rfind("concert_priority=", 0) == 0);
  CHECK(granted->find("; Path=/; Max-Age=3600; HttpOnly; SameSite=Lax") != std::string::npos);
  CHECK(granted->find("Secure") == std::string::npos);
  http::Headers set{{"Set-Cookie", *granted}};
  const std::string value = test::setCookieValue(set, "concert_priority");
  const CheckedPriority checked = checkPriority(test::kTestSecret, value, now);
  CHECK(checked.check == PassCheck::Valid);
  CHECK(checked.cookie.pass_id == mine.id);
  CHECK(checked.cookie.expiry == now + 3600);
  CHECK(checked.cookie.class_name == "staff");  // the configured spelling
  CHECK(priorityClass(room.ctx(), withCookies(admit, value), mine, now) == 0);

  // Default ttl: -admit-ttl; at most 24 h.
  granted = grantPriority(room.ctx(), request, {}, "checkout", now);
  REQUIRE(granted);
  CHECK(granted->find("Max-Age=600;") != std::string::npos);
  granted = grantPriority(room.ctx(), request, {}, "checkout; ttl=999999999", now);
  REQUIRE(granted);
  CHECK(granted->find("Max-Age=86400;") != std::string::npos);

  // Secure for a client on https.
  http::Request https = request;
  https.client_https = true;
  granted = grantPriority(room.ctx(), https, {}, "staff", now);
  REQUIRE(granted);
  CHECK(granted->find("; Secure") != std::string::npos);

  // Unknown class, malformed header, no pass: nothing.
  CHECK_FALSE(grantPriority(room.ctx(), request, {}, "vip", now));
  CHECK_FALSE(grantPriority(room.ctx(), request, {}, "staff; ttl=x", now));
  CHECK_FALSE(grantPriority(room.ctx(), test::get("/"), {}, "staff", now));
  CHECK_FALSE(grantPriority(room.ctx(), withCookies("forged", ""), {}, "staff", now));
  // An ended session's pass binds nothing.
  REQUIRE(endSession(room.ctx(), request, now));
  CHECK_FALSE(grantPriority(room.ctx(), request, {}, "staff", now));

  // none / empty: the cookie is expired.
  granted = grantPriority(room.ctx(), test::get("/"), {}, "none", now);
  REQUIRE(granted);
  CHECK(*granted == "concert_priority=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax");
}

TEST_CASE("grantPriority binds to the pass the same response sets") {
  Site room(priorityConfig({"staff"}));
  const int64_t now = unixSeconds();
  const AdmitPass fresh{idOf(9), now + 600};
  const http::Headers guard_headers{
      {"Cache-Control", "no-store"},
      {"Set-Cookie", admitSetCookie(*room.config, mintPass(test::kTestSecret, fresh.id, fresh.expiry), false)}};
  // No pass in the request: the one being set.
  std::optional<std::string> granted = grantPriority(room.ctx(), test::get("/"), guard_headers, "staff", now);
  REQUIRE(granted);
  http::Headers set{{"Set-Cookie", *granted}};
  CHECK(checkPriority(test::kTestSecret, test::setCookieValue(set, "concert_priority"), now).cookie.pass_id ==
        fresh.id);
  // A request whose pass was ended gets a new one from the guard: the grant follows the new one.
  const std::string old = mintPass(test::kTestSecret, idOf(4), now + 600);
  REQUIRE(endSession(room.ctx(), withCookies(old, ""), now));
  granted = grantPriority(room.ctx(), withCookies(old, ""), guard_headers, "staff", now);
  REQUIRE(granted);
  set = {{"Set-Cookie", *granted}};
  CHECK(checkPriority(test::kTestSecret, test::setCookieValue(set, "concert_priority"), now).cookie.pass_id ==
        fresh.id);
}

TEST_CASE("a forged concert_priority cookie is a forgery for the strikes; a foreign-bound or expired one is not") {
  Site room(priorityConfig({"staff"}));
  // A client that can be struck (an IP address, not exempt).
  auto withCookies = [](const std::string& admit, const std::string& priority) {
    http::Request r = ::withCookies(admit, priority);
    r.client_keyed = true;
    r.client_key.fill(0x42);
    return r;
  };
  const int64_t now = unixSeconds();
  // What the screen asks of a request's Visitor.
  auto carriesForgedPass = [](const AdmissionContext& ctx, const http::Request& r, int64_t unix_now) {
    return strikable(*ctx.config, r) && Visitor(ctx, r).carriesForged(unix_now);
  };
  const std::string admit = mintPass(test::kTestSecret, idOf(1), now + 600);
  const std::string genuine = mintPriority(test::kTestSecret, idOf(1), now + 60, "staff");
  CHECK_FALSE(carriesForgedPass(room.ctx(), withCookies(admit, genuine), now));
  CHECK_FALSE(carriesForgedPass(room.ctx(), withCookies(admit, mintPriority(test::kTestSecret, idOf(2), now + 60, "staff")), now));
  CHECK_FALSE(carriesForgedPass(room.ctx(), withCookies(admit, mintPriority(test::kTestSecret, idOf(1), now - 1, "staff")), now));
  CHECK_FALSE(carriesForgedPass(room.ctx(), withCookies(admit, mintPriority(test::kTestSecret, idOf(1), now + 60, "gone")), now));
  CHECK(carriesForgedPass(room.ctx(), withCookies(admit, tampered(genuine, 30)), now));
  CHECK(carriesForgedPass(room.ctx(), withCookies(admit, "forged"), now));
  CHECK(carriesForgedPass(room.ctx(), withCookies("", "forged"), now));
  CHECK(carriesForgedPass(room.ctx(), withCookies(admit, admit), now));
}

TEST_CASE("concert_priority never reaches the origin") {
  CHECK(stripConcertCookies("a=1; concert_priority=xyz; b=2") == "a=1; b=2");
  CHECK_FALSE(stripConcertCookies("concert_priority=xyz"));
}
