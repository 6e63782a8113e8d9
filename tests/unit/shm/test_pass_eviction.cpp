// The pass table when it is full: a new pass takes the entry of the least
// recently used idle pass of its window, never a busy one; TableFull only
// when every entry has a request in flight; threads churning more passes
// than entries; reclaim of a worker that evicted.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "shm/segment.h"

using namespace concert::shm;

namespace {

std::unique_ptr<Segment> makeSegment(uint32_t table, uint32_t slots = 4) {
  Geometry g;
  g.ring_size = 1u << 12;
  g.worker_slots = slots;
  g.pass_table_size = table;
  return Segment::create(g, 10, 100);
}

struct Id {
  uint8_t bytes[16];
  explicit Id(int n) {
    std::memset(bytes, 0, sizeof(bytes));
    std::memcpy(bytes, &n, sizeof(n));
    bytes[15] = 0xe7;
  }
};

uint64_t evicted(const Segment& s) {
  return s.stats().snapshot().pass_evicted_total;
}

uint64_t tableFull(const Segment& s) {
  return s.stats().snapshot().pass_table_full_total;
}

// One request of pass `n` at time `now`, given back at once: the pass's
// entry, its last use stamped `now`, idle.
uint32_t touch(Segment& s, int n, concert::Millis now, WorkerSlot slot = 0) {
  const Id id(n);
  PassHold h;
  REQUIRE(s.passes().tryAcquire(id.bytes, PassProto::H1, 1, slot, now, &h) == PassAcquire::Acquired);
  s.passes().release(h, slot, now);
  return h.index;
}

}  // namespace

TEST_CASE("a full table gives a new pass the entry of the least recently used idle pass") {
  auto s = makeSegment(4);
  uint32_t index[4];
  for (int i = 0; i < 4; ++i) index[i] = touch(*s, i, 10 * (i + 1));  // used at 10, 20, 30, 40
  CHECK(s->passes().users() == 4);
  CHECK(evicted(*s) == 0);
  touch(*s, 0, 50);  // pass 0 used again: pass 1 (20) is now the least recently used

  const Id late(100);
  PassHold h;
  REQUIRE(s->passes().tryAcquire(late.bytes, PassProto::H2, 3, 1, 60, &h) == PassAcquire::Acquired);
  CHECK(h.index == index[1]);
  CHECK(evicted(*s) == 1);
  CHECK(tableFull(*s) == 0);
  CHECK(s->passes().users() == 4);
  s->passes().release(h, 1, 60);

  // The others kept their entries: using them again evicts nothing.
  CHECK(touch(*s, 0, 70) == index[0]);
  CHECK(touch(*s, 2, 70) == index[2]);
  CHECK(touch(*s, 3, 70) == index[3]);
  CHECK(evicted(*s) == 1);

  // The evicted pass comes back: a fresh entry, taken from the least
  // recently used idle pass again (the late one, last used at 60).
  CHECK(touch(*s, 1, 80) == h.index);
  CHECK(evicted(*s) == 2);
  CHECK(tableFull(*s) == 0);
}

TEST_CASE("an entry with a request in flight is never evicted, however old") {
  auto s = makeSegment(4);
  const Id old(0);
  PassHold busy;
  REQUIRE(s->passes().tryAcquire(old.bytes, PassProto::H2, 1, 2, 0, &busy) == PassAcquire::Acquired);
  uint32_t index[4];
  index[0] = busy.index;
  for (int i = 1; i < 4; ++i) index[i] = touch(*s, i, 100 * i);

  // Three new passes in turn: each takes the oldest idle entry, never the busy one.
  for (int n = 0; n < 3; ++n) {
    const Id fresh(10 + n);
    PassHold h;
    REQUIRE(s->passes().tryAcquire(fresh.bytes, PassProto::H1, 1, 0, 1000 + n, &h) == PassAcquire::Acquired);
    CHECK(h.index == index[1 + n]);
    CHECK(h.index != busy.index);
    s->passes().release(h, 0, 1000 + n);
  }
  CHECK(evicted(*s) == 3);

  // The busy pass still has its entry and its hold: at its cap of 1.
  PassHold again;
  CHECK(s->passes().tryAcquire(old.bytes, PassProto::H2, 1, 3, 2000, &again) == PassAcquire::AtCap);
  CHECK(s->passes().tryAcquire(old.bytes, PassProto::H2, 2, 3, 2000, &again) == PassAcquire::Acquired);
  CHECK(again.index == busy.index);
  s->passes().release(again, 3, 2000);
  s->passes().release(busy, 2, 2000);
  CHECK(evicted(*s) == 3);
}

