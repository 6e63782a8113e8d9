// The host's cache of the engine's line (cluster.h).
#include "shm/cluster.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "shm/layout.h"
#include "shm/line_rate.h"
#include "shm/nonce.h"
#include "shm/semaphore.h"
#include "shm/worker_slots.h"

namespace concert::shm {

namespace {

constexpr int kReadAttempts = 8;

uint32_t homeOf(uint64_t id, uint32_t size) {
  return static_cast<uint32_t>(hashId(id, 0x636c7573746572ull)) & (size - 1);  // "cluster"
}

uint16_t stampOf(Millis now) {
  return static_cast<uint16_t>(static_cast<uint64_t>(now / 1000));
}

int64_t ageMs(uint64_t word, Millis now) {
  const uint16_t then = static_cast<uint16_t>(word & 0xffffu);
  return static_cast<int64_t>(static_cast<uint16_t>(stampOf(now) - then)) * 1000;
}

constexpr uint64_t kDeparted = uint64_t{1} << 16;

// The agent's state word, Up or not, and whether the reservation's lease lapsed.
bool leaseLapsed(const ClusterArea& area, Millis now) {
  const int64_t until = area.lease_until_ms.load(std::memory_order_seq_cst);
  return until != 0 && now >= until;
}

bool upWord(const ClusterArea& area) {
  return static_cast<ClusterState>(area.state.load(std::memory_order_seq_cst)) == ClusterState::Up;
}

// A 16-byte key (a client, a pass id) as the two words the marks keep.
std::pair<uint64_t, uint64_t> wordsOf(const uint8_t key[16]) {
  uint64_t a = 0, b = 0;
  std::memcpy(&a, key, 8);
  std::memcpy(&b, key + 8, 8);
  return {a, b};
}

}  // namespace

int64_t sharedCapNow(const ClusterArea& area, int64_t share, Millis now) {
  if (area.enabled.load(std::memory_order_relaxed) == 0 || !upWord(area) || !leaseLapsed(area, now)) return share;
  return 0;  // the agent is stuck and the engine gave this share away (cluster.h)
}

// ---------------------------------------------------------------- words
bool ClusterLine::enabled() const {
  return layout_->cluster->enabled.load(std::memory_order_relaxed) != 0;
}

ClusterState ClusterLine::state() const {
  const ClusterArea& area = *layout_->cluster;
  const auto state = static_cast<ClusterState>(area.state.load(std::memory_order_seq_cst));
  if (state == ClusterState::Up && leaseLapsed(area, monotonicMs())) return ClusterState::Down;
  return state;
}

int32_t ClusterLine::hosts() const {
  return layout_->cluster->hosts.load(std::memory_order_relaxed);
}

int64_t ClusterLine::reserved() const {
  return layout_->cluster->reserved.load(std::memory_order_relaxed);
}

int64_t ClusterLine::horizon() const {
  return layout_->cluster->horizon.load(std::memory_order_seq_cst);
}

void ClusterLine::hidePositionsUntil(Millis until) {
  layout_->cluster->positions_from_ms.store(until, std::memory_order_relaxed);
}

int64_t ClusterLine::engineHorizon() const {
  return layout_->cluster->engine_horizon.load(std::memory_order_relaxed);
}

uint64_t ClusterLine::roundTrips() const {
  return layout_->cluster->round_trips.load(std::memory_order_relaxed);
}

bool ClusterLine::failOpen() const {
  return layout_->cluster->fail_open.load(std::memory_order_relaxed) != 0;
}

int64_t ClusterLine::cap() const {
  return layout_->cluster->cap.load(std::memory_order_seq_cst);
}

void ClusterLine::setCap(int64_t cap) {
  if (cap >= 1) layout_->cluster->cap.store(cap, std::memory_order_seq_cst);
}

void ClusterLine::configure(bool enabled, bool fail_open, int64_t lease) {
  ClusterArea& area = *layout_->cluster;
  area.enabled.store(enabled ? 1 : 0, std::memory_order_seq_cst);
  area.fail_open.store(fail_open ? 1 : 0, std::memory_order_seq_cst);
  area.lease.store(lease, std::memory_order_seq_cst);
  uint64_t none = 0;
  uint64_t id = randomNonce();
  area.host_id.compare_exchange_strong(none, id == 0 ? 1 : id, std::memory_order_seq_cst);
  if (enabled && state() == ClusterState::Off) setState(ClusterState::Joining);
}

void ClusterLine::pushOnNextRound(uint32_t what) {
  layout_->cluster->push.fetch_or(what, std::memory_order_seq_cst);
}

uint64_t ClusterLine::hostId() const {
  return layout_->cluster->host_id.load(std::memory_order_seq_cst);
}

uint32_t ClusterLine::pendingPush() const {
  return layout_->cluster->push.load(std::memory_order_seq_cst);
}

void ClusterLine::pushed(uint32_t what) {
  layout_->cluster->push.fetch_and(~what, std::memory_order_seq_cst);
}

void ClusterLine::setState(ClusterState state) {
  layout_->cluster->state.store(static_cast<uint32_t>(state), std::memory_order_seq_cst);
  slots_->wake(Resource::PageSlot);
}

// ---------------------------------------------------------------- the copy
std::optional<ClusterLine::Found> ClusterLine::lookup(uint64_t id) const {
  const ClusterArea& area = *layout_->cluster;
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    const uint64_t before = area.mirror_version.load(std::memory_order_seq_cst);
    const ClusterMirror& m = area.mirrors[area.active.load(std::memory_order_seq_cst) & 1];
    const uint32_t count = std::min(m.count.load(std::memory_order_relaxed), kClusterMirror);
    std::optional<Found> found;
    for (uint32_t probe = 0, i = homeOf(id, kClusterIndex); probe < kClusterIndex;
         ++probe, i = (i + 1) & (kClusterIndex - 1)) {
      const uint64_t word = m.index[i].load(std::memory_order_relaxed);
      if (word == 0) break;
      if ((word >> 16) != id) continue;
      const uint32_t rank = static_cast<uint32_t>(word & 0xffffu);
      if (rank >= count || m.order[rank].id.load(std::memory_order_relaxed) != id) break;
      const uint32_t returned = m.returned.load(std::memory_order_relaxed);
      const uint32_t waiting = m.waiting.load(std::memory_order_relaxed);
      const uint32_t local = m.local.load(std::memory_order_relaxed);
      Found f;
      f.where = Where::Ranked;
      f.rank = rank;
      f.section = rank < returned                     ? LineSection::Returned
                  : rank < returned + waiting         ? LineSection::Waiting
                  : rank < returned + waiting + local ? LineSection::Local
                                                      : LineSection::Missed;
      f.position = f.section == LineSection::Returned ? 1
                   : f.section == LineSection::Waiting
                       ? static_cast<int64_t>(rank - returned) + 1
                       : area.depth.load(std::memory_order_relaxed) + 1;
      f.nonce = m.order[rank].nonce.load(std::memory_order_relaxed);
      f.issued_ms = m.order[rank].issued_ms.load(std::memory_order_relaxed);
      found = f;
      break;
    }
    if (area.mirror_version.load(std::memory_order_seq_cst) - before < 2) return found;
  }
  return std::nullopt;
}

