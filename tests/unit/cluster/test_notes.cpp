// NOTES (src/cluster/notes.lua) against a real redis-server: enrolments in
// order, touches, departures, marks, and an engine that lost the room.
#include <doctest/doctest.h>

#include "cluster/engine.h"
#include "redis_engine.h"

using namespace concert;
using namespace concert::cluster;
using namespace concert::cluster::testing;

namespace {

constexpr const char* kRoom = "n";

int64_t notes(RedisEngine& e, std::vector<std::string> list, const std::string& epoch = "") {
  std::vector<std::string> args = {"60000", "20000", epoch, "0"};
  args.insert(args.end(), list.begin(), list.end());
  return num(e.eval(kNotesScript, notesKeys(kRoom), args));
}

}  // namespace

TEST_CASE("NOTES: enrolments take places in order, once; a departure leaves every list") {
  RedisEngine e;
  CHECK(notes(e, {"E 5 00000000000000aa 1000", "E 3 00000000000000bb 2000", "E 5 00000000000000aa 1000"}) == 2);
  CHECK(strings(e.command({"ZRANGE", "n:line", "0", "-1"})) == std::vector<std::string>{"5", "3"});
  CHECK(e.command({"HGET", "n:tix", "3"}).str == "00000000000000bb:2000");
  CHECK(num(e.command({"GET", "n:seq"})) == 5);  // numbers below the hosts' own range raise the counter
  CHECK(num(e.command({"GET", "n:ver"})) == 1);
  // A host's own range never raises it.
  CHECK(notes(e, {"E 70368744177665 0000000000000001 3000"}) == 1);
  CHECK(num(e.command({"GET", "n:seq"})) == 5);
  CHECK(notes(e, {"L 5"}) == 1);
  CHECK(strings(e.command({"ZRANGE", "n:line", "0", "-1"})) == std::vector<std::string>{"3", "70368744177665"});
  CHECK(e.command({"HGET", "n:tix", "5"}).type == Reply::Type::Nil);
  CHECK(e.command({"ZSCORE", "n:seen", "5"}).type == Reply::Type::Nil);
  CHECK(notes(e, {"L 5"}) == 0);
}

TEST_CASE("NOTES: a keep renews the deadline; a touch returns a missed ticket ahead of the line, once") {
  RedisEngine e;
  notes(e, {"E 1 0000000000000001 1", "E 2 0000000000000002 1"});
  const int64_t first = num(e.command({"ZSCORE", "n:seen", "1"}));
  CHECK(notes(e, {"K 1"}) == 0);
  CHECK(num(e.command({"ZSCORE", "n:seen", "1"})) > first);  // token ttl (60 s) past the grace (20 s)
  // Ticket 2 missed its turn (as SYNC leaves it): a keep does not bring it back, a touch does.
  e.command({"ZREM", "n:line", "2"});
  e.command({"ZADD", "n:missed", "9", "2"});
  CHECK(notes(e, {"K 2"}) == 0);
  CHECK(e.command({"ZSCORE", "n:missed", "2"}).type != Reply::Type::Nil);
  CHECK(notes(e, {"T 2"}) == 1);
  CHECK(e.command({"ZSCORE", "n:missed", "2"}).type == Reply::Type::Nil);
  CHECK(e.command({"ZSCORE", "n:back", "2"}).type != Reply::Type::Nil);
  CHECK(notes(e, {"T 2"}) == 0);  // returned already: nothing more
  CHECK(notes(e, {"T 99", "K 99", "W 99"}) == 0);  // unknown tickets are not enrolled by a touch
  CHECK(e.command({"HGET", "n:tix", "99"}).type == Reply::Type::Nil);
}

TEST_CASE("NOTES: a wait restarts the clock of a turn that came, and only of one that came") {
  RedisEngine e;
  notes(e, {"E 1 0000000000000001 1", "E 2 0000000000000002 1"});
  e.command({"ZADD", "n:ready", "5", "1"});
  CHECK(notes(e, {"W 1", "W 2"}) == 0);
  CHECK(num(e.command({"ZSCORE", "n:ready", "1"})) > 5);
  CHECK(e.command({"ZSCORE", "n:ready", "2"}).type == Reply::Type::Nil);
}

TEST_CASE("NOTES: promotions and ended sessions raise the marks; another epoch applies nothing") {
  RedisEngine e;
  CHECK(notes(e, {"P 7 00000000000000ff 1900000000", "V 00000000000000ab 00000000000000cd 1900000001"}) == 0);
  CHECK(num(e.command({"ZSCORE", "n:promoted", "7:00000000000000ff"})) == 1900000000);
  CHECK(num(e.command({"ZSCORE", "n:revoked", "00000000000000ab:00000000000000cd"})) == 1900000001);
  CHECK(num(e.command({"GET", "n:marks"})) == 2);
  e.command({"SET", "n:epoch", "e1"});
  CHECK(notes(e, {"E 1 0000000000000001 1"}, "e0") == -1);
  CHECK(num(e.command({"ZCARD", "n:line"})) == 0);
  CHECK(notes(e, {"E 1 0000000000000001 1"}, "e1") == 1);
}

TEST_CASE("NOTES: a client gets no more tickets in line than its limit, whichever host enrolls them") {
  RedisEngine e;
  const std::string c1 = "0102030405060708090a0b0c0d0e0f10", c2 = "ffeeddccbbaa99887766554433221100";
  auto enroll = [&](const std::vector<std::string>& list) {
    std::vector<std::string> args = {"60000", "20000", "", "2"};
    args.insert(args.end(), list.begin(), list.end());
    return num(e.eval(kNotesScript, notesKeys(kRoom), args));
  };
  CHECK(enroll({"E 1 0000000000000001 1000 " + c1, "E 2 0000000000000002 1000 " + c2}) == 2);
  CHECK(e.command({"HGET", "n:tix", "1"}).str == "0000000000000001:1000:" + c1);
  CHECK(e.command({"ZSCORE", "n:full", c1}).type == Reply::Type::Nil);
  // The second ticket fills c1's share: marked full for every host.
  CHECK(enroll({"E 3 0000000000000003 1000 " + c1}) == 1);
  CHECK(e.command({"ZSCORE", "n:full", c1}).type != Reply::Type::Nil);
  const int64_t marks = num(e.command({"GET", "n:marks"}));
  // A third, issued by a host that had not learnt it yet: not enrolled.
  CHECK(enroll({"E 4 0000000000000004 1000 " + c1}) == 0);
  CHECK(strings(e.command({"ZRANGE", "n:line", "0", "-1"})) == std::vector<std::string>{"1", "2", "3"});
  CHECK(num(e.command({"HGET", "n:clients", c1})) == 2);
  // One of its tickets leaves: the mark goes, and so does the count.
  CHECK(enroll({"L 1"}) == 1);
  CHECK(e.command({"ZSCORE", "n:full", c1}).type == Reply::Type::Nil);
  CHECK(num(e.command({"GET", "n:marks"})) > marks);
  CHECK(num(e.command({"HGET", "n:clients", c1})) == 1);
  CHECK(enroll({"E 5 0000000000000005 1000 " + c1}) == 1);
  // Tickets enrolled without a client are not counted.
  CHECK(enroll({"E 6 0000000000000006 1000", "E 7 0000000000000007 1000"}) == 2);
}
