// The segment's header: its magic and layout version are checked against
// this binary, and a segment of another layout is refused with a message
// naming what differs.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "shm/layout.h"
#include "shm/segment.h"

using namespace concert::shm;

namespace {

std::unique_ptr<Segment> makeSegment() {
  Geometry g;
  g.ring_size = 1u << 12;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  return Segment::create(g, 4, 10);
}

Header& header(Segment& s) {
  return *static_cast<Header*>(s.address());
}

// What checkHeader() says of the segment: "" when it accepts it.
std::string refusal(const Segment& s) {
  try {
    s.checkHeader();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a created segment passes its header check") {
  auto s = makeSegment();
  CHECK(header(*s).magic == kMagic);
  CHECK(header(*s).layout_version == kLayoutVersion);
  CHECK(refusal(*s).empty());
}

TEST_CASE("a segment of another layout version is refused, naming both versions") {
  auto s = makeSegment();
  header(*s).layout_version = kLayoutVersion + 1;
  const std::string why = refusal(*s);
  CHECK(why.starts_with("shared segment at "));
  CHECK(contains(why, "has layout version " + std::to_string(kLayoutVersion + 1) + ", this binary expects " +
                          std::to_string(kLayoutVersion)));
  header(*s).layout_version = kLayoutVersion - 1;
  CHECK(contains(refusal(*s), "has layout version " + std::to_string(kLayoutVersion - 1)));
  header(*s).layout_version = kLayoutVersion;
  CHECK(refusal(*s).empty());
}

TEST_CASE("a segment with another magic is refused as not a Concert segment") {
  auto s = makeSegment();
  header(*s).magic = 0x0123456789abcdefull;
  const std::string why = refusal(*s);
  CHECK(why.starts_with("shared segment at "));
  CHECK(contains(why, "has magic 0x0123456789abcdef, this binary expects 0x545245434e4f4321: not a Concert segment"));
  // The magic is checked first: a version from another layout is not even read.
  header(*s).layout_version = kLayoutVersion + 1;
  CHECK(!contains(refusal(*s), "layout version"));
  header(*s).magic = kMagic;
  header(*s).layout_version = kLayoutVersion;
  CHECK(refusal(*s).empty());
}

TEST_CASE("a header whose geometry or size does not match the mapping is refused") {
  auto s = makeSegment();
  Header& h = header(*s);
  h.ring_size = 1000;  // not a power of two
  CHECK(contains(refusal(*s), "has an invalid geometry (ring 1000,"));
  h.ring_size = 1u << 13;  // valid, but the mapping was carved for 2^12
  CHECK(contains(refusal(*s), "this binary carves its geometry into"));
  h.ring_size = 1u << 12;
  h.total_bytes += 64;
  CHECK(contains(refusal(*s), "says it is " + std::to_string(h.total_bytes) + " bytes"));
  h.total_bytes -= 64;
  CHECK(refusal(*s).empty());
  // A mapping shorter than the header says.
  try {
    Segment::checkHeader(s->address(), s->bytes() - 64);
    FAIL("a short mapping was accepted");
  } catch (const std::runtime_error& e) {
    CHECK(contains(e.what(), "bytes mapped, its header says " + std::to_string(s->bytes())));
  }
  CHECK_THROWS_AS(Segment::checkHeader(s->address(), 16), std::runtime_error);
  CHECK_THROWS_AS(Segment::checkHeader(nullptr, 0), std::runtime_error);
}