std::vector<ClusterLineEntry> ClusterLine::mirrored() const {
  const ClusterArea& area = *layout_->cluster;
  std::vector<ClusterLineEntry> out;
  const ClusterMirror& m = area.mirrors[area.active.load(std::memory_order_seq_cst) & 1];
  const uint32_t count = std::min(m.count.load(std::memory_order_relaxed), kClusterMirror);
  const uint32_t returned = m.returned.load(std::memory_order_relaxed);
  const uint32_t waiting = m.waiting.load(std::memory_order_relaxed);
  const uint32_t local = m.local.load(std::memory_order_relaxed);
  out.reserve(count);
  for (uint32_t r = 0; r < count; ++r)
    out.push_back({m.order[r].id.load(std::memory_order_relaxed), m.order[r].nonce.load(std::memory_order_relaxed),
                   m.order[r].issued_ms.load(std::memory_order_relaxed),
                   r < returned                     ? LineSection::Returned
                   : r < returned + waiting         ? LineSection::Waiting
                   : r < returned + waiting + local ? LineSection::Local
                                                    : LineSection::Missed});
  return out;
}

void ClusterLine::writeCopy(const std::vector<ClusterLineEntry>& line, bool truncated) {
  ClusterArea& area = *layout_->cluster;
  area.mirror_version.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t next = (area.active.load(std::memory_order_seq_cst) & 1) ^ 1;
  ClusterMirror& m = area.mirrors[next];
  for (auto& word : m.index) word.store(0, std::memory_order_relaxed);
  const uint32_t count = static_cast<uint32_t>(std::min<size_t>(line.size(), kClusterMirror));
  uint32_t returned = 0, waiting = 0, local = 0, written = 0;
  for (uint32_t r = 0; r < count; ++r, ++written) {
    const ClusterLineEntry& e = line[r];
    // Sections come in order (returned, line, local, missed); one out of
    // order, or an id no host hands out, ends the copy.
    if (e.id == 0 || e.id > kMaxId) break;
    if (e.section == LineSection::Returned && r != returned) break;
    if (e.section == LineSection::Waiting && r != returned + waiting) break;
    if (e.section == LineSection::Local && r != returned + waiting + local) break;
    returned += e.section == LineSection::Returned;
    waiting += e.section == LineSection::Waiting;
    local += e.section == LineSection::Local;
    m.order[r].id.store(e.id, std::memory_order_relaxed);
    m.order[r].nonce.store(e.nonce, std::memory_order_relaxed);
    m.order[r].issued_ms.store(e.issued_ms, std::memory_order_relaxed);
    uint32_t i = homeOf(e.id, kClusterIndex);
    while (m.index[i].load(std::memory_order_relaxed) != 0) i = (i + 1) & (kClusterIndex - 1);
    m.index[i].store(e.id << 16 | r, std::memory_order_relaxed);
  }
  m.count.store(written, std::memory_order_relaxed);
  m.returned.store(returned, std::memory_order_relaxed);
  m.waiting.store(waiting, std::memory_order_relaxed);
  m.local.store(local, std::memory_order_relaxed);
  m.truncated.store(truncated || line.size() > count ? 1 : 0, std::memory_order_relaxed);
  area.active.store(next, std::memory_order_seq_cst);
  area.mirror_version.fetch_add(1, std::memory_order_seq_cst);
}

