// Ranked requests waiting for a slot and the line's credit (sessions.h).
#include "shm/sessions.h"

#include <algorithm>

#include "shm/layout.h"
#include "shm/worker_slots.h"

namespace concert::shm {

std::atomic<int64_t>& Sessions::counter(WorkerSlot slot, int rank) {
  SlotRecord& record = layout_->slots[slot];
  if (rank < 0 || rank >= kPriorityRanks) return record.sessions_waiting;
  return record.ranked_waiting[rank];
}

void Sessions::enter(WorkerSlot slot, int rank) { counter(slot, rank).fetch_add(1, std::memory_order_seq_cst); }

void Sessions::leave(WorkerSlot slot, int rank) {
  counter(slot, rank).fetch_sub(1, std::memory_order_seq_cst);
  // The line's (and the lower ranks') free slots grew: held requests and streams look again.
  slots_->wake(Resource::PageSlot);
}

int64_t Sessions::waiting() const { return waitingAhead(kSessionRank + 1); }

int64_t Sessions::waitingAhead(int rank) const {
  int64_t sum = 0;
  for (uint32_t s = 0; s < layout_->geometry.worker_slots; ++s) {
    const SlotRecord& record = layout_->slots[s];
    for (int r = 0; r < rank && r < kPriorityRanks; ++r) sum += record.ranked_waiting[r].load(std::memory_order_seq_cst);
    if (rank > kSessionRank) sum += record.sessions_waiting.load(std::memory_order_seq_cst);
  }
  return std::max<int64_t>(sum, 0);
}

int64_t Sessions::creditMilli() const {
  return layout_->header->line_credit.load(std::memory_order_seq_cst);
}

void Sessions::addCredit(int64_t delta) {
  std::atomic<int64_t>& word = layout_->header->line_credit;
  int64_t old = word.load(std::memory_order_seq_cst);
  for (;;) {
    const int64_t next = std::clamp<int64_t>(old + delta, 0, kMaxCredit);
    if (next == old || word.compare_exchange_weak(old, next, std::memory_order_seq_cst)) return;
  }
}

int64_t Sessions::reclaim(WorkerSlot slot) {
  SlotRecord& record = layout_->slots[slot];
  int64_t was = record.sessions_waiting.exchange(0, std::memory_order_seq_cst);
  for (std::atomic<int64_t>& ranked : record.ranked_waiting) was += ranked.exchange(0, std::memory_order_seq_cst);
  return was;
}

}  // namespace concert::shm
