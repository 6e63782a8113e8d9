// Segment::copyInto: a restart into another geometry (segment.h).
//
// Nothing moves while it copies: either no process runs on the old segment
// (a restart, after recover()) or every process that maps it is parked
// between two of its events, where no entry is half written by a live
// process (a reload that grows it). Nobody maps the new one yet. So plain
// loads and stores suffice. The rules that make the copy exact:
//   * The header is copied whole (counters, the line's numbers, the pace,
//     the room's mode and rate, the once marks, the sale), then given the
//     new geometry.
//   * A ticket lives in the entry its number names (number mod ring), so a
//     ring that only grows takes every entry of the old one to its own
//     entry of the new one: two entries of the old ring differ modulo the
//     old size, hence modulo any multiple of it. Every number stays below
//     next_ticket, so an entry's numbers still only grow. A number from L
//     on that has no entry of its own in the new ring (the old one skipped
//     it for a carried returned ticket) is written Finished there, as a
//     position counts every number from L that is not out of the line. The
//     bits and their counts are then rebuilt from the state words, and
//     every position comes out as it was.
//   * Client entries, passes and revocations move to their home bucket in
//     the new tables (first free entry of the probe run); a ticket's client
//     tag follows its client's new index, and its lap the new ring.
//   * Per-slot histogram cells move slot for slot; the cells of slots the
//     new segment does not have are added to its slot 0.
//   * The history and the cluster cache have a fixed size: copied as bytes.
#include <cstring>
#include <vector>

#include "shm/layout.h"
#include "shm/segment.h"

