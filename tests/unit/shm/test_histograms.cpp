// Histograms (histograms.h): bucketing at the bounds, the merge over worker
// slots, quantiles, deltas; and what a claim reports (wait, inversions).
#include <doctest/doctest.h>

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

}  // namespace

TEST_CASE("histograms: a value on a bound falls in that bound's bucket, above the last in +Inf") {
  auto s = makeSegment(1);
  Histograms& h = s->histograms();
  h.observe(Histogram::UpstreamResponse, 0, 1000);        // 0.001 s: le=0.001
  h.observe(Histogram::UpstreamResponse, 0, 1001);        // le=0.0025
  h.observe(Histogram::UpstreamResponse, 1, 0);           // le=0.001
  h.observe(Histogram::UpstreamResponse, 1, -5);          // counted as 0
  h.observe(Histogram::UpstreamResponse, 2, 500'000'000);  // 500 s: +Inf
  HistogramSnapshot m = h.merged(Histogram::UpstreamResponse);
  CHECK(m.buckets[0] == 3);
  CHECK(m.buckets[1] == 1);
  CHECK(m.buckets[kHistogramBounds] == 1);
  CHECK(m.count() == 5);
  CHECK(m.cumulative(0) == 3);
  CHECK(m.cumulative(kHistogramBounds) == 5);
  CHECK(m.sum_micros == 1000 + 1001 + 500'000'000);
  CHECK(h.merged(Histogram::QueueWait).count() == 0);
  // An out-of-range slot is ignored rather than written past the table.
  h.observe(Histogram::QueueWait, 99, 1);
  CHECK(h.merged(Histogram::QueueWait).count() == 0);
}

TEST_CASE("histograms: quantiles interpolate inside the bucket, as histogram_quantile does") {
  HistogramSnapshot empty;
  CHECK(empty.quantile(0.5) == 0);
  auto s = makeSegment(1);
  // 100 waits of 3 s: all in (2.5, 5].
  for (int i = 0; i < 100; ++i) s->histograms().observe(Histogram::QueueWait, 0, 3'000'000);
  HistogramSnapshot m = s->histograms().merged(Histogram::QueueWait);
  CHECK(m.quantile(0.5) == doctest::Approx(3.75));
  CHECK(m.quantile(1.0) == doctest::Approx(5.0));
  // Another 100 of 20 s, in (10, 30]: the median is at the top of the first bucket.
  for (int i = 0; i < 100; ++i) s->histograms().observe(Histogram::QueueWait, 3, 20'000'000);
  m = s->histograms().merged(Histogram::QueueWait);
  CHECK(m.quantile(0.5) == doctest::Approx(5.0));
  CHECK(m.quantile(0.75) == doctest::Approx(20.0));
  // Beyond every bound: the highest finite bound.
  for (int i = 0; i < 1000; ++i) s->histograms().observe(Histogram::QueueWait, 1, 7200'000'000);
  CHECK(s->histograms().merged(Histogram::QueueWait).quantile(0.99) == doctest::Approx(3600));
}

TEST_CASE("histograms: since() is what was observed in between") {
  auto s = makeSegment(1);
  s->histograms().observe(Histogram::QueueWait, 0, 200'000);
  HistogramSnapshot before = s->histograms().merged(Histogram::QueueWait);
  s->histograms().observe(Histogram::QueueWait, 1, 40'000'000);
  s->histograms().observe(Histogram::QueueWait, 1, 40'000'000);
  HistogramSnapshot delta = s->histograms().merged(Histogram::QueueWait).since(before);
  CHECK(delta.count() == 2);
  CHECK(delta.sum_micros == 80'000'000);
  CHECK(delta.quantile(0.5) > 30);
}

TEST_CASE("histograms: concurrent observers in their own slots lose nothing") {
  auto s = makeSegment(1);
  std::vector<std::thread> threads;
  for (WorkerSlot slot = 0; slot < 4; ++slot)
    threads.emplace_back([&s, slot] {
      for (int i = 0; i < 20000; ++i) s->histograms().observe(Histogram::UpstreamResponse, slot, i % 300'000);
    });
  for (std::thread& t : threads) t.join();
  CHECK(s->histograms().merged(Histogram::UpstreamResponse).count() == 80000);
}

TEST_CASE("claim: reports the wait since issue and where the ticket came from") {
  auto s = makeSegment(1);
  REQUIRE(s->pages().tryAcquire(0));  // the room is full: the next arrival waits
  Issued t = s->tickets().issue(0, 0, monotonicMs());
  REQUIRE(t.outcome == IssueOutcome::Queued);
  s->pages().release(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  REQUIRE(s->pages().tryAcquire(0));
  Claimed claimed;
  REQUIRE(s->tickets().claim(t.cookie, &claimed));
  CHECK(claimed.from_line);
  CHECK(claimed.waited >= 30);
  CHECK_FALSE(claimed.inversion);
  CHECK(s->stats().snapshot().counter(Counter::FifoInversionsTotal) == 0);
}

TEST_CASE("claim: tickets whose turn came together are no inversion in any order; the rest wait") {
  // cap 2, both slots held, five waiting; the slots free together.
  auto s = makeSegment(2);
  REQUIRE(s->pages().tryAcquire(0));
  REQUIRE(s->pages().tryAcquire(0));
  std::vector<Issued> line;
  for (int i = 0; i < 5; ++i) line.push_back(s->tickets().issue(0, 0, monotonicMs()));
  s->pages().release(0);
  s->pages().release(0);
  // Tickets 1 and 2 are both ready: the second taking its slot first is concurrency.
  REQUIRE(s->pages().tryAcquire(1));
  Claimed c;
  REQUIRE(s->tickets().claim(line[1].cookie, &c));
  CHECK_FALSE(c.inversion);
  // Ticket 5 has three older tickets waiting and one slot free: refused.
  REQUIRE(s->pages().tryAcquire(1));
  CHECK_FALSE(s->tickets().claim(line[4].cookie, &c));
  REQUIRE(s->tickets().claim(line[0].cookie, &c));
  CHECK_FALSE(c.inversion);
  // A raised cap makes ticket 5 ready past two older waiting tickets, fewer than the cap.
  s->pages().setCap(6);
  REQUIRE(s->pages().tryAcquire(1));
  REQUIRE(s->tickets().claim(line[4].cookie, &c));
  CHECK_FALSE(c.inversion);
  CHECK(s->stats().snapshot().counter(Counter::FifoInversionsTotal) == 0);
}
