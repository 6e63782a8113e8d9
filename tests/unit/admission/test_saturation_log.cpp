// The "upstream saturated" / "draining" log lines: the first edge is logged
// at once, a flapping room writes at most one line per second, and the log
// always ends on the room's current state.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "common/log.h"
#include "fixture.h"
#include "admission/answers.h"

using namespace concert;
using namespace concert::admission;
using namespace concert::http;
using concert::test::Site;

namespace {

struct LogFile {
  std::string path;
  LogFile() {
    char name[] = "/tmp/concert-satlog-XXXXXX";
    int fd = mkstemp(name);
    REQUIRE(fd >= 0);
    close(fd);
    path = name;
    REQUIRE(log::openErrorLog(path));
  }
  ~LogFile() {
    log::openErrorLog("");
    std::remove(path.c_str());
  }
  std::string text() const {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  int count(const std::string& needle) const {
    const std::string t = text();
    int n = 0;
    for (size_t at = t.find(needle); at != std::string::npos; at = t.find(needle, at + 1)) ++n;
    return n;
  }
};

}  // namespace

TEST_CASE("saturation log: one line per second while the room flaps, ending on the current state") {
  Site room(test::baseConfig(2));
  LogFile log;
  const Millis t0 = monotonicMs() + 100'000'000;  // far from any edge other tests logged
  room.self->saturation.edge(*room.segment, "upstream saturated", t0);
  CHECK(log.count("upstream saturated: 0/2 slots, 0 queued (0 live)") == 1);
  // A thousand edges within the same second: nothing more is written.
  for (int i = 0; i < 1000; ++i)
    room.self->saturation.edge(*room.segment, i % 2 == 0 ? "draining" : "upstream saturated", t0 + 1 + i % 900);
  CHECK(log.count("upstream saturated:") == 1);
  CHECK(log.count("draining:") == 0);
  // The last edge was back to "saturated", what the log already says: the
  // tick has nothing to add.
  room.self->saturation.flush(*room.segment, t0 + 1000);
  CHECK(log.count("draining:") == 0);
  CHECK(log.count("upstream saturated:") == 1);

  // The room drains and stays so: the tick writes it once the second is up.
  room.self->saturation.edge(*room.segment, "draining", t0 + 1500);  // a new second: logged at once
  CHECK(log.count("draining: 0/2 slots") == 1);
  room.self->saturation.edge(*room.segment, "upstream saturated", t0 + 1600);
  room.self->saturation.edge(*room.segment, "draining", t0 + 1700);
  room.self->saturation.edge(*room.segment, "upstream saturated", t0 + 1800);
  room.self->saturation.flush(*room.segment, t0 + 2000);  // too soon after the last line
  CHECK(log.count("upstream saturated:") == 1);
  room.self->saturation.flush(*room.segment, t0 + 2500);
  CHECK(log.count("upstream saturated:") == 2);
  room.self->saturation.flush(*room.segment, t0 + 5000);  // nothing pending: no line
  CHECK(log.count("upstream saturated:") == 2);
  CHECK(log.count("draining:") == 1);
}
