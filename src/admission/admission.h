// The room, the asset tier and the ops endpoints as the data path sees them:
// the gate before routing (screen), factories for per-request guards, the
// local handlers and the waiting page's event stream. Implemented in
// screen.cpp, endpoints.cpp, page_guard.cpp, asset_guard.cpp,
// origin_policy.cpp, queue_status.cpp, queue_events.cpp, ops.cpp and
// metrics.cpp; pure logic over the shared segment, no I/O. Every decision the
// room makes is in this folder; src/worker/ only moves bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "admission/context.h"
#include "admission/guard.h"
#include "admission/visitor.h"
#include "http/request.h"
#include "http/response.h"
#include "http/router.h"

namespace concert::admission {

// The gate every request passes after routing and before any handler or
// guard, /_room/healthz excepted, while strikes are on (-abuse-threshold): a
// forged pass is a strike (abuse.h), and a banned client is refused. nullopt:
// the request goes on; else the answer (403), counted in
// rejected_banned_total, which closes the connection, is always logged and
// has the outcome Rejected. `now` and `unix_now`: when the request started.
// screen.cpp.
std::optional<http::LocalResponse> screen(const AdmissionContext& context, const http::Request& request,
                                          const Visitor& visitor, http::Route route, Millis now, int64_t unix_now);

// The data path refused the request with `status` before any guard: a
// malformed or oversized request (400, 413, 414, 431) is a strike against its
// client; other statuses are not. screen.cpp.
void refused(const AdmissionContext& context, const http::Request& request, int status, Millis now);

// The guard of a proxied route (Page, LongLived, PrivateAsset, PublicAsset,
// Bypass; null for any other), with the request's Visitor as the screen read
// it (the guard keeps it for the exchange). endpoints.cpp.
std::unique_ptr<RequestGuard> makeGuard(const AdmissionContext& context, http::Route route, Visitor visitor);

// Gated catch-all: room admission (fast path, ticket, waiting page / JSON
// 429, breaker 503, slot wait), then the concert_admit pass on admission.
// `long_lived` (-long-lived): admission also takes one of -long-lived-cap
// (none: 503 + Retry-After, long_lived_refused_total, and the page slot goes
// straight back), and the page slot goes back once the origin's tunnel or
// event stream opens (onLongLived); the long-lived slot is held until release().
// Without a Visitor the guard reads its own from the first request it sees.
std::unique_ptr<RequestGuard> makePageGuard(const AdmissionContext& context, bool long_lived = false,
                                            std::optional<Visitor> visitor = std::nullopt);

// -assets (private: pass required) and -asset-public (global cap only).
std::unique_ptr<RequestGuard> makeAssetGuard(const AdmissionContext& context, bool private_asset,
                                             std::optional<Visitor> visitor = std::nullopt);

// A client in -bypass-cidrs, or a -bypass path: proxied at once, nothing
// held (Outcome::Bypass); the origin's word is heeded as on any response.
std::unique_ptr<RequestGuard> makeBypassGuard(const AdmissionContext& context);

// The answer of a local endpoint (router.h: every route served here but the
// event streams), `body` the request body collected for it (a POST to
// /_room/cap, /_room/mode or /_room/promote; empty otherwise). endpoints.cpp.
http::LocalResponse answer(const AdmissionContext& context, http::Route route, const http::Request& request,
                           const std::string& body, Millis now);

// The response headers the origin addresses to Concert (Concert-Session,
// Concert-Priority; origin_policy.h): never relayed to the client.
std::span<const std::string_view> originOnlyHeaders();

// The Cookie header the origin gets: the request's cookies without Concert's
// own (cookies.h); nullopt when none is left.
std::optional<std::string> originCookie(const http::Request& request);

// GET /queue/status (and OPTIONS -> 204).
http::LocalResponse handleQueueStatus(const AdmissionContext& context, const http::Request& request, Millis now);

// An event stream the worker keeps open (text/event-stream, answered
// locally): the waiting page's GET /queue/events (QueueEvents) and the
// dashboard's GET /_room/history/events (dashboard.h). The feed decides what
// the stream says; the worker owns the connection, the wire framing, the
// keep-alive comments, the timers and the order of its streams
// (worker/worker.h), and treats every feed alike.
class EventFeed {
 public:
  struct Event {
    enum class Kind { None, Position, Ready, End, Samples };
    Event(Kind k = Kind::None, std::string d = {}, std::string i = {})
        : kind(k), data(std::move(d)), id(std::move(i)) {}