bool ClusterLine::present(uint64_t id, Millis now) const {
  const ClusterArea& area = *layout_->cluster;
  const uint64_t touched = area.touched[homeOf(id, kClusterRecent)].load(std::memory_order_relaxed);
  if ((touched >> 16) == id && ageMs(touched, now) < kPresentMs) return true;
  const uint64_t recent = recentWord(id);
  return recent != 0 && (recent & kDeparted) == 0 && ageMs(recent, now) < kPresentMs;
}

void ClusterLine::publishAway(const std::vector<ClusterLineEntry>& unplaced, Millis now) {
  ClusterArea& area = *layout_->cluster;
  std::vector<ClusterLineEntry> line = mirrored();
  // The engine's part as it was, the tickets issued here since at its back.
  std::vector<ClusterLineEntry> next;
  next.reserve(line.size() + unplaced.size());
  std::vector<uint64_t> had_local, has_local;
  for (const ClusterLineEntry& e : line) {
    if (e.section == LineSection::Local)
      had_local.push_back(e.id);
    else if (e.section != LineSection::Missed)
      next.push_back(e);
  }
  for (const ClusterLineEntry& e : unplaced) {
    if (lookup(e.id) && std::find(had_local.begin(), had_local.end(), e.id) == had_local.end()) continue;
    if (recentWord(e.id) & kDeparted) continue;
    next.push_back({e.id, e.nonce, e.issued_ms, LineSection::Local});
    has_local.push_back(e.id);
  }
  for (const ClusterLineEntry& e : line)
    if (e.section == LineSection::Missed) next.push_back(e);
  const bool rewrite = has_local != had_local;
  if (rewrite) writeCopy(next, false);
  // This host's horizon: up to the free-th ticket whose holder is here.
  int64_t free = static_cast<int64_t>(pages_->cap()) - pages_->occupancy();
  if (gate_) free = gate_->lineFree(free, liveQueueDepth());
  int64_t horizon = 0;
  for (int64_t r = 0, seen = 0; free > 0 && r < static_cast<int64_t>(next.size()); ++r) {
    const ClusterLineEntry& e = next[static_cast<size_t>(r)];
    if (e.section == LineSection::Missed) break;
    horizon = r + 1;
    if ((recentWord(e.id) & kDeparted) == 0 && present(e.id, now) && ++seen == free) break;
  }
  const bool moved = rewrite || area.horizon.load(std::memory_order_relaxed) != horizon;
  area.horizon.store(horizon, std::memory_order_seq_cst);
  area.refreshed_ms.store(now, std::memory_order_relaxed);
  if (moved) slots_->wake(Resource::PageSlot);
}

