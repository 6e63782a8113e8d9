// FETCH (src/cluster/fetch.lua) against a real redis-server: the line in
// turn order, returned tickets first and missed ones last, within a limit.
#include <doctest/doctest.h>

#include "cluster/engine.h"
#include "redis_engine.h"

using namespace concert;
using namespace concert::cluster;
using namespace concert::cluster::testing;

TEST_CASE("FETCH: returned, waiting, then missed tickets with nonces and issue times, within the limit") {
  RedisEngine e;
  std::vector<std::string> args = {"60000", "20000", ""};
  for (int id = 1; id <= 5; ++id) args.push_back("E " + std::to_string(id) + " 000000000000000" + std::to_string(id) +
                                                 " " + std::to_string(1000 * id));
  REQUIRE(num(e.eval(kNotesScript, notesKeys("f"), args)) == 5);
  e.command({"ZREM", "f:line", "4"});
  e.command({"ZADD", "f:back", "10", "4"});
  e.command({"ZREM", "f:line", "2"});
  e.command({"ZADD", "f:missed", "11", "2"});
  std::optional<FetchReply> all = parseFetch(e.eval(kFetchScript, fetchKeys("f"), {"100"}));
  REQUIRE(all);
  CHECK(all->depth == 3);
  REQUIRE(all->line.size() == 5);
  const std::vector<uint64_t> order = {4, 1, 3, 5, 2};
  for (size_t i = 0; i < order.size(); ++i) CHECK(all->line[i].id == order[i]);
  CHECK(all->line[0].section == shm::LineSection::Returned);
  CHECK(all->line[1].section == shm::LineSection::Waiting);
  CHECK(all->line[4].section == shm::LineSection::Missed);
  CHECK(all->line[1].nonce == 1);
  CHECK(all->line[1].issued_ms == 1000);
  // The limit counts across the sections, head first.
  std::optional<FetchReply> head = parseFetch(e.eval(kFetchScript, fetchKeys("f"), {"2"}));
  REQUIRE(head);
  CHECK(head->depth == 3);
  REQUIRE(head->line.size() == 2);
  CHECK(head->line[0].id == 4);
  CHECK(head->line[1].id == 1);
  // An empty room.
  std::optional<FetchReply> none = parseFetch(e.eval(kFetchScript, fetchKeys("empty"), {"100"}));
  REQUIRE(none);
  CHECK(none->depth == 0);
  CHECK(none->line.empty());
}

TEST_CASE("scripts run by their SHA1 once loaded; an engine that does not know one answers NOSCRIPT") {
  RedisEngine e;
  const std::string sha = scriptSha(kFetchScript);
  CHECK(sha.size() == 40);
  Reply unknown = e.command({"EVALSHA", sha, "4", "a:line", "a:tix", "a:back", "a:missed", "10"});
  CHECK(unknown.type == Reply::Type::Error);
  CHECK(unknown.str.rfind("NOSCRIPT", 0) == 0);
  for (const char* script : {kNotesScript, kSyncScript, kFetchScript, kReleaseScript})
    CHECK(e.command({"SCRIPT", "LOAD", script}).str == scriptSha(script));
  CHECK(parseFetch(e.command({"EVALSHA", sha, "4", "a:line", "a:tix", "a:back", "a:missed", "10"})));
}