    Kind kind = Kind::None;
    std::string data;  // Position, Ready: the /queue/status body; Samples: a JSON array
    std::string id;    // Samples: the event id (the last sample's index), "" for none

    bool ends() const { return kind == Kind::Ready || kind == Kind::End; }
    // As sent on the stream: "event: NAME\ndata: JSON\n\n" (preceded by
    // "id: ID\n" when there is one); End is the reconnection hint
    // "retry: MS\n\n"; None is "".
    std::string text() const;
  };

  struct Opening {
    bool stream = false;           // false: `response` is the whole answer
    http::LocalResponse response;  // stream: status and headers of the head (no body)
    Event first;                   // stream: the first event (None: nothing yet)
  };

  virtual ~EventFeed() = default;
  virtual Opening open(const http::Request& request, Millis now) = 0;  // once
  // What to send now (None: nothing); `may_send_position` as QueueEvents says.
  virtual Event recheck(Millis now, bool may_send_position) = 0;
  // Where the worker files the stream: waiting pages by ticket, so that a
  // wake-up's walk stops early; other feeds after every ticket (kLast).
  virtual uint64_t ticket() const = 0;
  static constexpr uint64_t kLast = UINT64_MAX;
};

// The feed of an event-stream route (QueueEvents, HistoryEvents; null for any
// other). endpoints.cpp.
std::unique_ptr<EventFeed> makeFeed(const AdmissionContext& context, http::Route route);

// GET /queue/events: the waiting page learns its turn by push. One object per
// stream decides what the stream says; the worker owns the connection, the
// wire framing, the keep-alive comments, the timers and the order of its
// streams (worker/worker.h).
//
//   open()     Without a usable room_ticket, or for a ticket no longer in
//              line (admitted, reaped, expired), the answer /queue/status
//              would give (plain JSON, not a stream). Otherwise the stream's
//              head (text/event-stream, with the place cookies re-sent) and
//              its first event: `position` with the /queue/status body of the
//              waiting ticket, or `ready` if the ticket may take a slot now.
//   recheck()  On every PageSlot wake-up and every second while the stream
//              is open. Touches the ticket (seen, so the reaper leaves it; the
//              poll rate limit is not spent) and says what to send:
//                Ready    the ticket may take a slot, or left the line
//                         meanwhile (/queue/status answers {"ready":true} then
//                         too): the page reloads. The stream ends.
//                End      the worker drains, or the room_ticket cookie sent
//                         with the head is due for a refresh (-token-ttl / 3
//                         after it, as /queue/status refreshes it): the stream
//                         ends with a retry hint and the browser's EventSource
//                         reconnects (to another worker when this one drains).
//                Position the position changed since the last one sent, that
//                         one went out kPositionEvery ago or more, and the
//                         caller lets it go now (`may_send_position`: the
//                         worker spreads a burst of updates over a few ticks).
//                None     nothing to say.
// From open() until the stream ends (or the object goes) it is registered as
// a PageSlot waiter, and it registers before its first look at the ticket: a
// release or finished ticket in any worker wakes this one (context.h).
class QueueEvents final : public EventFeed {
 public:
  static constexpr Millis kPositionEvery = 5'000;

  explicit QueueEvents(const AdmissionContext& context);
  ~QueueEvents() override;
  QueueEvents(const QueueEvents&) = delete;
  QueueEvents& operator=(const QueueEvents&) = delete;

  Opening open(const http::Request& request, Millis now) override;  // first: Position or Ready
  Event recheck(Millis now, bool may_send_position = true) override;  // None once the stream ended
  uint64_t ticket() const override { return cookie_.ticket; }

 private:
  Event ended(Event event);
  Event position(int64_t position, Millis now);