void ClusterLine::publish(const ClusterRound& round, const std::vector<ClusterLineEntry>* line, bool truncated,
                          Millis now) {
  ClusterArea& area = *layout_->cluster;
  if (line) {
    writeCopy(*line, truncated);
    area.pending.store(0, std::memory_order_seq_cst);
  }
  const bool moved = line != nullptr || area.horizon.load(std::memory_order_relaxed) != round.horizon ||
                     area.depth.load(std::memory_order_relaxed) != round.depth || state() != ClusterState::Up;
  area.lease_until_ms.store(round.lease_until_ms, std::memory_order_seq_cst);
  area.hosts.store(round.hosts, std::memory_order_relaxed);
  area.reserved.store(round.reserved, std::memory_order_relaxed);
  area.horizon.store(round.horizon, std::memory_order_seq_cst);
  area.engine_horizon.store(round.horizon, std::memory_order_relaxed);
  area.depth.store(round.depth, std::memory_order_seq_cst);
  if (round.cap >= 1) area.cap.store(round.cap, std::memory_order_seq_cst);
  area.refreshed_ms.store(now, std::memory_order_relaxed);
  area.state.store(static_cast<uint32_t>(ClusterState::Up), std::memory_order_seq_cst);
  if (moved) slots_->wake(Resource::PageSlot);
}

// ---------------------------------------------------------------- recent
uint64_t ClusterLine::recentWord(uint64_t id) const {
  const uint64_t word = layout_->cluster->recent[homeOf(id, kClusterRecent)].load(std::memory_order_seq_cst);
  return (word >> 17) == id ? word : 0;
}

void ClusterLine::remember(uint64_t id, Millis now, bool departed) {
  std::atomic<uint64_t>& slot = layout_->cluster->recent[homeOf(id, kClusterRecent)];
  slot.store(id << 17 | (departed ? kDeparted : 0) | stampOf(now), std::memory_order_seq_cst);
}

// ---------------------------------------------------------------- lookups
ClusterLine::Found ClusterLine::find(const TicketCookie& cookie, Millis now) {
  const uint64_t id = cookie.ticket;
  if (id == 0 || id > kMaxId) return {};
  const uint64_t recent = recentWord(id);
  if (recent & kDeparted) return {};
  if (std::optional<Found> found = lookup(id)) {
    if (found->nonce != cookie.nonce) return {};
    return *found;
  }
  Found pending;
  pending.where = Where::Pending;
  pending.nonce = cookie.nonce;
  if (state() != ClusterState::Up) return pending;  // the engine is away: keep everyone waiting
  const ClusterArea& area = *layout_->cluster;
  const ClusterMirror& m = area.mirrors[area.active.load(std::memory_order_seq_cst) & 1];
  if (m.truncated.load(std::memory_order_relaxed)) return pending;  // perhaps beyond the copy's end
  if (recent != 0) return ageMs(recent, now) < kPendingMs ? pending : Found{};
  remember(id, now, false);  // first seen here: the engine may not have listed it yet
  return pending;
}

bool ClusterLine::ready(int64_t rank) const {
  switch (flow()) {
    case LineFlow::Still: return false;
    case LineFlow::Everyone: return true;
    case LineFlow::ByCap: break;
  }
  // The engine away: closed admits nobody from the line; open moves this
  // host's own line, by the horizon the agent sets (publishAway).
  if (state() != ClusterState::Up && !failOpen()) return false;
  return rank >= 0 && rank < horizon();
}

TicketView ClusterLine::view(const TicketCookie& cookie, Millis now, Contact contact) {
  TicketView v;
  const Found f = find(cookie, now);
  if (f.where == Where::Gone) return v;
  const bool up = state() == ClusterState::Up;
  if (f.where == Where::Ranked) {
    v.raw_position = f.position;
    v.state = f.section != LineSection::Missed && ready(f.rank) ? TicketState::Ready : TicketState::Waiting;
    // With the engine away this host's copy stops where its last round left
    // it, and another host's may be newer: no position rather than one that
    // could grow from one host to the next.
    // A missed ticket has no place until its holder's touch returns it
    // (ahead of the line: the engine's next round says where), so none is
    // shown meanwhile either: the back of the line would be a position that
    // grew.
    v.placed = up && f.section != LineSection::Local && f.section != LineSection::Missed &&
               now >= layout_->cluster->positions_from_ms.load(std::memory_order_relaxed);
    // Its turn had come by the engine's last word and its holder is here, but
    // this host cannot let it in now: the engine restarts the turn's clock
    // once back, so the turn is not counted missed for the outage.
    if (!up && v.state == TicketState::Waiting && f.section != LineSection::Missed && f.rank < engineHorizon())
      waitNote(cookie, now);
  } else {
    v.raw_position = layout_->cluster->depth.load(std::memory_order_relaxed) + 1;
    v.state = TicketState::Waiting;
    v.placed = false;
  }
  v.position = v.state == TicketState::Waiting ? v.raw_position : 0;
  // A missed ticket's holder is back: the engine returns it on this note,
  // sent at once, and a returned ticket that misses again leaves the line
  // (a turn comes back once). The engine's copy does not say when a missed
  // ticket's turn would come, so here a poll or a stream brings it back as
  // a page request does; the hold of the request it was issued to does not.
  if (contact != Contact::Own && f.where == Where::Ranked && f.section == LineSection::Missed)
    post({NoteKind::Touch, cookie.ticket, cookie.nonce, 0});
  else
    touchNote(cookie, now);
  return v;
}

