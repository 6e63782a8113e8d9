// Reverse-proxy message rewriting: the request head Concert sends to the
// origin and the response head it sends to the client. Pure functions over
// parsed heads; the streaming itself lives in OriginExchange
// (origin_exchange.h).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "admission/admission.h"
#include "config/config.h"
#include "http/parser.h"
#include "http/request.h"

namespace concert::worker {

// How a response body is delimited toward the client.
enum class ClientFraming {
  None,     // HEAD, 1xx, 204, 304: no body at all
  Length,   // Content-Length (the origin's)
  Chunked,  // HTTP/1.1 client, origin length unknown
  Close,    // HTTP/1.0 client, origin length unknown: the close ends the body
};

// Connection, Keep-Alive, Proxy-Connection, Proxy-Authenticate,
// Proxy-Authorization, TE, Trailer, Transfer-Encoding, Upgrade.
bool isHopByHop(std::string_view name);

// Path and query sent to the origin: the upstream base path joined with the
// request path by a single slash, the upstream query merged with the request's.
// The request path is raw_path: escapes as sent, dot-segments removed by the
// parser, i.e. the path the router matched.
std::string upstreamTarget(const config::Upstream& upstream, const http::Request& request);

// The whole request head toward the origin (ends with the blank line):
// hop-by-hop headers (and those Connection names) removed, Forwarded and
// X-Forwarded-* replaced (a trusted proxy's chain carried on, see
// http/client_address.h), Host preserved or rewritten, Cookie rebuilt as
// admission says (admission::originCookie), framing chosen by Concert (Content-Length when known,
// chunked otherwise), Expect dropped (Concert answers 100-continue itself),
// Upgrade re-added for a protocol switch.
void buildUpstreamRequestHead(const http::Request& request, const config::Config& config, std::string& out);

// The response head toward the client: origin status and headers minus
// hop-by-hop and framing headers and those named in `dropped` (the headers
// the origin addresses to Concert, as admission lists them), then `extra`
// (the guard's Set-Cookie), Concert's framing, Date when the origin sent
// none, and Connection.
void buildClientResponseHead(const http::ResponseHead& origin, const http::Request& request, ClientFraming framing,
                             bool close_client, const http::Headers& extra, std::string& out,
                             std::span<const std::string_view> dropped = admission::originOnlyHeaders());

// A `text/event-stream` response: long-lived, bounded by the tunnel timeout
// instead of the upstream read timeout.
bool isEventStream(const http::ResponseHead& origin);

// Framing toward the client for an origin response to `request`.
ClientFraming chooseClientFraming(const http::ResponseHead& origin, const http::Request& request);

}  // namespace concert::worker
