// The engine's side of the cluster (cluster/engine.h): key names, the
// arguments the agent sends and how it reads the answers. The scripts run
// against a real redis-server in test_notes.cpp, test_sync.cpp and
// test_fetch.cpp.
#include <doctest/doctest.h>

#include "cluster/engine.h"

using namespace concert;
using namespace concert::cluster;

namespace {

Reply integer(int64_t n) {
  Reply r;
  r.type = Reply::Type::Integer;
  r.integer = n;
  return r;
}

Reply string(std::string s) {
  Reply r;
  r.type = Reply::Type::String;
  r.str = std::move(s);
  return r;
}

Reply array(std::vector<Reply> elements) {
  Reply r;
  r.type = Reply::Type::Array;
  r.elements = std::move(elements);
  return r;
}

Reply syncReply(std::vector<Reply> bans = {}, std::vector<Reply> promoted = {}, std::vector<Reply> revoked = {},
                std::vector<Reply> full = {}) {
  return array({integer(3), integer(2), integer(5), integer(40), integer(17), integer(10), string("open"),
                string("e1"), integer(1), integer(1001), integer(2), integer(4), integer(6), array(std::move(bans)),
                array(std::move(promoted)), array(std::move(revoked)), array(std::move(full)), integer(7), integer(1),
                array({}), integer(0)});
}

}  // namespace

TEST_CASE("every key of a room has the room's prefix") {
  for (const std::vector<std::string>& keys : {notesKeys("shop"), syncKeys("shop"), fetchKeys("shop")})
    for (const std::string& key : keys) CHECK(key.rfind("shop:", 0) == 0);
  CHECK(syncKeys("r").size() == 28);
  CHECK(syncKeys("r")[21] == "r:held");
  CHECK(syncKeys("r")[23] == "r:full");
  CHECK(releaseKeys("r") == std::vector<std::string>{"r:hosts", "r:resv", "r:busy", "r:want", "r:held"});
  CHECK(notesKeys("r").size() == 20);
  CHECK(notesKeys("r")[14] == "r:full");
  CHECK(syncKeys("r")[0] == "r:hosts");
  CHECK(notesKeys("r")[0] == "r:line");
  CHECK(fetchKeys("r") == std::vector<std::string>{"r:line", "r:tix", "r:back", "r:missed", "r:gone", "r:gonefloor", "r:ver"});
}