  const AdmissionContext& context_;
  shm::TicketCookie cookie_;
  bool parked_ = false;
  Millis renew_at_ = 0;
  int64_t position_sent_ = 0;
  Millis position_sent_at_ = 0;
};

// A comment line the worker sends on an idle event stream now and then, so
// that intermediaries do not take it for dead.
inline constexpr std::string_view kEventStreamKeepAlive = ": keep-alive\n\n";

// The admin endpoints' gate: nullopt when the request may go on (it came on
// -admin-listen, or carries `Authorization: Bearer $CONCERT_ADMIN_TOKEN`),
// else the answer: 404 while no token is set, 401 without the header or with
// a wrong token (a wrong token is a strike).
std::optional<http::LocalResponse> adminRefusal(const AdmissionContext& context, const http::Request& request);

// GET /_room/healthz, GET /_room/stats, POST /_room/cap (body = request body).
http::LocalResponse handleHealthz(const AdmissionContext& context, const http::Request& request);
http::LocalResponse handleStats(const AdmissionContext& context, const http::Request& request);
http::LocalResponse handleCap(const AdmissionContext& context, const http::Request& request,
                              const std::string& body);
// GET (or HEAD) /_room/mode: {"mode": "..."}; POST with {"mode": "..."}
// (body) sets the room's mode for every worker (shm/modes.h) and answers the
// same; 400 {"error": ...} for a bad body. Admin only (adminRefusal).
http::LocalResponse handleMode(const AdmissionContext& context, const http::Request& request, std::string_view body);

// GET /_room/queue?limit=N (default 50, at most 1000): the head of the line,
// oldest first, `[{"ticket", "age_seconds", "client", "last_seen_seconds",
// "returned"}]`; DELETE /_room/queue/<ticket>: that ticket leaves the line
// (404 when it holds no place). Both admin (adminRefusal). line_admin.cpp.
http::LocalResponse handleQueueList(const AdmissionContext& context, const http::Request& request, Millis now);
http::LocalResponse handleQueueRemove(const AdmissionContext& context, const http::Request& request);

// POST /_room/promote (admin token), body {"ticket": "<ref>"} (the
// {{.Ticket}} reference of -skip-url; a ticket number from /_room/queue is
// taken too): the ticket leaves the line and its holder gets a room pass on
// its next poll, event stream or page (room_pass.h). 200 {"promoted": N};
// 404 when the reference names no ticket in line; 400 for a bad body.
http::LocalResponse handlePromote(const AdmissionContext& context, const http::Request& request,
                                  std::string_view body);
// GET /queue/promote?ticket=<ref>&exp=<unix seconds>&sig=<hex>: a payment
// page's signed link (CONCERT_PROMOTE_SECRET). Valid, unexpired and unused:
// 303 to / with the room_pass cookie, and the ticket leaves the line.
// Anything else: 403.
http::LocalResponse handleQueuePromote(const AdmissionContext& context, const http::Request& request);
// GET /_room/metrics (open, like stats): every counter, gauge and histogram
// of the segment in Prometheus text format 0.0.4 (metrics.cpp; the names are
// listed in concert(8), METRICS). renderMetrics is the body alone.
inline constexpr std::string_view kMetricsType = "text/plain; version=0.0.4; charset=utf-8";
std::string renderMetrics(const AdmissionContext& context);
http::LocalResponse handleMetrics(const AdmissionContext& context, const http::Request& request);

// GET /_room/report (admin, adminRefusal): the fairness report, one JSON
// object: fifo_inversions (fifo_inversions_total), ghost_share (ghost
// evictions / tickets issued, 0 before any ticket), tickets_per_client (the
// kReportClients clients holding the most live tickets: [{"client": IPv4
// text or IPv6 "/64" prefix, "tickets": N}], most first) and wait_seconds
// ({"p50", "p90", "p99"} of the queue wait histogram, all workers, 0 when
// empty). renderReport is the body alone.
inline constexpr size_t kReportClients = 10;
std::string renderReport(const AdmissionContext& context);
http::LocalResponse handleReport(const AdmissionContext& context, const http::Request& request);

}  // namespace concert::admission
