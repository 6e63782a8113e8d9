// Single-use marks (once.h) and the ranks of the ahead-of-the-line wait
// (sessions.h): who may take a freed slot first.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "ruled.h"
#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

constexpr int64_t kNow = 1'800'000'000;  // 2027

std::unique_ptr<Segment> makeSegment(int32_t cap = 1) {
  Geometry g;
  g.ring_size = 1u << 10;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  return Segment::create(g, cap, 100);
}

}  // namespace

TEST_CASE("a key is claimed once until its mark expires") {
  auto seg = makeSegment();
  OnceMarks& once = seg->once();
  const uint64_t key = onceKey(1, 42);
  CHECK_FALSE(once.marked(key, kNow));
  CHECK(once.claim(key, kNow + 600, kNow));
  CHECK(once.marked(key, kNow));
  CHECK_FALSE(once.claim(key, kNow + 600, kNow));
  CHECK_FALSE(once.claim(key, kNow + 600, kNow + 599));
  // Another key is unaffected; labels and numbers keep keys apart.
  CHECK(once.claim(onceKey(1, 43), kNow + 600, kNow));
  CHECK(once.claim(onceKey(2, 42), kNow + 600, kNow));
  CHECK(onceKey(1, 42, 7) != onceKey(1, 42, 8));
  // Past its expiry (minute granularity, rounded up) the mark is gone and the entry reusable.
  CHECK_FALSE(once.marked(key, kNow + 600 + 61));
  CHECK(once.claim(key, kNow + 2000, kNow + 600 + 61));
}

TEST_CASE("forget gives a claim back") {
  auto seg = makeSegment();
  const uint64_t key = onceKey(3, 9);
  REQUIRE(seg->once().claim(key, kNow + 60, kNow));
  seg->once().forget(key, kNow);
  CHECK_FALSE(seg->once().marked(key, kNow));
  CHECK(seg->once().claim(key, kNow + 60, kNow));
}

TEST_CASE("a full window ends the soonest mark early, and never refuses a new key") {
  auto seg = makeSegment();
  OnceMarks& once = seg->once();
  // Keys with one home entry (key mod kOnceEntries), so they share one probe window.
  std::vector<uint64_t> keys;
  for (uint64_t j = 0; keys.size() < kOnceWindow + 1; ++j)
    if (const uint64_t k = onceKey(7, j); k % kOnceEntries == 5) keys.push_back(k);
  for (size_t i = 0; i < kOnceWindow; ++i) REQUIRE(once.claim(keys[i], kNow + 3600 + 60 * int64_t(i), kNow));
  CHECK(once.claim(keys.back(), kNow + 7200, kNow));
  CHECK_FALSE(once.marked(keys[0], kNow));  // the soonest to expire made room
  for (size_t i = 1; i <= kOnceWindow; ++i) CHECK(once.marked(keys[i], kNow));
}

TEST_CASE("racing claimers of one key: exactly one wins") {
  auto seg = makeSegment();
  for (uint64_t round = 0; round < 200; ++round) {
    const uint64_t key = onceKey(9, round);
    std::atomic<int> wins{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        while (!go.load()) {
        }
        if (seg->once().claim(key, kNow + 60, kNow)) wins.fetch_add(1);
      });
    go.store(true);
    for (std::thread& t : threads) t.join();
    CHECK(wins.load() == 1);
  }
}

TEST_CASE("ranks: a freed slot goes to the best rank waiting") {
  auto seg = makeSegment();
  Sessions& s = seg->sessions();
  s.enter(0, kSessionRank);
  s.enter(1, 3);
  s.enter(2, kRoomPassRank);
  CHECK(s.waiting() == 3);
  CHECK(s.waitingAhead(kRoomPassRank) == 0);
  CHECK(s.waitingAhead(3) == 1);
  CHECK(s.waitingAhead(kSessionRank) == 2);
  // The line sees everyone ranked as waiting ahead of it.
  concert::admission::Room& room = followRoomRules(*seg);
  CHECK(room.lineFree(2, 5) == 0);
  CHECK(room.lineFree(4, 5) == 1);
  s.leave(2, kRoomPassRank);
  CHECK(s.waitingAhead(3) == 0);
  CHECK(s.waitingAhead(kSessionRank) == 1);
  // A dead worker's waits are reclaimed, whatever their rank.
  seg->reclaimDeadWorker(1);
  CHECK(s.waiting() == 1);
  CHECK(s.waitingAhead(kSessionRank) == 0);
}