TEST_CASE("notes go to the engine as one argument each") {
  CHECK(noteArg({shm::NoteKind::Enroll, 42, 0xabcdef, 1'700'000'000'123}) == "E 42 0000000000abcdef 1700000000123");
  CHECK(noteArg({shm::NoteKind::Enroll, 42, 1, 5}, true) == "R 42 0000000000000001 5");
  // With its holder's client key: the key's bytes in order, as bans carry them.
  CHECK(noteArg({shm::NoteKind::Enroll, 42, 1, 5, 0x0807060504030201ull, 0x100f0e0d0c0b0a09ull}) ==
        "E 42 0000000000000001 5 0102030405060708090a0b0c0d0e0f10");
  CHECK(noteArg({shm::NoteKind::Touch, 7, 1, 5}) == "T 7");
  CHECK(noteArg({shm::NoteKind::Keep, 7, 1, 5}) == "K 7");
  CHECK(noteArg({shm::NoteKind::Wait, 7, 1, 5}) == "W 7");
  CHECK(noteArg({shm::NoteKind::Leave, 7, 1, 5}) == "L 7");
  CHECK(noteArg({shm::NoteKind::Promote, 7, 0x10, 1'900'000'000}) == "P 7 0000000000000010 1900000000");
  CHECK(noteArg({shm::NoteKind::Revoke, 0xab, 0xcd, 1'900'000'000}) == "V 00000000000000ab 00000000000000cd 1900000000");
}

TEST_CASE("SYNC's arguments are in the script's order, new bans last") {
  SyncRequest r;
  r.host = "web1:100";
  r.lease_ttl_ms = 10'000;
  r.lease = 4;
  r.busy = 3;
  r.wanted = 7;
  r.cap = 10;
  r.push_cap = false;
  r.mode = "pause";
  r.push_mode = true;
  r.epoch = "";
  r.new_epoch = "ab";
  r.block = 64;
  r.claim_window_ms = 7'000;
  r.marks_version = 3;
  r.held = true;
  r.bans = {"00ff:99"};
  const std::vector<std::string> args = syncArgs(r);
  CHECK(args == std::vector<std::string>{"web1:100", "10000", "4", "3", "7", "10", "0", "pause", "1", "", "ab", "64",
                                         "1000", "7000", "3", "1", "0", "00ff:99"});
}

TEST_CASE("SYNC's answer is read field by field; anything else is refused") {
  std::optional<SyncReply> s = parseSync(syncReply({string("0102030405060708090a0b0c0d0e0f10"), string("1900")},
                                                   {string("42:00000000000000ff"), string("2000")},
                                                   {string("00000000000000ab:00000000000000cd"), string("2100")},
                                                   {string("1102030405060708090a0b0c0d0e0f10"), string("2200")}));
  REQUIRE(s);
  CHECK(s->round.reserved == 3);
  CHECK(s->round.hosts == 2);
  CHECK(s->round.horizon == 5);
  CHECK(s->round.depth == 40);
  CHECK(s->version == 17);
  CHECK(s->round.cap == 10);
  CHECK(s->mode == "open");
  CHECK(s->epoch == "e1");
  CHECK(s->lost);
  CHECK(s->block_first == 1001);
  CHECK(s->reaped == 2);
  CHECK(s->missed == 4);
  CHECK(s->marks_version == 6);
  REQUIRE(s->bans.size() == 1);
  CHECK(s->bans[0].a == 0x0807060504030201ull);  // the key's first eight bytes, as a word in memory order
  CHECK(s->bans[0].b == 0x100f0e0d0c0b0a09ull);
  CHECK(s->bans[0].until == 1900);
  REQUIRE(s->promoted.size() == 1);
  CHECK(s->promoted[0].a == 42);
  CHECK(s->promoted[0].b == 0xff);
  CHECK(s->promoted[0].until == 2000);
  REQUIRE(s->revoked.size() == 1);
  CHECK(s->revoked[0].a == 0xab);
  CHECK(s->revoked[0].b == 0xcd);
  CHECK(s->revoked[0].until == 2100);
  REQUIRE(s->full.size() == 1);
  CHECK(s->full[0].a == 0x0807060504030211ull);
  CHECK(s->full[0].until == 2200);
  CHECK(s->removed == 7);
  CHECK(s->marks == SyncReply::Marks::Lists);
  // Changes since the host's copy, in order: a ban, a promotion taken off.
  Reply changes = syncReply();
  changes.elements[18] = integer(2);
  changes.elements[19] = array({string("8 b 0102030405060708090a0b0c0d0e0f10 1900"), string("9 p 42:00000000000000ff -")});
  s = parseSync(changes);
  REQUIRE(s);
  CHECK(s->marks == SyncReply::Marks::Changes);
  REQUIRE(s->changes.size() == 2);
  CHECK(s->changes[0].list == MarkList::Bans);
  CHECK(s->changes[0].mark.a == 0x0807060504030201ull);
  CHECK(s->changes[0].mark.until == 1900);
  CHECK(s->changes[1].list == MarkList::Promoted);
  CHECK(s->changes[1].mark.a == 42);
  CHECK(s->changes[1].mark.until == 0);
  changes.elements[19] = array({string("8 x 00 1")});
  CHECK_FALSE(parseSync(changes));
  // Redis hands Lua numbers back as integers, but WITHSCORES as strings: both are read.
  CHECK(parseSync(syncReply({string("0102030405060708090a0b0c0d0e0f10"), integer(5)})));
  CHECK_FALSE(parseSync(syncReply({string("aa")})));  // a key without its end
  CHECK_FALSE(parseSync(array({integer(1)})));
  CHECK_FALSE(parseSync(string("OK")));
  Reply bad = syncReply();
  bad.elements[0] = string("x");
  CHECK_FALSE(parseSync(bad));
}

TEST_CASE("FETCH's answer: version, length, reset, more, who left, then the tickets placed with their numbers") {
  std::optional<FetchReply> f =
      parseFetch(array({integer(17), integer(3), integer(0), integer(1), integer(2), string("5"), string("6"),
                        integer(4),
                        string("9"), string("b"), integer(40), string("0000000000000009:1600"),
                        string("12"), string("w"), integer(41), string("00000000000000ff:1700:0102"),
                        string("13"), string("w"), integer(42), string(""),  // half gone: skipped
                        string("15"), string("m"), integer(43), string("0000000000000002:1900")}));
  REQUIRE(f);
  CHECK(f->version == 17);
  CHECK(f->depth == 3);
  CHECK_FALSE(f->reset);
  CHECK(f->more);
  CHECK(f->gone == std::vector<uint64_t>{5, 6});
  REQUIRE(f->placed.size() == 3);
  CHECK(f->placed[0].entry.id == 9);
  CHECK(f->placed[0].entry.section == shm::LineSection::Returned);
  CHECK(f->placed[0].order == 40);
  CHECK(f->placed[1].entry.nonce == 0xff);
  CHECK(f->placed[1].entry.issued_ms == 1700);  // the client key after the issue time is not the host's
  CHECK(f->placed[1].entry.section == shm::LineSection::Waiting);
  CHECK(f->placed[2].entry.section == shm::LineSection::Missed);
  CHECK_FALSE(parseFetch(array({integer(1), integer(0), integer(0), integer(0), integer(0), integer(1), string("12")})));
  CHECK_FALSE(parseFetch(array({integer(1), integer(0), integer(0), integer(0), integer(2), string("5")})));
  CHECK_FALSE(parseFetch(array({integer(1), integer(0), integer(0), integer(0), integer(0), integer(1), string("12"),
                                string("x"), integer(1), string("0000000000000001:1")})));  // no such section
  CHECK_FALSE(parseFetch(array({})));
  CHECK(parseFetch(array({integer(0), integer(0), integer(1), integer(0), integer(0), integer(0)}))->placed.empty());
}
