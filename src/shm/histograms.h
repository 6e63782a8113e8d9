// Histograms: how long visitors waited in line and how long the origin took
// to answer, as Prometheus histograms (served on GET /_room/metrics).
//
// Each worker slot owns one set of cells per histogram in its SlotRecord
// (layout.h): a count per bucket (not cumulative) and the sum of the
// observed values in microseconds. Only the slot's own worker writes them
// (fetch_add, relaxed), except EngineRoundTrip, which the cluster agent
// (src/cluster/) adds to slot 0's cells, also by fetch_add; a scrape merges every slot's cells. The count is
// the sum of the buckets, so a scrape never sees a count that disagrees
// with its buckets; the sum may lag one observation behind them.
//
// States: the cells only grow, from 0 at create; nothing resets them, not a
// reload, not the death of the worker (reclaim leaves them: what the dead
// worker observed stays observed), not a new worker taking the slot (it
// adds to them). So every merged bucket is a monotonic counter. A SIGKILL
// between the bucket and the sum leaves one observation without its sum.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "shm/handle.h"
#include "shm/types.h"

namespace concert::shm {

enum class Histogram : uint32_t {
  QueueWait,         // a ticket's issue to its admission from the line (seconds)
  UpstreamResponse,  // request sent to the origin's response head (seconds)
  EngineRoundTrip,   // -cluster: one round trip to the engine (seconds); the cluster agent's, in slot 0's cells
  PageFirstByte,     // a page request sent to the origin's response head (seconds): pages only, no assets
};
// kHistogramCount and kHistogramBounds (finite upper bounds; one more bucket
// is +Inf) are in types.h, with the segment's other sizes.
static_assert(kHistogramCount == static_cast<size_t>(Histogram::PageFirstByte) + 1);

// Upper bounds (seconds, inclusive, as Prometheus `le`), ascending.
constexpr std::array<double, kHistogramBounds> histogramBounds(Histogram h) {
  if (h == Histogram::QueueWait)
    return {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600};
  if (h == Histogram::EngineRoundTrip)
    return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

// Every slot's cells added up.
struct HistogramSnapshot {
  Histogram which = Histogram::QueueWait;
  std::array<uint64_t, kHistogramBounds + 1> buckets{};  // per bucket, not cumulative; the last is +Inf
  uint64_t sum_micros = 0;

  uint64_t count() const;
  // Observations <= bound i (Prometheus' cumulative bucket); i ==
  // kHistogramBounds is +Inf, i.e. count().
  uint64_t cumulative(size_t i) const;
  double sumSeconds() const { return static_cast<double>(sum_micros) / 1e6; }
  // The q-quantile (0..1) by linear interpolation inside its bucket, as
  // Prometheus' histogram_quantile: 0 for an empty histogram, the highest
  // finite bound when it falls in +Inf.
  double quantile(double q) const;
  // What was observed since `earlier` (a snapshot of the same histogram).
  HistogramSnapshot since(const HistogramSnapshot& earlier) const;
};

class Histograms final : public Handle {
 public:
  using Handle::Handle;

  // One observation of `micros` (negative counts as 0) by the worker in `slot`.
  void observe(Histogram h, WorkerSlot slot, int64_t micros);
  HistogramSnapshot merged(Histogram h) const;

 private:
  friend class Segment;
  int64_t reclaim(WorkerSlot) override { return 0; }  // observations outlive their worker
};

}  // namespace concert::shm
