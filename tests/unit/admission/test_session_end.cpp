// Ending a session (Concert-Session: end): the pass is revoked for every
// worker of the segment, sessionPass and the asset tier refuse it, other
// passes are untouched.
#include <doctest/doctest.h>

#include "admission/pass.h"
#include "admission/session.h"
#include "fixture.h"

using namespace concert;
using namespace concert::admission;
using namespace concert::http;
using concert::test::Site;

namespace {

PassId idOf(uint8_t fill) {
  PassId id;
  id.fill(fill);
  return id;
}

std::string pass(uint8_t fill, int64_t lifetime = 590) {
  return mintPass(test::kTestSecret, idOf(fill), unixSeconds() + lifetime);
}

Request withPass(const std::string& path, const std::string& value) {
  return test::get(path, {{"Cookie", "cart=3; concert_admit=" + value}});
}

config::Config sessionConfig() {
  config::Config c = test::baseConfig(3);
  c.admit_ttl = 600'000;
  c.asset_user_wait = 50;
  c.asset_wait = 50;
  return c;
}

}  // namespace

TEST_CASE("sessionPass: a valid pass opens a session until the origin ends it") {
  Site room(sessionConfig());
  const int64_t now = unixSeconds();
  const Request mine = withPass("/checkout", pass(1));
  const Request theirs = withPass("/", pass(2));
  REQUIRE(sessionPass(room.ctx(), mine, now));
  CHECK(sessionPass(room.ctx(), mine, now)->id == idOf(1));
  CHECK_FALSE(sessionPass(room.ctx(), test::get("/"), now));
  CHECK_FALSE(sessionPass(room.ctx(), withPass("/", "forged"), now));

  CHECK(endSession(room.ctx(), mine, now));
  CHECK_FALSE(sessionPass(room.ctx(), mine, now));
  // Another worker of the same segment refuses it too.
  auto other = room.other(1);
  CHECK_FALSE(sessionPass(other->context, mine, now));
  // Re-minted (slid) with the same id and any expiry: still refused.
  const Request slid = withPass("/", mintPass(test::kTestSecret, idOf(1), now + 600));
  CHECK_FALSE(sessionPass(room.ctx(), slid, now));
  // Until the latest a pass of that id could have lived: now + -admit-ttl.
  CHECK(room.segment->revocations().revoked(idOf(1).data(), now + 599));
  CHECK_FALSE(room.segment->revocations().revoked(idOf(1).data(), now + 600));
  // Someone else's session goes on.
  CHECK(sessionPass(room.ctx(), theirs, now));
  CHECK(sessionPass(other->context, theirs, now));
}

TEST_CASE("endSession revokes nothing without a genuine, unexpired pass") {
  Site room(sessionConfig());
  const int64_t now = unixSeconds();
  CHECK_FALSE(endSession(room.ctx(), test::get("/checkout"), now));
  CHECK_FALSE(endSession(room.ctx(), withPass("/checkout", "forged"), now));
  CHECK_FALSE(endSession(room.ctx(), withPass("/checkout", pass(3, -5)), now));
  const std::string foreign = mintPass("some-other-secret-of-32-bytes-or-more", idOf(4), now + 500);
  CHECK_FALSE(endSession(room.ctx(), withPass("/checkout", foreign), now));
  CHECK(room.segment->revocations().active(now) == 0);
  // Ending an ended session again is harmless.
  const Request mine = withPass("/checkout", pass(5));
  CHECK(endSession(room.ctx(), mine, now));
  CHECK(endSession(room.ctx(), mine, now + 1));
  CHECK(room.segment->revocations().active(now) == 1);
}

TEST_CASE("assets: an ended session's pass gets 403 like no pass, other passes go on") {
  Site room(sessionConfig());
  const std::string ended = pass(7), alive = pass(8);
  REQUIRE(endSession(room.ctx(), withPass("/checkout", ended), unixSeconds()));
  for (shm::WorkerSlot slot : {0u, 1u}) {
    auto view = room.other(slot);
    auto g = makeAssetGuard(view->context, true);
    Admission a = g->admit(withPass("/assets/app.js", ended), 1000);
    REQUIRE(a.kind == Admission::Kind::Respond);
    CHECK(a.response.status == 403);
    CHECK(test::setCookies(a.response.headers).empty());  // never slid
    g->release();

    auto ok = makeAssetGuard(view->context, true);
    Admission b = ok->admit(withPass("/assets/app.js", alive), 1000);
    CHECK(b.kind == Admission::Kind::Proceed);
    ok->release();
  }
  CHECK(room.segment->stats().snapshot().asset_denied_total == 2);
  CHECK(room.segment->stats().snapshot().asset_served_total == 2);
}
