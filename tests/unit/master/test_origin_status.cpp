// The origin's status page as PHP-FPM writes it (src/master/origin_status.h):
// its JSON (?json) and its plain text, and pages that say nothing usable.
#include <doctest/doctest.h>

#include "master/origin_status.h"

using concert::master::parseOriginStatus;

TEST_CASE("PHP-FPM's JSON status") {
  const auto s = parseOriginStatus(
      R"({"pool":"www","process manager":"static","start time":1733356800,"start since":42,)"
      R"("accepted conn":1200,"listen queue":3,"max listen queue":17,"listen queue len":4096,)"
      R"("idle processes":0,"active processes":8,"total processes":8,"max active processes":8,)"
      R"("max children reached":5,"slow requests":0})");
  CHECK(s.ok);
  CHECK(s.active == 8);
  CHECK(s.total == 8);
  CHECK(s.listen_queue == 3);
  CHECK(s.max_children_reached == 5);
}

TEST_CASE("PHP-FPM's plain text status") {
  const auto s = parseOriginStatus(
      "pool:                 www\n"
      "process manager:      static\n"
      "listen queue:         0\n"
      "max listen queue:     2\r\n"
      "active processes:     1\n"
      "total processes:      4\n"
      "max children reached: 0\n");
  CHECK(s.ok);
  CHECK(s.active == 1);
  CHECK(s.total == 4);
  CHECK(s.listen_queue == 0);
  CHECK(s.max_children_reached == 0);
}

TEST_CASE("a page that is not a status page") {
  CHECK_FALSE(parseOriginStatus("<html>hello</html>").ok);
  CHECK_FALSE(parseOriginStatus(R"({"listen queue":"three"})").ok);
  CHECK_FALSE(parseOriginStatus("").ok);
  const auto partial = parseOriginStatus("total processes: 6\nactive processes: x\n");
  CHECK(partial.ok);
  CHECK(partial.total == 6);
  CHECK(partial.active == -1);
}
