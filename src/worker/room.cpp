// The waiting room as a per-request guard, GET /queue/status, and the
// helpers the asset tier and ops endpoints share (room.h).
//
// The queue itself lives in shared memory (shm::Segment: ticket ring, page
// semaphore, counters); this file is the HTTP face of it for one request:
//
//   Start ──(room_ticket ready: claim)──────────────┐
//     │  (known, waiting: queued)                    │
//     │  (new arrival: issue → Ready)────────────────┤
//     │  (issue → Queued: queued)                    ▼
//     │  (issue → Breaker/RingFull: 503)        tryAcquirePage
//     ▼                                           │ ok            │ none (cap shrank, race)
//   Done (responded)                            Holding      WaitingForSlot ──deadline──▶ 503
//     (concert_admit issued or slid on Proceed)     │              │ slot freed (eventfd)
//                                                   ▼              ▼
//                                      release(): ticket finished, page slot back
//
//   queued: -queue-hold 0 (or the worker drains) → Done: 200 page / 429 JSON
//           -queue-hold > 0 → Held ──(ticket ready: claim)──▶ tryAcquirePage
//                               │ (ticket gone: issue again, as a new arrival)
//                               └──hold deadline──▶ Done: 200 page / 429 JSON
//
// Once a ticket is claimed it is "in flight", owned by this worker's slot in
// the segment, and this guard must finish it exactly once: on release (all
// endings) or on the slot-wait timeout. A waiting ticket (Queued, and Held)
// belongs to the visitor's cookie, not to this request; nothing is released
// for it when a hold runs out (the answer carries the cookie) or when the
// client of a held request that came with the cookie goes away. Only a
// ticket issued for a held request whose client left before any answer is
// retired then (counted in timeouts_total): no cookie for it exists.
// If the worker dies, the master's reclaimDeadWorker finishes the claimed
// ticket and returns the page slot from the slot's ledger.
//
// A ready ticket normally finds a page slot at once: the window admits no more
// tickets than the cap. It can miss when the cap shrank or another worker's
// request raced it; it then waits for a PageSlot wake-up, for at most
// -upstream-timeout (the same patience the origin gets), and is answered like
// the breaker when that runs out (counted in timeouts_total).
//
// Held requests (-queue-hold). A page request whose ticket has to wait is
// parked on its connection instead of being answered, for at most
// -queue-hold. Every recheck (PageSlot wake-up, the worker's 250 ms timer)
// touches the ticket and claims it once it is ready, so held requests are
// admitted in ticket order and exactly as a visitor reloading at that moment
// would be. The timer rechecks every held request, so a held ticket is seen
// at least every 250 ms and can never reach -token-ttl (30 s at least) and be
// reaped while it is held. When the hold runs out first, the request gets the
// answer it would have had at once without -queue-hold (waiting page or JSON
// 429 with room_ticket and room_probe), and the visitor keeps the same place
// in line through the cookie. Wake-ups cannot be lost: the guard registers as
// a PageSlot waiter before its first check, and every path that finishes a
// ticket wakes PageSlot waiters after the window moved (see shm/tickets.cpp;
// release() below finishes the ticket before it returns the page slot).
#include "worker/room.h"

#include <cstring>
#include <map>
#include <tuple>

#include "common/admit_pass.h"
#include "common/json.h"
#include "common/log.h"
#include "worker/admission.h"
#include "worker/cookies.h"
#include "worker/pages.h"

