// Sessions and the line's share of freed slots (shm/sessions.h): the one
// rule that orders admitted visitors and the line.
#include <doctest/doctest.h>

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

TEST_CASE("the line sees the free slots waiting sessions leave it, and what it is owed") {
  auto s = makeSegment(4);
  Sessions& sessions = s->sessions();
  CHECK(sessions.lineFree(3, 5) == 3);  // no session waits: everything
  sessions.enter(0);
  sessions.enter(0);
  CHECK(sessions.lineFree(3, 5) == 1);  // two go to the sessions first
  CHECK(sessions.lineFree(1, 5) == 0);
  CHECK(sessions.owed(5) == 0);
  // Four sessions admitted while the line waits, at share 0.2: one slot owed.
  for (int i = 0; i < 4; ++i) sessions.sessionAdmitted(5, 0.2);
  CHECK(sessions.creditMilli() == 1000);
  CHECK(sessions.owed(5) == 1);
  CHECK(sessions.owed(0) == 0);         // nobody in line: nothing owed
  CHECK(sessions.lineFree(1, 5) == 1);  // the owed slot is the line's, sessions waiting or not
  CHECK(sessions.lineFree(0, 5) == 0);  // never more than is free
  sessions.lineAdmitted();
  CHECK(sessions.creditMilli() == 0);
  CHECK(sessions.owed(5) == 0);
}

TEST_CASE("credit: only while the line waits, bounded, share 0 never and share 1 always") {
  auto s = makeSegment(1);
  Sessions& sessions = s->sessions();
  sessions.sessionAdmitted(0, 0.2);  // the line is empty: nothing owed
  CHECK(sessions.creditMilli() == 0);
  sessions.sessionAdmitted(3, 0);
  CHECK(sessions.creditMilli() == 0);
  for (int i = 0; i < 100; ++i) sessions.sessionAdmitted(3, 0.5);
  CHECK(sessions.creditMilli() == Sessions::kMaxCredit);
  CHECK(sessions.owed(3) == 3);  // never more than wait in line
  for (int i = 0; i < 10; ++i) sessions.lineAdmitted();
  CHECK(sessions.creditMilli() == 0);
  sessions.sessionAdmitted(1, 1.0);
  CHECK(sessions.owed(1) == 1);
}

TEST_CASE("a waiting session keeps a free slot from the line's readiness") {
  auto s = makeSegment(1);
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
