// Single-use marks: the tokens Concert honours once across every worker
// (invitations, promote signatures, single-use room passes) and the tickets
// an operator or a payment page promoted. A mark is a key (64 bits the caller
// derives from the token; never 0) with an expiry; once the expiry has
// passed, the mark is gone and its entry free for reuse.
//
// Entry = one 64-bit word: key's top 40 bits (the low bit forced to 1, so a
// live word is never 0) | expiry in minutes since 2024-01-01 (24 bits, good
// until 2055), rounded up. 0 = never used. Everything an entry says is one
// word, changed only by CAS, so readers never see half an entry and a
// SIGKILL leaves every entry whole: nothing to reclaim.
//
// Open addressing over a window of kOnceWindow entries from the key's home.
// claim(key):
//   1. scan the window: a live entry with the key -> false (used already);
//   2. CAS the first free entry (0 or expired) from what was read to the
//      key; a failed CAS starts again from 1;
//   3. scan the window again: another live entry with the key -> false.
// Step 3 settles two claimers of one key that took different entries (an
// entry expired between their scans): each stores, then reads the other's
// entry, sequentially consistent, so at least one sees the other and fails
// (both may: a token raced against itself is refused, never honoured
// twice). Two claimers of the same entry are settled by the CAS.
//
// Full (no free entry in the window): the entry expiring soonest is
// overwritten, which can only end a mark early (a token honoured once more
// within its life). The table holds kOnceEntries marks; marks live minutes to
// hours, so a window fills only under a flood of valid single-use tokens,
// which only the operator can mint. Keys are 40 bits: a fresh token mistaken
// for a used one needs a collision among the few thousand live marks.
#pragma once

#include <cstdint>

#include "shm/handle.h"

namespace concert::shm {

class OnceMarks final : public Handle {
 public:
  using Handle::Handle;

  // First use of `key` until `until` (Unix seconds): true; used already
  // (or raced by another claimer): false.
  bool claim(uint64_t key, int64_t until, int64_t now);
  // Is there a live mark for `key`?
  bool marked(uint64_t key, int64_t now) const;
  // Take a mark back (a claim whose use did not happen). Any worker.
  void forget(uint64_t key, int64_t now);

 private:
  int64_t reclaim(WorkerSlot) override { return 0; }  // entries are single words
};

// 64 bits from a label and up to two numbers, never 0 (splitmix64 rounds):
// not secret, only well spread. Callers feed it MACs or random ids.
uint64_t onceKey(uint64_t label, uint64_t a, uint64_t b = 0);

}  // namespace concert::shm
