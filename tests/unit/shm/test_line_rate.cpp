// The line's pace and the ETA (line_rate.h), with injected times: the null
// rule, a steady pace, a burst after a stall, idle time, cap changes, what
// counts as an admission from the line, and the janitor's sweep rolling it.
//
// Crash safety: a claimer adds its admission with one fetch_add after its
// claim, so a worker killed between the two leaves one admission uncounted
// and nothing else; the janitor (master) is the only writer of the other
// words and each store is a whole word valid on its own, so a reader (or a
// janitor stopped mid-pass) never sees anything but one pass or the next.
// The last case reads while claims are counted and the janitor passes.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

std::unique_ptr<Segment> makeSegment(int32_t cap) {
  Geometry g;
  g.ring_size = 1u << 12;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  return Segment::create(g, cap, 100);
}

// Drives the estimator as the room does: admissions counted as they happen,
// the janitor's pass once a second with the line's depth and the cap.
struct PacedLine {
  Segment& s;
  Millis now = 1000;
  int64_t depth = 100;  // visitors waiting
  double owed = 0;      // fractional admissions carried to the next second

  explicit PacedLine(Segment& segment) : s(segment) { pass(); }

  void pass() { s.lineRate().roll(now, depth, s.pages().cap()); }
  void admit(int n) {
    for (int i = 0; i < n; ++i) s.lineRate().admitted();
  }
  // `seconds` seconds at `per_second` admissions a second.
  void run(double seconds, double per_second) {
    for (int i = 0; i < static_cast<int>(seconds); ++i) {
      owed += per_second;
      const int now_admitted = static_cast<int>(owed);
      owed -= now_admitted;
      admit(now_admitted);
      now += 1000;
      pass();
    }
  }
  double pace() const { return s.lineRate().pace().value_or(-1); }
};

}  // namespace

TEST_CASE("no ETA before 20 admissions from the line, always one after") {
  auto s = makeSegment(2);
  LineRate& rate = s->lineRate();
  PacedLine line(*s);
  CHECK_FALSE(rate.etaSeconds(5).has_value());
  CHECK_FALSE(rate.pace().has_value());
  line.admit(19);
  line.run(3, 0);
  CHECK(rate.admissions() == 19);
  CHECK_FALSE(rate.etaSeconds(5).has_value());
  line.admit(1);
  // The 20th admission: a number at once, before any bucket has closed.
  REQUIRE(rate.etaSeconds(5).has_value());
  CHECK(*rate.etaSeconds(5) >= 1);
  // 20 admissions in 3 s of waiting: 20/3 a second.
  CHECK(rate.pace().value() == doctest::Approx(20.0 / 3.0));
  CHECK(rate.etaSeconds(20).value() == 3);
  // A line that does not move still gets a number: the longest.
  line.run(600, 0);
  REQUIRE(rate.etaSeconds(5).has_value());
  CHECK(*rate.etaSeconds(5) > 600);
  CHECK(*rate.etaSeconds(5) <= LineRate::kMaxEtaSeconds);
}

TEST_CASE("a steady pace gives the right ETA") {
  auto s = makeSegment(2);
  PacedLine line(*s);
  line.run(60, 3);
  CHECK(line.pace() == doctest::Approx(3).epsilon(0.02));
  CHECK(s->lineRate().etaSeconds(30).value() == 10);
  CHECK(s->lineRate().etaSeconds(1).value() == 1);
  CHECK(s->lineRate().etaSeconds(0).value() == 1);  // taken as position 1
  // A slower pace: the estimate follows within a few buckets.
  line.run(60, 0.5);
  CHECK(line.pace() == doctest::Approx(0.5).epsilon(0.1));
  CHECK(s->lineRate().etaSeconds(50).value() == doctest::Approx(100).epsilon(0.1));
  // A faster one too (a burst-limited rise, still within a minute).
  line.run(60, 4);
  CHECK(line.pace() == doctest::Approx(4).epsilon(0.05));
}

TEST_CASE("a burst after a stall does not inflate the pace for long") {
  auto s = makeSegment(2);
  PacedLine line(*s);
  line.run(120, 2);
  CHECK(line.pace() == doctest::Approx(2).epsilon(0.02));
  // The origin stalls for a minute: the line waits, nobody gets in.
  line.run(60, 0);
  CHECK(line.pace() < 0.1);
  // Then 200 go in at one instant.
  line.admit(200);
  double highest = 0;
  for (int i = 0; i < 10; ++i) {
    line.run(1, 0);
    highest = std::max(highest, line.pace());
  }
  CHECK(highest > 0.5);  // the burst is seen
  CHECK(highest < 6.0);  // but counts as at most three times the old pace, not 40/s
  // Back at 2 a second: within a quarter of it after 30 s.
  line.run(30, 2);
  CHECK(line.pace() == doctest::Approx(2).epsilon(0.25));
  line.run(30, 2);
  CHECK(line.pace() == doctest::Approx(2).epsilon(0.05));
}