namespace concert::worker {

// ------------------------------------------------------------------ helpers

bool wantsHtml(const http::Request& request) {
  return http::joinHeader(request.headers, "Accept").find("text/html") != std::string::npos;
}

namespace {

void replaceAll(std::string& text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

http::Header header(std::string_view name, std::string value) {
  return http::Header{std::string(name), std::move(value)};
}

}  // namespace

std::string renderWaitingPage(const config::Config& config, int64_t position) {
  std::string page = config.html_template.empty() ? std::string(kWaitingRoomHtml) : config.html_template;
  replaceAll(page, "{{.Position}}", std::to_string(position < 1 ? 1 : position));
  replaceAll(page, "{{.SkipURL}}", config.rate > 0 ? config.skip_url : std::string());
  return page;
}

http::LocalResponse roomFullResponse(const config::Config& config, const http::Request& request) {
  http::LocalResponse r;
  r.status = 503;
  if (config.api_json && !wantsHtml(request)) {
    r.headers.push_back(header("Content-Type", std::string(kJsonType)));
    r.body = common::JsonObject()
                 .add("error", "waiting room is full")
                 .add("queued", false)
                 .add("retry_after_seconds", config.retry_after)
                 .str();
  } else {
    r.headers.push_back(header("Content-Type", std::string(kHtmlType)));
    r.body = std::string(kQueueFullHtml);
  }
  r.headers.push_back(header("Cache-Control", "no-store"));
  r.headers.push_back(header("Retry-After", std::to_string(config.retry_after)));
  return r;
}

http::LocalResponse emptyResponse(int status, int retry_after) {
  http::LocalResponse r;
  r.status = status;
  if (retry_after > 0) r.headers.push_back(header("Retry-After", std::to_string(retry_after)));
  return r;
}

namespace {

using ParkKey = std::tuple<const shm::Segment*, shm::WorkerSlot, shm::Resource>;

std::map<ParkKey, int64_t>& parkedCounts() {
  static std::map<ParkKey, int64_t> counts;
  return counts;
}

}  // namespace

void ParkedRequests::park(const WorkerContext& context, shm::Resource resource) {
  int64_t& n = parkedCounts()[ParkKey(context.segment, context.slot, resource)];
  if (n++ == 0) context.segment->setWaiting(context.slot, resource, true);
}

void ParkedRequests::unpark(const WorkerContext& context, shm::Resource resource) {
  auto it = parkedCounts().find(ParkKey(context.segment, context.slot, resource));
  if (it == parkedCounts().end() || it->second <= 0) return;
  if (--it->second == 0) {
    context.segment->setWaiting(context.slot, resource, false);
    parkedCounts().erase(it);
  }
}

int64_t ParkedRequests::count(const WorkerContext& context, shm::Resource resource) {
  auto it = parkedCounts().find(ParkKey(context.segment, context.slot, resource));
  return it == parkedCounts().end() ? 0 : it->second;
}

namespace {

struct HeldState {
  std::optional<uint64_t> note;
  bool draining = false;
};

HeldState& heldState() {
  static HeldState state;
  return state;
}

}  // namespace

void HeldPages::note(uint64_t ticket) {
  heldState().note = ticket;
}

std::optional<uint64_t> HeldPages::take() {
  std::optional<uint64_t> note = heldState().note;
  heldState().note.reset();
  return note;
}

void HeldPages::setDraining(bool draining) {
  heldState().draining = draining;
}

bool HeldPages::draining() {
  return heldState().draining;
}

// ------------------------------------------------------------------ saturation log

namespace {

struct SaturationState {
  const char* last_logged = nullptr;  // the edge the log shows now
  const char* pending = nullptr;      // a later edge not logged yet
  Millis last_ms = -kSaturationLogGapMs;
};

SaturationState& saturationState() {
  static SaturationState state;
  return state;
}

void logSaturation(const shm::Segment& segment, const char* what) {
  LOG_INFO("%s: %lld/%d slots, %lld queued (%lld live)", what, static_cast<long long>(segment.pageOccupancy()),
           segment.pageCap(), static_cast<long long>(segment.queueDepth()),
           static_cast<long long>(segment.liveQueueDepth()));
}

}  // namespace

void SaturationLog::edge(const shm::Segment& segment, const char* what, Millis now) {
  SaturationState& st = saturationState();
  if (now - st.last_ms >= kSaturationLogGapMs) {
    logSaturation(segment, what);
    st.last_logged = what;
    st.pending = nullptr;
    st.last_ms = now;
    return;
  }
  // Too soon after the last line: remember where the room ended up; an edge
  // back to what the log already says needs no line at all.
  st.pending = (st.last_logged && std::strcmp(st.last_logged, what) == 0) ? nullptr : what;
}

void SaturationLog::flush(const shm::Segment& segment, Millis now) {
  SaturationState& st = saturationState();
  if (!st.pending || now - st.last_ms < kSaturationLogGapMs) return;
  logSaturation(segment, st.pending);
  st.last_logged = st.pending;
  st.pending = nullptr;
  st.last_ms = now;
}

// ------------------------------------------------------------------ page guard
namespace {

class PageGuard final : public RequestGuard {
 public:
  explicit PageGuard(const WorkerContext& context) : context_(context), config_(*context.config) {}
  ~PageGuard() override { release(); }