TEST_CASE("TableFull only when every entry has a request in flight") {
  auto s = makeSegment(4);
  PassHold holds[4];
  for (int i = 0; i < 4; ++i) {
    const Id id(i);
    REQUIRE(s->passes().tryAcquire(id.bytes, i % 2 ? PassProto::H2 : PassProto::H1, 1, i, i, &holds[i]) ==
            PassAcquire::Acquired);
  }
  const Id late(99);
  PassHold h;
  CHECK(s->passes().tryAcquire(late.bytes, PassProto::H1, 1, 0, 10, &h) == PassAcquire::TableFull);
  CHECK(s->passes().tryAcquire(late.bytes, PassProto::H2, 8, 1, 11, &h) == PassAcquire::TableFull);
  CHECK(tableFull(*s) == 2);
  CHECK(evicted(*s) == 0);
  CHECK(s->passes().users() == 4);

  // One request ends: its pass is idle now, and the only candidate.
  s->passes().release(holds[2], 2, 12);
  CHECK(s->passes().tryAcquire(late.bytes, PassProto::H1, 1, 0, 13, &h) == PassAcquire::Acquired);
  CHECK(h.index == holds[2].index);
  CHECK(evicted(*s) == 1);
  CHECK(tableFull(*s) == 2);

  // Busy again everywhere: the evicted pass itself is refused.
  const Id back(2);
  PassHold b;
  CHECK(s->passes().tryAcquire(back.bytes, PassProto::H1, 1, 3, 14, &b) == PassAcquire::TableFull);
  CHECK(tableFull(*s) == 3);
  s->passes().release(h, 0, 15);
  for (int i : {0, 1, 3}) s->passes().release(holds[i], static_cast<WorkerSlot>(i), 15);
}

TEST_CASE("a window smaller than the table: the most recently used passes survive") {
  // 256 entries, probe window 128: each new pass in a full window evicts the
  // oldest idle pass of its own window. A pass among the last 64 used is
  // never the oldest of a window of 128 full entries, so it is never evicted.
  auto s = makeSegment(256);
  constexpr int kPasses = 2000;
  for (int i = 0; i < kPasses; ++i) touch(*s, i, i + 1);
  CHECK(s->passes().users() == 256);
  const uint64_t before = evicted(*s);
  CHECK(before >= kPasses - 256);
  CHECK(tableFull(*s) == 0);
  for (int i = kPasses - 64; i < kPasses; ++i) touch(*s, i, kPasses + 1);
  CHECK(evicted(*s) == before);
  // An old pass comes back by evicting someone.
  touch(*s, 0, kPasses + 2);
  CHECK(evicted(*s) == before + 1);
  CHECK(s->passes().users() == 256);
}