namespace concert::shm {

namespace {

constexpr uint32_t kNoIndex = 0xffffffffu;

// The first free entry of `key`'s probe run in a table of `mask` + 1
// entries, at most `window` from home; kNoIndex when there is none.
template <typename Used>
uint32_t freeEntry(uint64_t a, uint64_t b, uint32_t mask, uint32_t window, Used used) {
  const uint32_t home = static_cast<uint32_t>(hashId(a, b)) & mask;
  const uint32_t probes = window < mask + 1 ? window : mask + 1;
  for (uint32_t i = 0; i < probes; ++i) {
    const uint32_t index = (home + i) & mask;
    if (!used(index)) return index;
  }
  return kNoIndex;
}

template <typename T>
void copyAtomic(std::atomic<T>& to, const std::atomic<T>& from) {
  to.store(from.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

// Probe windows no longer than the tables' own lookups use.
constexpr uint32_t kClientWindow = 32;
constexpr uint32_t kPassWindow = 128;
constexpr uint32_t kRevocationWindow = 64;

}  // namespace

bool Segment::copyInto(Segment& to, std::string* why) const {
  const Layout& a = view();
  Layout& b = to.view();
  const Geometry& ga = a.geometry;
  const Geometry& gb = b.geometry;
  if (gb.ring_size < ga.ring_size || gb.pass_table_size < ga.pass_table_size ||
      gb.revocation_table_size < ga.revocation_table_size || gb.client_table_size < ga.client_table_size) {
    *why = "the new segment is smaller than the old one in some table";
    return false;
  }
  const BlockPhase phase = blockPhase(a.header->sale.block.load(std::memory_order_seq_cst));
  if (phase == BlockPhase::Opening || phase == BlockPhase::Open) {
    *why = "a sale's pre-queue block is open (its size is half the ring)";
    return false;
  }

  // -- the header, then the new geometry over it
  const uint64_t total_bytes = b.header->total_bytes;
  std::memcpy(static_cast<void*>(b.header), a.header, sizeof(Header));
  Header& hb = *b.header;
  hb.ring_size = gb.ring_size;
  hb.total_bytes = total_bytes;
  hb.worker_slots = gb.worker_slots;
  hb.pass_table_size = gb.pass_table_size;
  hb.revocation_table_size = gb.revocation_table_size;
  hb.client_table_size = gb.client_table_size;

  // -- slot records: each slot's ledger, its process and its cells as they
  // are (a running process's holds come along); the histogram cells of
  // slots the new segment does not have (free ones: a restart) go to slot 0
  for (uint32_t s = 0; s < ga.worker_slots; ++s) {
    const SlotRecord& from = a.slots[s];
    if (s < gb.worker_slots) {
      SlotRecord& into = b.slots[s];
      copyAtomic(into.page, from.page);
      copyAtomic(into.asset, from.asset);
      copyAtomic(into.long_lived, from.long_lived);
      copyAtomic(into.sessions_waiting, from.sessions_waiting);
      for (int r = 0; r < kPriorityRanks; ++r) copyAtomic(into.ranked_waiting[r], from.ranked_waiting[r]);
      copyAtomic(into.pid, from.pid);
      copyAtomic(into.heartbeat, from.heartbeat);
      copyAtomic(into.generation, from.generation);
      copyAtomic(into.waiting_mask, from.waiting_mask);
      copyAtomic(into.wake_pending, from.wake_pending);
    }
    const uint32_t cells_into = s < gb.worker_slots ? s : 0;
    for (size_t h = 0; h < kHistogramCount; ++h) {
      const HistogramCells& cells_from = from.histograms[h];
      HistogramCells& cells = b.slots[cells_into].histograms[h];
      for (size_t i = 0; i <= kHistogramBounds; ++i)
        cells.buckets[i].fetch_add(cells_from.buckets[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
      cells.sum_micros.fetch_add(cells_from.sum_micros.load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
  }

  // -- clients, to their home runs; old index -> new index for the tags
  std::vector<uint32_t> client_moved(ga.client_table_size, kNoIndex);
  for (uint32_t i = 0; i < ga.client_table_size; ++i) {
    const ClientEntry& from = a.clients[i];
    const uint64_t word = from.state.load(std::memory_order_relaxed);
    // An entry a dead writer was updating has its key whole: Live again.
    if (clientState(word) != ClientState::Live && clientState(word) != ClientState::Updating) continue;
    const uint64_t ka = from.key[0].load(std::memory_order_relaxed);
    const uint64_t kb = from.key[1].load(std::memory_order_relaxed);
    const uint32_t j = freeEntry(ka, kb, b.client_mask, kClientWindow, [&](uint32_t x) {
      return clientState(b.clients[x].state.load(std::memory_order_relaxed)) != ClientState::Empty;
    });
    if (j == kNoIndex) continue;  // its run is full: the client starts anew
    ClientEntry& into = b.clients[j];
    copyAtomic(into.key[0], from.key[0]);
    copyAtomic(into.key[1], from.key[1]);
    copyAtomic(into.live, from.live);
    copyAtomic(into.strikes, from.strikes);
    copyAtomic(into.ban, from.ban);
    copyAtomic(into.last_seen, from.last_seen);
    into.state.store(packClient(clientVersion(word) + 1, ClientState::Live, clientOwner(word)),
                     std::memory_order_relaxed);
    client_moved[i] = j;
  }

  // -- the ticket ring: each entry to the entry its number names
  for (uint32_t i = 0; i < ga.ring_size; ++i) {
    const TicketEntry& from = a.entries[i];
    const uint64_t word = from.state.load(std::memory_order_relaxed);
    const uint64_t ticket = entryTicket(word);
    if (ticket == 0) continue;
    const uint32_t j = b.index(ticket);
    TicketEntry& into = b.entries[j];
    copyAtomic(into.nonce, from.nonce);
    copyAtomic(into.last_seen, from.last_seen);
    copyAtomic(into.last_poll, from.last_poll);
    copyAtomic(into.ready_since, from.ready_since);
    copyAtomic(into.seen, from.seen);
    into.state.store(word, std::memory_order_relaxed);
    copyAtomic(b.cookie_sent[j], a.cookie_sent[i]);
    copyAtomic(b.issued_at[j], a.issued_at[i]);
    const uint32_t tag = a.client_tags[i].load(std::memory_order_relaxed);
    uint32_t moved = 0;
    if (tagNames(tag, ticket, a.ring_bits) && tagClient(tag) < ga.client_table_size &&
        client_moved[tagClient(tag)] != kNoIndex)
      moved = packClientTag(ticket, b.ring_bits, client_moved[tagClient(tag)]);
    b.client_tags[j].store(moved, std::memory_order_relaxed);
  }

  // -- numbers of the line without an entry of their own in the new ring: a
  // position counts every number from L on that is not out of the line, so
  // one the old ring skipped (its entry held a carried returned ticket)
  // or whose entry moved elsewhere must read as finished here too
  const uint64_t low = hb.low_water.load(std::memory_order_relaxed);
  const uint64_t next = hb.next_ticket.load(std::memory_order_relaxed);
  for (uint64_t t = low; t < next; ++t) {
    TicketEntry& into = b.entry(t);
    const uint64_t word = into.state.load(std::memory_order_relaxed);
    const uint64_t held = entryTicket(word);
    if (held == t || (held != 0 && held < t && entryState(word) == EntryState::Returned)) continue;
    into.state.store(packEntry(t, EntryState::Finished, kOwnerNone), std::memory_order_relaxed);
    b.client_tags[b.index(t)].store(0, std::memory_order_relaxed);
  }

  // -- passes (no holds: nothing runs), to their home runs
  for (uint32_t i = 0; i < ga.pass_table_size; ++i) {
    const uint64_t word = a.pass_state[i].load(std::memory_order_relaxed);
    if (passState(word) != PassState::Live) continue;
    const uint64_t ia = a.pass_id[2 * i].load(std::memory_order_relaxed);
    const uint64_t ib = a.pass_id[2 * i + 1].load(std::memory_order_relaxed);
    const uint32_t j = freeEntry(ia, ib, b.pass_mask, kPassWindow, [&](uint32_t x) {
      return passState(b.pass_state[x].load(std::memory_order_relaxed)) != PassState::Empty;
    });
    if (j == kNoIndex) continue;
    b.pass_id[2 * j].store(ia, std::memory_order_relaxed);
    b.pass_id[2 * j + 1].store(ib, std::memory_order_relaxed);
    copyAtomic(b.pass_last_used[j], a.pass_last_used[i]);
    const uint32_t slots = ga.worker_slots < gb.worker_slots ? ga.worker_slots : gb.worker_slots;
    for (uint32_t slot = 0; slot < slots; ++slot)
      for (PassProto proto : {PassProto::H1, PassProto::H2})
        copyAtomic(b.passCell(j, slot, proto), a.passCell(i, slot, proto));
    b.pass_state[j].store(word, std::memory_order_relaxed);
  }

  // -- revocations, to their home runs
  for (uint32_t i = 0; i < ga.revocation_table_size; ++i) {
    const RevocationEntry& from = a.revocations[i];
    const uint64_t word = from.state.load(std::memory_order_relaxed);
    if (revocationState(word) != RevocationState::Live) continue;
    const uint64_t ia = from.id[0].load(std::memory_order_relaxed);
    const uint64_t ib = from.id[1].load(std::memory_order_relaxed);
    const uint32_t j = freeEntry(ia, ib, b.revocation_mask, kRevocationWindow, [&](uint32_t x) {
      return revocationState(b.revocations[x].state.load(std::memory_order_relaxed)) != RevocationState::Empty;
    });
    if (j == kNoIndex) continue;
    RevocationEntry& into = b.revocations[j];
    into.id[0].store(ia, std::memory_order_relaxed);
    into.id[1].store(ib, std::memory_order_relaxed);
    copyAtomic(into.until, from.until);
    into.state.store(word, std::memory_order_relaxed);
  }

  // -- fixed-size areas
  std::memcpy(static_cast<void*>(b.history), a.history, sizeof(HistoryRing));
  std::memcpy(static_cast<void*>(b.cluster), a.cluster, sizeof(ClusterArea));

  to.tickets_.resync();
  return true;
}

}  // namespace concert::shm
