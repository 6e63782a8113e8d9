// The host's side of the reservation's lease (shm/cluster.h): once the
// agent stops renewing it, every process here falls back to the fail-mode
// share by itself, and the next round lifts that. Also the Wait note a claim
// sends when the admission rate has no token.
#include <doctest/doctest.h>

#include "common/clock.h"
#include "shm/line_gate.h"
#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

std::unique_ptr<Segment> makeHost(bool fail_open) {
  Geometry g;
  g.ring_size = 1u << 10;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  auto seg = Segment::create(g, 10, 100);
  seg->cluster().configure(true, fail_open, 4);
  seg->cluster().setCap(10);
  seg->pages().setShare(0);
  return seg;
}

void round(Segment& seg, int64_t reserved, Millis lease_until, const std::vector<ClusterLineEntry>* line = nullptr) {
  ClusterRound r;
  r.hosts = 2;
  r.reserved = reserved;
  r.horizon = 5;
  r.depth = line ? static_cast<int64_t>(line->size()) : 0;
  r.cap = 10;
  r.lease_until_ms = lease_until;
  seg.pages().setShare(static_cast<int32_t>(reserved));
  seg.cluster().publish(r, line, false, monotonicMs());
}

class NoTokens final : public LineGate {
 public:
  LineFlow flow() const override { return LineFlow::ByCap; }
  int64_t lineFree(int64_t free, int64_t) const override { return free; }
  LineToken takeToken() override { return LineToken::Refused; }
  void giveBackToken() override {}
};

}  // namespace

TEST_CASE("a lapsed lease: the host uses nothing of the share the engine gave away, in either fail mode; a round "
          "lifts it") {
  for (bool open : {false, true}) {
    CAPTURE(open);
    auto seg = makeHost(open);
    round(*seg, 8, monotonicMs() + 60'000);
    CHECK(seg->cluster().state() == ClusterState::Up);
    CHECK(seg->pages().cap() == 8);
    REQUIRE(seg->pages().tryAcquire(0));
    // The agent's last round lapsed while it took the engine for up (it is
    // stuck): the engine, reachable, gives the share to others, so nothing here.
    round(*seg, 8, monotonicMs() - 1);
    CHECK(seg->cluster().state() == ClusterState::Down);
    CHECK(seg->pages().cap() == 0);
    CHECK_FALSE(seg->pages().tryAcquire(0));
    CHECK(seg->stats().snapshot().cluster_engine_up == false);
    // The next round renews it.
    round(*seg, 8, monotonicMs() + 60'000);
    CHECK(seg->cluster().state() == ClusterState::Up);
    CHECK(seg->pages().cap() == 8);
    CHECK(seg->pages().tryAcquire(1));
  }
  // No lease published (0): no end, as before any round.
  auto seg = makeHost(false);
  round(*seg, 3, 0);
  CHECK(seg->pages().cap() == 3);
  CHECK(seg->cluster().state() == ClusterState::Up);
}

TEST_CASE("a claim refused for want of a token tells the engine the holder waits, at most every kWaitEveryMs") {
  auto seg = makeHost(true);
  NoTokens gate;
  seg->setGate(&gate);
  const std::vector<ClusterLineEntry> line = {{42, 7, 1'000, LineSection::Waiting}};
  round(*seg, 4, monotonicMs() + 60'000, &line);
  seg->cluster().takeNotes(1000, monotonicMs());
  const TicketCookie t{42, 7};
  CHECK_FALSE(seg->line().claim(t));
  CHECK_FALSE(seg->line().claim(t));
  int waits = 0;
  for (const ClusterNoteValue& n : seg->cluster().takeNotes(1000, monotonicMs())) {
    if (n.kind == NoteKind::Wait && n.id == 42) ++waits;
    CHECK(n.kind != NoteKind::Leave);
  }
  CHECK(waits == 1);
  seg->setGate(nullptr);
}
