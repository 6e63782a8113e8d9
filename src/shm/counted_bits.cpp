// CountedBits implementation; the design and the concurrency rule are in
// counted_bits.h.
#include "shm/counted_bits.h"

#include <cassert>

namespace concert::shm {

namespace {

constexpr uint32_t kWordFan = 8;    // bitmap words per level-0 count
constexpr uint32_t kCountFan = 16;  // counts per higher-level count
constexpr uint32_t kTopMax = 16;    // a level this small is the top

size_t alignUp(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

// The portable x86-64 baseline has no POPCNT instruction, and std::popcount
// then calls into libgcc; this inline SWAR count is several times faster.
inline uint32_t bitCount(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return static_cast<uint32_t>((x * 0x0101010101010101ull) >> 56);
}

}  // namespace

int CountedBits::levelShape(uint32_t nbits, Level* levels) {
  uint32_t children = nbits / 64;
  uint32_t fan = kWordFan;
  uint64_t unit = 64ull * kWordFan;
  int n = 0;
  for (;;) {
    assert(n < kMaxLevels);
    Level& level = levels[n++];
    level.fan = fan;
    level.size = (children + fan - 1) / fan;
    level.unit_bits = unit;
    if (level.size <= kTopMax) break;
    children = level.size;
    fan = kCountFan;
    unit *= kCountFan;
  }
  return n;
}

size_t CountedBits::bytesFor(uint32_t nbits) {
  Level levels[kMaxLevels];
  const int n = levelShape(nbits, levels);
  size_t bytes = alignUp(size_t{nbits} / 8, 64);
  for (int i = 0; i < n; ++i) bytes += alignUp(size_t{levels[i].size} * sizeof(uint32_t), 64);
  return bytes;
}

void CountedBits::attach(void* base, uint32_t nbits) {
  static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);
  nbits_ = nbits;
  nwords_ = nbits / 64;
  nlevels_ = levelShape(nbits, levels_);
  auto* p = static_cast<unsigned char*>(base);
  words_ = reinterpret_cast<std::atomic<uint64_t>*>(p);
  p += alignUp(size_t{nbits} / 8, 64);
  for (int i = 0; i < nlevels_; ++i) {
    levels_[i].counts = reinterpret_cast<std::atomic<uint32_t>*>(p);
    p += alignUp(size_t{levels_[i].size} * sizeof(uint32_t), 64);
  }
}

uint32_t CountedBits::sumChildren(int level, uint32_t group) const {
  const Level& l = levels_[level];
  uint32_t sum = 0;
  if (level == 0) {
    const uint32_t begin = group * l.fan;
    const uint32_t end = begin + l.fan < nwords_ ? begin + l.fan : nwords_;
    for (uint32_t w = begin; w < end; ++w) sum += bitCount(words_[w].load(std::memory_order_seq_cst));
  } else {
    const Level& below = levels_[level - 1];
    const uint32_t begin = group * l.fan;
    const uint32_t end = begin + l.fan < below.size ? begin + l.fan : below.size;
    for (uint32_t c = begin; c < end; ++c) sum += below.counts[c].load(std::memory_order_seq_cst);
  }
  return sum;
}

void CountedBits::recompute(int level, uint32_t group) {
  std::atomic<uint32_t>& count = levels_[level].counts[group];
  uint32_t sum = sumChildren(level, group);
  for (;;) {
    count.store(sum, std::memory_order_seq_cst);
    const uint32_t again = sumChildren(level, group);
    if (again == sum) return;
    sum = again;
  }
}

bool CountedBits::set(uint32_t index, bool value) {
  const uint32_t w = index / 64;
  const uint64_t mask = uint64_t{1} << (index % 64);
  const uint64_t old = value ? words_[w].fetch_or(mask, std::memory_order_seq_cst)
                             : words_[w].fetch_and(~mask, std::memory_order_seq_cst);
  if (((old & mask) != 0) == value) return false;
  uint32_t child = w;
  for (int level = 0; level < nlevels_; ++level) {
    const uint32_t group = child / levels_[level].fan;
    recompute(level, group);
    child = group;
  }
  return true;
}

bool CountedBits::test(uint32_t index) const {
  return (words_[index / 64].load(std::memory_order_seq_cst) >> (index % 64)) & 1u;
}

uint64_t CountedBits::prefix(uint32_t end) const {
  uint64_t sum = 0;
  const Level& top = levels_[nlevels_ - 1];
  const uint64_t top_end = end / top.unit_bits;
  for (uint64_t i = 0; i < top_end; ++i) sum += top.counts[i].load(std::memory_order_relaxed);
  for (int k = nlevels_ - 2; k >= 0; --k) {
    const Level& l = levels_[k];
    const uint64_t begin = end / levels_[k + 1].unit_bits * levels_[k + 1].fan;
    const uint64_t stop = end / l.unit_bits;
    for (uint64_t i = begin; i < stop; ++i) sum += l.counts[i].load(std::memory_order_relaxed);
  }
  const uint64_t word_begin = end / levels_[0].unit_bits * levels_[0].fan;
  const uint64_t word_end = end / 64;
  for (uint64_t w = word_begin; w < word_end; ++w) sum += bitCount(words_[w].load(std::memory_order_relaxed));
  if (end % 64 != 0) {
    const uint64_t mask = (uint64_t{1} << (end % 64)) - 1;
    sum += bitCount(words_[end / 64].load(std::memory_order_relaxed) & mask);
  }
  return sum;
}

uint64_t CountedBits::total() const {
  const Level& top = levels_[nlevels_ - 1];
  uint64_t sum = 0;
  for (uint32_t i = 0; i < top.size; ++i) sum += top.counts[i].load(std::memory_order_relaxed);
  return sum;
}

uint64_t CountedBits::circular(uint64_t lo, uint64_t hi) const {
  if (hi <= lo) return 0;
  if (hi - lo >= nbits_) return total();
  const uint32_t a = static_cast<uint32_t>(lo & (nbits_ - 1));
  const uint32_t b = static_cast<uint32_t>(hi & (nbits_ - 1));
  // Levels read at slightly different instants can disagree; never report
  // more than the range holds or wrap below zero.
  int64_t n = a < b ? static_cast<int64_t>(prefix(b)) - static_cast<int64_t>(prefix(a))
                    : static_cast<int64_t>(total()) - static_cast<int64_t>(prefix(a)) + static_cast<int64_t>(prefix(b));
  if (n < 0) n = 0;
  if (static_cast<uint64_t>(n) > hi - lo) n = static_cast<int64_t>(hi - lo);
  return static_cast<uint64_t>(n);
}

void CountedBits::rebuild() {
  for (int level = 0; level < nlevels_; ++level)
    for (uint32_t group = 0; group < levels_[level].size; ++group) recompute(level, group);
}

}  // namespace concert::shm
