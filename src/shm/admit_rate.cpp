// The admission rate's bucket; see admit_rate.h.
#include "shm/admit_rate.h"

#include <algorithm>

#include "shm/layout.h"

namespace concert::shm {

void AdmitRate::configure(int64_t interval_ns, int64_t burst, int64_t now_ns) {
  RoomControl& room = layout_->header->room;
  if (interval_ns < 0) interval_ns = 0;
  burst = std::max<int64_t>(burst, 1);
  if (room.rate_interval.load(std::memory_order_seq_cst) == interval_ns &&
      room.rate_burst.load(std::memory_order_seq_cst) == burst)
    return;
  // The bucket restarts full: a tat owed at the old interval means nothing at the new one.
  room.rate_tat.store(now_ns, std::memory_order_seq_cst);
  room.rate_burst.store(burst, std::memory_order_seq_cst);
  room.rate_interval.store(interval_ns, std::memory_order_seq_cst);
}

bool AdmitRate::limited() const {
  return layout_->header->room.rate_interval.load(std::memory_order_seq_cst) > 0;
}

int64_t AdmitRate::available(int64_t now_ns) const {
  const RoomControl& room = layout_->header->room;
  const int64_t interval = room.rate_interval.load(std::memory_order_seq_cst);
  if (interval <= 0) return kUnlimited;
  const int64_t burst = room.rate_burst.load(std::memory_order_seq_cst);
  const int64_t tat = std::max(room.rate_tat.load(std::memory_order_seq_cst), now_ns);
  const int64_t room_left = now_ns + burst * interval - tat;
  return std::clamp<int64_t>(room_left / interval, 0, burst);
}

bool AdmitRate::take(int64_t now_ns) {
  RoomControl& room = layout_->header->room;
  const int64_t interval = room.rate_interval.load(std::memory_order_seq_cst);
  if (interval <= 0) return true;
  const int64_t burst = room.rate_burst.load(std::memory_order_seq_cst);
  int64_t tat = room.rate_tat.load(std::memory_order_seq_cst);
  for (;;) {
    const int64_t next = std::max(tat, now_ns) + interval;
    if (next - now_ns > burst * interval) return false;
    if (room.rate_tat.compare_exchange_weak(tat, next, std::memory_order_seq_cst)) return true;
  }
}

void AdmitRate::giveBack() {
  RoomControl& room = layout_->header->room;
  const int64_t interval = room.rate_interval.load(std::memory_order_seq_cst);
  if (interval > 0) room.rate_tat.fetch_sub(interval, std::memory_order_seq_cst);
}

}  // namespace concert::shm
