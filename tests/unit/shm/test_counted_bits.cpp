// CountedBits against a plain bool array: every range count must agree.
#include <doctest/doctest.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "shm/counted_bits.h"

using concert::shm::CountedBits;

namespace {

struct Bits {
  explicit Bits(uint32_t n) : memory(CountedBits::bytesFor(n) / 8 + 8, 0) { bits.attach(memory.data(), n); }
  std::vector<uint64_t> memory;
  CountedBits bits;
};

uint64_t naive(const std::vector<bool>& v, uint64_t lo, uint64_t hi) {
  uint64_t n = 0;
  for (uint64_t i = lo; i < hi; ++i) n += v[i % v.size()];
  return n;
}

}  // namespace

TEST_CASE("CountedBits counts agree with a plain array over random ranges") {
  for (uint32_t size : {64u, 512u, 4096u, 1u << 16}) {
    CAPTURE(size);
    Bits b(size);
    std::vector<bool> ref(size, false);
    std::mt19937_64 rng(size);
    for (int i = 0; i < 5000; ++i) {
      const uint32_t index = rng() % size;
      const bool value = rng() % 3 != 0;
      const bool changed = b.bits.set(index, value);
      CHECK(changed == (ref[index] != value));
      ref[index] = value;
    }
    CHECK(b.bits.total() == naive(ref, 0, size));
    for (int i = 0; i < 500; ++i) {
      const uint64_t lo = rng() % (4ull * size);
      const uint64_t len = rng() % (size + 1);
      REQUIRE(b.bits.circular(lo, lo + len) == naive(ref, lo, lo + len));
    }
    for (uint32_t end = 0; end <= size; end += size / 64 + 1) REQUIRE(b.bits.prefix(end) == naive(ref, 0, end));
  }
}

TEST_CASE("CountedBits rebuild repairs stale counts") {
  Bits b(4096);
  for (uint32_t i = 0; i < 4096; i += 3) b.bits.set(i, true);
  const uint64_t before = b.bits.total();
  // Corrupt the counts the way a killed writer could leave them: zero every
  // count word after the bitmap.
  auto* bytes = reinterpret_cast<unsigned char*>(b.memory.data());
  std::fill(bytes + 4096 / 8, bytes + CountedBits::bytesFor(4096), 0);
  CHECK(b.bits.total() == 0);
  b.bits.rebuild();
  CHECK(b.bits.total() == before);
  uint64_t expected = 0;
  for (uint32_t i = 100; i < 2100; ++i) expected += (i % 3 == 0);
  CHECK(b.bits.circular(100, 2100) == expected);
}
