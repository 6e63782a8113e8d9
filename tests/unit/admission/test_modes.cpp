// The room's modes and the admission rate as the page guard applies them,
// and the POST /_room/mode body and handler, over a real in-process segment.
#include <doctest/doctest.h>

#include "admission/mode_body.h"
#include "admission/pass.h"
#include "fixture.h"

using namespace concert;
using namespace concert::admission;
using concert::test::Site;

namespace {

http::Headers json() {
  return {{"Accept", "application/json"}};
}

http::Headers withPass(const std::string& pass) {
  return {{"Accept", "application/json"}, {"Cookie", "concert_admit=" + pass}};
}

std::string freshPass() {
  PassId id;
  id.fill(9);
  return mintPass(test::kTestSecret, id, unixSeconds() + 590);
}

http::Request adminPost(std::string body_path = "/_room/mode") {
  http::Request r = test::get(std::move(body_path), {{"Authorization", "Bearer admin-token"}});
  r.method = "POST";
  return r;
}

}  // namespace

TEST_CASE("pause: a new arrival queues though slots are free; a session goes in") {
  Site room(test::baseConfig(2));
  room.segment->modes().set(shm::RoomMode::Pause);
  auto arrival = makePageGuard(room.ctx());
  Admission a = arrival->admit(test::get("/", json()), 1000);
  REQUIRE(a.kind == Admission::Kind::Respond);
  CHECK(a.response.status == 429);
  CHECK(arrival->outcome() == Outcome::Queued);
  CHECK(room.segment->pages().occupancy() == 0);
  CHECK(room.segment->tickets().liveQueueDepth() == 1);
  auto session = makePageGuard(room.ctx());
  CHECK(session->admit(test::get("/", withPass(freshPass())), 1000).kind == Admission::Kind::Proceed);
  CHECK(room.segment->pages().occupancy() == 1);
  session->release();
}

TEST_CASE("reject: the maintenance page for a visitor without a session, no ticket; a session goes in") {
  Site room(test::baseConfig(2));
  room.segment->modes().set(shm::RoomMode::Reject);
  auto visitor = makePageGuard(room.ctx());
  Admission a = visitor->admit(test::get("/", {{"Accept", "text/html"}}), 1000);
  REQUIRE(a.kind == Admission::Kind::Respond);
  CHECK(a.response.status == 503);
  CHECK(test::headerValue(a.response.headers, "Retry-After") == "5");
  CHECK(a.response.body.find("Down for maintenance") != std::string::npos);
  CHECK(test::setCookies(a.response.headers).empty());
  CHECK(room.segment->tickets().liveQueueDepth() == 0);
  auto api = makePageGuard(room.ctx());
  Admission j = api->admit(test::get("/", json()), 1000);
  CHECK(j.response.status == 503);
  CHECK(j.response.body == "{\"error\":\"down for maintenance\",\"queued\":false,\"retry_after_seconds\":5}");
  auto session = makePageGuard(room.ctx());
  CHECK(session->admit(test::get("/", withPass(freshPass())), 1000).kind == Admission::Kind::Proceed);
  // Two maintenance pages, counted by reason; the session is an admission.
  shm::StatsSnapshot s = room.segment->stats().snapshot();
  CHECK(s.counter(shm::Counter::RejectedMaintenanceTotal) == 2);
  CHECK(s.counter(shm::Counter::AdmissionsSessionTotal) == 1);
}

TEST_CASE("passthrough: past the cap without a slot, counted; slots taken only while free; none leaks") {
  Site room(test::baseConfig(1));
  room.segment->modes().set(shm::RoomMode::Passthrough);
  auto first = makePageGuard(room.ctx());
  auto second = makePageGuard(room.ctx());
  auto session = makePageGuard(room.ctx());
  CHECK(first->admit(test::get("/", json()), 1000).kind == Admission::Kind::Proceed);
  CHECK(second->admit(test::get("/", json()), 1000).kind == Admission::Kind::Proceed);
  CHECK(session->admit(test::get("/", withPass(freshPass())), 1000).kind == Admission::Kind::Proceed);
  CHECK(room.segment->pages().occupancy() == 1);
  CHECK(room.segment->stats().snapshot().would_queue_total == 1);  // the second; a session is never queued
  room.segment->modes().set(shm::RoomMode::Open);
  auto late = makePageGuard(room.ctx());
  CHECK(late->admit(test::get("/", json()), 1000).kind == Admission::Kind::Respond);  // the cap binds again
  second->release();
  session->release();
  CHECK(room.segment->pages().occupancy() == 1);
  first->release();
  CHECK(room.segment->pages().occupancy() == 0);
}

