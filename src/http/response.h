// A response Concert answers itself (ops endpoints, waiting page, JSON 429 /
// 503, 403/429/503 of the asset tier, 4xx for bad requests, 502/504). The
// data path serialises it: it adds Content-Length (omitted for 204/304 and
// HEAD keeps the length but sends no body), Date and Connection.
#pragma once

#include <string>

#include "http/request.h"

namespace concert::http {

struct LocalResponse {
  int status = 200;
  Headers headers;  // Content-Type, Set-Cookie, Retry-After, Cache-Control, Allow ...
  std::string body;
};

// "Too Many Requests" etc.; "" for unknown codes.
const char* reasonPhrase(int status);

// A text/plain; charset=utf-8 response (errors such as 400, 502, 504).
LocalResponse plainText(int status, std::string body);

// How a response head is framed toward the client.
struct WireOptions {
  bool head_request = false;       // HEAD: headers (with the real Content-Length), no body
  bool close = false;              // announce and then do close the connection
  bool http10_keep_alive = false;  // HTTP/1.0 client that asked for keep-alive: say so
};

// Appends the whole response (status line, headers, Content-Length unless
// 1xx/204/304, Date, Connection, body) to `out`. Any Content-Length,
// Transfer-Encoding, Connection or Date in `response.headers` is ignored:
// the data path owns framing.
void serializeResponse(const LocalResponse& response, const WireOptions& options, std::string& out);

// The head of a response whose body the data path streams for as long as it
// wants (GET /queue/events): status line, `response.headers` (framing headers
// ignored as above), Date, Transfer-Encoding: chunked when `chunked` (an
// HTTP/1.1 client), and Connection: close when `close` or not `chunked` (the
// body then ends with the connection). No Content-Length; `response.body` is
// not written.
void serializeStreamHead(const LocalResponse& response, bool chunked, bool close, std::string& out);

// The current time as an IMF-fixdate ("Mon, 30 Nov 2026 03:10:16 GMT"),
// formatted at most once per second.
std::string_view httpDate();

}  // namespace concert::http
