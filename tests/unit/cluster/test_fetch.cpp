// FETCH (src/cluster/fetch.lua) against a real redis-server: the line in
// turn order, returned tickets first and missed ones last, within a limit.
#include <doctest/doctest.h>

#include "cluster/engine.h"
#include "redis_engine.h"

using namespace concert;
using namespace concert::cluster;
using namespace concert::cluster::testing;

namespace {

std::optional<FetchReply> fetch(RedisEngine& e, int64_t limit, int64_t since_order, int64_t since_ver) {
  return parseFetch(e.eval(kFetchScript, fetchKeys("f"),
                           {std::to_string(limit), std::to_string(since_order), std::to_string(since_ver)}));
}

int64_t notes(RedisEngine& e, const std::vector<std::string>& list) {
  std::vector<std::string> args = {"60000", "20000", "", "0"};
  args.insert(args.end(), list.begin(), list.end());
  return num(e.eval(kNotesScript, notesKeys("f"), args));
}

std::vector<uint64_t> ids(const FetchReply& f) {
  std::vector<uint64_t> out;
  for (const FetchReply::Placed& p : f.placed) out.push_back(p.entry.id);
  return out;
}

}  // namespace

TEST_CASE("FETCH: a host with no copy reads every ticket in place order, in pages within the limit") {
  RedisEngine e;
  std::vector<std::string> list;
  for (int id = 1; id <= 5; ++id)
    list.push_back("E " + std::to_string(id) + " 000000000000000" + std::to_string(id) + " " + std::to_string(1000 * id));
  REQUIRE(notes(e, list) == 5);
  // 4 returned (a new number), 2 missed (a new number), as SYNC and NOTES move them.
  e.command({"ZREM", "f:line", "4"});
  e.command({"ZADD", "f:back", "10", "4"});
  e.command({"ZREM", "f:line", "2"});
  e.command({"ZADD", "f:missed", "11", "2"});
  std::optional<FetchReply> all = fetch(e, 100, -1, -1);
  REQUIRE(all);
  CHECK(all->reset);
  CHECK_FALSE(all->more);
  CHECK(all->depth == 3);
  CHECK(all->version == 1);
  CHECK(ids(*all) == std::vector<uint64_t>{1, 3, 5, 4, 2});  // by number: the host sorts by section
  CHECK(all->placed[3].entry.section == shm::LineSection::Returned);
  CHECK(all->placed[4].entry.section == shm::LineSection::Missed);
  CHECK(all->placed[0].entry.nonce == 1);
  CHECK(all->placed[0].entry.issued_ms == 1000);
  // Two at a time: pages that follow each other by number.
  std::optional<FetchReply> page = fetch(e, 2, -1, -1);
  REQUIRE(page);
  CHECK(page->more);
  CHECK(ids(*page) == std::vector<uint64_t>{1, 3});
  page = fetch(e, 2, page->placed.back().order, page->version);
  REQUIRE(page);
  CHECK_FALSE(page->reset);
  CHECK(ids(*page) == std::vector<uint64_t>{5, 4});
  page = fetch(e, 2, page->placed.back().order, page->version);
  REQUIRE(page);
  CHECK_FALSE(page->more);
  CHECK(ids(*page) == std::vector<uint64_t>{2});
  // An empty room.
  std::optional<FetchReply> none = parseFetch(
      e.eval(kFetchScript, fetchKeys("empty"), {"100", "-1", "-1"}));
  REQUIRE(none);
  CHECK(none->depth == 0);
  CHECK(none->placed.empty());
}

TEST_CASE("FETCH: a host with a copy reads only who left and who was placed since") {
  RedisEngine e;
  REQUIRE(notes(e, {"E 1 0000000000000001 1", "E 2 0000000000000002 1", "E 3 0000000000000003 1"}) == 3);
  std::optional<FetchReply> first = fetch(e, 100, -1, -1);
  REQUIRE(first);
  const int64_t last = first->placed.back().order;
  REQUIRE(notes(e, {"L 2", "E 4 0000000000000004 1"}) == 2);
  std::optional<FetchReply> next = fetch(e, 100, last, first->version);
  REQUIRE(next);
  CHECK_FALSE(next->reset);
  CHECK(next->gone == std::vector<uint64_t>{2});
  CHECK(ids(*next) == std::vector<uint64_t>{4});
  CHECK(next->version == first->version + 1);
  // Nothing since: nothing.
  std::optional<FetchReply> same = fetch(e, 100, next->placed.back().order, next->version);
  REQUIRE(same);
  CHECK(same->gone.empty());
  CHECK(same->placed.empty());
  // A copy older than what the log of departures still holds, or newer than the engine's (it lost the
  // room): read anew.
  e.command({"SET", "f:gonefloor", std::to_string(next->version)});
  CHECK(fetch(e, 100, last, first->version)->reset);
  CHECK(fetch(e, 100, last, next->version + 5)->reset);
  CHECK_FALSE(fetch(e, 100, last, next->version)->reset);
}

TEST_CASE("scripts run by their SHA1 once loaded; an engine that does not know one answers NOSCRIPT") {
  RedisEngine e;
  const std::string sha = scriptSha(kFetchScript);
  CHECK(sha.size() == 40);
  Reply unknown = e.command({"EVALSHA", sha, "7", "a:line", "a:tix", "a:back", "a:missed", "a:gone", "a:gonefloor",
                             "a:ver", "10", "-1", "-1"});
  CHECK(unknown.type == Reply::Type::Error);
  CHECK(unknown.str.rfind("NOSCRIPT", 0) == 0);
  for (const char* script : {kNotesScript, kSyncScript, kFetchScript, kReleaseScript})
    CHECK(e.command({"SCRIPT", "LOAD", script}).str == scriptSha(script));
  CHECK(parseFetch(e.command({"EVALSHA", sha, "7", "a:line", "a:tix", "a:back", "a:missed", "a:gone", "a:gonefloor",
                              "a:ver", "10", "-1", "-1"})));
}