  Admission admit(const http::Request& request, Millis now) override {
    switch (state_) {
      case State::Start: return start(request, now);
      case State::Held: return retryHold(request, now);
      case State::WaitingForSlot: return retrySlot(request, now);
      case State::Holding: return proceed(request);
      case State::Done: break;
    }
    return respond(roomFullResponse(config_, request), Outcome::Rejected);
  }

  http::LocalResponse timedOut(const http::Request& request, Millis now) override {
    if (state_ == State::Held) return holdExpired(request, now).response;
    if (state_ == State::WaitingForSlot) giveUpSlot();
    state_ = State::Done;
    outcome_ = Outcome::Rejected;
    return roomFullResponse(config_, request);
  }

  void release() override {
    // A held request's client went away. A ticket it came with stays in
    // line: the visitor holds its cookie and may come back. A ticket issued
    // for this request never reached anyone (its cookie goes out only with
    // the answer), so nobody can ever claim it: it leaves the line at once
    // instead of blocking everyone behind it until the reaper finds it.
    if (state_ == State::Held) {
      leaveHold();
      if (!cookie_presented_) segment().retire(cookie_.ticket, true);
    }
    // The client went away while its ready ticket waited for a slot: the
    // reference's EventTimeout (§1.3 step 4).
    if (state_ == State::WaitingForSlot) giveUpSlot();
    // The ticket finishes before the page slot is returned, so the wake-up
    // releasePage() sends finds the window already moved: a held ticket that
    // this made ready is admitted on that wake-up, not on the fallback timer.
    const bool finished = finishTicket();
    if (holding_page_) {
      holding_page_ = false;
      // Edge-triggered like the original: only the full -> not-full step logs.
      bool was_full = segment().pageOccupancy() == segment().pageCap();
      segment().releasePage(context_.slot);
      if (was_full) logEdge("draining");
    } else if (finished) {
      segment().wake(shm::Resource::PageSlot);
    }
    state_ = State::Done;
  }

  Outcome outcome() const override { return outcome_; }

 private:
  enum class State { Start, Held, WaitingForSlot, Holding, Done };

  shm::Segment& segment() const { return *context_.segment; }

  Admission start(const http::Request& request, Millis now) {
    std::optional<std::string> value = cookieValue(request.headers, kTicketCookie);
    std::optional<shm::TicketCookie> cookie = value ? shm::TicketCookie::fromHex(*value) : std::nullopt;
    if (cookie) {
      if (segment().claim(*cookie, context_.slot)) return takeSlot(cookie->ticket, request, now);
      // A request about to be held sends no cookie now: touch, not render.
      shm::TicketView view = holds() ? segment().touch(*cookie, now, config_.token_ttl)
                                     : segment().render(*cookie, now, config_.token_ttl);
      if (view.state == shm::TicketState::Waiting) return queued(request, *cookie, view.position, now, true);
      // Ready here means it turned ready between claim and render: one more try.
      if (view.state == shm::TicketState::Ready && segment().claim(*cookie, context_.slot))
        return takeSlot(cookie->ticket, request, now);
      // Unknown, expired, or claimed by a concurrent reload: a new arrival.
    }
    return arrive(request, now);
  }

  // A new arrival: the fast path, a waiting ticket, or the breaker.
  Admission arrive(const http::Request& request, Millis now) {
    shm::Issued issued = segment().issue(context_.slot, config_.max_queue, now);
    switch (issued.outcome) {
      case shm::IssueOutcome::Ready: return takeSlot(issued.cookie.ticket, request, now);
      case shm::IssueOutcome::Queued: return queued(request, issued.cookie, issued.position, now, false);
      case shm::IssueOutcome::Breaker:
      case shm::IssueOutcome::RingFull: break;
    }
    return respond(roomFullResponse(config_, request), Outcome::Rejected);
  }

