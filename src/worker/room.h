// Helpers shared by the room (room.cpp), the asset tier (assets.cpp) and the
// ops endpoints (ops.cpp): response builders, the browser test, and the
// worker-local bookkeeping of parked requests.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "shm/segment.h"
#include "worker/context.h"
#include "worker/request.h"
#include "worker/response.h"

namespace concert::worker {

inline constexpr std::string_view kJsonType = "application/json; charset=utf-8";
inline constexpr std::string_view kHtmlType = "text/html; charset=utf-8";
inline constexpr std::string_view kTextType = "text/plain; charset=utf-8";

// §2.4: the joined Accept values contain "text/html" (case-sensitive).
bool wantsHtml(const Request& request);

// The waiting page with {{.Position}} and {{.SkipURL}} substituted verbatim
// (the configured -html template, else the built-in page). SkipURL is empty
// unless -rate > 0.
std::string renderWaitingPage(const config::Config& config, int64_t position);

// The answer for "no room for you": breaker, ring full, slot-wait timeout.
// API clients (with -api-json) get 503 JSON, everyone else the small HTML page;
// both carry Retry-After: -retry-after and Cache-Control: no-store.
LocalResponse roomFullResponse(const config::Config& config, const Request& request);

// An empty-bodied response with an optional Retry-After (asset tier, ops).
LocalResponse emptyResponse(int status, int retry_after = 0);

// /queue/status reads the smoothed utilization through a per-process cache
// refreshed at most once a second. A process that builds a new segment
// (the unit tests) forgets the old value with this.
void resetUtilizationCache();

// Parked requests of this worker, per resource. The segment's waiting flag is
// one bit per (slot, resource), but a worker may park many requests on the
// same resource: the flag is raised by the first park and lowered by the
// last unpark. Only the worker's own (single) event-loop thread calls these.
class ParkedRequests {
 public:
  static void park(const WorkerContext& context, shm::Resource resource);
  static void unpark(const WorkerContext& context, shm::Resource resource);
  static int64_t count(const WorkerContext& context, shm::Resource resource);
};

}  // namespace concert::worker
