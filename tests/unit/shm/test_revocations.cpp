// The revocation table: revoke and look up, expiry and reuse, a full table,
// concurrent writers and readers.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "shm/segment.h"

using namespace concert::shm;

namespace {

std::unique_ptr<Segment> makeSegment(uint32_t table = 4096) {
  Geometry g;
  g.ring_size = 1u << 12;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  g.revocation_table_size = table;
  return Segment::create(g, 10, 100);
}

struct Id {
  uint8_t bytes[16];
  explicit Id(uint32_t n, uint8_t tag = 0x5a) {
    std::memset(bytes, 0, sizeof(bytes));
    std::memcpy(bytes, &n, sizeof(n));
    bytes[15] = tag;
  }
};

constexpr int64_t kNow = 1'700'000'000;  // Unix seconds

}  // namespace

TEST_CASE("a revoked id is revoked until its until, and no other id is") {
  auto s = makeSegment();
  Revocations& r = s->revocations();
  const Id a(1), b(2);
  CHECK_FALSE(r.revoked(a.bytes, kNow));
  CHECK(r.revoke(a.bytes, kNow + 600, kNow, 0) == RevokeOutcome::Added);
  CHECK(r.revoked(a.bytes, kNow));
  CHECK(r.revoked(a.bytes, kNow + 599));
  CHECK_FALSE(r.revoked(a.bytes, kNow + 600));  // like a pass: valid while now < expiry
  CHECK_FALSE(r.revoked(b.bytes, kNow));
  CHECK(r.active(kNow) == 1);
  CHECK(r.active(kNow + 600) == 0);
  CHECK(r.writing() == 0);
}

TEST_CASE("a second revocation of an id keeps the later until") {
  auto s = makeSegment();
  Revocations& r = s->revocations();
  const Id a(7);
  REQUIRE(r.revoke(a.bytes, kNow + 600, kNow, 1) == RevokeOutcome::Added);
  CHECK(r.revoke(a.bytes, kNow + 300, kNow, 2) == RevokeOutcome::Extended);  // earlier: changes nothing
  CHECK(r.revoked(a.bytes, kNow + 599));
  CHECK(r.revoke(a.bytes, kNow + 900, kNow + 100, 2) == RevokeOutcome::Extended);
  CHECK(r.revoked(a.bytes, kNow + 899));
  CHECK_FALSE(r.revoked(a.bytes, kNow + 900));
  CHECK(r.active(kNow) == 1);  // one entry, raised in place
  CHECK(r.revoke(a.bytes, kNow, kNow, 0) == RevokeOutcome::Ignored);
  CHECK(r.revoke(a.bytes, kNow - 5, kNow, 0) == RevokeOutcome::Ignored);
}

TEST_CASE("an expired revocation frees its entry for the next one") {
  auto s = makeSegment(4);
  Revocations& r = s->revocations();
  for (uint32_t i = 0; i < 4; ++i) REQUIRE(r.revoke(Id(i).bytes, kNow + 10 + i, kNow, 0) == RevokeOutcome::Added);
  CHECK(r.active(kNow) == 4);
  // At kNow + 11 the first two have run out: two new ids take their entries.
  CHECK(r.revoke(Id(100).bytes, kNow + 600, kNow + 11, 0) == RevokeOutcome::Added);
  CHECK(r.revoke(Id(101).bytes, kNow + 600, kNow + 11, 0) == RevokeOutcome::Added);
  CHECK(r.active(kNow + 11) == 4);
  for (uint32_t i = 2; i < 4; ++i) CHECK(r.revoked(Id(i).bytes, kNow + 11));
  CHECK(r.revoked(Id(100).bytes, kNow + 11));
  CHECK(r.revoked(Id(101).bytes, kNow + 11));
  // An expired id revoked again gets an entry again.
  CHECK(r.revoke(Id(0).bytes, kNow + 700, kNow + 13, 0) == RevokeOutcome::Added);
  CHECK(r.revoked(Id(0).bytes, kNow + 13));
}