  bool holds() const { return config_.queue_hold > 0 && !HeldPages::draining(); }

  // The ticket has to wait: answer now, or hold the request for -queue-hold.
  // `presented`: the visitor sent this ticket's cookie (they hold it already).
  Admission queued(const http::Request& request, const shm::TicketCookie& cookie, int64_t position, Millis now,
                   bool presented) {
    if (!holds()) return waiting(request, cookie, position);
    cookie_ = cookie;
    cookie_presented_ = presented;
    position_ = position;
    state_ = State::Held;
    hold_deadline_ = now + config_.queue_hold;
    // Register before the first check, so a ticket that turns ready between
    // the two is not missed: its wake-up finds the flag raised.
    ParkedRequests::park(context_, shm::Resource::PageSlot);
    return retryHold(request, now);
  }

  // One recheck of a held request: touch the ticket (so the reaper never
  // takes it while held) and claim it once it is ready.
  Admission retryHold(const http::Request& request, Millis now) {
    if (HeldPages::draining()) return holdExpired(request, now);
    shm::TicketView view = segment().touch(cookie_, now, config_.token_ttl);
    if (view.state == shm::TicketState::Ready) {
      if (segment().claim(cookie_, context_.slot)) {
        Admission a = takeSlot(cookie_.ticket, request, now);
        leaveHold();
        return a;
      }
      view = segment().touch(cookie_, now, config_.token_ttl);  // it changed under us: look again
    }
    if (view.state == shm::TicketState::Waiting || view.state == shm::TicketState::Ready) {
      if (view.state == shm::TicketState::Waiting) position_ = view.position;
      return holdOn();
    }
    // The ticket is gone (another request with the same cookie claimed it,
    // or it expired): a new arrival at the back, as without the hold, still
    // within the same hold deadline.
    shm::Issued issued = segment().issue(context_.slot, config_.max_queue, now);
    switch (issued.outcome) {
      case shm::IssueOutcome::Ready: {
        Admission a = takeSlot(issued.cookie.ticket, request, now);
        leaveHold();
        return a;
      }
      case shm::IssueOutcome::Queued:
        cookie_ = issued.cookie;
        cookie_presented_ = false;
        position_ = issued.position;
        return holdOn();
      case shm::IssueOutcome::Breaker:
      case shm::IssueOutcome::RingFull: break;
    }
    leaveHold();
    return respond(roomFullResponse(config_, request), Outcome::Rejected);
  }

  Admission holdOn() {
    HeldPages::note(cookie_.ticket);
    Admission a;
    a.kind = Admission::Kind::Wait;
    a.deadline = hold_deadline_;
    return a;
  }

  // The hold ran out (or the worker drains) before the ticket's turn: the
  // answer the request would have had at once without -queue-hold, with the
  // cookies that keep the visitor's place. The ticket stays in line.
  Admission holdExpired(const http::Request& request, Millis now) {
    leaveHold();
    shm::TicketView view = segment().render(cookie_, now, config_.token_ttl);
    if (view.state == shm::TicketState::Waiting) position_ = view.position;
    return waiting(request, cookie_, position_);
  }

  void leaveHold() { ParkedRequests::unpark(context_, shm::Resource::PageSlot); }

  Admission takeSlot(uint64_t ticket, const http::Request& request, Millis now) {
    ticket_ = ticket;
    ticket_in_flight_ = true;
    if (segment().tryAcquirePage(context_.slot)) return admitted(request);
    // Register before retrying, so a release between the two cannot be missed.
    ParkedRequests::park(context_, shm::Resource::PageSlot);
    if (segment().tryAcquirePage(context_.slot)) {
      ParkedRequests::unpark(context_, shm::Resource::PageSlot);
      return admitted(request);
    }
    state_ = State::WaitingForSlot;
    deadline_ = now + (config_.upstream_timeout > 0 ? config_.upstream_timeout : 1000);
    Admission a;
    a.kind = Admission::Kind::Wait;
    a.deadline = deadline_;
    return a;
  }

