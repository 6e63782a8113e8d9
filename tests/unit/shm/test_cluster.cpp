// The host's cache of the engine's line (cluster.h): tickets issued here and
// elsewhere, positions and turns from the published line, claims, the
// mailbox of notes, ticket numbers, the engine away, bans of other hosts.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

constexpr Millis kTtl = 300'000;

std::unique_ptr<Segment> makeCluster(int32_t cap = 10, bool fail_open = true) {
  Geometry g;
  g.ring_size = 1u << 10;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  auto seg = Segment::create(g, cap, 100);
  seg->cluster().configure(true, fail_open, 4);
  seg->cluster().setCap(cap);
  seg->pages().setShare(0);
  return seg;
}

ClusterRound round(int64_t horizon, int64_t depth, int64_t reserved = 4, int32_t hosts = 1) {
  ClusterRound r;
  r.hosts = hosts;
  r.reserved = reserved;
  r.horizon = horizon;
  r.depth = depth;
  r.cap = 10;
  return r;
}

// The engine's line as the agent would publish it: the given tickets in order.
void publish(Segment& seg, const std::vector<TicketCookie>& line, int64_t horizon, Millis now) {
  std::vector<ClusterLineEntry> entries;
  for (const TicketCookie& c : line) entries.push_back({c.ticket, c.nonce, 1'000});
  seg.cluster().publish(round(horizon, static_cast<int64_t>(line.size())), &entries, false, now);
  seg.pages().setShare(4);
}

std::vector<ClusterNoteValue> notesOf(Segment& seg, NoteKind kind, Millis now) {
  std::vector<ClusterNoteValue> out;
  for (const ClusterNoteValue& n : seg.cluster().takeNotes(1000, now))
    if (n.kind == kind) out.push_back(n);
  return out;
}

}  // namespace

TEST_CASE("without -cluster the line is the ticket ring; with it, the engine's cache") {
  Geometry g;
  g.ring_size = 1u << 10;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  auto alone = Segment::create(g, 2, 100);
  CHECK_FALSE(alone->cluster().enabled());
  CHECK(&alone->line() == static_cast<Line*>(&alone->tickets()));
  CHECK(alone->cluster().state() == ClusterState::Off);
  auto seg = makeCluster();
  CHECK(seg->cluster().enabled());
  CHECK(&seg->line() == static_cast<Line*>(&seg->cluster()));
  CHECK(seg->cluster().state() == ClusterState::Joining);
  CHECK(seg->stats().snapshot().cluster);
  CHECK(seg->stats().snapshot().cap == 10);
}

TEST_CASE("a ticket issued here waits at the back until the engine lists it, then shows its rank") {
  auto seg = makeCluster();
  Line& line = seg->line();
  publish(*seg, {}, 0, 0);
  seg->cluster().offerNumbers(500, 10);
  Issued a = line.issue(0, 0, 0);
  Issued b = line.issue(0, 0, 0);
  REQUIRE(a.outcome == IssueOutcome::Queued);
  CHECK(a.cookie.ticket == 500);
  CHECK(b.cookie.ticket == 501);
  CHECK(a.position == 1);
  CHECK(b.position == 2);
  CHECK_FALSE(a.ready);
  CHECK(line.liveQueueDepth() == 2);  // pending enrolments count before the engine lists them
  // Enrolment notes carry id, nonce and issue time.
  std::vector<ClusterNoteValue> enrolled = notesOf(*seg, NoteKind::Enroll, 0);
  REQUIRE(enrolled.size() == 2);
  CHECK(enrolled[0].id == 500);
  CHECK(enrolled[0].nonce == a.cookie.nonce);
  CHECK(enrolled[0].issued_ms > 0);
  // Pending: waiting at the back, never ready.
  TicketView pending = line.render(b.cookie, 100, kTtl);
  CHECK(pending.state == TicketState::Waiting);
  // Listed, with one free slot in the room: the head's turn has come, the next waits at 2.
  publish(*seg, {a.cookie, b.cookie}, 1, 200);
  CHECK(line.liveQueueDepth() == 2);
  CHECK(line.render(a.cookie, 200, kTtl).state == TicketState::Ready);
  TicketView second = line.render(b.cookie, 200, kTtl);
  CHECK(second.state == TicketState::Waiting);
  CHECK(second.position == 2);
  // A wrong nonce is no ticket.
  CHECK(line.render(TicketCookie{b.cookie.ticket, b.cookie.nonce + 1}, 200, kTtl).state == TicketState::Unknown);
  CHECK(line.nonceOf(a.cookie.ticket) == a.cookie.nonce);
  CHECK(line.head(10, 200).size() == 2);
}

TEST_CASE("a ticket of another host is pending for a while, then gone unless the engine lists it") {
  auto seg = makeCluster();
  publish(*seg, {}, 5, 0);
  const TicketCookie foreign{777, 0xabc};
  CHECK(seg->line().poll(foreign, 1'000, kTtl).state == TicketState::Waiting);
  CHECK(seg->line().poll(foreign, 1'000 + ClusterLine::kPendingMs - 1'000, kTtl).state == TicketState::Waiting);
  CHECK(seg->line().poll(foreign, 1'000 + ClusterLine::kPendingMs + 1'000, kTtl).state == TicketState::Unknown);
  // Listed by the engine (issued on another host, enrolled there): its rank.
  publish(*seg, {TicketCookie{5, 1}, foreign}, 1, 6'000);
  TicketView v = seg->line().poll(foreign, 6'000, kTtl);
  CHECK(v.state == TicketState::Waiting);
  CHECK(v.position == 2);
  CHECK(v.refresh_cookie);
  CHECK_FALSE(v.rate_limited);
  CHECK(seg->line().poll(foreign, 6'500, kTtl).rate_limited);  // one poll a second
  CHECK_FALSE(seg->line().poll(foreign, 7'100, kTtl).rate_limited);
  CHECK(notesOf(*seg, NoteKind::Keep, 6'000).size() >= 1);  // a poll keeps it alive
}

TEST_CASE("a claim takes the ticket out here at once and tells the engine; a second claim fails") {
  auto seg = makeCluster();
  const TicketCookie t{42, 9};
  publish(*seg, {t, TicketCookie{43, 9}}, 2, 0);
  notesOf(*seg, NoteKind::Touch, 0);
  REQUIRE(seg->pages().tryAcquire(0));
  Claimed claimed;
  CHECK(seg->line().claim(t, &claimed));
  CHECK(claimed.from_line);
  CHECK_FALSE(claimed.inversion);
  CHECK(claimed.waited >= 0);
  CHECK_FALSE(seg->line().claim(t));
  CHECK(seg->line().render(t, 0, kTtl).state == TicketState::Unknown);
  std::vector<ClusterNoteValue> left = notesOf(*seg, NoteKind::Leave, 0);
  REQUIRE(left.size() == 1);
  CHECK(left[0].id == 42);
  CHECK(seg->line().head(10, 0).size() == 1);  // the claimed one is not listed here any more
}

TEST_CASE("one ticket claimed by racing workers is admitted once") {
  auto seg = makeCluster();
  const TicketCookie t{42, 9};
  publish(*seg, {t}, 1, 0);
  std::atomic<int> won{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      if (seg->cluster().claim(t)) won.fetch_add(1);
    });
  for (std::thread& th : threads) th.join();
  CHECK(won.load() == 1);
}

TEST_CASE("a claim past a whole cap of older tickets counts as an inversion") {
  auto seg = makeCluster();
  std::vector<TicketCookie> line;
  for (uint64_t i = 1; i <= 12; ++i) line.push_back(TicketCookie{i, i});
  publish(*seg, line, 12, 0);  // a horizon of 12: everyone's turn (what the engine never sends past its cap)
  CHECK(seg->line().claim(line[11]));
  CHECK(seg->stats().snapshot().fifo_inversions_total == 1);
  CHECK(seg->line().claim(line[0]));
  CHECK(seg->stats().snapshot().fifo_inversions_total == 1);
}

TEST_CASE("the engine away: open moves this host's own line in ticket order up to its share, closed admits nobody") {
  auto open = makeCluster(10, true);
  // The engine's line as last read: a (its holder is on another host), then b and c.
  const TicketCookie a{41, 1}, b{42, 2}, c{43, 3};
  publish(*open, {a, b, c}, 0, 0);
  open->cluster().setState(ClusterState::Down);
  open->pages().setShare(1);
  const Millis now = monotonicMs();
  CHECK(open->line().render(b, now, kTtl).position == 2);  // b's and c's holders are seen here
  CHECK(open->line().render(c, now, kTtl).position == 3);
  // A ticket issued here while the engine is away: at the back of this host's line, shown no position.
  const Issued d = open->line().issue(0, 0, now);
  REQUIRE(d.outcome == IssueOutcome::Queued);
  const std::vector<ClusterLineEntry> unplaced = {{d.cookie.ticket, d.cookie.nonce, 0, LineSection::Waiting}};
  open->cluster().publishAway(unplaced, now);
  // One slot free: turns up to the first holder seen here (b); a does not hold this host's line.
  CHECK(open->line().render(b, now, kTtl).state == TicketState::Ready);
  CHECK(open->cluster().horizon() == 2);  // a is ranked within it (had its holder come here, it would be in turn)
  TicketView cv = open->line().render(c, now, kTtl);
  CHECK(cv.state == TicketState::Waiting);
  CHECK_FALSE(cv.placed);  // no position while the engine is away: another host's copy may be newer
  TicketView dv = open->line().render(d.cookie, now, kTtl);
  CHECK(dv.state == TicketState::Waiting);
  CHECK_FALSE(dv.placed);
  // b's turn: a slot, then the claim, which the slot it now holds does not undo.
  REQUIRE(open->pages().tryAcquire(0));
  CHECK(open->line().claim(b));
  open->cluster().publishAway(unplaced, now);
  CHECK(open->line().render(c, now, kTtl).state == TicketState::Waiting);  // the share is spent
  open->pages().release(0);
  open->cluster().publishAway(unplaced, now);
  CHECK(open->line().render(c, now, kTtl).state == TicketState::Ready);
  CHECK(open->line().render(d.cookie, now, kTtl).state == TicketState::Waiting);
  open->pages().setShare(2);
  open->cluster().publishAway(unplaced, now);
  dv = open->line().render(d.cookie, now, kTtl);
  CHECK(dv.state == TicketState::Ready);
  CHECK_FALSE(dv.placed);
  // A ticket never listed and not issued here is not in this host's line.
  CHECK(open->line().render(TicketCookie{1234, 5}, now, kTtl).state == TicketState::Waiting);
  // The line as re-enrolled once the engine is back leaves the Local tickets to their notes.
  std::vector<ClusterLineEntry> copy = open->cluster().mirrored();
  REQUIRE(copy.size() == 4);
  CHECK(copy[3].section == LineSection::Local);

  auto closed = makeCluster(10, false);
  const TicketCookie t{42, 9};
  publish(*closed, {t}, 5, 0);
  closed->cluster().setState(ClusterState::Down);
  closed->pages().setShare(0);
  CHECK(closed->line().render(t, 0, kTtl).state == TicketState::Waiting);
  // Tickets are still handed out (from the host's own range once the block is gone).
  Issued issued = closed->line().issue(0, 0, 0);
  CHECK(issued.outcome == IssueOutcome::Queued);
  CHECK(issued.cookie.ticket >= ClusterLine::kLocalIds);
  CHECK(issued.cookie.ticket <= ClusterLine::kMaxId);
}

TEST_CASE("numbers come from the block, then from the host's own range; the breaker still holds") {
  auto seg = makeCluster();
  publish(*seg, {}, 0, 0);
  seg->cluster().offerNumbers(100, 2);
  CHECK(seg->cluster().numbersLeft() == 2);
  CHECK(seg->line().issue(0, 0, 0).cookie.ticket == 100);
  CHECK(seg->line().issue(0, 0, 0).cookie.ticket == 101);
  CHECK(seg->cluster().numbersLeft() == 0);
  const uint64_t own = seg->line().issue(0, 0, 0).cookie.ticket;
  CHECK(own >= ClusterLine::kLocalIds);
  CHECK(seg->line().issue(0, 0, 0).cookie.ticket == own + 1);
  CHECK(seg->line().issue(0, 4, 0).outcome == IssueOutcome::Breaker);  // 4 pending already
}

TEST_CASE("a full mailbox drops notes; the agent reads them in order") {
  auto seg = makeCluster();
  publish(*seg, {}, 0, 0);
  for (uint32_t i = 0; i < kClusterNotes + 10; ++i) seg->line().retire(1 + i, false);
  std::vector<ClusterNoteValue> notes = seg->cluster().takeNotes(kClusterNotes + 100, 0);
  REQUIRE(notes.size() == kClusterNotes);
  for (uint32_t i = 0; i < kClusterNotes; ++i) CHECK(notes[i].id == 1 + i);
  seg->line().retire(5, false);
  notes = seg->cluster().takeNotes(10, 0);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].id == 5);
}

TEST_CASE("a long line: every rank is found; a ticket past the cached head waits at the back") {
  auto seg = makeCluster();
  std::vector<ClusterLineEntry> entries;
  for (uint64_t i = 1; i <= kClusterMirror + 5; ++i) entries.push_back({i * 3, i, 1'000});
  seg->cluster().publish(round(0, static_cast<int64_t>(entries.size())), &entries, true, 0);
  for (uint64_t r : {uint64_t{0}, uint64_t{1}, uint64_t{4'000}, uint64_t{kClusterMirror} - 1}) {
    TicketView v = seg->line().render(TicketCookie{entries[r].id, entries[r].nonce}, 0, kTtl);
    CHECK(v.state == TicketState::Waiting);
    CHECK(v.position == static_cast<int64_t>(r) + 1);
  }
  TicketView beyond = seg->line().render(TicketCookie{entries.back().id, entries.back().nonce}, 100'000, kTtl);
  CHECK(beyond.state == TicketState::Waiting);
  CHECK(beyond.position == static_cast<int64_t>(entries.size()) + 1);
  CHECK(seg->cluster().mirrored().size() == kClusterMirror);
}

TEST_CASE("returned tickets go first and are not counted ahead; a missed one waits at the back until the engine returns it") {
  auto seg = makeCluster();
  const TicketCookie back{7, 1}, first{8, 2}, second{9, 3}, missed{10, 4};
  std::vector<ClusterLineEntry> entries = {{back.ticket, back.nonce, 1'000, LineSection::Returned},
                                           {first.ticket, first.nonce, 1'000, LineSection::Waiting},
                                           {second.ticket, second.nonce, 1'000, LineSection::Waiting},
                                           {missed.ticket, missed.nonce, 1'000, LineSection::Missed}};
  seg->cluster().publish(round(1, 3), &entries, false, 0);
  seg->pages().setShare(4);
  notesOf(*seg, NoteKind::Touch, 0);
  // One free slot: the returned ticket's turn.
  CHECK(seg->line().render(back, 0, kTtl).state == TicketState::Ready);
  TicketView v = seg->line().render(first, 0, kTtl);
  CHECK(v.state == TicketState::Waiting);
  CHECK(v.position == 1);
  CHECK(seg->line().render(second, 0, kTtl).position == 2);
  // The missed ticket: at the back, never ready, and its touch goes out at
  // once (every time); it takes no slot until the engine returns it.
  TicketView m = seg->line().render(missed, 0, kTtl);
  CHECK(m.state == TicketState::Waiting);
  CHECK(m.position == 4);
  CHECK_FALSE(seg->line().claim(missed));
  seg->line().render(missed, 0, kTtl);
  std::vector<ClusterNoteValue> touches = notesOf(*seg, NoteKind::Touch, 0);
  CHECK(std::count_if(touches.begin(), touches.end(), [&](const ClusterNoteValue& n) { return n.id == missed.ticket; }) == 2);
  // The hold of the request it was issued to is no return: no Touch for it.
  seg->line().touch(missed, 0, kTtl, Contact::Own);
  touches = notesOf(*seg, NoteKind::Touch, 0);
  CHECK(std::count_if(touches.begin(), touches.end(), [&](const ClusterNoteValue& n) { return n.id == missed.ticket; }) == 0);
  // The head listing: returned first, then the line; the missed one is not in line.
  std::vector<LineEntry> head = seg->line().head(10, 0);
  REQUIRE(head.size() == 3);
  CHECK(head[0].returned);
  CHECK(head[1].ticket == first.ticket);
  Claimed claimed;
  CHECK(seg->line().claim(back, &claimed));
  CHECK_FALSE(claimed.from_line);
}

TEST_CASE("a touch goes to the engine at most once per ticket every few seconds") {
  auto seg = makeCluster();
  const TicketCookie t{42, 9};
  publish(*seg, {t}, 0, 0);
  for (int i = 0; i < 10; ++i) seg->line().touch(t, 100 + i, kTtl);
  CHECK(notesOf(*seg, NoteKind::Keep, 200).size() == 1);
  seg->line().touch(t, 100 + ClusterLine::kTouchEveryMs + 1'000, kTtl);
  CHECK(notesOf(*seg, NoteKind::Keep, 5'000).size() == 1);
}

TEST_CASE("bans, promotions and ended sessions of other hosts hold here until they end") {
  auto seg = makeCluster();
  std::array<uint8_t, 16> key{};
  key[15] = 7;
  std::array<uint8_t, 16> other{};
  other[15] = 8;
  uint64_t a = 0, b = 0;
  std::memcpy(&a, key.data(), 8);
  std::memcpy(&b, key.data() + 8, 8);
  seg->cluster().setRemoteBans({{a, b, 2'000}});
  CHECK(seg->cluster().bannedRemotely(key.data(), 1'999));
  CHECK_FALSE(seg->cluster().bannedRemotely(key.data(), 2'000));
  CHECK_FALSE(seg->cluster().bannedRemotely(other.data(), 1'000));
  seg->cluster().setRemoteBans({});
  CHECK_FALSE(seg->cluster().bannedRemotely(key.data(), 1'000));

  seg->cluster().setPromotions({{42, 9, 2'000}});
  CHECK(seg->cluster().promotedElsewhere(42, 9, 1'000));
  CHECK_FALSE(seg->cluster().promotedElsewhere(42, 8, 1'000));  // another nonce: not that visitor
  CHECK_FALSE(seg->cluster().promotedElsewhere(42, 9, 2'000));
  // A promotion made here goes to the engine as a note.
  publish(*seg, {}, 0, 0);
  seg->cluster().promote(43, 10, 3'000);
  std::vector<ClusterNoteValue> notes = notesOf(*seg, NoteKind::Promote, 0);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].id == 43);
  CHECK(notes[0].nonce == 10);
  CHECK(notes[0].issued_ms == 3'000);

  // Sessions ended on other hosts, found by binary search among many.
  std::vector<ClusterMarkValue> revoked;
  for (uint64_t i = 0; i < 5'000; ++i) revoked.push_back({i * 7919 % 100'003, i, 2'000});
  seg->cluster().setRevocations(revoked);
  uint8_t id[16];
  for (uint64_t i : {uint64_t{0}, uint64_t{1}, uint64_t{2'500}, uint64_t{4'999}}) {
    const uint64_t word = i * 7919 % 100'003;
    std::memcpy(id, &word, 8);
    std::memcpy(id + 8, &i, 8);
    CHECK(seg->cluster().revokedElsewhere(id, 1'000));
    CHECK_FALSE(seg->cluster().revokedElsewhere(id, 2'000));
  }
  const uint64_t three = 0xf000000000000003ull, ninety_nine = 99;  // every bit of the word goes out
  std::memcpy(id, &three, 8);
  std::memcpy(id + 8, &ninety_nine, 8);
  CHECK_FALSE(seg->cluster().revokedElsewhere(id, 1'000));
  seg->cluster().revoke(id, 4'000);
  std::vector<ClusterNoteValue> ended = notesOf(*seg, NoteKind::Revoke, 0);
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].id == three);
  CHECK(ended[0].nonce == 99);
}

TEST_CASE("the page semaphore's share may be 0: nobody new goes in") {
  auto seg = makeCluster();
  CHECK(seg->pages().cap() == 0);
  CHECK_FALSE(seg->pages().tryAcquire(0));
  seg->pages().setShare(1);
  CHECK(seg->pages().tryAcquire(0));
  CHECK_FALSE(seg->pages().tryAcquire(1));
  seg->pages().release(0);
}
