// Request path normalisation: dot-segment removal (RFC 3986, section 5.2.4)
// on the path as sent, so that routing and forwarding agree on one path.
//
// Rules (see also README "Paths"):
//   * a segment is a dot-segment when it consists of one or two dots, each
//     written literally or as %2e / %2E: ".", "%2e", "..", ".%2E", "%2e.",
//     "%2E%2e" ...; "..." or ".a" are ordinary segments;
//   * "." is dropped, ".." drops the segment before it; a dot-segment at the
//     end leaves a trailing '/' ("/a/b/.." -> "/a/", "/a/." -> "/a/");
//   * a ".." with no segment left to drop climbs above the root: AboveRoot
//     (the connection answers 400);
//   * empty segments ("//") are kept: they are segments like any other, so
//     "/a//../b" is "/a/b" as in RFC 3986; nothing is merged;
//   * every other byte, percent-escapes included, is kept as sent: "%2F" is
//     not a separator here and nothing is decoded or re-encoded.
//
// Origins read more syntax into a path than RFC 3986 does: a decoded "%2F" or
// "%5C", a backslash (IIS, many Windows servers) separate segments, and
// ";parameters" after a segment are not part of it (Tomcat and Jetty serve
// "/checkout" for "/static/..;/checkout"). A path that still holds a dot-segment
// when read that way would be routed as one path and served as another, so
// the parser refuses it (hasHiddenDotSegment).
#pragma once

#include <string>
#include <string_view>

namespace concert::http {

enum class DotSegment { None, Dot, DotDot };

// What `segment` (no '/' in it) is; `encoded` lets %2e / %2E count as dots.
DotSegment dotSegment(std::string_view segment, bool encoded = true);

// True when any '/'-separated segment of `path` is a dot-segment. With
// `encoded` false only literal dots count (for an already-decoded path).
bool hasDotSegment(std::string_view path, bool encoded = true);

// True when the decoded `path`, with '\\' also separating segments and each
// segment's ";parameters" ignored, has a "." or ".." segment (literal dots
// only: `path` is decoded). After normalisePath a true answer means the
// dot-segment hides behind an encoded slash, a backslash or parameters.
bool hasHiddenDotSegment(std::string_view path);

enum class PathNormalisation {
  Unchanged,    // no dot-segment: `out` was not touched
  Normalised,   // `out` holds the normalised path
  AboveRoot,    // a ".." would climb above "/"
  NotAbsolute,  // the path is empty or does not start with '/'
};

// Removes the dot-segments of `raw` (an origin-form path as sent, query
// removed). Writes `out` only for Normalised, so the common case copies
// nothing.
PathNormalisation normalisePath(std::string_view raw, std::string& out);

}  // namespace concert::http
