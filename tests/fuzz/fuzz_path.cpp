// Fuzz target: dot-segment removal on request paths (http::normalisePath).
//
// The input is a raw path (a leading '/' is added when missing, after
// checking that such a path is refused as NotAbsolute). Properties:
//   * the result starts with '/', is never longer than the input and has no
//     dot-segment, literal or percent-encoded;
//   * normalising the result again changes nothing (and copies nothing);
//   * Unchanged exactly when the input had no dot-segment;
//   * the result and the above-root verdict agree with RFC 3986, section
//     5.2.4, as written (the five buffer rules, below), run on the input with
//     its encoded dot-segments spelled as literal dots: rule C on an empty
//     output buffer is a climb above the root.
#include <string>

#include "fuzz_target.h"
#include "http/path.h"

namespace concert::fuzz {
namespace {

// A segment made only of '.' and "%2e"/"%2E" is spelled with literal dots.
std::string spellDots(std::string_view raw) {
  std::string out;
  size_t start = 0;
  while (true) {
    size_t slash = raw.find('/', start);
    std::string_view seg = raw.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    std::string literal;
    bool only_dots = true;
    for (size_t i = 0; i < seg.size() && only_dots;) {
      if (seg[i] == '.') {
        literal += '.';
        i += 1;
      } else if (seg.size() - i >= 3 && seg[i] == '%' && seg[i + 1] == '2' && (seg[i + 2] | 0x20) == 'e') {
        literal += '.';
        i += 3;
      } else {
        only_dots = false;
      }
    }
    out += (only_dots && (literal == "." || literal == "..")) ? std::string_view(literal) : seg;
    if (slash == std::string_view::npos) return out;
    out += '/';
    start = slash + 1;
  }
}

// RFC 3986, section 5.2.4, remove_dot_segments, rule by rule (A to E).
std::string removeDotSegments(std::string_view in, bool* climbed) {
  std::string out;
  auto dropLast = [&] {
    if (out.empty()) {
      *climbed = true;
      return;
    }
    size_t slash = out.rfind('/');
    out.erase(slash == std::string::npos ? 0 : slash);
  };
  while (!in.empty()) {
    if (in.starts_with("../")) {
      in.remove_prefix(3);
    } else if (in.starts_with("./")) {
      in.remove_prefix(2);
    } else if (in.starts_with("/./")) {
      in.remove_prefix(2);  // "/./" -> "/"
    } else if (in == "/.") {
      in = "/";
    } else if (in.starts_with("/../")) {
      in.remove_prefix(3);  // "/../" -> "/"
      dropLast();
    } else if (in == "/..") {
      in = "/";
      dropLast();
    } else if (in == "." || in == "..") {
      in = {};
    } else {
      size_t end = in.find('/', in[0] == '/' ? 1 : 0);
      if (end == std::string_view::npos) end = in.size();
      out.append(in.substr(0, end));
      in.remove_prefix(end);
    }
  }
  return out;
}

}  // namespace

int fuzzPath(const uint8_t* data, size_t size) {
  std::string raw(reinterpret_cast<const char*>(data), size);
  std::string out;
  if (raw.empty() || raw.front() != '/') {
    FUZZ_ASSERT(http::normalisePath(raw, out) == http::PathNormalisation::NotAbsolute);
    raw.insert(0, 1, '/');
  }
  http::PathNormalisation verdict = http::normalisePath(raw, out);
  FUZZ_ASSERT(verdict != http::PathNormalisation::NotAbsolute);
  FUZZ_ASSERT((verdict == http::PathNormalisation::Unchanged) == !http::hasDotSegment(raw));

  bool climbed = false;
  std::string expected = removeDotSegments(spellDots(raw), &climbed);
  FUZZ_ASSERT(climbed == (verdict == http::PathNormalisation::AboveRoot));
  if (verdict == http::PathNormalisation::AboveRoot) return 0;

  const std::string& result = verdict == http::PathNormalisation::Unchanged ? raw : out;
  if (result != expected) {
    std::fprintf(stderr, "raw %s\nnormalised %s\nRFC 3986 %s\n", raw.c_str(), result.c_str(), expected.c_str());
    FUZZ_ASSERT(result == expected);
  }
  FUZZ_ASSERT(!result.empty() && result.front() == '/');
  FUZZ_ASSERT(result.size() <= raw.size());
  FUZZ_ASSERT(!http::hasDotSegment(result));
  FUZZ_ASSERT(!http::hasDotSegment(result, false));
  std::string again = "untouched";
  FUZZ_ASSERT(http::normalisePath(result, again) == http::PathNormalisation::Unchanged);
  FUZZ_ASSERT(again == "untouched");
  return 0;
}

}  // namespace concert::fuzz

CONCERT_FUZZ_ENTRY(fuzzPath)
