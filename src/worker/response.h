// A response Concert answers itself (ops endpoints, waiting page, JSON 429 /
// 503, 403/429/503 of the asset tier, 4xx for bad requests, 502/504). The
// data path serialises it: it adds Content-Length (omitted for 204/304 and
// HEAD keeps the length but sends no body), Date and Connection.
#pragma once

#include <string>

#include "worker/request.h"

namespace concert::worker {

struct LocalResponse {
  int status = 200;
  Headers headers;  // Content-Type, Set-Cookie, Retry-After, Cache-Control, Allow ...
  std::string body;
};

// "Too Many Requests" etc.; "" for unknown codes.
const char* reasonPhrase(int status);

}  // namespace concert::worker