TEST_CASE("reclaim after eviction: the dead worker's holds on evicted-into entries come back") {
  auto s = makeSegment(4);
  s->slots().started(0, 100, 1, 0);
  s->slots().started(1, 101, 1, 0);
  for (int i = 0; i < 4; ++i) touch(*s, i, i + 1, 0);

  // Slot 1 brings two new passes (each evicts) and holds three requests.
  const Id x(50), y(51);
  PassHold hx1, hx2, hy;
  REQUIRE(s->passes().tryAcquire(x.bytes, PassProto::H1, 2, 1, 10, &hx1) == PassAcquire::Acquired);
  REQUIRE(s->passes().tryAcquire(x.bytes, PassProto::H1, 2, 1, 10, &hx2) == PassAcquire::Acquired);
  REQUIRE(s->passes().tryAcquire(y.bytes, PassProto::H2, 2, 1, 11, &hy) == PassAcquire::Acquired);
  CHECK(evicted(*s) == 2);
  CHECK(hx1.index == hx2.index);
  CHECK(hx1.index != hy.index);
  // Slot 0 holds the two other entries: the table is all busy.
  PassHold h2, h3;
  REQUIRE(s->passes().tryAcquire(Id(2).bytes, PassProto::H1, 1, 0, 12, &h2) == PassAcquire::Acquired);
  REQUIRE(s->passes().tryAcquire(Id(3).bytes, PassProto::H1, 1, 0, 12, &h3) == PassAcquire::Acquired);
  PassHold none;
  CHECK(s->passes().tryAcquire(Id(60).bytes, PassProto::H1, 1, 0, 13, &none) == PassAcquire::TableFull);

  // Slot 1 dies: exactly its three holds come back.
  const ReclaimReport r = s->reclaimDeadWorker(1);
  CHECK(r.pass_holds == 3);
  CHECK(s->slots().pid(1) == 0);

  // Its passes are still in the table, idle: x takes its full cap again...
  PassHold a, b;
  CHECK(s->passes().tryAcquire(x.bytes, PassProto::H1, 2, 2, 20, &a) == PassAcquire::Acquired);
  CHECK(s->passes().tryAcquire(x.bytes, PassProto::H1, 2, 2, 20, &b) == PassAcquire::Acquired);
  CHECK(a.index == hx1.index);
  CHECK(evicted(*s) == 2);
  // ...and y, idle and the least recently used, is what a new pass evicts.
  PassHold n;
  CHECK(s->passes().tryAcquire(Id(60).bytes, PassProto::H1, 1, 2, 21, &n) == PassAcquire::Acquired);
  CHECK(n.index == hy.index);
  CHECK(evicted(*s) == 3);
  for (const PassHold& h : {a, b, n}) s->passes().release(h, 2, 22);
  s->passes().release(h2, 0, 22);
  s->passes().release(h3, 0, 22);
  for (WorkerSlot slot = 0; slot < 4; ++slot) CHECK(s->reclaimDeadWorker(slot).pass_holds == 0);
}

