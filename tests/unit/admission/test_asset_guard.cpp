// The asset guard: pass checks, per-pass pools by protocol, the global pool,
// waits and their timeouts, counters.
#include <doctest/doctest.h>

#include "admission/pass.h"
#include "fixture.h"
#include "admission/answers.h"

using namespace concert;
using namespace concert::admission;
using namespace concert::http;
using concert::test::Site;

namespace {

std::string pass(uint8_t fill, int64_t lifetime = 590) {
  admission::PassId id;
  id.fill(fill);
  return admission::mintPass(test::kTestSecret, id, unixSeconds() + lifetime);
}

Request asset(const std::string& value, int http_major = 1, Headers extra = {}) {
  Headers h = std::move(extra);
  if (!value.empty()) h.push_back({"Cookie", "concert_admit=" + value});
  Request r = test::get("/assets/app.js", std::move(h));
  r.http_major = http_major;
  r.http_minor = http_major >= 2 ? 0 : 1;
  return r;
}

config::Config assetConfig(int32_t h1, int32_t h2, int32_t asset_cap) {
  config::Config c = test::baseConfig(3);
  c.asset_user_cap_h1 = h1;
  c.asset_user_cap_h2 = h2;
  c.asset_cap = asset_cap;
  c.asset_user_wait = 50;
  c.asset_wait = 50;
  return c;
}

}  // namespace

TEST_CASE("assets: private requires a valid pass") {
  Site room(assetConfig(8, 16, 48));
  for (std::string bad : {std::string(), std::string("forged"), pass(1, -5)}) {
    auto g = makeAssetGuard(room.ctx(), true);
    Admission a = g->admit(asset(bad), 1000);
    REQUIRE(a.kind == Admission::Kind::Respond);
    CHECK(a.response.status == 403);
    CHECK(a.response.body.empty());
    CHECK(test::setCookies(a.response.headers).empty());
    CHECK(g->outcome() == Outcome::Rejected);
  }
  CHECK(room.segment->stats().snapshot().asset_denied_total == 3);

  auto ok = makeAssetGuard(room.ctx(), true);
  Admission a = ok->admit(asset(pass(1)), 1000);
  REQUIRE(a.kind == Admission::Kind::Proceed);
  CHECK(ok->outcome() == Outcome::Admitted);
  CHECK(test::setCookies(a.response_headers).empty());
  shm::StatsSnapshot s = room.segment->stats().snapshot();
  CHECK(s.asset_served_total == 1);
  CHECK(s.asset_in_flight == 1);
  CHECK(s.asset_users == 1);
  CHECK(s.asset_cap == 48);
  ok->release();
  ok->release();
  CHECK(room.segment->assets().occupancy() == 0);
}

TEST_CASE("assets: a pass past half-life slides, same id") {
  Site room(assetConfig(8, 16, 48));
  auto g = makeAssetGuard(room.ctx(), true);
  Admission a = g->admit(asset(pass(9, 100)), 1000);
  REQUIRE(a.kind == Admission::Kind::Proceed);
  auto slid =
      admission::verifyPass(test::kTestSecret, test::setCookieValue(a.response_headers, "concert_admit"), unixSeconds());
  REQUIRE(slid);
  CHECK(slid->id[0] == 9);
  CHECK(test::setCookieValue(a.response_headers, "room_ticket").empty());
}

TEST_CASE("assets: per-pass HTTP/1 limit, wait and 429") {
  Site room(assetConfig(1, 2, 48));
  const std::string p = pass(2);
  auto first = makeAssetGuard(room.ctx(), true);
  REQUIRE(first->admit(asset(p), 1000).kind == Admission::Kind::Proceed);

  auto second = makeAssetGuard(room.ctx(), true);
  Admission w = second->admit(asset(p), 1000);
  REQUIRE(w.kind == Admission::Kind::Wait);
  CHECK(w.deadline == 1050);

  SUBCASE("timeout: 429 Retry-After 1") {
    LocalResponse r = second->timedOut(asset(p), 1050);
    CHECK(r.status == 429);
    CHECK(test::headerValue(r.headers, "Retry-After") == "1");
    CHECK(r.body.empty());
    CHECK(second->outcome() == Outcome::Rejected);
    second->release();
    CHECK(room.segment->stats().snapshot().asset_user_throttled_total == 1);
    CHECK(room.parked(shm::Resource::PassSlot) == 0);
  }
  SUBCASE("the slot frees: served") {
    first->release();
    Admission b = second->admit(asset(p), 1020);
    REQUIRE(b.kind == Admission::Kind::Proceed);
    CHECK(room.parked(shm::Resource::PassSlot) == 0);
    second->release();
  }
  SUBCASE("another pass and the HTTP/2 pool of the same pass are separate") {
    auto other = makeAssetGuard(room.ctx(), true);
    CHECK(other->admit(asset(pass(3)), 1000).kind == Admission::Kind::Proceed);
    auto h2 = makeAssetGuard(room.ctx(), true);
    CHECK(h2->admit(asset(p, 2), 1000).kind == Admission::Kind::Proceed);
    second->release();
  }
}

