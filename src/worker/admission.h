// The room, the asset tier and the ops endpoints as the data path sees them:
// factories for per-request guards and the local handlers. Implemented in
// room.cpp, assets.cpp, ops.cpp; pure logic over the shared segment, no I/O.
#pragma once

#include <memory>
#include <string>

#include "worker/context.h"
#include "worker/guard.h"
#include "http/request.h"
#include "http/response.h"

namespace concert::worker {

// Gated catch-all: room admission (fast path, ticket, waiting page / JSON
// 429, breaker 503, slot wait), then the concert_admit pass on admission.
std::unique_ptr<RequestGuard> makePageGuard(const WorkerContext& context);

// -assets (private: pass required) and -asset-public (global cap only).
std::unique_ptr<RequestGuard> makeAssetGuard(const WorkerContext& context, bool private_asset);

// GET /queue/status (and OPTIONS -> 204).
http::LocalResponse handleQueueStatus(const WorkerContext& context, const http::Request& request, Millis now);

// GET /_room/healthz, GET /_room/stats, POST /_room/cap (body = request body).
http::LocalResponse handleHealthz(const WorkerContext& context, const http::Request& request);
http::LocalResponse handleStats(const WorkerContext& context, const http::Request& request);
http::LocalResponse handleCap(const WorkerContext& context, const http::Request& request, const std::string& body);

// The Cookie header value with room_ticket, room_pass, room_probe and
// concert_admit removed and the rest kept in order ("a=1; b=2"); nullopt when
// nothing is left (the header is then dropped, never invented).
std::optional<std::string> stripConcertCookies(std::string_view cookie_header);

}  // namespace concert::worker