TEST_CASE("passthrough: a visitor who waited goes in and its ticket leaves the line") {
  Site room(test::baseConfig(1));
  auto holder = makePageGuard(room.ctx());
  REQUIRE(holder->admit(test::get("/"), 1000).kind == Admission::Kind::Proceed);
  auto waiter = makePageGuard(room.ctx());
  Admission w = waiter->admit(test::get("/", json()), 1000);
  REQUIRE(w.response.status == 429);
  const std::string ticket = test::setCookieValue(w.response.headers, "room_ticket");
  REQUIRE(room.segment->tickets().liveQueueDepth() == 1);
  room.segment->modes().set(shm::RoomMode::Passthrough);
  auto back = makePageGuard(room.ctx());
  http::Headers h = json();
  h.push_back({"Cookie", "room_ticket=" + ticket});
  CHECK(back->admit(test::get("/", h), 2000).kind == Admission::Kind::Proceed);
  CHECK(room.segment->tickets().liveQueueDepth() == 0);
}

TEST_CASE("-admit-rate: going straight in takes a token; with none the visitor takes a ticket") {
  Site room(test::baseConfig(10));
  room.segment->admitRate().configure(int64_t{3600} * 1'000'000'000, 1, monotonicNs());  // one token
  auto first = makePageGuard(room.ctx());
  CHECK(first->admit(test::get("/", json()), 1000).kind == Admission::Kind::Proceed);
  first->release();
  auto second = makePageGuard(room.ctx());
  Admission a = second->admit(test::get("/", json()), 1000);
  REQUIRE(a.kind == Admission::Kind::Respond);
  CHECK(a.response.status == 429);                // ten free slots, no token
  CHECK(room.segment->pages().occupancy() == 0);  // the slot it tried went back
  auto session = makePageGuard(room.ctx());
  CHECK(session->admit(test::get("/", withPass(freshPass())), 1000).kind == Admission::Kind::Proceed);
}

TEST_CASE("parseModeBody: the four modes, and an error naming the problem") {
  CHECK(parseModeBody(R"({"mode":"pause"})").mode == shm::RoomMode::Pause);
  CHECK(parseModeBody(R"({"mode":"pause"})").error.empty());
  CHECK(parseModeBody(R"( {"other": 1, "mode": "passthrough"} )").mode == shm::RoomMode::Passthrough);
  CHECK(parseModeBody(R"({"mode":"open"})").mode == shm::RoomMode::Open);
  CHECK(parseModeBody(R"({"mode":"reject"})").mode == shm::RoomMode::Reject);
  CHECK(parseModeBody("").error.starts_with("invalid JSON body"));
  CHECK(parseModeBody("{").error.starts_with("invalid JSON body"));
  CHECK(parseModeBody("{}").error.starts_with("missing \"mode\""));
  CHECK(parseModeBody("[]").error.starts_with("missing \"mode\""));
  CHECK(parseModeBody(R"({"mode":null})").error.starts_with("\"mode\" must be a string"));
  CHECK(parseModeBody(R"({"mode":"Pause"})").error ==
        "unknown mode \"Pause\": must be open, pause, reject or passthrough");
  CHECK(parseModeBody(R"({"mode":")" + std::string(100, 'x') + "\"}").error ==
        "unknown mode: must be open, pause, reject or passthrough");
}

TEST_CASE("POST /_room/mode: the admin gate, 400 for a bad body, 200 with the mode; GET tells it") {
  config::Config c = test::baseConfig(2);
  c.admin_token = "admin-token";
  Site room(c);
  http::Request anonymous = test::get("/_room/mode");
  anonymous.method = "POST";
  CHECK(handleMode(room.ctx(), anonymous, R"({"mode":"pause"})").status == 401);
  http::LocalResponse bad = handleMode(room.ctx(), adminPost(), R"({"mode":"closed"})");
  CHECK(bad.status == 400);
  CHECK(bad.body == "{\"error\":\"unknown mode \\\"closed\\\": must be open, pause, reject or passthrough\"}");
  CHECK(room.segment->modes().mode() == shm::RoomMode::Open);
  http::LocalResponse ok = handleMode(room.ctx(), adminPost(), R"({"mode":"pause"})");
  CHECK(ok.status == 200);
  CHECK(ok.body == "{\"mode\":\"pause\"}");
  CHECK(room.segment->modes().mode() == shm::RoomMode::Pause);
  http::LocalResponse told =
      handleMode(room.ctx(), test::get("/_room/mode", {{"Authorization", "Bearer admin-token"}}), "");
  CHECK(told.body == "{\"mode\":\"pause\"}");
  config::Config no_token = test::baseConfig(2);
  Site closed(no_token);
  CHECK(handleMode(closed.ctx(), adminPost(), R"({"mode":"pause"})").status == 404);
}