void ClusterLine::touchNote(const TicketCookie& cookie, Millis now) {
  std::atomic<uint64_t>& slot = layout_->cluster->touched[homeOf(cookie.ticket, kClusterRecent)];
  const uint64_t word = slot.load(std::memory_order_relaxed);
  if ((word >> 16) == cookie.ticket && ageMs(word, now) < kTouchEveryMs) return;
  slot.store(cookie.ticket << 16 | stampOf(now), std::memory_order_relaxed);
  post({NoteKind::Keep, cookie.ticket, cookie.nonce, 0});
}

void ClusterLine::waitNote(const TicketCookie& cookie, Millis now) {
  std::atomic<uint64_t>& slot = layout_->cluster->waited[homeOf(cookie.ticket, kClusterRecent)];
  const uint64_t tenth = static_cast<uint64_t>(now / 100) & 0xffffu;
  const uint64_t word = slot.load(std::memory_order_relaxed);
  if ((word >> 16) == cookie.ticket && ((tenth - (word & 0xffffu)) & 0xffffu) < kWaitEveryMs / 100) return;
  slot.store(cookie.ticket << 16 | tenth, std::memory_order_relaxed);
  post({NoteKind::Wait, cookie.ticket, cookie.nonce, 0});
}

TicketView ClusterLine::render(const TicketCookie& cookie, Millis now, Millis, Contact contact) {
  return view(cookie, now, contact);
}

TicketView ClusterLine::touch(const TicketCookie& cookie, Millis now, Millis, Contact contact) {
  return view(cookie, now, contact);
}

TicketView ClusterLine::poll(const TicketCookie& cookie, Millis now, Millis) {
  TicketView v = view(cookie, now, Contact::Look);
  // One accepted poll a second per ticket on this host (direct-mapped: a
  // ticket sharing the word with another is limited less, never more).
  std::atomic<uint64_t>& slot = layout_->cluster->polled[homeOf(cookie.ticket, kClusterRecent)];
  const uint64_t tenth = static_cast<uint64_t>(now / 100) & 0xffffu;
  const uint64_t word = slot.load(std::memory_order_relaxed);
  if ((word >> 16) == cookie.ticket && ((tenth - (word & 0xffffu)) & 0xffffu) < 10) {
    v.rate_limited = true;
    return v;
  }
  slot.store(cookie.ticket << 16 | tenth, std::memory_order_relaxed);
  // No per-ticket record here to time the cookies by: every answer renews them.
  v.refresh_cookie = v.state != TicketState::Unknown;
  return v;
}

std::optional<uint64_t> ClusterLine::nonceOf(uint64_t ticket) const {
  if (recentWord(ticket) & kDeparted) return std::nullopt;
  std::optional<Found> found = lookup(ticket);
  if (!found) return std::nullopt;
  return found->nonce;
}

std::vector<LineEntry> ClusterLine::head(size_t limit, Millis) const {
  std::vector<LineEntry> out;
  const int64_t unix_now = unixMs();
  for (const ClusterLineEntry& e : mirrored()) {
    if (out.size() >= limit) break;
    if (e.section == LineSection::Missed || (recentWord(e.id) & kDeparted)) continue;
    LineEntry entry;
    entry.ticket = e.id;
    entry.returned = e.section == LineSection::Returned;
    entry.age = std::max<int64_t>(0, unix_now - e.issued_ms);
    out.push_back(entry);
  }
  return out;
}

int64_t ClusterLine::queueDepth() const {
  return liveQueueDepth();
}

int64_t ClusterLine::liveQueueDepth() const {
  const ClusterArea& area = *layout_->cluster;
  return area.depth.load(std::memory_order_seq_cst) + area.pending.load(std::memory_order_seq_cst);
}

