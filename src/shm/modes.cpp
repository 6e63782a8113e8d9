// The room's mode; see modes.h.
#include "shm/modes.h"

#include "shm/layout.h"
#include "shm/sale.h"
#include "shm/worker_slots.h"

namespace concert::shm {

namespace {

RoomMode fromWord(uint32_t word) {
  // Only the four values are ever stored; anything else would be a broken
  // segment, read as the safe default.
  return word <= static_cast<uint32_t>(RoomMode::Passthrough) ? static_cast<RoomMode>(word) : RoomMode::Open;
}

}  // namespace

RoomMode Modes::mode() const {
  return fromWord(layout_->header->room.mode.load(std::memory_order_seq_cst));
}

RoomMode Modes::set(RoomMode mode) {
  const uint32_t before = layout_->header->room.mode.exchange(static_cast<uint32_t>(mode), std::memory_order_seq_cst);
  slots_->wake(Resource::PageSlot);
  return fromWord(before);
}

RoomMode Modes::configured() const {
  return fromWord(layout_->header->room.configured_mode.load(std::memory_order_seq_cst));
}

void Modes::setConfigured(RoomMode mode) {
  layout_->header->room.configured_mode.store(static_cast<uint32_t>(mode), std::memory_order_seq_cst);
}

bool Modes::lineMoves() const {
  const RoomMode m = mode();
  if (m == RoomMode::Passthrough) return true;
  return m == RoomMode::Open && !inPrequeue(layout_->header->sale, unixMs());
}

}  // namespace concert::shm
