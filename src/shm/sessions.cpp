// Sessions waiting for a slot and the line's share; the rule is in sessions.h.
#include "shm/sessions.h"

#include <algorithm>

#include "shm/layout.h"
#include "shm/worker_slots.h"

namespace concert::shm {

void Sessions::enter(WorkerSlot slot) {
  layout_->slots[slot].sessions_waiting.fetch_add(1, std::memory_order_seq_cst);
}

void Sessions::leave(WorkerSlot slot) {
  layout_->slots[slot].sessions_waiting.fetch_sub(1, std::memory_order_seq_cst);
  // The line's free slots grew: held line requests and streams look again.
  slots_->wake(Resource::PageSlot);
}

int64_t Sessions::waiting() const {
  int64_t sum = 0;
  for (uint32_t s = 0; s < layout_->geometry.worker_slots; ++s)
    sum += layout_->slots[s].sessions_waiting.load(std::memory_order_seq_cst);
  return std::max<int64_t>(sum, 0);
}

int64_t Sessions::owed(int64_t line_depth) const {
  if (line_depth <= 0) return 0;
  return std::min(line_depth, creditMilli() / kUnit);
}

int64_t Sessions::lineFree(int64_t free, int64_t line_depth) const {
  const int64_t waiting_sessions = waiting();
  if (waiting_sessions == 0) return free;
  return std::max(free - waiting_sessions, std::min(free, owed(line_depth)));
}

void Sessions::sessionAdmitted(int64_t line_depth, double share) {
  if (line_depth <= 0 || share <= 0) return;
  // share / (1 - share) slots per session slot; share 1 means the line
  // always goes first.
  const int64_t delta = share >= 1 ? kMaxCredit : static_cast<int64_t>(share / (1 - share) * kUnit + 0.5);
  addCredit(delta);
}

void Sessions::lineAdmitted() {
  if (creditMilli() >= kUnit) addCredit(-kUnit);
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
  return layout_->slots[slot].sessions_waiting.exchange(0, std::memory_order_seq_cst);
}

}  // namespace concert::shm
