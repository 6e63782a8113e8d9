// Segment-wide pieces: geometry, cookies, worker slots, reclaim, stats.
#include <doctest/doctest.h>

#include <cstring>
#include <iterator>
#include <set>
#include <string_view>

#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

std::unique_ptr<Segment> makeSegment(int32_t cap = 4) {
  Geometry g;
  g.ring_size = 1u << 12;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  return Segment::create(g, cap, 10);
}

}  // namespace

TEST_CASE("computeGeometry") {
  Geometry g = computeGeometry(100, 10, 2, 500);
  CHECK(g.ring_size == 4096);  // 2 * 110 = 220, raised to the 2^12 floor
  CHECK(g.worker_slots == 4);
  CHECK(g.pass_table_size == 512);
  g = computeGeometry(10000, 500, 4, 1024);
  CHECK(g.ring_size == 32768);  // next power of two >= 21000
  CHECK(g.worker_slots == 8);
  CHECK(g.pass_table_size == 1024);
  g = computeGeometry(0, 500, 1, 1);
  CHECK(g.ring_size == (1u << 20));
  CHECK(g.worker_slots == 2);
  CHECK(g.pass_table_size >= 1);
  g = computeGeometry(1000000, 500, 64, 64000);
  CHECK(g.ring_size == (1u << 21));
  CHECK(g.worker_slots == 128);
  CHECK(g.pass_table_size == 65536);
}

TEST_CASE("create rejects a bad geometry") {
  Geometry g;
  g.ring_size = 1000;
  CHECK_THROWS(Segment::create(g, 1, 1));
  g.ring_size = 1024;
  g.worker_slots = 0;
  CHECK_THROWS(Segment::create(g, 1, 1));
  g.worker_slots = 2;
  CHECK_THROWS(Segment::create(g, 0, 1));
  auto s = Segment::create(g, 1, 1);
  CHECK(s->bytes() > 1024 * 24);
  CHECK(s->geometry().ring_size == 1024);
}

TEST_CASE("worker slots: start, heartbeat, generation") {
  auto s = makeSegment();
  CHECK(s->slots().pid(1) == 0);
  s->slots().started(1, 4242, 3, 1000);
  CHECK(s->slots().pid(1) == 4242);
  CHECK(s->slots().generation(1) == 3);
  CHECK(s->slots().lastHeartbeat(1) == 1000);
  s->slots().heartbeat(1, 2500);
  CHECK(s->slots().lastHeartbeat(1) == 2500);
  CHECK(s->stats().snapshot().workers == 1);
  s->stats().setGeneration(7);
  CHECK(s->stats().generation() == 7);
  CHECK(s->stats().snapshot().generation == 7);
}

TEST_CASE("reclaimDeadWorker returns exactly what the slot held") {
  auto s = makeSegment(3);
  s->slots().started(0, 100, 1, 0);
  s->slots().started(1, 101, 1, 0);

  // Slot 1: two requests in flight (admitted through the line: their
  // tickets left it when claimed, so they hold page slots only), one asset
  // slot, three pass holds.
  for (int i = 0; i < 2; ++i) {
    const Issued t = s->tickets().issue(1, 0, 0);
    REQUIRE(t.outcome == IssueOutcome::Queued);
    REQUIRE(t.ready);
    REQUIRE(s->pages().tryAcquire(1));
    REQUIRE(s->tickets().claim(t.cookie));
  }
  REQUIRE(s->assets().tryAcquire(1));
  uint8_t id[16] = {1, 2, 3};
  PassHold h;
  REQUIRE(s->passes().tryAcquire(id, PassProto::H1, 5, 1, 0, &h) == PassAcquire::Acquired);
  REQUIRE(s->passes().tryAcquire(id, PassProto::H1, 5, 1, 0, &h) == PassAcquire::Acquired);
  REQUIRE(s->passes().tryAcquire(id, PassProto::H2, 5, 1, 0, &h) == PassAcquire::Acquired);
  // Slot 0 holds one of everything and must keep it.
  const Issued t3 = s->tickets().issue(0, 0, 0);
  REQUIRE(t3.outcome == IssueOutcome::Queued);
  REQUIRE(t3.ready);
  REQUIRE(s->pages().tryAcquire(0));
  REQUIRE(s->tickets().claim(t3.cookie));
  REQUIRE(s->assets().tryAcquire(0));
  PassHold h0;
  REQUIRE(s->passes().tryAcquire(id, PassProto::H1, 5, 0, 0, &h0) == PassAcquire::Acquired);
  // A waiting ticket issued by slot 1 belongs to its visitor, not the worker.
  const Issued waiting = s->tickets().issue(1, 0, 0);
  REQUIRE(waiting.outcome == IssueOutcome::Queued);
  REQUIRE_FALSE(waiting.ready);

  const ReclaimReport r = s->reclaimDeadWorker(1);
  CHECK(r.page_slots == 2);
  CHECK(r.tickets_finished == 0);  // no ticket of slot 1 was caught half-issued (Reserved)
  CHECK(r.asset_slots == 1);
  CHECK(r.pass_holds == 3);
  CHECK(r.total() == 6);
  CHECK(s->slots().pid(1) == 0);
  CHECK(s->pages().occupancy() == 1);
  CHECK(s->assets().occupancy() == 1);
  CHECK(s->tickets().liveQueueDepth() == 1);
  CHECK(s->stats().snapshot().slots_reclaimed_total == 6);
  CHECK(s->stats().snapshot().workers == 1);
  // The freed slots admit the waiting ticket; the pass has one H1 hold left.
  CHECK(s->tickets().render(waiting.cookie, 0, 300000).state == TicketState::Ready);
  REQUIRE(s->pages().tryAcquire(2));
  CHECK(s->tickets().claim(waiting.cookie));
  PassHold more;
  for (int i = 0; i < 4; ++i) CHECK(s->passes().tryAcquire(id, PassProto::H1, 5, 2, 0, &more) == PassAcquire::Acquired);
  CHECK(s->passes().tryAcquire(id, PassProto::H1, 5, 2, 0, &more) == PassAcquire::AtCap);
  CHECK(s->reclaimDeadWorker(1).total() == 0);
}