// ---------------------------------------------------------------- changes
uint64_t ClusterLine::takeNumber() {
  std::atomic<uint64_t>& numbers = layout_->cluster->numbers;
  uint64_t word = numbers.load(std::memory_order_seq_cst);
  while ((word & 0xffffu) != 0) {
    if (numbers.compare_exchange_weak(word, word + (uint64_t{1} << 16) - 1, std::memory_order_seq_cst))
      return word >> 16;
  }
  return 0;
}

void ClusterLine::offerNumbers(uint64_t first, uint32_t count) {
  count = std::min<uint32_t>(count, 0xffffu);
  layout_->cluster->numbers.store(first << 16 | count, std::memory_order_seq_cst);
}

uint32_t ClusterLine::numbersLeft() const {
  return static_cast<uint32_t>(layout_->cluster->numbers.load(std::memory_order_seq_cst) & 0xffffu);
}

Issued ClusterLine::issue(WorkerSlot, int64_t max_queue, Millis now, const ClientTicketing* client) {
  Issued out;
  if (max_queue > 0 && liveQueueDepth() >= max_queue) {
    out.outcome = IssueOutcome::Breaker;
    return out;
  }
  if (client && client->max_per_client > 0 && clientFull(client->key, unixSeconds())) {
    out.outcome = IssueOutcome::ClientLimit;
    return out;
  }
  ClusterArea& area = *layout_->cluster;
  uint64_t id = takeNumber();
  if (id == 0) {  // the block ran out before the agent's next round, or the engine is away
    uint64_t next = area.local_next.load(std::memory_order_seq_cst);
    for (;;) {
      const uint64_t seed = next != 0 ? next : kLocalIds | (randomNonce() & ((kLocalIds - 1) >> 8)) << 8;
      if (seed > kMaxId) break;
      if (area.local_next.compare_exchange_weak(next, seed + 1, std::memory_order_seq_cst)) {
        id = seed;
        break;
      }
    }
  }
  if (id == 0) {
    layout_->counter(Counter::RingFullTotal).fetch_add(1, std::memory_order_relaxed);
    out.outcome = IssueOutcome::RingFull;
    return out;
  }
  out.outcome = IssueOutcome::Queued;
  out.cookie = TicketCookie{id, randomNonce()};
  remember(id, now, false);
  ClusterNoteValue enroll{NoteKind::Enroll, id, out.cookie.nonce, unixMs()};
  if (client) std::tie(enroll.key_a, enroll.key_b) = wordsOf(client->key);
  post(enroll);
  out.position = area.depth.load(std::memory_order_relaxed) + area.pending.fetch_add(1, std::memory_order_seq_cst) + 1;
  out.ready = false;  // its turn comes once the engine lists it
  layout_->counter(Counter::QueuedTotal).fetch_add(1, std::memory_order_relaxed);
  return out;
}

bool ClusterLine::claim(const TicketCookie& cookie, Claimed* claimed) {
  const Millis now = monotonicMs();
  const Found f = find(cookie, now);
  if (f.where == Where::Gone) return false;
  const bool up = state() == ClusterState::Up;
  if (f.where != Where::Ranked || f.section == LineSection::Missed || !ready(f.rank)) return false;
  const bool metered = flow() == LineFlow::ByCap && gate_ != nullptr;
  const LineToken token = metered ? gate_->takeToken() : LineToken::Unmetered;
  if (token == LineToken::Refused) {
    // Its turn came and its holder is here: the engine must not count the turn missed for want of a token.
    if (f.where == Where::Ranked) waitNote(cookie, now);
    return false;
  }
  // One claim per ticket on this host: the departed mark goes in by CAS.
  std::atomic<uint64_t>& slot = layout_->cluster->recent[homeOf(cookie.ticket, kClusterRecent)];
  uint64_t word = slot.load(std::memory_order_seq_cst);
  for (;;) {
    if ((word >> 17) == cookie.ticket && (word & kDeparted)) {
      if (token == LineToken::Taken) gate_->giveBackToken();
      return false;
    }
    if (slot.compare_exchange_weak(word, cookie.ticket << 17 | kDeparted | stampOf(now), std::memory_order_seq_cst))
      break;
  }
  post({NoteKind::Leave, cookie.ticket, cookie.nonce, 0});
  line_rate_->admitted();
  // A waiting ticket admitted past a whole cap of older waiting tickets
  // jumped people whose turn had not come (as on one host, tickets.h).
  const bool inversion = f.where == Where::Ranked && f.section == LineSection::Waiting && up &&
                         flow() == LineFlow::ByCap && f.position - 1 >= cap();
  if (inversion) layout_->counter(Counter::FifoInversionsTotal).fetch_add(1, std::memory_order_relaxed);
  if (claimed) {
    claimed->from_line = f.section != LineSection::Returned;
    claimed->waited = f.issued_ms > 0 ? std::max<int64_t>(0, unixMs() - f.issued_ms) : 0;
    claimed->inversion = inversion;
  }
  return true;
}