TEST_CASE("a full table overwrites the revocation expiring soonest, shortening only that one") {
  constexpr uint32_t kTable = 8;
  auto s = makeSegment(kTable);
  Revocations& r = s->revocations();
  // Untils kNow+100 .. kNow+107; the soonest is id 0.
  for (uint32_t i = 0; i < kTable; ++i) REQUIRE(r.revoke(Id(i).bytes, kNow + 100 + i, kNow, 0) == RevokeOutcome::Added);
  CHECK(r.active(kNow) == kTable);

  CHECK(r.revoke(Id(50).bytes, kNow + 600, kNow, 1) == RevokeOutcome::Replaced);
  CHECK(r.revoked(Id(50).bytes, kNow));
  CHECK_FALSE(r.revoked(Id(0).bytes, kNow));  // shortened: accepted again
  for (uint32_t i = 1; i < kTable; ++i) CHECK(r.revoked(Id(i).bytes, kNow + 99));
  CHECK(r.active(kNow) == kTable);

  // Next is id 1, and so on: never an id that was not revoked, never one
  // revoked longer than asked.
  CHECK(r.revoke(Id(51).bytes, kNow + 600, kNow, 1) == RevokeOutcome::Replaced);
  CHECK_FALSE(r.revoked(Id(1).bytes, kNow));
  CHECK(r.revoked(Id(2).bytes, kNow));
  for (uint32_t i = 2; i < kTable; ++i) {
    CHECK(r.revoked(Id(i).bytes, kNow + 100 + i - 1));
    CHECK_FALSE(r.revoked(Id(i).bytes, kNow + 100 + i));
  }
  CHECK_FALSE(r.revoked(Id(1000).bytes, kNow));
  // An id already in the full table is raised in place, never replaced.
  CHECK(r.revoke(Id(7).bytes, kNow + 650, kNow, 2) == RevokeOutcome::Extended);
  CHECK(r.revoked(Id(7).bytes, kNow + 649));
  CHECK(r.revoked(Id(50).bytes, kNow + 599));
  CHECK(r.writing() == 0);
}

TEST_CASE("a segment's revocation table is sized from the pass table, at least 4096") {
  CHECK(computeGeometry(100, 10, 2, 500).revocation_table_size == 4096);
  CHECK(computeGeometry(100, 10, 2, 65536).revocation_table_size == 65536);
  CHECK(computeGeometry(100, 10, 2, 100000).revocation_table_size == 131072);
  Geometry g;
  g.revocation_table_size = 1000;  // not a power of two
  CHECK_THROWS(Segment::create(g, 1, 1));
}

TEST_CASE("threads revoking at once: every revocation is seen, none invented") {
  constexpr int kThreads = 4;
  constexpr uint32_t kPerThread = 1000;  // 4000 ids in 16384 entries, plus shared ids raised by everyone
  auto s = makeSegment(16384);
  Revocations& r = s->revocations();
  std::atomic<int> ready{0};
  std::atomic<uint64_t> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      for (uint32_t i = 0; i < kPerThread; ++i) {
        const Id own(i, static_cast<uint8_t>(t));
        const RevokeOutcome o = r.revoke(own.bytes, kNow + 600, kNow, static_cast<WorkerSlot>(t));
        if (o != RevokeOutcome::Added) wrong.fetch_add(1);
        if (!r.revoked(own.bytes, kNow)) wrong.fetch_add(1);  // our own write is visible to us
        // Ids every thread revokes, with different untils: raised in place.
        const Id shared(i % 16, 0xee);
        const RevokeOutcome so = r.revoke(shared.bytes, kNow + 600 + t + i, kNow, static_cast<WorkerSlot>(t));
        if (so != RevokeOutcome::Added && so != RevokeOutcome::Extended) wrong.fetch_add(1);
        // A reader racing the writers never sees an id nobody revoked.
        if (r.revoked(Id(i, 0x77).bytes, kNow)) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  CHECK(wrong.load() == 0);
  CHECK(r.writing() == 0);
  for (int t = 0; t < kThreads; ++t)
    for (uint32_t i = 0; i < kPerThread; ++i) REQUIRE(r.revoked(Id(i, static_cast<uint8_t>(t)).bytes, kNow + 599));
  for (uint32_t i = 0; i < 16; ++i) {
    // The latest until asked for this id wins: the largest t + round over
    // the rounds that wrote it.
    const uint32_t last_round = i + 16 * ((kPerThread - 1 - i) / 16);
    const int64_t latest = kNow + 600 + (kThreads - 1) + last_round;
    CHECK(r.revoked(Id(i, 0xee).bytes, latest - 1));
    CHECK_FALSE(r.revoked(Id(i, 0xee).bytes, latest));
  }
  // Concurrent first revocations of a shared id may leave two entries; at
  // most one extra per shared id and thread.
  CHECK(r.active(kNow) >= kThreads * kPerThread + 16);
  CHECK(r.active(kNow) <= kThreads * kPerThread + 16 * kThreads);
}