TEST_CASE("assets: asset-user-wait 0 answers 429 at once") {
  config::Config c = assetConfig(1, 2, 48);
  c.asset_user_wait = 0;
  Site room(std::move(c));
  const std::string p = pass(4);
  auto first = makeAssetGuard(room.ctx(), true);
  REQUIRE(first->admit(asset(p), 1000).kind == Admission::Kind::Proceed);
  auto second = makeAssetGuard(room.ctx(), true);
  Admission a = second->admit(asset(p), 1000);
  REQUIRE(a.kind == Admission::Kind::Respond);
  CHECK(a.response.status == 429);
  CHECK(room.segment->stats().snapshot().asset_user_throttled_total == 1);
}

TEST_CASE("assets: protocol from the client-proto header") {
  config::Config c = assetConfig(1, 2, 48);
  c.client_proto_header = "X-Client-Proto";
  c.asset_user_wait = 0;
  Site room(std::move(c));
  const std::string p = pass(5);
  auto h2a = makeAssetGuard(room.ctx(), true);
  auto h2b = makeAssetGuard(room.ctx(), true);
  auto h2c = makeAssetGuard(room.ctx(), true);
  CHECK(h2a->admit(asset(p, 1, {{"X-Client-Proto", "HTTP/2.0"}}), 1000).kind == Admission::Kind::Proceed);
  CHECK(h2b->admit(asset(p, 1, {{"X-Client-Proto", "HTTP/3"}}), 1000).kind == Admission::Kind::Proceed);
  CHECK(h2c->admit(asset(p, 2), 1000).response.status == 429);  // own protocol: h2, pool full
  auto h1 = makeAssetGuard(room.ctx(), true);
  CHECK(h1->admit(asset(p, 2, {{"X-Client-Proto", "HTTP/1.1"}}), 1000).kind == Admission::Kind::Proceed);
  auto unknown = makeAssetGuard(room.ctx(), true);
  CHECK(unknown->admit(asset(p, 1, {{"X-Client-Proto", "spdy"}}), 1000).response.status == 429);  // falls back: h1
}

TEST_CASE("assets: header ignored when not configured") {
  config::Config c = assetConfig(1, 2, 48);
  c.asset_user_wait = 0;
  Site room(std::move(c));
  const std::string p = pass(6);
  auto a = makeAssetGuard(room.ctx(), true);
  CHECK(a->admit(asset(p, 1, {{"X-Client-Proto", "HTTP/2"}}), 1000).kind == Admission::Kind::Proceed);
  auto b = makeAssetGuard(room.ctx(), true);
  CHECK(b->admit(asset(p, 1, {{"X-Client-Proto", "HTTP/2"}}), 1000).response.status == 429);
}

TEST_CASE("assets: global limit and public assets") {
  Site room(assetConfig(8, 16, 1));
  auto a = makeAssetGuard(room.ctx(), true);
  REQUIRE(a->admit(asset(pass(7)), 1000).kind == Admission::Kind::Proceed);

  SUBCASE("private: wait then 503, pass hold returned") {
    auto b = makeAssetGuard(room.ctx(), true);
    Admission w = b->admit(asset(pass(8)), 1000);
    REQUIRE(w.kind == Admission::Kind::Wait);
    LocalResponse r = b->timedOut(asset(pass(8)), w.deadline);
    CHECK(r.status == 503);
    CHECK(test::headerValue(r.headers, "Retry-After") == "1");
    CHECK(r.body.empty());
    b->release();
    CHECK(room.segment->stats().snapshot().asset_global_throttled_total == 1);
    CHECK(room.parked(shm::Resource::AssetSlot) == 0);
  }
  SUBCASE("public: counts against the global limit") {
    auto pub = makeAssetGuard(room.ctx(), false);
    Admission w = pub->admit(test::get("/public/x.css"), 1000);
    REQUIRE(w.kind == Admission::Kind::Wait);
    CHECK(pub->timedOut(test::get("/public/x.css"), w.deadline).status == 503);
    pub->release();
  }
  SUBCASE("public: served once the slot frees") {
    auto pub = makeAssetGuard(room.ctx(), false);
    REQUIRE(pub->admit(test::get("/public/x.css"), 1000).kind == Admission::Kind::Wait);
    a->release();
    Admission b = pub->admit(test::get("/public/x.css"), 1010);
    REQUIRE(b.kind == Admission::Kind::Proceed);
    CHECK(pub->outcome() == Outcome::Admitted);
    pub->release();
    CHECK(room.segment->assets().occupancy() == 0);
  }
}

TEST_CASE("assets: public needs no pass") {
  Site room(assetConfig(8, 16, 48));
  auto pub = makeAssetGuard(room.ctx(), false);
  Admission a = pub->admit(test::get("/public/logo.png"), 1000);
  CHECK(a.kind == Admission::Kind::Proceed);
  CHECK(room.segment->stats().snapshot().asset_served_total == 1);
  CHECK(room.segment->stats().snapshot().asset_users == 0);
}