void ClusterLine::retire(uint64_t ticket, bool timeout) {
  if (ticket == 0 || ticket > kMaxId) return;
  remember(ticket, monotonicMs(), true);
  post({NoteKind::Leave, ticket, 0, 0});
  if (timeout) {
    layout_->counter(Counter::TimeoutsTotal).fetch_add(1, std::memory_order_relaxed);
    layout_->counter(Counter::TimeoutsQueueHoldTotal).fetch_add(1, std::memory_order_relaxed);
  }
  slots_->wake(Resource::PageSlot);
}

bool ClusterLine::remove(uint64_t ticket, Counter counted) {
  if (!nonceOf(ticket)) return false;
  remember(ticket, monotonicMs(), true);
  post({NoteKind::Leave, ticket, 0, 0});
  layout_->counter(counted).fetch_add(1, std::memory_order_relaxed);
  slots_->wake(Resource::PageSlot);
  return true;
}

// ---------------------------------------------------------------- notes
void ClusterLine::post(const ClusterNoteValue& note) {
  ClusterArea& area = *layout_->cluster;
  uint64_t at = area.notes_reserved.load(std::memory_order_seq_cst);
  for (;;) {
    if (at - area.notes_read.load(std::memory_order_seq_cst) >= kClusterNotes) return;  // full: dropped
    if (area.notes_reserved.compare_exchange_weak(at, at + 1, std::memory_order_seq_cst)) break;
  }
  ClusterNote& n = area.notes[at % kClusterNotes];
  n.id.store(note.id, std::memory_order_relaxed);
  n.nonce.store(note.nonce, std::memory_order_relaxed);
  n.issued_ms.store(note.issued_ms, std::memory_order_relaxed);
  n.key_a.store(note.key_a, std::memory_order_relaxed);
  n.key_b.store(note.key_b, std::memory_order_relaxed);
  n.seq.store((at + 1) << 8 | static_cast<uint64_t>(note.kind), std::memory_order_seq_cst);
}

std::vector<ClusterNoteValue> ClusterLine::takeNotes(size_t max, Millis now) {
  ClusterArea& area = *layout_->cluster;
  std::vector<ClusterNoteValue> out;
  uint64_t read = area.notes_read.load(std::memory_order_seq_cst);
  const uint64_t reserved = area.notes_reserved.load(std::memory_order_seq_cst);
  while (read < reserved && out.size() < max) {
    ClusterNote& n = area.notes[read % kClusterNotes];
    const uint64_t seq = n.seq.load(std::memory_order_seq_cst);
    if ((seq >> 8) != read + 1) {
      // Not written yet: its writer is between the two steps, or died there.
      if (stuck_at_ != read) {
        stuck_at_ = read;
        stuck_since_ = now;
        break;
      }
      if (now - stuck_since_ < kNoteWaitMs) break;
      ++read;  // skipped
      continue;
    }
    out.push_back({static_cast<NoteKind>(seq & 0xffu), n.id.load(std::memory_order_relaxed),
                   n.nonce.load(std::memory_order_relaxed), n.issued_ms.load(std::memory_order_relaxed),
                   n.key_a.load(std::memory_order_relaxed), n.key_b.load(std::memory_order_relaxed)});
    ++read;
  }
  area.notes_read.store(read, std::memory_order_seq_cst);
  return out;
}

void ClusterLine::wantSlot(const TicketCookie* cookie) {
  if (!enabled()) return;
  layout_->cluster->wanted.fetch_add(1, std::memory_order_relaxed);
  // Its holder is here for the page: the turn must not pass while this host
  // waits for a slot (the engine restarts its clock; the wait is bounded by
  // the hold, after which the holder only polls, which restarts nothing).
  if (cookie && state() == ClusterState::Up) {
    const Millis now = monotonicMs();
    const Found f = find(*cookie, now);
    if (f.where == Where::Ranked && f.section != LineSection::Missed && ready(f.rank)) waitNote(*cookie, now);
  }
}

