// Priority classes granted by the origin. The origin says
// `Concert-Priority: <class>[; ttl=<seconds>]` on a response (the header
// never reaches the client); when <class> is one of -priority-classes,
// Concert adds a concert_priority cookie to that response, signed with the
// admit secret and bound to the visitor's concert_admit pass. The page guard
// reads it back with priorityClass(). Nothing here keeps state: every worker
// (and every instance sharing the secret) agrees on every cookie, and a
// reload that drops or reorders a class changes what existing cookies mean
// at once.
//
// Wire format of concert_priority: unpadded base64url (pass.h) of
//   [0,16)     the id of the concert_admit pass it is bound to
//   [16,24)    expiry, Unix seconds, unsigned 64-bit big-endian
//   [24,n-16)  the class name as configured (1 to 32 token characters)
//   [n-16,n)   first 16 bytes of HMAC-SHA256(key = admit secret,
//              msg = kPriorityMacLabel + bytes [0,n-16))
// The label keeps the two signed cookies apart: a concert_admit MAC covers
// exactly its 24 bytes with no label, so neither cookie's MAC can ever verify
// as the other's (and a concert_admit value, 40 bytes, is too short to be a
// priority cookie at all).
//
// Header rules (parsePriorityHeader): the class is trimmed of spaces and tabs
// and matched against -priority-classes without case (the cookie carries the
// configured spelling); parameter names are matched without case too
// (`TTL=60` is `ttl=60`); ttl is a whole number of seconds from 1, at most
// kMaxPriorityTtl taken; other parameters are ignored. An empty class or
// `none` clears the cookie. Anything else (a class that is not a token, a
// bad or repeated ttl) is malformed and ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "admission/context.h"
#include "admission/pass.h"
#include "http/request.h"

namespace concert::admission {

// The origin's word: never relayed to the client.
inline constexpr std::string_view kPriorityHeader = "Concert-Priority";
// Domain separation for the priority cookie's MAC (see above).
inline constexpr std::string_view kPriorityMacLabel{"concert_priority/v1\0", 20};
// The longest a priority cookie lives, whatever ttl the origin asks for.
inline constexpr int64_t kMaxPriorityTtl = 24 * 3600;

struct PriorityCookie {
  PassId pass_id{};
  int64_t expiry = 0;  // Unix seconds
  std::string class_name;
};

// The cookie value binding `class_name` to the pass `pass_id` until `expiry`
// (Unix seconds); "" when the MAC cannot be computed or the class name is
// empty.
std::string mintPriority(std::string_view secret, const PassId& pass_id, int64_t expiry, std::string_view class_name);

// What a presented concert_priority value is, as checkPass says of a pass:
// Valid (genuine, now < expiry), Expired (genuine, too late) or Forged
// (malformed, tampered with, or signed with another key). Binding and class
// are not judged here: `cookie` is filled for Valid and Expired.
struct CheckedPriority {
  PassCheck check = PassCheck::Forged;
  PriorityCookie cookie;
};
CheckedPriority checkPriority(std::string_view secret, std::string_view value, int64_t now);

// The request's priority class: the index (0 = first) in -priority-classes of a
// genuine, unexpired concert_priority cookie bound to `pass` (the request's valid
// concert_admit pass). nullopt when there is none, it is forged, expired, bound
// to another pass, or names a class not (or no longer) configured.
std::optional<int> priorityClass(const AdmissionContext& context, const http::Request& request,
                                 const AdmitPass& pass, int64_t unix_now);

// Where `name` stands in `classes` (compared without case); nullopt if absent.
std::optional<int> classIndex(const std::vector<std::string>& classes, std::string_view name);

// One Concert-Priority header value, parsed (rules above); nullopt when
// malformed. An empty class_name asks to clear the cookie.
struct PriorityGrant {
  std::string class_name;            // as sent, trimmed; "" = clear
  std::optional<int64_t> ttl_seconds;  // as sent (>= 1), not yet capped
};
std::optional<PriorityGrant> parsePriorityHeader(std::string_view value);

// The Set-Cookie value to add to a response whose origin sent
// `Concert-Priority: header_value`; nullopt to add nothing (malformed, a class
// not configured, or no pass to bind to; logged). The pass is the one the
// response itself sets (a concert_admit Set-Cookie in `response_headers`,
// the guard's headers: a new or slid pass) or else the request's session
// pass. The cookie lives ttl seconds (default -admit-ttl), at most
// kMaxPriorityTtl.
std::optional<std::string> grantPriority(const AdmissionContext& context, const http::Request& request,
                                         const http::Headers& response_headers, std::string_view header_value,
                                         int64_t unix_now);

}  // namespace concert::admission