TEST_CASE("time without a line does not decay the pace") {
  auto s = makeSegment(2);
  PacedLine line(*s);
  line.run(60, 3);
  const double before = line.pace();
  CHECK(before == doctest::Approx(3).epsilon(0.02));
  // An hour with nobody waiting and nobody admitted from the line.
  line.depth = 0;
  line.run(3600, 0);
  CHECK(line.pace() == doctest::Approx(before));
  // A pass after a long gap (the janitor was stopped) with no line either.
  line.now += 3600000;
  line.pass();
  CHECK(line.pace() == doctest::Approx(before));
  // A new line starts from the last one's pace.
  line.depth = 40;
  line.run(2, 3);
  CHECK(line.pace() == doctest::Approx(before));
  CHECK(s->lineRate().etaSeconds(30).value() == 10);
  // Whereas a line that waits without moving does decay it.
  line.run(30, 0);
  CHECK(line.pace() < before / 5);
}

TEST_CASE("a cap change scales the pace at once and the buckets follow") {
  auto s = makeSegment(4);
  PacedLine line(*s);
  line.run(60, 4);
  CHECK(line.pace() == doctest::Approx(4).epsilon(0.02));
  // Lowered to 1: a quarter of the pace from the moment it is set.
  s->pages().setCap(1);
  CHECK(line.pace() == doctest::Approx(1).epsilon(0.02));
  CHECK(s->lineRate().etaSeconds(10).value() == 10);
  // The real pace under the new cap turns out a bit lower; the estimate
  // follows it.
  line.run(60, 0.8);
  CHECK(line.pace() == doctest::Approx(0.8).epsilon(0.05));
  // Raised to 10: ten times the pace at once.
  s->pages().setCap(10);
  CHECK(line.pace() == doctest::Approx(8).epsilon(0.05));
  // The bucket open at the change does not mix the two caps: a bucket
  // counted half under cap 1 would pull the pace down.
  line.run(30, 8);
  CHECK(line.pace() == doctest::Approx(8).epsilon(0.05));
}

TEST_CASE("a cap change before the first bucket closes keeps what was seen") {
  auto s = makeSegment(2);
  PacedLine line(*s);
  line.run(3, 10);  // 30 admissions in 3 s, no bucket closed yet
  CHECK(line.pace() == doctest::Approx(10).epsilon(0.02));
  s->pages().setCap(4);
  line.run(1, 0);  // the janitor's pass restarts the bucket
  // The open bucket became the estimate (per slot), so the ETA survives the
  // change and the pace doubles with the cap.
  // 30 admissions in 4 s of waiting under cap 2, doubled for cap 4.
  CHECK(line.pace() == doctest::Approx(15).epsilon(0.05));
  CHECK(s->lineRate().etaSeconds(40).has_value());
}

TEST_CASE("only claims of waiting tickets count, and the janitor's sweep rolls the pace") {
  auto s = makeSegment(1);
  TicketRing& tickets = s->tickets();
  auto takeTurn = [&](const TicketCookie& cookie) {
    if (!s->pages().tryAcquire(0)) return false;
    if (tickets.claim(cookie)) return true;
    s->pages().release(0);
    return false;
  };
  // A line of 30.
  std::vector<TicketCookie> line;
  REQUIRE(s->pages().tryAcquire(1));  // a request in flight: the room is full
  for (int i = 0; i < 30; ++i) {
    const Issued issued = tickets.issue(0, 0, 0);
    REQUIRE(issued.outcome == IssueOutcome::Queued);
    line.push_back(issued.cookie);
  }
  s->pages().release(1);
  // A failed claim (not its turn) counts nothing.
  CHECK_FALSE(takeTurn(line[5]));
  CHECK(s->lineRate().admissions() == 0);
  // One a second, in order, the janitor passing in between.
  Millis now = 1000;
  tickets.sweep(now, SweepLimits{});
  for (int i = 0; i < 25; ++i) {
    REQUIRE(takeTurn(line[static_cast<size_t>(i)]));
    s->pages().release(0);
    now += 1000;
    tickets.sweep(now, SweepLimits{});
  }
  CHECK(s->lineRate().admissions() == 25);
  CHECK(s->lineRate().pace().value() == doctest::Approx(1).epsilon(0.02));
  // Five still wait: positions 1..5, ETA one second a place.
  CHECK(s->lineRate().etaSeconds(5).value() == 5);
  // A retired (abandoned) ticket is not an admission.
  tickets.retire(line[25].ticket, false);
  CHECK(s->lineRate().admissions() == 25);
  // A missed ticket that comes back goes in ahead of the line: not counted.
  SweepLimits window;
  window.claim_window = 1000;
  tickets.sweep(now, window);  // stamps the head ready
  now += 2000;
  tickets.sweep(now, window);                                                  // its turn passed: missed
  REQUIRE(tickets.render(line[26], now, 300000).state == TicketState::Ready);  // returned
  REQUIRE(takeTurn(line[26]));
  s->pages().release(0);
  CHECK(s->lineRate().admissions() == 25);
  REQUIRE(takeTurn(line[27]));
  CHECK(s->lineRate().admissions() == 26);
}

TEST_CASE("a reader racing the janitor and the claims always reads a sane pace") {
  auto s = makeSegment(2);
  PacedLine line(*s);
  line.run(60, 3);
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    while (!done.load()) {
      const std::optional<int64_t> eta = s->lineRate().etaSeconds(30);
      const std::optional<double> pace = s->lineRate().pace();
      if (!eta || *eta < 5 || *eta > 30 || !pace || !(*pace > 1) || !(*pace < 6)) bad.fetch_add(1);
    }
  });
  // Claims and the janitor's passes, a simulated second apart, 3 admissions
  // between passes.
  for (int i = 0; i < 20000; ++i) line.run(1, 3);
  done.store(true);
  reader.join();
  CHECK(bad.load() == 0);
}
