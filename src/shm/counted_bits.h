// CountedBits: a bitmap in shared memory with a tree of population counts
// above it, so "how many bits are set in [a, b)" costs O(levels * fan) loads
// instead of O(b - a).
//
// Used by the ticket ring: one bitmap per entry state it counts ("waiting",
// "returned", "missed"), one bit per ring entry. A bit is a pure function of its ring entry's state word,
// so anyone can recompute it; the counts above are a pure function of the
// bits, so anyone can recompute them too. That is what makes the structure
// crash-safe without a log: a worker killed between flipping a bit and
// fixing the counts leaves counts that are merely stale, and rebuild() (run
// by the master in reclaimDeadWorker) restores them exactly while the other
// workers keep running.
//
// Concurrency rule ("store, then verify"): a writer that changed a bit
// recomputes each ancestor count from its children, stores it, then re-sums
// the children; if the sum moved meanwhile it stores again. The last store to
// any count is therefore followed by a verification that saw the final
// children, so once writers stop, every count is exact. Readers may see a
// transiently inconsistent mix of levels; callers clamp.
//
// Levels: level 0 counts 8 bitmap words (512 bits), each higher level counts
// 16 children, until a level has at most 16 counts (the top, summed on read).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace concert::shm {

class CountedBits {
 public:
  static constexpr int kMaxLevels = 8;

  // Bytes of shared memory needed for `nbits` bits (a power of two >= 64).
  static size_t bytesFor(uint32_t nbits);

  // Points this view at zeroed (or already initialised) shared memory.
  void attach(void* base, uint32_t nbits);

  // Sets bit `index` to `value`; true if that changed it (and the counts).
  bool set(uint32_t index, bool value);
  bool test(uint32_t index) const;

  uint64_t prefix(uint32_t end) const;  // set bits in [0, end)
  uint64_t total() const;
  // Set bits over the circular index range covering positions lo .. hi-1
  // (taken modulo nbits); requires hi - lo <= nbits.
  uint64_t circular(uint64_t lo, uint64_t hi) const;

  // Recompute every count from the bits (master, after a worker died).
  void rebuild();

 private:
  struct Level {
    std::atomic<uint32_t>* counts = nullptr;
    uint32_t size = 0;       // number of counts on this level
    uint32_t fan = 0;        // children per count
    uint64_t unit_bits = 0;  // bits covered by one count
  };

  static int levelShape(uint32_t nbits, Level* levels);
  uint32_t sumChildren(int level, uint32_t group) const;
  void recompute(int level, uint32_t group);

  std::atomic<uint64_t>* words_ = nullptr;
  uint32_t nwords_ = 0;
  uint32_t nbits_ = 0;
  Level levels_[kMaxLevels];
  int nlevels_ = 0;
};

}  // namespace concert::shm
