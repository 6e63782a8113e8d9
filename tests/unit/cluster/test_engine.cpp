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

Reply syncReply(std::vector<Reply> bans = {}, std::vector<Reply> promoted = {}, std::vector<Reply> revoked = {}) {
  return array({integer(3), integer(2), integer(5), integer(40), integer(17), integer(10), string("open"),
                string("e1"), integer(1), integer(1001), integer(2), integer(4), integer(6), array(std::move(bans)),
                array(std::move(promoted)), array(std::move(revoked))});
}

}  // namespace

TEST_CASE("every key of a room has the room's prefix") {
  for (const std::vector<std::string>& keys : {notesKeys("shop"), syncKeys("shop"), fetchKeys("shop")})
    for (const std::string& key : keys) CHECK(key.rfind("shop:", 0) == 0);
  CHECK(syncKeys("r").size() == 22);
  CHECK(syncKeys("r")[21] == "r:held");
  CHECK(releaseKeys("r") == std::vector<std::string>{"r:hosts", "r:resv", "r:busy", "r:want", "r:held"});
  CHECK(notesKeys("r").size() == 13);
  CHECK(syncKeys("r")[0] == "r:hosts");
  CHECK(notesKeys("r")[0] == "r:line");
  CHECK(fetchKeys("r") == std::vector<std::string>{"r:line", "r:tix", "r:back", "r:missed"});
}

TEST_CASE("notes go to the engine as one argument each") {
  CHECK(noteArg({shm::NoteKind::Enroll, 42, 0xabcdef, 1'700'000'000'123}) == "E 42 0000000000abcdef 1700000000123");
  CHECK(noteArg({shm::NoteKind::Enroll, 42, 1, 5}, true) == "R 42 0000000000000001 5");
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
                                         "1000", "7000", "3", "1", "00ff:99"});
}

TEST_CASE("SYNC's answer is read field by field; anything else is refused") {
  std::optional<SyncReply> s = parseSync(syncReply({string("0102030405060708090a0b0c0d0e0f10"), string("1900")},
                                                   {string("42:00000000000000ff"), string("2000")},
                                                   {string("00000000000000ab:00000000000000cd"), string("2100")}));
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
  // Redis hands Lua numbers back as integers, but WITHSCORES as strings: both are read.
  CHECK(parseSync(syncReply({string("0102030405060708090a0b0c0d0e0f10"), integer(5)})));
  CHECK_FALSE(parseSync(syncReply({string("aa")})));  // a key without its end
  CHECK_FALSE(parseSync(array({integer(1)})));
  CHECK_FALSE(parseSync(string("OK")));
  Reply bad = syncReply();
  bad.elements[0] = string("x");
  CHECK_FALSE(parseSync(bad));
}

TEST_CASE("FETCH's answer: the line's length, then returned, waiting and missed tickets, each section counted") {
  std::optional<FetchReply> f =
      parseFetch(array({integer(3), integer(1), string("9"), string("0000000000000009:1600"),  // returned
                        integer(3), string("12"), string("00000000000000ff:1700"), string("13"), string(""),
                        string("14"), string("0000000000000001:1800"),                        // waiting
                        integer(1), string("15"), string("0000000000000002:1900")}));        // missed
  REQUIRE(f);
  CHECK(f->depth == 3);
  REQUIRE(f->line.size() == 4);  // 13 is half gone: skipped
  CHECK(f->line[0].id == 9);
  CHECK(f->line[0].section == shm::LineSection::Returned);
  CHECK(f->line[1].id == 12);
  CHECK(f->line[1].nonce == 0xff);
  CHECK(f->line[1].issued_ms == 1700);
  CHECK(f->line[1].section == shm::LineSection::Waiting);
  CHECK(f->line[2].id == 14);
  CHECK(f->line[3].id == 15);
  CHECK(f->line[3].section == shm::LineSection::Missed);
  CHECK_FALSE(parseFetch(array({integer(1), integer(0), integer(1), string("12")})));  // a ticket cut short
  CHECK_FALSE(parseFetch(array({integer(0), integer(0), integer(0)})));                 // a section missing
  CHECK_FALSE(parseFetch(array({})));
  CHECK(parseFetch(array({integer(0), integer(0), integer(0), integer(0)}))->line.empty());
}