  Admission retrySlot(const http::Request& request, Millis) {
    if (segment().tryAcquirePage(context_.slot)) {
      ParkedRequests::unpark(context_, shm::Resource::PageSlot);
      return admitted(request);
    }
    Admission a;
    a.kind = Admission::Kind::Wait;
    a.deadline = deadline_;
    return a;
  }

  Admission admitted(const http::Request& request) {
    holding_page_ = true;
    state_ = State::Holding;
    outcome_ = Outcome::Admitted;
    if (segment().pageOccupancy() == segment().pageCap()) logEdge("upstream saturated");
    // §3.3: issue or slide the concert_admit pass before proxying, so it is
    // present even when the origin then fails.
    int64_t unix_now = unixSeconds();
    std::optional<std::string> presented = cookieValue(request.headers, kAdmitCookie);
    std::optional<common::AdmitPass> pass =
        presented ? common::verifyPass(config_.admit_secret, *presented, unix_now) : std::nullopt;
    pass_cookie_ = common::slidePass(config_.admit_secret, pass, unix_now, config_.admit_ttl / 1000, true);
    return proceed(request);
  }

  Admission proceed(const http::Request&) {
    Admission a;
    a.kind = Admission::Kind::Proceed;
    if (pass_cookie_) a.response_headers.push_back(header("Set-Cookie", admitSetCookie(config_, *pass_cookie_)));
    return a;
  }

  Admission waiting(const http::Request& request, const shm::TicketCookie& cookie, int64_t position) {
    http::LocalResponse r;
    std::string ticket_cookie = ticketSetCookie(config_, cookie.toHex(), request.tls);
    std::string probe_cookie = probeSetCookie(config_, request.tls);
    if (config_.api_json && !wantsHtml(request)) {
      // §2.5, byte-exact: Go marshals this map with its keys sorted.
      r.status = 429;
      r.headers.push_back(header("Content-Type", std::string(kJsonType)));
      r.headers.push_back(header("Cache-Control", "no-store"));
      r.headers.push_back(header("Retry-After", std::to_string(config_.retry_after)));
      r.body = common::JsonObject()
                   .add("hint", "keep the room_ticket cookie and retry to hold your position")
                   .add("queued", true)
                   .add("retry_after_seconds", config_.retry_after)
                   .add("status_url", "/queue/status")
                   .str();
    } else {
      r.status = 200;
      r.headers.push_back(header("Content-Type", std::string(kHtmlType)));
      r.headers.push_back(header("Cache-Control", "no-store"));
      r.body = renderWaitingPage(config_, position);
    }
    r.headers.push_back(header("Set-Cookie", std::move(ticket_cookie)));
    r.headers.push_back(header("Set-Cookie", std::move(probe_cookie)));
    return respond(std::move(r), Outcome::Queued);
  }

  Admission respond(http::LocalResponse response, Outcome outcome) {
    state_ = State::Done;
    outcome_ = outcome;
    Admission a;
    a.kind = Admission::Kind::Respond;
    a.response = std::move(response);
    return a;
  }

  // The slot wait ended without a slot: the ticket will never be served.
  // retire() finishes it (the window moves on) and counts timeouts_total.
  void giveUpSlot() {
    ParkedRequests::unpark(context_, shm::Resource::PageSlot);
    ticket_in_flight_ = false;
    segment().retire(ticket_, true);
  }

  bool finishTicket() {
    if (!ticket_in_flight_) return false;
    ticket_in_flight_ = false;
    segment().finish(ticket_, context_.slot);
    return true;
  }

  void logEdge(const char* what) const { SaturationLog::edge(segment(), what, monotonicMs()); }

