// Dot-segment removal on the raw request path; see path.h for the rules.
#include "http/path.h"

namespace concert::http {

namespace {

// "%2e" or "%2E" at `i`.
inline bool encodedDotAt(std::string_view s, size_t i) {
  return s.size() - i >= 3 && s[i] == '%' && s[i + 1] == '2' && (s[i + 2] == 'e' || s[i + 2] == 'E');
}

}  // namespace

DotSegment dotSegment(std::string_view segment, bool encoded) {
  // At most two dots of at most three bytes each.
  if (segment.empty() || segment.size() > 6) return DotSegment::None;
  int dots = 0;
  for (size_t i = 0; i < segment.size(); ++dots) {
    if (dots == 2) return DotSegment::None;
    if (segment[i] == '.')
      i += 1;
    else if (encoded && encodedDotAt(segment, i))
      i += 3;
    else
      return DotSegment::None;
  }
  return dots == 1 ? DotSegment::Dot : DotSegment::DotDot;
}

bool hasDotSegment(std::string_view path, bool encoded) {
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    std::string_view segment =
        path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    // A segment can only be a dot-segment if it starts with '.' or '%'.
    if (!segment.empty() && (segment.front() == '.' || segment.front() == '%') &&
        dotSegment(segment, encoded) != DotSegment::None)
      return true;
    if (slash == std::string_view::npos) return false;
    start = slash + 1;
  }
}

bool hasHiddenDotSegment(std::string_view path) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find_first_of("/\\", start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view segment = path.substr(start, end - start);
    segment = segment.substr(0, segment.find(';'));
    if (!segment.empty() && segment.front() == '.' && dotSegment(segment, false) != DotSegment::None) return true;
    start = end + 1;
  }
  return false;
}

PathNormalisation normalisePath(std::string_view raw, std::string& out) {
  if (raw.empty() || raw.front() != '/') return PathNormalisation::NotAbsolute;
  if (!hasDotSegment(raw)) return PathNormalisation::Unchanged;
  // `out` is the output buffer of RFC 3986, section 5.2.4: "/seg" per kept
  // segment, so dropping the last segment is cutting at the last '/'.
  out.clear();
  out.reserve(raw.size());
  size_t pos = 0;  // raw[pos] == '/'
  while (pos < raw.size()) {
    size_t next = raw.find('/', pos + 1);
    const bool last = next == std::string_view::npos;
    if (last) next = raw.size();
    std::string_view segment = raw.substr(pos + 1, next - pos - 1);
    switch (dotSegment(segment)) {
      case DotSegment::None:
        out += '/';
        out += segment;
        break;
      case DotSegment::Dot:
        if (last) out += '/';
        break;
      case DotSegment::DotDot:
        if (out.empty()) return PathNormalisation::AboveRoot;
        out.resize(out.rfind('/'));
        if (last) out += '/';
        break;
    }
    pos = next;
  }
  if (out.empty()) out += '/';
  return PathNormalisation::Normalised;
}

}  // namespace concert::http
