// The pass table: per-pass caps per protocol, sweeping, a full table of
// busy passes (eviction of idle ones: test_pass_eviction.cpp).
#include <doctest/doctest.h>

#include <cstring>

#include "shm/segment.h"

using namespace concert::shm;

namespace {

std::unique_ptr<Segment> makeSegment(uint32_t table = 64) {
  Geometry g;
  g.ring_size = 1u << 12;
  g.worker_slots = 4;
  g.pass_table_size = table;
  return Segment::create(g, 10, 100);
}

struct Id {
  uint8_t bytes[16];
  explicit Id(int n) {
    std::memset(bytes, 0, sizeof(bytes));
    std::memcpy(bytes, &n, sizeof(n));
    bytes[15] = 0x5a;
  }
};

}  // namespace

TEST_CASE("per-pass caps are separate pools for HTTP/1 and HTTP/2") {
  auto s = makeSegment();
  const Id a(1);
  PassHold h1a, h1b, h1c, h2[3];
  CHECK(s->passes().tryAcquire(a.bytes, PassProto::H1, 2, 0, 100, &h1a) == PassAcquire::Acquired);
  CHECK(s->passes().tryAcquire(a.bytes, PassProto::H1, 2, 1, 100, &h1b) == PassAcquire::Acquired);
  CHECK(s->passes().tryAcquire(a.bytes, PassProto::H1, 2, 2, 100, &h1c) == PassAcquire::AtCap);
  for (auto& h : h2) CHECK(s->passes().tryAcquire(a.bytes, PassProto::H2, 3, 2, 100, &h) == PassAcquire::Acquired);
  PassHold extra;
  CHECK(s->passes().tryAcquire(a.bytes, PassProto::H2, 3, 0, 100, &extra) == PassAcquire::AtCap);
  CHECK(h1a.index == h1b.index);
  CHECK(h2[0].index == h1a.index);
  CHECK(s->passes().users() == 1);

  const Id b(2);
  PassHold hb;
  CHECK(s->passes().tryAcquire(b.bytes, PassProto::H1, 2, 0, 100, &hb) == PassAcquire::Acquired);
  CHECK(hb.index != h1a.index);
  CHECK(s->passes().users() == 2);

  s->passes().release(h1a, 0, 200);
  CHECK(s->passes().tryAcquire(a.bytes, PassProto::H1, 2, 3, 200, &h1c) == PassAcquire::Acquired);
}

TEST_CASE("the sweep removes only idle entries with nothing in flight") {
  auto s = makeSegment();
  const Id busy(1), idle(2), recent(3);
  PassHold hb, hi, hr;
  REQUIRE(s->passes().tryAcquire(busy.bytes, PassProto::H1, 4, 0, 0, &hb) == PassAcquire::Acquired);
  REQUIRE(s->passes().tryAcquire(idle.bytes, PassProto::H2, 4, 1, 0, &hi) == PassAcquire::Acquired);
  s->passes().release(hi, 1, 0);
  REQUIRE(s->passes().tryAcquire(recent.bytes, PassProto::H1, 4, 0, 900, &hr) == PassAcquire::Acquired);
  s->passes().release(hr, 0, 900);
  CHECK(s->passes().users() == 3);
  CHECK(s->passes().sweep(1000, 500) == 1);  // idle only
  CHECK(s->passes().users() == 2);
  s->passes().release(hb, 0, 1000);
  CHECK(s->passes().sweep(1200, 500) == 0);
  CHECK(s->passes().sweep(2000, 500) == 2);
  CHECK(s->passes().users() == 0);
  // A swept pass comes back as a new entry on its next request.
  REQUIRE(s->passes().tryAcquire(busy.bytes, PassProto::H1, 1, 2, 2000, &hb) == PassAcquire::Acquired);
  CHECK(s->passes().users() == 1);
  CHECK(s->passes().tryAcquire(busy.bytes, PassProto::H1, 1, 0, 2000, &hr) == PassAcquire::AtCap);
}

TEST_CASE("a full table of busy passes answers TableFull and counts it; swept entries are reused") {
  auto s = makeSegment(4);
  PassHold held[4];
  for (int i = 0; i < 4; ++i) {
    const Id id(i);
    REQUIRE(s->passes().tryAcquire(id.bytes, PassProto::H1, 1, 0, 0, &held[i]) == PassAcquire::Acquired);
  }
  const Id late(99);
  PassHold h;
  CHECK(s->passes().tryAcquire(late.bytes, PassProto::H1, 1, 0, 0, &h) == PassAcquire::TableFull);
  CHECK(s->stats().snapshot().pass_table_full_total == 1);
  for (const PassHold& hold : held) s->passes().release(hold, 0, 0);
  const Id known(2);
  PassHold kept;
  CHECK(s->passes().tryAcquire(known.bytes, PassProto::H1, 2, 0, 10, &kept) == PassAcquire::Acquired);
  CHECK(s->passes().sweep(100, 50) == 3);
  CHECK(s->passes().tryAcquire(late.bytes, PassProto::H1, 1, 0, 100, &h) == PassAcquire::Acquired);
  CHECK(s->passes().users() == 2);
  CHECK(s->stats().snapshot().pass_evicted_total == 0);  // a swept entry was free: nothing evicted
  s->passes().release(kept, 0, 100);
}
