// A scheduled sale's schedule; see sale.h.
#include "shm/sale.h"

#include "shm/layout.h"
#include "shm/worker_slots.h"

namespace concert::shm {

bool inPrequeue(const SaleControl& sale, int64_t unix_ms) {
  const int64_t start = sale.start_ms.load(std::memory_order_seq_cst);
  const int64_t prequeue = sale.prequeue_ms.load(std::memory_order_seq_cst);
  return start != 0 && prequeue > 0 && unix_ms >= start - prequeue && unix_ms < start;
}

bool Sale::schedule(int64_t start_unix_ms, Millis prequeue, bool shuffle) {
  SaleControl& sale = layout_->header->sale;
  sale.prequeue_ms.store(prequeue, std::memory_order_seq_cst);
  sale.shuffle.store(shuffle ? 1 : 0, std::memory_order_seq_cst);
  const int64_t before = sale.start_ms.exchange(start_unix_ms, std::memory_order_seq_cst);
  if (before == start_unix_ms) return false;
  // A new start: the block spent on the old one may open again. A block
  // still open is left to the janitor (TicketRing::saleTick), which closes
  // it when the new schedule has no pre-queue now.
  uint64_t block = sale.block.load(std::memory_order_seq_cst);
  if (blockPhase(block) == BlockPhase::Done)
    sale.block.compare_exchange_strong(block, packBlock(0, BlockPhase::Idle, 0), std::memory_order_seq_cst);
  slots_->wake(Resource::PageSlot);  // held requests look again: the line may move now
  return true;
}

int64_t Sale::startMs() const {
  return layout_->header->sale.start_ms.load(std::memory_order_seq_cst);
}

bool Sale::shuffles() const {
  return layout_->header->sale.shuffle.load(std::memory_order_seq_cst) != 0;
}

bool Sale::prequeue(int64_t unix_ms) const {
  return inPrequeue(layout_->header->sale, unix_ms);
}

int64_t Sale::startsIn(int64_t unix_ms) const {
  if (!prequeue(unix_ms)) return 0;
  const int64_t left = startMs() - unix_ms;
  return left <= 0 ? 1 : (left + 999) / 1000;
}

}  // namespace concert::shm
