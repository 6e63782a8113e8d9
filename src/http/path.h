// Request path normalisation: dot-segment removal (RFC 3986 §5.2.4) on the
// path as sent, so that routing and forwarding agree on one path.
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
