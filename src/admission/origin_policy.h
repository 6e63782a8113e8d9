// The origin's word to Concert: response headers addressed to Concert, acted
// on by the guard of the request (RequestGuard::onResponseHead) and never
// relayed to the client.
//
//   Concert-Session: end   ends the visitor's session: the request's pass is
//                          revoked on every worker (session.h), and the
//                          response expires its cookie instead of sliding it.
//                          Acted on also when the client is gone (the origin
//                          did end the session).
//   Concert-Priority: ...  grants a priority class (priority.h): a
//                          concert_priority cookie is added to the response.
//                          Never for a response that ends the session (the
//                          pass the cookie would be bound to is revoked with
//                          it) nor when the client is gone.
//
// Both are dropped from every response head toward the client, whoever
// proxied it (admission.h, originOnlyHeaders()).
#pragma once

#include <string_view>

#include "admission/context.h"
#include "http/parser.h"
#include "http/request.h"

namespace concert::admission {

inline constexpr std::string_view kSessionHeader = "Concert-Session";

// Does the origin end the visitor's session with this response (a
// Concert-Session header listing `end`, in any case)?
bool endsSession(const http::ResponseHead& origin);

// The guard's headers for a response that ends the session: every
// concert_admit Set-Cookie (a slid or newly minted pass) dropped, the rest
// kept in order, and `expire_cookie` (the Set-Cookie value that expires the
// pass) added.
http::Headers sessionEndHeaders(const http::Headers& extra, std::string_view expire_cookie);

// The first Concert-Priority header of the origin's response; false when
// there is none.
bool priorityHeader(const http::ResponseHead& origin, std::string_view& value);

// Acts on the origin's final response head (101, or 200..599) to `request`
// as the rules above say; `response_headers` are the headers going out with
// it (the guard's), changed in place. `detached`: the client is gone.
void heedOrigin(const AdmissionContext& context, const http::Request& request, const http::ResponseHead& head,
                bool detached, http::Headers& response_headers);

}  // namespace concert::admission
