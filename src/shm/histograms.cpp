// Per-slot histogram cells and their merge; see histograms.h.
#include "shm/histograms.h"

#include "shm/layout.h"

namespace concert::shm {

uint64_t HistogramSnapshot::count() const {
  uint64_t n = 0;
  for (uint64_t b : buckets) n += b;
  return n;
}

uint64_t HistogramSnapshot::cumulative(size_t i) const {
  uint64_t n = 0;
  for (size_t k = 0; k <= i && k < buckets.size(); ++k) n += buckets[k];
  return n;
}

double HistogramSnapshot::quantile(double q) const {
  const uint64_t total = count();
  if (total == 0) return 0;
  if (q < 0) q = 0;
  if (q > 1) q = 1;
  const auto bounds = histogramBounds(which);
  const double rank = q * static_cast<double>(total);
  uint64_t below = 0;
  for (size_t i = 0; i < kHistogramBounds; ++i) {
    const uint64_t here = buckets[i];
    if (here > 0 && static_cast<double>(below + here) >= rank) {
      const double lower = i == 0 ? 0.0 : bounds[i - 1];
      const double into = (rank - static_cast<double>(below)) / static_cast<double>(here);
      return lower + (bounds[i] - lower) * (into < 0 ? 0 : into);
    }
    below += here;
  }
  return bounds[kHistogramBounds - 1];
}

HistogramSnapshot HistogramSnapshot::since(const HistogramSnapshot& earlier) const {
  HistogramSnapshot d;
  d.which = which;
  for (size_t i = 0; i < buckets.size(); ++i)
    d.buckets[i] = buckets[i] >= earlier.buckets[i] ? buckets[i] - earlier.buckets[i] : 0;
  d.sum_micros = sum_micros >= earlier.sum_micros ? sum_micros - earlier.sum_micros : 0;
  return d;
}

void Histograms::observe(Histogram h, WorkerSlot slot, int64_t micros) {
  if (slot >= layout_->geometry.worker_slots) return;
  if (micros < 0) micros = 0;
  const auto bounds = histogramBounds(h);
  const double seconds = static_cast<double>(micros) / 1e6;
  size_t i = 0;
  while (i < kHistogramBounds && seconds > bounds[i]) ++i;
  HistogramCells& cells = layout_->slots[slot].histograms[static_cast<size_t>(h)];
  cells.buckets[i].fetch_add(1, std::memory_order_relaxed);
  cells.sum_micros.fetch_add(static_cast<uint64_t>(micros), std::memory_order_relaxed);
}

HistogramSnapshot Histograms::merged(Histogram h) const {
  HistogramSnapshot s;
  s.which = h;
  for (uint32_t slot = 0; slot < layout_->geometry.worker_slots; ++slot) {
    const HistogramCells& cells = layout_->slots[slot].histograms[static_cast<size_t>(h)];
    for (size_t i = 0; i < s.buckets.size(); ++i) s.buckets[i] += cells.buckets[i].load(std::memory_order_relaxed);
    s.sum_micros += cells.sum_micros.load(std::memory_order_relaxed);
  }
  return s;
}

}  // namespace concert::shm
