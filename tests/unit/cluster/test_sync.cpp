// SYNC (src/cluster/sync.lua) against a real redis-server: each host's share
// of the cap (its lease, headroom, demand), leases that lapse, and the rule by
// which the line moves: turns, missed turns and the room's mode.
#include <doctest/doctest.h>

#include <algorithm>

#include "cluster/engine.h"
#include "common/clock.h"
#include "redis_engine.h"

using namespace concert;
using namespace concert::cluster;
using namespace concert::cluster::testing;

namespace {

constexpr const char* kRoom = "s";
constexpr int64_t kWindow = 300;  // the claim window of these tests, ms

SyncRequest host(const std::string& name, int64_t busy = 0, int64_t wanted = 0) {
  SyncRequest r;
  r.host = name;
  r.lease_ttl_ms = 10'000;
  r.lease = 4;
  r.busy = busy;
  r.wanted = wanted;
  r.cap = 10;
  r.mode = "open";
  r.new_epoch = "e1";
  r.epoch = "e1";
  r.claim_window_ms = kWindow;
  return r;
}

SyncReply sync(RedisEngine& e, const SyncRequest& r) {
  std::optional<SyncReply> reply = parseSync(e.eval(kSyncScript, syncKeys(kRoom), syncArgs(r)));
  REQUIRE(reply);
  return *reply;
}

void enroll(RedisEngine& e, int count) {
  std::vector<std::string> args = {"60000", "60000", "", "0"};
  for (int id = 1; id <= count; ++id) args.push_back("E " + std::to_string(id) + " 0000000000000001 1");
  REQUIRE(num(e.eval(kNotesScript, notesKeys(kRoom), args)) == count);
}

void note(RedisEngine& e, const std::string& n) {
  e.eval(kNotesScript, notesKeys(kRoom), {"60000", "60000", "", "0", n});
}

std::vector<std::string> zset(RedisEngine& e, const std::string& key) {
  return strings(e.command({"ZRANGE", std::string(kRoom) + ":" + key, "0", "-1"}));
}

}  // namespace

TEST_CASE("SYNC, one host: a lease of headroom while nobody waits, more on demand, never past the cap") {
  RedisEngine e;
  SyncReply r = sync(e, host("a"));
  CHECK(r.round.hosts == 1);
  CHECK(r.round.cap == 10);
  CHECK(r.mode == "open");
  CHECK(r.round.reserved == 4);  // one lease
  CHECK(r.round.horizon == 10);
  r = sync(e, host("a", 3));
  CHECK(r.round.reserved == 7);  // in flight, plus a lease
  CHECK(r.round.horizon == 7);
  r = sync(e, host("a", 3, 9));
  CHECK(r.round.reserved == 10);  // three leases wanted, seven slots free
  // Once someone waits and no request went without, the headroom goes back.
  enroll(e, 2);
  sleepMs(600);  // past the demand's memory
  r = sync(e, host("a", 3));
  CHECK(r.round.reserved == 3);
  CHECK(r.round.depth == 2);
}

