// The room, the asset tier and the ops endpoints as the data path sees them:
// factories for per-request guards and the local handlers. Implemented in
// page_guard.cpp, asset_guard.cpp, queue_status.cpp and ops.cpp; pure logic
// over the shared segment, no I/O. Every decision the room makes is in this
// folder; src/worker/ only moves bytes.
#pragma once

#include <memory>
#include <string>

#include "admission/context.h"
#include "admission/guard.h"
#include "http/request.h"
#include "http/response.h"

namespace concert::admission {

// Gated catch-all: room admission (fast path, ticket, waiting page / JSON
// 429, breaker 503, slot wait), then the concert_admit pass on admission.
std::unique_ptr<RequestGuard> makePageGuard(const AdmissionContext& context);

// -assets (private: pass required) and -asset-public (global cap only).
std::unique_ptr<RequestGuard> makeAssetGuard(const AdmissionContext& context, bool private_asset);

// GET /queue/status (and OPTIONS -> 204).
http::LocalResponse handleQueueStatus(const AdmissionContext& context, const http::Request& request, Millis now);

// GET /_room/healthz, GET /_room/stats, POST /_room/cap (body = request body).
http::LocalResponse handleHealthz(const AdmissionContext& context, const http::Request& request);
http::LocalResponse handleStats(const AdmissionContext& context, const http::Request& request);
http::LocalResponse handleCap(const AdmissionContext& context, const http::Request& request,
                              const std::string& body);

}  // namespace concert::admission
