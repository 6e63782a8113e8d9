// The line's pace and the ETA; the design is in line_rate.h.
#include "shm/line_rate.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "shm/layout.h"

namespace concert::shm {

namespace {

// estimate word: pace per slot (float32) << 32 | slow reference per slot (float32).
uint64_t packEstimate(double pace, double slow) {
  const auto bits = [](double v) { return uint64_t{std::bit_cast<uint32_t>(static_cast<float>(std::max(v, 0.0)))}; };
  return (bits(pace) << 32) | bits(slow);
}
double estimatePace(uint64_t word) {
  return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(word >> 32)));
}
double estimateSlow(uint64_t word) {
  return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(word)));
}

// bucket word: waited ms << 32 | line_admitted at the bucket's start (mod 2^32).
uint64_t packBucket(Millis waited, uint64_t mark) {
  return (static_cast<uint64_t>(waited) << 32) | static_cast<uint32_t>(mark);
}
Millis bucketWaited(uint64_t word) {
  return static_cast<Millis>(word >> 32);
}
uint64_t bucketCount(uint64_t word, uint64_t admitted) {
  return static_cast<uint32_t>(static_cast<uint32_t>(admitted) - static_cast<uint32_t>(word));
}

// The open bucket's own pace: its admissions over its waited time, that
// time counted as at least one second.
double bucketPace(uint64_t word, uint64_t admitted) {
  const Millis waited = std::max<Millis>(bucketWaited(word), 1000);
  return static_cast<double>(bucketCount(word, admitted)) * 1000.0 / static_cast<double>(waited);
}

}  // namespace

void LineRate::admitted() {
  layout_->header->line_admitted.fetch_add(1, std::memory_order_relaxed);
}

uint64_t LineRate::admissions() const {
  return layout_->header->line_admitted.load(std::memory_order_relaxed);
}

void LineRate::roll(Millis now, int64_t line_depth, int32_t cap) {
  Header& h = *layout_->header;
  LinePace& p = h.pace;
  const uint64_t admitted = h.line_admitted.load(std::memory_order_relaxed);
  const Millis last = p.last_pass.load(std::memory_order_relaxed);
  const uint64_t open = p.bucket.load(std::memory_order_relaxed);
  Millis waited = bucketWaited(open);
  if (last != kNeverPassed) {
    const bool line_waited = p.last_depth.load(std::memory_order_relaxed) > 0 || line_depth > 0 ||
                             admitted != p.last_admitted.load(std::memory_order_relaxed);
    if (line_waited) waited += std::clamp<Millis>(now - last, 0, kMaxPassGap);
  }
  const uint64_t estimate = p.estimate.load(std::memory_order_relaxed);
  const int64_t bucket_cap = std::max<int64_t>(p.bucket_cap.load(std::memory_order_relaxed), 1);
  uint64_t bucket = packBucket(waited, open);
  if (cap != bucket_cap) {
    // A new cap: the open bucket, counted under the old one, starts again.
    // With no estimate yet its pace becomes one rather than be lost.
    if (estimate == 0 && bucketCount(open, admitted) > 0) {
      const double per_slot = bucketPace(bucket, admitted) / static_cast<double>(bucket_cap);
      p.estimate.store(packEstimate(per_slot, per_slot), std::memory_order_relaxed);
    }
    p.bucket_cap.store(cap, std::memory_order_relaxed);
    bucket = packBucket(0, admitted);
  } else if (waited >= kBucketMs) {
    double sample = static_cast<double>(bucketCount(open, admitted)) * 1000.0 / static_cast<double>(waited) /
                    static_cast<double>(bucket_cap);
    double pace = sample;
    double slow = sample;
    if (estimate != 0) {
      pace = estimatePace(estimate);
      slow = estimateSlow(estimate);
      sample = std::min(sample, kBurstFactor * std::max(pace, slow));
      pace += kAlpha * (sample - pace);
      slow += kSlowAlpha * (sample - slow);
    }
    p.estimate.store(packEstimate(pace, slow), std::memory_order_relaxed);
    bucket = packBucket(0, admitted);
  }
  p.bucket.store(bucket, std::memory_order_relaxed);
  p.last_admitted.store(admitted, std::memory_order_relaxed);
  p.last_depth.store(line_depth, std::memory_order_relaxed);
  p.last_pass.store(now, std::memory_order_relaxed);
}

std::optional<double> LineRate::pace() const {
  const Header& h = *layout_->header;
  const uint64_t admitted = h.line_admitted.load(std::memory_order_relaxed);
  if (admitted < kMinAdmissions) return std::nullopt;
  const uint64_t estimate = h.pace.estimate.load(std::memory_order_relaxed);
  if (estimate != 0) return estimatePace(estimate) * static_cast<double>(h.page_cap.load(std::memory_order_relaxed));
  // No bucket closed yet: the open one's (the janitor restarts it within a
  // pass of a cap change).
  return bucketPace(h.pace.bucket.load(std::memory_order_relaxed), admitted);
}

std::optional<int64_t> LineRate::etaSeconds(int64_t position) const {
  const std::optional<double> rate = pace();
  if (!rate) return std::nullopt;
  const double places = static_cast<double>(std::max<int64_t>(position, 1));
  if (!(*rate > 0)) return kMaxEtaSeconds;
  const double seconds = std::ceil(places / *rate);
  if (!(seconds < static_cast<double>(kMaxEtaSeconds))) return kMaxEtaSeconds;
  return std::max<int64_t>(1, static_cast<int64_t>(seconds));
}

}  // namespace concert::shm