namespace {

// Threads, one per worker slot, churning acquire / release over more passes
// than entries, each holding at most `max_holds` requests at once. Checked
// from outside, under a mutex taken after an acquire returns and before a
// release starts (so what it records is a subset of the real holds): no two
// passes ever hold one entry at once (a busy entry was never evicted), no
// pass is over its cap. Afterwards every cell is zero (no hold lost, none
// negative) and every entry can be taken again.
struct Churn {
  uint64_t acquired = 0, at_cap = 0, table_full = 0, violations = 0, evicted = 0;
};

Churn churn(uint32_t table, int threads, int passes, int32_t cap, int max_holds, int rounds) {
  auto s = makeSegment(table, static_cast<uint32_t>(threads));
  std::mutex mu;
  std::vector<int> index_pass(table, -1), index_count(table, 0);
  std::vector<int> pass_count(static_cast<size_t>(passes) * 2, 0);
  std::atomic<int64_t> clock{0};
  std::atomic<uint64_t> acquired{0}, at_cap{0}, table_full{0}, violations{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const auto slot = static_cast<WorkerSlot>(t);
      std::mt19937 rng(static_cast<uint32_t>(1234 + t));
      struct Held {
        PassHold hold;
        int pass;
      };
      std::vector<Held> held;
      auto releaseOne = [&] {
        const size_t k = rng() % held.size();
        const Held h = held[k];
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
        {
          std::lock_guard<std::mutex> lock(mu);
          if (--index_count[h.hold.index] < 0) violations.fetch_add(1);
          if (--pass_count[static_cast<size_t>(h.pass) * 2 + static_cast<size_t>(h.hold.proto)] < 0)
            violations.fetch_add(1);
        }
        s->passes().release(h.hold, slot, clock.fetch_add(1));
      };
      for (int round = 0; round < rounds; ++round) {
        if (static_cast<int>(held.size()) >= max_holds || (!held.empty() && rng() % 2 == 0)) {
          releaseOne();
          continue;
        }
        const int pass = static_cast<int>(rng() % static_cast<uint32_t>(passes));
        const PassProto proto = rng() % 4 == 0 ? PassProto::H2 : PassProto::H1;
        const Id id(pass);
        PassHold hold;
        switch (s->passes().tryAcquire(id.bytes, proto, cap, slot, clock.fetch_add(1), &hold)) {
          case PassAcquire::Acquired: {
            acquired.fetch_add(1);
            std::lock_guard<std::mutex> lock(mu);
            if (index_count[hold.index]++ > 0 && index_pass[hold.index] != pass) violations.fetch_add(1);
            index_pass[hold.index] = pass;
            if (++pass_count[static_cast<size_t>(pass) * 2 + static_cast<size_t>(proto)] > cap) violations.fetch_add(1);
            held.push_back({hold, pass});
            break;
          }
          case PassAcquire::AtCap: at_cap.fetch_add(1); break;
          case PassAcquire::TableFull: table_full.fetch_add(1); break;
        }
      }
      while (!held.empty()) releaseOne();
    });
  }
  for (std::thread& th : pool) th.join();

  Churn result;
  result.acquired = acquired.load();
  result.at_cap = at_cap.load();
  result.table_full = table_full.load();
  result.violations = violations.load();
  result.evicted = evicted(*s);
  CHECK(result.table_full == tableFull(*s));
  CHECK(s->passes().users() <= static_cast<int64_t>(table));
  // Every entry is idle and takeable: `table` fresh passes, all held at
  // once, each get their own entry; one more is refused.
  std::vector<PassHold> fill(table);
  std::vector<bool> taken(table, false);
  for (uint32_t i = 0; i < table; ++i) {
    const Id id(100000 + static_cast<int>(i));
    REQUIRE(s->passes().tryAcquire(id.bytes, PassProto::H1, 1, 0, clock.fetch_add(1), &fill[i]) ==
            PassAcquire::Acquired);
    CHECK_FALSE(taken[fill[i].index]);
    taken[fill[i].index] = true;
  }
  PassHold extra;
  CHECK(s->passes().tryAcquire(Id(200000).bytes, PassProto::H1, 1, 1, clock.fetch_add(1), &extra) ==
        PassAcquire::TableFull);
  for (const PassHold& h : fill) s->passes().release(h, 0, clock.fetch_add(1));
  // No cell of any slot is left non-zero (a lost hold) or wrapped (a negative count).
  for (WorkerSlot slot = 0; slot < static_cast<WorkerSlot>(threads); ++slot)
    CHECK(s->reclaimDeadWorker(slot).pass_holds == 0);
  return result;
}

}  // namespace

TEST_CASE("threads churn more passes than entries: no busy entry evicted, no hold lost, never a 503") {
  // Four threads holding one request each keep at most four of eight entries
  // busy: a new pass always finds an idle one to evict.
  const Churn c = churn(8, 4, 24, 1, 1, 40000);
  CAPTURE(c.acquired);
  CAPTURE(c.at_cap);
  CHECK(c.violations == 0);
  CHECK(c.table_full == 0);
  CHECK(c.evicted > 1000);
  CHECK(c.acquired > 10000);
}

TEST_CASE("threads churn a table they can fill with requests: 503s but no busy entry evicted, no hold lost") {
  // Four threads holding up to three requests each can keep all eight
  // entries busy: some new passes are refused, none steals a busy entry.
  const Churn c = churn(8, 4, 16, 2, 3, 40000);
  CAPTURE(c.acquired);
  CAPTURE(c.at_cap);
  CAPTURE(c.table_full);
  CHECK(c.violations == 0);
  CHECK(c.evicted > 1000);
  CHECK(c.acquired > 10000);
}
