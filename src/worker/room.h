// Helpers shared by the room (room.cpp), the asset tier (assets.cpp) and the
// ops endpoints (ops.cpp): response builders, the browser test, and the
// worker-local bookkeeping of parked requests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shm/segment.h"
#include "worker/context.h"
#include "http/request.h"
#include "http/response.h"

namespace concert::worker {

inline constexpr std::string_view kJsonType = "application/json; charset=utf-8";
inline constexpr std::string_view kHtmlType = "text/html; charset=utf-8";
inline constexpr std::string_view kTextType = "text/plain; charset=utf-8";

// §2.4: the joined Accept values contain "text/html" (case-sensitive).
bool wantsHtml(const http::Request& request);

// The waiting page with {{.Position}} and {{.SkipURL}} substituted verbatim
// (the configured -html template, else the built-in page). SkipURL is empty
// unless -rate > 0.
std::string renderWaitingPage(const config::Config& config, int64_t position);

// The answer for "no room for you": breaker, ring full, slot-wait timeout.
// API clients (with -api-json) get 503 JSON, everyone else the small HTML page;
// both carry Retry-After: -retry-after and Cache-Control: no-store.
http::LocalResponse roomFullResponse(const config::Config& config, const http::Request& request);

// An empty-bodied response with an optional Retry-After (asset tier, ops).
http::LocalResponse emptyResponse(int status, int retry_after = 0);

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

// Page requests held on their connection by -queue-hold, as the worker's
// event loop sees them. A page guard whose admit() keeps its request held
// (Wait) notes the ticket it waits on; the worker takes the note right after
// the call that produced it (Worker::park for a new park, Worker::recheckParked
// for a recheck). That is how the worker keeps its held requests in ticket
// order without knowing what kind of guard a connection has. While the
// worker drains, guards hold nothing: a request that would be held is
// answered at once with the waiting room. Worker-local, like ParkedRequests.
class HeldPages {
 public:
  static void note(uint64_t ticket);
  static std::optional<uint64_t> take();  // the last note, cleared
  static void setDraining(bool draining);
  static bool draining();
};

// The "upstream saturated" / "draining" lines (reference §1.8: logged on the
// full and not-full edges). At full cap those edges alternate on nearly
// every request, so a worker writes at most one such line per second: the
// first edge is logged at once, later ones within the second are folded,
// and flush() (the worker's 1 s tick) logs where the room ended up if that
// differs from the last line. The log always ends on the current state.
constexpr Millis kSaturationLogGapMs = 1000;
class SaturationLog {
 public:
  static void edge(const shm::Segment& segment, const char* what, Millis now);
  static void flush(const shm::Segment& segment, Millis now);
};

}  // namespace concert::worker
