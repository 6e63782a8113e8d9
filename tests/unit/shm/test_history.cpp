// History (history.h): the ring keeps the last hour in order, readers copy
// consistent samples while the writer goes on, and the sampler's deltas and
// trailing quantiles.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

std::unique_ptr<Segment> makeSegment() {
  Geometry g;
  g.ring_size = 1u << 12;
  g.worker_slots = 2;
  g.pass_table_size = 64;
  return Segment::create(g, 4, 100);
}

// A sample whose every word follows from `n`, so a torn copy shows.
HistorySample patterned(uint64_t n) {
  HistorySample s;
  s.unix_seconds = 1'700'000'000 + static_cast<int64_t>(n);
  s.queue_depth = static_cast<int64_t>(n * 3);
  s.occupancy = static_cast<int64_t>(n % 7);
  s.cap = static_cast<int64_t>(n * 5 + 1);
  s.admissions = n * 11;
  s.wait_p50 = static_cast<double>(n) / 4;
  s.wait_p95 = static_cast<double>(n) / 2;
  s.origin_p95 = static_cast<double>(n);
  return s;
}

bool matchesPattern(const HistorySample& s) {
  const HistorySample want = patterned(s.index);
  return s.unix_seconds == want.unix_seconds && s.queue_depth == want.queue_depth &&
         s.occupancy == want.occupancy && s.cap == want.cap && s.admissions == want.admissions &&
         s.wait_p50 == want.wait_p50 && s.wait_p95 == want.wait_p95 && s.origin_p95 == want.origin_p95;
}

}  // namespace

TEST_CASE("history: empty at create; samples come back in order with their indices") {
  auto seg = makeSegment();
  History& h = seg->history();
  CHECK(h.written() == 0);
  CHECK(h.last(10).empty());
  CHECK(h.since(0).empty());
  for (uint64_t n = 0; n < 5; ++n) CHECK(h.record(patterned(n)).index == n);
  CHECK(h.written() == 5);
  auto all = h.since(0);
  REQUIRE(all.size() == 5);
  for (uint64_t n = 0; n < 5; ++n) {
    CHECK(all[n].index == n);
    CHECK(matchesPattern(all[n]));
  }
  auto tail = h.last(2);
  REQUIRE(tail.size() == 2);
  CHECK(tail[0].index == 3);
  CHECK(tail[1].index == 4);
  CHECK(h.since(3).size() == 2);
  CHECK(h.since(5).empty());
  CHECK(h.since(99).empty());
  CHECK(h.since(0, 1).size() == 1);
  CHECK(h.since(0, 1)[0].index == 4);  // the newest `max`
}

TEST_CASE("history: NaN quantiles (nothing observed) survive the ring") {
  auto seg = makeSegment();
  HistorySample s;
  s.unix_seconds = 42;
  seg->history().record(s);
  auto back = seg->history().last(1);
  REQUIRE(back.size() == 1);
  CHECK(std::isnan(back[0].wait_p50));
  CHECK(std::isnan(back[0].wait_p95));
  CHECK(std::isnan(back[0].origin_p95));
  CHECK(back[0].unix_seconds == 42);
}

TEST_CASE("history: the ring keeps the last hour; older samples are gone") {
  auto seg = makeSegment();
  History& h = seg->history();
  const uint64_t total = kHistorySamples + 500;
  for (uint64_t n = 0; n < total; ++n) h.record(patterned(n));
  CHECK(h.written() == total);
  auto all = h.since(0);
  REQUIRE(all.size() == kHistorySamples);
  CHECK(all.front().index == total - kHistorySamples);
  CHECK(all.back().index == total - 1);
  for (const HistorySample& s : all) CHECK(matchesPattern(s));
  CHECK(h.last(kHistorySamples + 10).size() == kHistorySamples);
  CHECK(h.since(total - 3).size() == 3);
}