TEST_CASE("SYNC, two hosts: the reservations' sum stays within the cap; a host that stops renewing loses its own") {
  RedisEngine e;
  SyncRequest a = host("a"), b = host("b");
  a.lease_ttl_ms = b.lease_ttl_ms = 1'000;
  CHECK(sync(e, a).round.reserved == 4);
  SyncReply rb = sync(e, b);
  CHECK(rb.round.hosts == 2);
  CHECK(rb.round.reserved == 4);
  // B's requests found no slot: it takes what A does not hold, no more.
  b.wanted = 20;
  rb = sync(e, b);
  CHECK(rb.round.reserved == 6);
  SyncReply ra = sync(e, a);
  CHECK(ra.round.reserved + rb.round.reserved <= 10);
  // A in flight past its share (the cap was lowered): B gets nothing new.
  a.busy = 9;
  a.wanted = 0;
  sync(e, a);
  b.busy = 1;
  b.wanted = 5;
  CHECK(sync(e, b).round.reserved == 1);
  // A stops renewing: after its lease TTL the engine forgets it and B may take the whole cap.
  sleepMs(1'100);
  b.wanted = 20;
  rb = sync(e, b);
  CHECK(rb.round.hosts == 1);
  CHECK(rb.round.reserved == 10);
  CHECK(e.command({"HGET", "s:resv", "a"}).type == Reply::Type::Nil);
  CHECK(e.command({"HGET", "s:busy", "a"}).type == Reply::Type::Nil);
  // RELEASE: a host that stops gives its reservation back at once.
  CHECK(num(e.eval(kReleaseScript, releaseKeys(kRoom), {"b"})) == 1);
  CHECK(num(e.command({"ZCARD", "s:hosts"})) == 0);
  CHECK(e.command({"HGET", "s:resv", "b"}).type == Reply::Type::Nil);
}

TEST_CASE("SYNC: a turn not taken within the claim window is missed; a returned ticket that misses again leaves") {
  RedisEngine e;
  enroll(e, 3);
  SyncRequest a = host("a", 8);  // two slots free: the first two tickets' turns come
  SyncReply r = sync(e, a);
  CHECK(r.round.horizon == 2);
  CHECK(zset(e, "ready") == std::vector<std::string>{"1", "2"});
  sleepMs(kWindow + 100);
  r = sync(e, a);
  CHECK(r.missed == 2);
  CHECK(zset(e, "missed") == std::vector<std::string>{"1", "2"});
  CHECK(zset(e, "line") == std::vector<std::string>{"3"});
  CHECK(zset(e, "ready").empty());  // the next one's turn comes next round
  // 1's holder asks for the page: it goes ahead of the line, and its turn comes.
  note(e, "T 1");
  r = sync(e, a);
  CHECK(zset(e, "back") == std::vector<std::string>{"1"});
  CHECK(zset(e, "ready") == std::vector<std::string>{"1", "3"});
  sleepMs(kWindow + 100);
  r = sync(e, a);
  CHECK(r.missed == 2);  // 1 again (it leaves), 3 for the first time
  CHECK(zset(e, "back").empty());
  CHECK(e.command({"HGET", "s:tix", "1"}).type == Reply::Type::Nil);
  CHECK(e.command({"ZSCORE", "s:seen", "1"}).type == Reply::Type::Nil);
  // Gone for good: a touch does not bring it back a second time.
  note(e, "T 1");
  sync(e, a);
  CHECK(zset(e, "back").empty());
  CHECK(zset(e, "missed") == std::vector<std::string>{"2", "3"});
}

TEST_CASE("SYNC: a ticket whose holder waits for a token of a host's admission rate keeps its turn") {
  RedisEngine e;
  enroll(e, 1);
  SyncRequest a = host("a", 9);
  sync(e, a);
  REQUIRE(zset(e, "ready") == std::vector<std::string>{"1"});
  for (int i = 0; i < 4; ++i) {
    sleepMs(kWindow / 2);
    note(e, "W 1");
    CHECK(sync(e, a).missed == 0);
  }
  sleepMs(kWindow + 100);
  CHECK(sync(e, a).missed == 1);
}

TEST_CASE("SYNC: in pause and reject no turn comes and none is missed; the line moves again in open") {
  for (const char* still : {"pause", "reject"}) {
    CAPTURE(still);
    RedisEngine e;
    enroll(e, 3);
    SyncRequest a = host("a"), b = host("b");
    sync(e, a);  // turns came in open
    REQUIRE(zset(e, "ready").size() == 3);
    a.mode = still;
    a.push_mode = true;
    SyncReply r = sync(e, a);
    a.push_mode = false;
    CHECK(r.mode == still);
    CHECK(r.round.horizon == 0);
    CHECK(zset(e, "ready").empty());
    // Two hosts, well past the claim window: positions stay, nobody misses a turn.
    for (int i = 0; i < 4; ++i) {
      sleepMs(kWindow / 2);
      CHECK(sync(e, a).missed == 0);
      r = sync(e, b);  // B says open, but the room's mode is the engine's
      CHECK(r.mode == still);
      CHECK(r.round.horizon == 0);
      CHECK(r.missed == 0);
    }
    CHECK(zset(e, "line") == std::vector<std::string>{"1", "2", "3"});
    CHECK(zset(e, "missed").empty());
    CHECK(zset(e, "ready").empty());
    // Open again: the turns come anew, with a whole claim window.
    b.mode = "open";
    b.push_mode = true;
    r = sync(e, b);
    CHECK(r.round.horizon == 10);
    CHECK(r.missed == 0);
    CHECK(zset(e, "ready").size() == 3);
    sleepMs(kWindow + 100);
    b.push_mode = false;
    CHECK(sync(e, b).missed == 3);
  }
}

TEST_CASE("SYNC: a host's sale pre-queue holds the line for the room; in passthrough every turn has come") {
  RedisEngine e;
  enroll(e, 3);
  SyncRequest a = host("a", 9), b = host("b");  // one slot free
  a.held = true;
  SyncReply r = sync(e, a);
  CHECK(r.round.horizon == 0);
  r = sync(e, b);
  CHECK(r.round.horizon == 0);  // B's line is held by A's pre-queue too
  sleepMs(kWindow + 100);
  CHECK(sync(e, b).missed == 0);
  CHECK(zset(e, "ready").empty());
  // Passthrough overrides the pre-queue, as on one host: every ticket's turn has come.
  a.mode = "passthrough";
  a.push_mode = true;
  r = sync(e, a);
  CHECK(r.round.horizon == 3);
  CHECK(zset(e, "ready").size() == 3);
  // Back to open with the pre-queue over: turns come as slots free.
  a.mode = "open";
  a.held = false;
  r = sync(e, a);
  CHECK(r.round.horizon == 1);
  CHECK(zset(e, "ready") == std::vector<std::string>{"1"});
}

TEST_CASE("SYNC: a ban takes the client's tickets out of the line, whichever host enrolled them") {
  RedisEngine e;
  const std::string banned = "0102030405060708090a0b0c0d0e0f10", other = "ffeeddccbbaa99887766554433221100";
  note(e, "E 1 0000000000000001 1 " + banned);
  note(e, "E 2 0000000000000002 1 " + other);
  note(e, "E 3 0000000000000003 1 " + banned);
  note(e, "E 4 0000000000000004 1");
  SyncRequest r = host("a", 1);  // the one slot is in use: nobody's turn comes
  r.cap = 1;
  r.push_cap = true;
  SyncReply before = sync(e, r);
  CHECK(before.round.depth == 4);
  r.bans = {banned + ":" + std::to_string(unixSeconds() + 60)};
  SyncReply after = sync(e, r);
  CHECK(after.removed == 2);
  CHECK(after.round.depth == 2);
  CHECK(after.version > before.version);
  CHECK(zset(e, "line") == std::vector<std::string>{"2", "4"});
  CHECK(e.command({"HGET", std::string(kRoom) + ":tix", "1"}).type == Reply::Type::Nil);
  CHECK(e.command({"HGET", std::string(kRoom) + ":clients", banned}).type == Reply::Type::Nil);
  // The same ban sent again takes nothing more.
  CHECK(sync(e, r).removed == 0);
}

TEST_CASE("SYNC: a host whose copy of the marks is current gets none; one a few changes behind gets just those") {
  RedisEngine e;
  SyncRequest r = host("a");
  SyncReply first = sync(e, r);  // a host that never read them: every list
  CHECK(first.marks == SyncReply::Marks::Lists);
  r.marks_version = first.marks_version;
  CHECK(sync(e, r).marks == SyncReply::Marks::None);
  const int64_t until = unixSeconds() + 60;
  note(e, "P 42 00000000000000ff " + std::to_string(until));
  note(e, "V 00000000000000ab 00000000000000cd " + std::to_string(until));
  SyncReply later = sync(e, r);
  CHECK(later.marks == SyncReply::Marks::Changes);
  CHECK(later.promoted.empty());
  REQUIRE(later.changes.size() == 2);
  CHECK(later.changes[0].list == MarkList::Promoted);
  CHECK(later.changes[0].mark.a == 42);
  CHECK(later.changes[0].mark.until == until);
  CHECK(later.changes[1].list == MarkList::Revoked);
  CHECK(later.marks_version == first.marks_version + 2);
  // A host older than the log (or from another engine's life) gets every list again.
  r.marks_version = -1;
  SyncReply all = sync(e, r);
  CHECK(all.marks == SyncReply::Marks::Lists);
  CHECK(all.promoted.size() == 1);
  CHECK(all.revoked.size() == 1);
}

TEST_CASE("SYNC: a pre-queue's tickets take random places once it closes, behind those placed before it") {
  RedisEngine e;
  enroll(e, 1);  // in line before the sale's pre-queue
  SyncRequest a = host("a", 10);  // no slot free: nobody's turn
  a.held = true;
  a.shuffle = true;
  sync(e, a);
  std::vector<std::string> pre;
  for (int id = 2; id <= 41; ++id) {
    note(e, "E " + std::to_string(id) + " 0000000000000001 1");
    pre.push_back(std::to_string(id));
  }
  CHECK(sync(e, a).shuffled == 0);  // still held: in arrival order
  CHECK(zset(e, "line").size() == 41);
  a.held = false;
  SyncReply r = sync(e, a);
  CHECK(r.shuffled == 40);
  std::vector<std::string> line = zset(e, "line");
  REQUIRE(line.size() == 41);
  CHECK(line[0] == "1");
  std::vector<std::string> placed(line.begin() + 1, line.end());
  CHECK(placed != pre);
  std::sort(placed.begin(), placed.end());
  std::sort(pre.begin(), pre.end());
  CHECK(placed == pre);
  // Later arrivals go behind; the shuffle happens once.
  note(e, "E 42 0000000000000001 1");
  CHECK(sync(e, a).shuffled == 0);
  CHECK(zset(e, "line").back() == "42");
  // Without -shuffle-prequeue the pre-queue keeps its arrival order.
  RedisEngine f;
  a.held = true;
  a.shuffle = false;
  SyncReply held = parseSync(f.eval(kSyncScript, syncKeys(kRoom), syncArgs(a))).value();
  CHECK(held.shuffled == 0);
  f.eval(kNotesScript, notesKeys(kRoom), {"60000", "60000", "", "0", "E 7 0000000000000001 1", "E 5 0000000000000001 1"});
  a.held = false;
  CHECK(parseSync(f.eval(kSyncScript, syncKeys(kRoom), syncArgs(a))).value().shuffled == 0);
  CHECK(strings(f.command({"ZRANGE", std::string(kRoom) + ":line", "0", "-1"})) == std::vector<std::string>{"7", "5"});
}