TEST_CASE("stats snapshot reports every counter") {
  auto s = makeSegment(2);
  const Counter all[] = {Counter::QueuedTotal,
                         Counter::EvictedTotal,
                         Counter::TimeoutsTotal,
                         Counter::PromotedTotal,
                         Counter::AssetServedTotal,
                         Counter::AssetDeniedTotal,
                         Counter::AssetUserThrottledTotal,
                         Counter::AssetGlobalThrottledTotal,
                         Counter::RingFullTotal,
                         Counter::PassTableFullTotal,
                         Counter::ReloadsTotal,
                         Counter::WorkerRestartsTotal,
                         Counter::SlotsReclaimedTotal,
                         Counter::MissedTurnsTotal,
                         Counter::GhostEvictedTotal};
  uint64_t n = 1;
  for (Counter c : all) s->stats().count(c, n++);
  s->stats().count(Counter::QueuedTotal);
  const StatsSnapshot st = s->stats().snapshot();
  CHECK(st.queued_total == 2);
  CHECK(st.evicted_total == 2);
  CHECK(st.timeouts_total == 3);
  CHECK(st.promoted_total == 4);
  CHECK(st.asset_served_total == 5);
  CHECK(st.asset_denied_total == 6);
  CHECK(st.asset_user_throttled_total == 7);
  CHECK(st.asset_global_throttled_total == 8);
  CHECK(st.ring_full_total == 9);
  CHECK(st.pass_table_full_total == 10);
  CHECK(st.reloads_total == 11);
  CHECK(st.worker_restarts_total == 12);
  CHECK(st.slots_reclaimed_total == 13);
  CHECK(st.missed_turns_total == 14);
  CHECK(st.ghost_evicted_total == 15);
  CHECK(st.cap == 2);
  CHECK(st.asset_cap == 10);
  CHECK(st.occupancy == 0);
  CHECK(st.queue_depth == 0);
  CHECK(st.live_queue_depth == 0);
  CHECK(st.asset_in_flight == 0);
  CHECK(st.asset_users == 0);
  CHECK(st.workers == 0);
}

TEST_CASE("the counter table: one enum value, one stats key and one snapshot field per entry") {
  CHECK(kCounterCount == std::size(kAllCounters));
  std::set<std::string_view> keys;
  for (Counter c : kAllCounters) keys.insert(counterKey(c));
  CHECK(keys.size() == kCounterCount);
  CHECK(counterKey(Counter::QueuedTotal) == "queued_total");
  CHECK(counterKey(Counter::SlotsReclaimedTotal) == "slots_reclaimed_total");
  CHECK(counterKey(Counter::MissedTurnsTotal) == "missed_turns_total");
  CHECK(counterKey(Counter::GhostEvictedTotal) == "ghost_evicted_total");

  auto s = makeSegment();
  uint64_t n = 1;
  for (Counter c : kAllCounters) s->stats().count(c, n++);
  const StatsSnapshot st = s->stats().snapshot();
  n = 1;
  for (Counter c : kAllCounters) CHECK(st.counter(c) == n++);
  CHECK(st.queued_total == 1);  // the field and counter() are the same storage
  CHECK(st.counter(kAllCounters[kCounterCount - 1]) == kCounterCount);  // the last entry of the table
}
