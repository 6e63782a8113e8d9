// The history ring's seqlock and the janitor's sampler; see history.h.
#include "shm/history.h"

#include <atomic>
#include <bit>

#include "shm/layout.h"

namespace concert::shm {

namespace {

constexpr uint64_t writingSeq(uint64_t index) {
  return 2 * index + 1;
}
constexpr uint64_t holdsSeq(uint64_t index) {
  return 2 * index + 2;
}

// NaN (nothing observed) stays NaN: an empty window has no quantile.
double quantileOrNone(const HistogramSnapshot& window, double q) {
  return window.count() == 0 ? HistorySample::kNone : window.quantile(q);
}

}  // namespace

uint64_t admissionsSoFar(const StatsSnapshot& snapshot) {
  uint64_t n = 0;
  for (Counter c : {Counter::AdmissionsDirectTotal, Counter::AdmissionsLineTotal, Counter::AdmissionsHeldTotal,
                    Counter::AdmissionsSessionTotal, Counter::AdmissionsPriorityTotal})
    n += snapshot.counter(c);
  return n;
}

HistorySample History::record(HistorySample sample) {
  HistoryRing& ring = *layout_->history;
  const uint64_t index = ring.written.load(std::memory_order_relaxed);  // the only writer
  sample.index = index;
  HistoryEntry& e = ring.entries[index % kHistorySamples];
  e.seq.store(writingSeq(index), std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  e.words[0].store(static_cast<uint64_t>(sample.unix_seconds), std::memory_order_relaxed);
  e.words[1].store(static_cast<uint64_t>(sample.queue_depth), std::memory_order_relaxed);
  e.words[2].store(static_cast<uint64_t>(sample.occupancy), std::memory_order_relaxed);
  e.words[3].store(static_cast<uint64_t>(sample.cap), std::memory_order_relaxed);
  e.words[4].store(sample.admissions, std::memory_order_relaxed);
  e.words[5].store(std::bit_cast<uint64_t>(sample.wait_p50), std::memory_order_relaxed);
  e.words[6].store(std::bit_cast<uint64_t>(sample.wait_p95), std::memory_order_relaxed);
  e.words[7].store(std::bit_cast<uint64_t>(sample.origin_p95), std::memory_order_relaxed);
  e.seq.store(holdsSeq(index), std::memory_order_release);
  ring.written.store(index + 1, std::memory_order_release);
  return sample;
}

uint64_t History::written() const {
  return layout_->history->written.load(std::memory_order_acquire);
}

std::vector<HistorySample> History::since(uint64_t from, size_t max) const {
  const HistoryRing& ring = *layout_->history;
  const uint64_t end = written();
  if (max > kHistorySamples) max = kHistorySamples;
  if (end > max && from < end - max) from = end - max;
  std::vector<HistorySample> out;
  if (from >= end) return out;
  out.reserve(end - from);
  for (uint64_t index = from; index < end; ++index) {
    const HistoryEntry& e = ring.entries[index % kHistorySamples];
    const uint64_t before = e.seq.load(std::memory_order_acquire);
    if (before != holdsSeq(index)) continue;
    uint64_t w[kHistoryWords];
    for (size_t i = 0; i < kHistoryWords; ++i) w[i] = e.words[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.seq.load(std::memory_order_relaxed) != before) continue;
    HistorySample s;
    s.index = index;
    s.unix_seconds = static_cast<int64_t>(w[0]);
    s.queue_depth = static_cast<int64_t>(w[1]);
    s.occupancy = static_cast<int64_t>(w[2]);
    s.cap = static_cast<int64_t>(w[3]);
    s.admissions = w[4];
    s.wait_p50 = std::bit_cast<double>(w[5]);
    s.wait_p95 = std::bit_cast<double>(w[6]);
    s.origin_p95 = std::bit_cast<double>(w[7]);
    out.push_back(s);
  }
  return out;
}

std::vector<HistorySample> History::last(size_t n) const {
  const uint64_t end = written();
  return since(end > n ? end - n : 0, n);
}

HistorySample HistorySampler::next(int64_t unix_seconds, const StatsSnapshot& stats, const HistogramSnapshot& wait,
                                   const HistogramSnapshot& origin) {
  waits_.push_back(wait);
  origins_.push_back(origin);
  while (waits_.size() > kWindow + 1) waits_.pop_front();
  while (origins_.size() > kWindow + 1) origins_.pop_front();
  // The first sample's window is empty: nothing before it to subtract.
  const HistogramSnapshot wait_window = waits_.back().since(waits_.front());
  const HistogramSnapshot origin_window = origins_.back().since(origins_.front());

  HistorySample s;
  s.unix_seconds = unix_seconds;
  s.queue_depth = stats.live_queue_depth;
  s.occupancy = stats.occupancy;
  s.cap = stats.cap;
  const uint64_t admitted = admissionsSoFar(stats);
  s.admissions = admissions_ && admitted >= *admissions_ ? admitted - *admissions_ : 0;
  admissions_ = admitted;
  s.wait_p50 = quantileOrNone(wait_window, 0.5);
  s.wait_p95 = quantileOrNone(wait_window, 0.95);
  s.origin_p95 = quantileOrNone(origin_window, 0.95);
  return s;
}

}  // namespace concert::shm