  const WorkerContext& context_;
  const config::Config& config_;
  State state_ = State::Start;
  Outcome outcome_ = Outcome::Rejected;
  uint64_t ticket_ = 0;
  bool ticket_in_flight_ = false;
  bool holding_page_ = false;
  Millis deadline_ = 0;
  shm::TicketCookie cookie_;       // Held: the waiting ticket
  bool cookie_presented_ = false;  // Held: the request came with that ticket's cookie
  int64_t position_ = 1;           // Held: its last known position
  Millis hold_deadline_ = 0;
  std::optional<std::string> pass_cookie_;
};

}  // namespace

std::unique_ptr<RequestGuard> makePageGuard(const WorkerContext& context) {
  return std::make_unique<PageGuard>(context);
}

// ------------------------------------------------------------------ /queue/status
namespace {

// The smoothed utilization for status polls. The segment only exposes it
// through snapshot(), which also counts the pass table (a scan); with many
// visitors polling every ~3 s that would dominate a poll. Each worker keeps
// the value for up to a second instead: it is an EWMA already, so a second of
// staleness changes nothing a visitor can see.
struct UtilizationCache {
  const shm::Segment* segment = nullptr;
  Millis at = 0;
  double value = 0;
};

UtilizationCache& utilizationCache() {
  static UtilizationCache cache;
  return cache;
}

double cachedUtilization(const shm::Segment& segment, Millis now) {
  constexpr Millis kRefresh = 1000;
  UtilizationCache& cache = utilizationCache();
  if (cache.segment != &segment || now - cache.at >= kRefresh || now < cache.at) {
    cache.segment = &segment;
    cache.at = now;
    cache.value = segment.snapshot().utilization;
  }
  return cache.value;
}

}  // namespace

void resetUtilizationCache() {
  utilizationCache() = UtilizationCache{};
}

http::LocalResponse handleQueueStatus(const WorkerContext& context, const http::Request& request, Millis now) {
  const config::Config& config = *context.config;
  http::LocalResponse r;
  if (request.method == "OPTIONS") {
    r.status = 204;
    return r;
  }
  r.headers.push_back(header("Content-Type", std::string(kJsonType)));
  r.headers.push_back(header("Cache-Control", "no-store"));

  // Field order is the original's struct order: ready, position, utilization,
  // skip_cost, rate_per_pos, has_pass, cookies_required; zero values omitted.
  std::optional<std::string> value = cookieValue(request.headers, kTicketCookie);
  if (!value) {
    r.body = common::JsonObject().add("ready", false).add("cookies_required", true).str();
    return r;
  }
  std::optional<shm::TicketCookie> cookie = shm::TicketCookie::fromHex(*value);
  if (!cookie) {
    r.body = common::JsonObject().add("ready", true).str();
    return r;
  }
  shm::TicketView view = context.segment->poll(*cookie, now, config.token_ttl);
  if (view.state == shm::TicketState::Unknown || view.state == shm::TicketState::Expired) {
    r.body = common::JsonObject().add("ready", true).str();
    return r;
  }
  if (view.rate_limited) {
    r.status = 429;
    r.headers.push_back(header("Retry-After", "1"));
    common::JsonObject body;
    body.add("ready", false);
    if (view.raw_position > 0) body.add("position", view.raw_position);
    r.body = body.str();
    return r;
  }
  if (view.state == shm::TicketState::Ready) {
    r.body = common::JsonObject().add("ready", true).str();
    return r;
  }
  common::JsonObject body;
  body.add("ready", false);
  if (view.position != 0) body.add("position", view.position);
  double utilization = cachedUtilization(*context.segment, now);
  if (utilization != 0) body.add("utilization", utilization);
  if (config.rate > 0) {
    double rate_per_pos = config.rate + static_cast<double>(context.segment->queueDepth()) * config.surge;
    double skip_cost = view.position > 1 ? static_cast<double>(view.position - 1) * rate_per_pos : 0;
    if (skip_cost != 0) body.add("skip_cost", skip_cost);
    if (rate_per_pos != 0) body.add("rate_per_pos", rate_per_pos);
  }
  r.body = body.str();
  if (view.refresh_cookie) {
    r.headers.push_back(header("Set-Cookie", ticketSetCookie(config, cookie->toHex(), request.tls)));
    r.headers.push_back(header("Set-Cookie", probeSetCookie(config, request.tls)));
  }
  return r;
}

}  // namespace concert::worker
