// Room: the rules are at the top of room.h.
#include "admission/room.h"

#include <algorithm>

#include "common/clock.h"

namespace concert::admission {

shm::LineFlow Room::flow() const {
  const shm::Modes& modes = segment_->modes();
  switch (modes.mode()) {
    case shm::RoomMode::Passthrough: return shm::LineFlow::Everyone;
    case shm::RoomMode::Pause:
    case shm::RoomMode::Reject: return shm::LineFlow::Still;
    case shm::RoomMode::Open: break;
  }
  // Open, but a scheduled sale's pre-queue holds the line (shm/sale.h).
  return modes.lineMoves() ? shm::LineFlow::ByCap : shm::LineFlow::Still;
}

shm::RoomMode Room::mode() const {
  return segment_->modes().mode();
}

namespace {

// Slots the line is owed by the credit, with `depth` visitors in it.
int64_t creditOwed(const shm::Sessions& sessions, int64_t depth) {
  if (depth <= 0) return 0;
  return std::min(depth, sessions.creditMilli() / shm::Sessions::kUnit);
}

}  // namespace

int64_t Room::lineFree(int64_t free, int64_t depth) const {
  const shm::Sessions& sessions = segment_->sessions();
  const int64_t ranked = sessions.waiting();
  const int64_t line = ranked == 0 ? free : std::max(free - ranked, std::min(free, creditOwed(sessions, depth)));
  return std::min(line, segment_->admitRate().available(monotonicNs()));
}

shm::LineToken Room::takeToken() {
  shm::AdmitRate& rate = segment_->admitRate();
  if (!rate.limited()) return shm::LineToken::Unmetered;
  return rate.take(monotonicNs()) ? shm::LineToken::Taken : shm::LineToken::Refused;
}

void Room::giveBackToken() {
  segment_->admitRate().giveBack();
}

bool Room::nobodyWaits() const {
  return segment_->line().liveQueueDepth() == 0 && segment_->sessions().waiting() == 0;
}

int64_t Room::owed() const {
  if (flow() != shm::LineFlow::ByCap) return 0;
  const int64_t depth = segment_->line().liveQueueDepth();
  return std::min(creditOwed(segment_->sessions(), depth), segment_->admitRate().available(monotonicNs()));
}

bool Room::straightIn(shm::WorkerSlot slot) {
  if (flow() != shm::LineFlow::ByCap || !nobodyWaits()) return false;
  if (!segment_->pages().tryAcquire(slot)) {
    segment_->cluster().wantSlot();  // -cluster: this host's share is spent; the agent asks for more
    return false;
  }
  if (takeToken() == shm::LineToken::Refused) {
    segment_->pages().release(slot);
    return false;
  }
  return true;
}

bool Room::takeRankedSlot(shm::WorkerSlot slot, int rank, double newcomer_share) {
  shm::Sessions& sessions = segment_->sessions();
  const int64_t free = static_cast<int64_t>(segment_->pages().cap()) - segment_->pages().occupancy();
  if (free - owed() - sessions.waitingAhead(rank) <= 0 || !segment_->pages().tryAcquire(slot)) {
    segment_->cluster().wantSlot();
    return false;
  }
  const int64_t depth = segment_->line().liveQueueDepth();
  if (flow() == shm::LineFlow::ByCap && depth > 0 && newcomer_share > 0) {
    // share / (1 - share) slots of credit per ranked slot; share 1 means the
    // line always goes first.
    const int64_t delta = newcomer_share >= 1
                              ? shm::Sessions::kMaxCredit
                              : static_cast<int64_t>(newcomer_share / (1 - newcomer_share) * shm::Sessions::kUnit + 0.5);
    sessions.addCredit(delta);
  }
  return true;
}

bool Room::takeTurn(shm::WorkerSlot slot, const shm::TicketCookie& cookie, shm::Claimed* claimed) {
  if (!segment_->pages().tryAcquire(slot)) {
    segment_->cluster().wantSlot(&cookie);
    return false;
  }
  if (!segment_->line().claim(cookie, claimed)) {
    segment_->pages().release(slot);
    return false;
  }
  // A turn from the line spends a slot of the line's credit.
  shm::Sessions& sessions = segment_->sessions();
  if (sessions.creditMilli() >= shm::Sessions::kUnit) sessions.addCredit(-shm::Sessions::kUnit);
  return true;
}

}  // namespace concert::admission
