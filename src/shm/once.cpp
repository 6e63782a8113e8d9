// Single-use marks; the rules are in once.h.
#include "shm/once.h"

#include <atomic>

#include "shm/layout.h"

namespace concert::shm {
namespace {

constexpr int64_t kEpoch = 1704067200;  // 2024-01-01T00:00:00Z
constexpr uint64_t kMinuteBits = 24;
constexpr uint64_t kMinuteMask = (uint64_t{1} << kMinuteBits) - 1;

uint64_t minutesOf(int64_t unix_seconds) {
  if (unix_seconds <= kEpoch) return 0;
  const uint64_t m = static_cast<uint64_t>(unix_seconds - kEpoch + 59) / 60;
  return m > kMinuteMask ? kMinuteMask : m;
}

uint64_t keyBits(uint64_t key) { return (key | (uint64_t{1} << kMinuteBits)) & ~kMinuteMask; }

// Live at `now`: written and its minute not yet over.
bool live(uint64_t word, uint64_t now_minute) { return word != 0 && (word & kMinuteMask) >= now_minute; }

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t onceKey(uint64_t label, uint64_t a, uint64_t b) {
  const uint64_t k = mix(mix(mix(label) ^ a) ^ b);
  return k == 0 ? 1 : k;
}

bool OnceMarks::claim(uint64_t key, int64_t until, int64_t now) {
  std::atomic<uint64_t>* words = layout_->header->once.words;
  const uint64_t want = keyBits(key);
  const uint64_t word = want | minutesOf(until);
  const uint64_t now_minute = minutesOf(now);
  const uint32_t home = static_cast<uint32_t>(key % kOnceEntries);
  for (int round = 0; round < 64; ++round) {
    uint32_t free_at = kOnceEntries;
    uint64_t free_was = 0;
    uint32_t soonest = home;
    uint64_t soonest_was = ~uint64_t{0};
    for (uint32_t i = 0; i < kOnceWindow; ++i) {
      const uint32_t at = (home + i) % kOnceEntries;
      const uint64_t seen = words[at].load(std::memory_order_seq_cst);
      if (live(seen, now_minute) && (seen & ~kMinuteMask) == want) return false;
      if (!live(seen, now_minute)) {
        if (free_at == kOnceEntries) free_at = at, free_was = seen;
      } else if ((seen & kMinuteMask) < (soonest_was & kMinuteMask)) {
        soonest = at, soonest_was = seen;
      }
    }
    if (free_at == kOnceEntries) free_at = soonest, free_was = soonest_was;  // full: end the soonest mark early
    if (!words[free_at].compare_exchange_strong(free_was, word, std::memory_order_seq_cst)) continue;
    for (uint32_t i = 0; i < kOnceWindow; ++i) {
      const uint32_t at = (home + i) % kOnceEntries;
      if (at == free_at) continue;
      const uint64_t seen = words[at].load(std::memory_order_seq_cst);
      if (live(seen, now_minute) && (seen & ~kMinuteMask) == want) return false;
    }
    return true;
  }
  return false;  // the window kept changing under us: refuse rather than honour twice
}

bool OnceMarks::marked(uint64_t key, int64_t now) const {
  const std::atomic<uint64_t>* words = layout_->header->once.words;
  const uint64_t want = keyBits(key);
  const uint64_t now_minute = minutesOf(now);
  const uint32_t home = static_cast<uint32_t>(key % kOnceEntries);
  for (uint32_t i = 0; i < kOnceWindow; ++i) {
    const uint64_t seen = words[(home + i) % kOnceEntries].load(std::memory_order_seq_cst);
    if (live(seen, now_minute) && (seen & ~kMinuteMask) == want) return true;
  }
  return false;
}

void OnceMarks::forget(uint64_t key, int64_t now) {
  std::atomic<uint64_t>* words = layout_->header->once.words;
  const uint64_t want = keyBits(key);
  const uint64_t now_minute = minutesOf(now);
  const uint32_t home = static_cast<uint32_t>(key % kOnceEntries);
  for (uint32_t i = 0; i < kOnceWindow; ++i) {
    std::atomic<uint64_t>& entry = words[(home + i) % kOnceEntries];
    uint64_t seen = entry.load(std::memory_order_seq_cst);
    if (live(seen, now_minute) && (seen & ~kMinuteMask) == want) entry.compare_exchange_strong(seen, 0);
  }
}

}  // namespace concert::shm