uint64_t ClusterLine::takeWanted() {
  return layout_->cluster->wanted.exchange(0, std::memory_order_seq_cst);
}

void ClusterLine::setMarks(ClusterMarks& table, std::vector<ClusterMarkValue> marks) {
  std::sort(marks.begin(), marks.end(),
            [](const ClusterMarkValue& x, const ClusterMarkValue& y) { return x.a != y.a ? x.a < y.a : x.b < y.b; });
  // An odd version is a writer that died mid-table (the agent killed, or
  // the whole host before a restart on its state dir): made even first, so
  // that this write's bracket is odd while it lasts and even after.
  const uint64_t left = table.version.load(std::memory_order_seq_cst);
  if (left & 1) table.version.store(left + 1, std::memory_order_seq_cst);
  table.version.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t count = static_cast<uint32_t>(std::min<size_t>(marks.size(), kClusterMarks));
  for (uint32_t i = 0; i < count; ++i) {
    table.marks[i].a.store(marks[i].a, std::memory_order_relaxed);
    table.marks[i].b.store(marks[i].b, std::memory_order_relaxed);
    table.marks[i].until.store(marks[i].until, std::memory_order_relaxed);
  }
  table.count.store(count, std::memory_order_relaxed);
  table.version.fetch_add(1, std::memory_order_seq_cst);
}

bool ClusterLine::hasMark(const ClusterMarks& table, uint64_t a, uint64_t b, int64_t unix_s) const {
  if (!enabled()) return false;
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    const uint64_t before = table.version.load(std::memory_order_seq_cst);
    if (before & 1) continue;
    uint32_t low = 0, high = std::min(table.count.load(std::memory_order_relaxed), kClusterMarks);
    while (low < high) {  // the first mark not below (a, b)
      const uint32_t mid = low + (high - low) / 2;
      const uint64_t ma = table.marks[mid].a.load(std::memory_order_relaxed);
      const uint64_t mb = table.marks[mid].b.load(std::memory_order_relaxed);
      if (ma < a || (ma == a && mb < b))
        low = mid + 1;
      else
        high = mid;
    }
    const bool found = low < std::min(table.count.load(std::memory_order_relaxed), kClusterMarks) &&
                       table.marks[low].a.load(std::memory_order_relaxed) == a &&
                       table.marks[low].b.load(std::memory_order_relaxed) == b &&
                       table.marks[low].until.load(std::memory_order_relaxed) > unix_s;
    if (table.version.load(std::memory_order_seq_cst) == before) return found;
  }
  return false;
}

void ClusterLine::setRemoteBans(const std::vector<ClusterMarkValue>& bans) {
  setMarks(layout_->cluster->bans, bans);
}

void ClusterLine::setPromotions(const std::vector<ClusterMarkValue>& promoted) {
  setMarks(layout_->cluster->promoted, promoted);
}

bool ClusterLine::bannedRemotely(const uint8_t key[16], int64_t unix_s) const {
  const auto [a, b] = wordsOf(key);
  return hasMark(layout_->cluster->bans, a, b, unix_s);
}

bool ClusterLine::promotedElsewhere(uint64_t ticket, uint64_t nonce, int64_t unix_s) const {
  return hasMark(layout_->cluster->promoted, ticket, nonce, unix_s);
}

void ClusterLine::promote(uint64_t ticket, uint64_t nonce, int64_t until) {
  if (enabled()) post({NoteKind::Promote, ticket, nonce, until});
}

void ClusterLine::setRevocations(const std::vector<ClusterMarkValue>& revoked) {
  setMarks(layout_->cluster->revoked, revoked);
}

void ClusterLine::setFullClients(const std::vector<ClusterMarkValue>& full) {
  setMarks(layout_->cluster->full, full);
}

bool ClusterLine::clientFull(const uint8_t key[16], int64_t unix_s) const {
  const auto [a, b] = wordsOf(key);
  return hasMark(layout_->cluster->full, a, b, unix_s);
}

bool ClusterLine::revokedElsewhere(const uint8_t id[16], int64_t unix_s) const {
  const auto [a, b] = wordsOf(id);
  return hasMark(layout_->cluster->revoked, a, b, unix_s);
}

void ClusterLine::revoke(const uint8_t id[16], int64_t until) {
  if (!enabled()) return;
  const auto [a, b] = wordsOf(id);
  post({NoteKind::Revoke, a, b, until});
}

void ClusterLine::countRoundTrip() {
  layout_->cluster->round_trips.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace concert::shm