TEST_CASE("history: a reader copying while the master writes never sees a torn sample") {
  auto seg = makeSegment();
  History& h = seg->history();
  std::atomic<bool> done{false};
  std::atomic<uint64_t> torn{0}, out_of_order{0}, copied{0};
  std::thread reader([&] {
    while (!done.load()) {
      auto got = h.last(64);
      for (size_t i = 0; i < got.size(); ++i) {
        if (!matchesPattern(got[i])) torn.fetch_add(1);
        if (i > 0 && got[i].index <= got[i - 1].index) out_of_order.fetch_add(1);
      }
      copied.fetch_add(got.size());
    }
  });
  // Several laps, so the reader also meets entries being overwritten, and
  // on until the reader has copied plenty (it may be scheduled late).
  for (uint64_t n = 0; n < 4 * kHistorySamples || copied.load() < 20000; ++n) h.record(patterned(n));
  done.store(true);
  reader.join();
  CHECK(torn.load() == 0);
  CHECK(out_of_order.load() == 0);
  CHECK(copied.load() > 0);
}

TEST_CASE("history: the sampler counts admissions per sample and takes quantiles over the trailing window") {
  auto seg = makeSegment();
  HistorySampler sampler;
  StatsSnapshot stats;
  stats.cap = 4;
  stats.occupancy = 3;
  stats.live_queue_depth = 9;
  stats.counter(Counter::AdmissionsDirectTotal) = 40;
  stats.counter(Counter::AdmissionsLineTotal) = 60;
  HistogramSnapshot wait = seg->histograms().merged(Histogram::QueueWait);
  HistogramSnapshot origin = seg->histograms().merged(Histogram::UpstreamResponse);

  // First sample: no previous one, so no admissions and an empty window.
  HistorySample first = sampler.next(1000, stats, wait, origin);
  CHECK(first.unix_seconds == 1000);
  CHECK(first.queue_depth == 9);
  CHECK(first.occupancy == 3);
  CHECK(first.cap == 4);
  CHECK(first.admissions == 0);
  CHECK(admissionsSoFar(stats) == 100);
  CHECK(std::isnan(first.wait_p50));
  CHECK(std::isnan(first.origin_p95));

  // Five admissions (three from the line, two sessions), waits of 3 s; origin answers of 0.2 s.
  stats.counter(Counter::AdmissionsLineTotal) = 63;
  stats.counter(Counter::AdmissionsSessionTotal) = 2;
  for (int i = 0; i < 5; ++i) seg->histograms().observe(Histogram::QueueWait, 0, 3'000'000);
  for (int i = 0; i < 20; ++i) seg->histograms().observe(Histogram::UpstreamResponse, 1, 200'000);
  HistorySample second = sampler.next(1001, stats, seg->histograms().merged(Histogram::QueueWait),
                                      seg->histograms().merged(Histogram::UpstreamResponse));
  CHECK(second.admissions == 5);
  CHECK(second.wait_p50 > 2.5);
  CHECK(second.wait_p50 <= 5.0);
  CHECK(second.wait_p95 <= 5.0);
  CHECK(second.origin_p95 > 0.1);
  CHECK(second.origin_p95 <= 0.25);

  // Those observations stay in the window for kWindow samples, then leave it.
  for (size_t i = 1; i < HistorySampler::kWindow; ++i) {
    HistorySample s = sampler.next(1001 + static_cast<int64_t>(i), stats,
                                   seg->histograms().merged(Histogram::QueueWait),
                                   seg->histograms().merged(Histogram::UpstreamResponse));
    CHECK(s.admissions == 0);
    CHECK_FALSE(std::isnan(s.wait_p50));
  }
  HistorySample later = sampler.next(2000, stats, seg->histograms().merged(Histogram::QueueWait),
                                     seg->histograms().merged(Histogram::UpstreamResponse));
  CHECK(std::isnan(later.wait_p50));
  CHECK(std::isnan(later.wait_p95));
  CHECK(std::isnan(later.origin_p95));
}

TEST_CASE("history: admissions are every way in, and nothing else") {
  auto seg = makeSegment();
  CHECK(admissionsSoFar(seg->stats().snapshot()) == 0);
  seg->stats().count(Counter::AdmissionsDirectTotal, 3);
  seg->stats().count(Counter::AdmissionsLineTotal, 4);
  seg->stats().count(Counter::AdmissionsHeldTotal, 5);
  seg->stats().count(Counter::AdmissionsSessionTotal, 6);
  seg->stats().count(Counter::AdmissionsPriorityTotal, 7);
  seg->stats().count(Counter::QueuedTotal, 100);
  seg->stats().count(Counter::RejectedFullTotal, 100);
  CHECK(admissionsSoFar(seg->stats().snapshot()) == 25);
}
