// Sessions and the line's share of freed slots (admission/room.h): the one
// rule that orders admitted visitors and the line.
#include <doctest/doctest.h>

#include <vector>

#include "ruled.h"
#include "shm/segment.h"

using namespace concert::shm;

namespace {

std::unique_ptr<Segment> makeSegment(int32_t cap) {
  Geometry g;
  g.ring_size = 1u << 10;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  return Segment::create(g, cap, 10);
}

}  // namespace

TEST_CASE("waiting sessions are counted over every slot and reclaimed with a dead worker") {
  auto s = makeSegment(2);
  Sessions& sessions = s->sessions();
  CHECK(sessions.waiting() == 0);
  sessions.enter(0);
  sessions.enter(1);
  sessions.enter(1);
  CHECK(sessions.waiting() == 3);
  sessions.leave(0);
  CHECK(sessions.waiting() == 2);
  s->reclaimDeadWorker(1);
  CHECK(sessions.waiting() == 0);
}

// `n` visitors wait in the line (their turns unclaimed).
std::vector<Issued> queue(Segment& s, int n) {
  std::vector<Issued> line;
  for (int i = 0; i < n; ++i) {
    line.push_back(s.tickets().issue(0, 0, 1000));
    REQUIRE(line.back().outcome == IssueOutcome::Queued);
  }
  return line;
}

TEST_CASE("the line sees the free slots waiting sessions leave it, and what it is owed") {
  auto s = makeSegment(4);
  concert::admission::Room& room = followRoomRules(*s);
  Sessions& sessions = s->sessions();
  const std::vector<Issued> line = queue(*s, 5);
  CHECK(room.lineFree(3, 5) == 3);  // no session waits: everything
  sessions.enter(3);
  sessions.enter(3);
  CHECK(room.lineFree(3, 5) == 1);  // two go to the sessions first
  CHECK(room.lineFree(1, 5) == 0);
  CHECK(room.owed() == 0);
  // Four sessions admitted while the line waits, at share 0.2: one slot owed.
  for (int i = 0; i < 4; ++i) REQUIRE(room.takeRankedSlot(1, kSessionRank, 0.2));
  CHECK(sessions.creditMilli() == 1000);
  CHECK(room.owed() == 1);
  CHECK(room.lineFree(1, 5) == 1);  // the owed slot is the line's, sessions waiting or not
  CHECK(room.lineFree(0, 5) == 0);  // never more than is free
  CHECK_FALSE(room.takeRankedSlot(1, kSessionRank, 0.2));  // the cap is full
  s->pages().release(1);
  CHECK_FALSE(room.takeRankedSlot(1, kSessionRank, 0.2));  // the freed slot is owed to the line
  REQUIRE(room.takeTurn(0, line[0].cookie, nullptr));       // the line takes it and spends the credit
  CHECK(sessions.creditMilli() == 0);
  CHECK(room.owed() == 0);
}

TEST_CASE("credit: only while the line waits, bounded, share 0 never and share 1 always") {
  auto s = makeSegment(100);
  concert::admission::Room& room = followRoomRules(*s);
  Sessions& sessions = s->sessions();
  REQUIRE(room.takeRankedSlot(1, kSessionRank, 0.2));  // the line is empty: nothing owed
  CHECK(sessions.creditMilli() == 0);
  const std::vector<Issued> line = queue(*s, 3);
  REQUIRE(room.takeRankedSlot(1, kSessionRank, 0));
  CHECK(sessions.creditMilli() == 0);
  for (int i = 0; i < 20; ++i) REQUIRE(room.takeRankedSlot(1, kSessionRank, 0.5));
  CHECK(sessions.creditMilli() == Sessions::kMaxCredit);
  CHECK(room.owed() == 3);  // never more than wait in line
  s->modes().set(RoomMode::Pause);
  CHECK(room.owed() == 0);  // a line that stands still is owed nothing
  s->modes().set(RoomMode::Open);
  for (const Issued& t : line) REQUIRE(room.takeTurn(0, t.cookie, nullptr));
  CHECK(sessions.creditMilli() == Sessions::kMaxCredit - 3 * Sessions::kUnit);
  sessions.addCredit(-Sessions::kMaxCredit);
  CHECK(sessions.creditMilli() == 0);
  const std::vector<Issued> one = queue(*s, 1);
  REQUIRE(room.takeRankedSlot(1, kSessionRank, 1.0));
  CHECK(room.owed() == 1);
}

TEST_CASE("a waiting session keeps a free slot from the line's readiness") {
  auto s = makeSegment(1);
  followRoomRules(*s);
  TicketRing& tickets = s->tickets();
  REQUIRE(s->pages().tryAcquire(0));
  Issued first = tickets.issue(0, 0, 1000);
  REQUIRE(first.outcome == IssueOutcome::Queued);
  CHECK_FALSE(first.ready);
  s->sessions().enter(1);
  s->pages().release(0);  // a slot frees while a session waits: it is the session's
  CHECK(tickets.render(first.cookie, 2000, 300'000).state == TicketState::Waiting);
  REQUIRE(s->pages().tryAcquire(1));
  CHECK_FALSE(tickets.claim(first.cookie));  // the line cannot take it either
  s->pages().release(1);
  s->sessions().leave(1);  // the session went elsewhere: the line's turn
  CHECK(tickets.render(first.cookie, 3000, 300'000).state == TicketState::Ready);
  REQUIRE(s->pages().tryAcquire(0));
  CHECK(tickets.claim(first.cookie));
}
