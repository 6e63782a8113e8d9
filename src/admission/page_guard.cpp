// The waiting room as a per-request guard.
//
// The queue itself lives in shared memory (shm::Segment: ticket ring, page
// semaphore, counters); this file is the HTTP face of it for one request:
//
//   Start ──(room_ticket ready: claim)──────────────┐
//     │  (known, waiting: queued)                    │
//     │  (new arrival: issue → Ready)────────────────┤
//     │  (issue → Queued: queued)                    ▼
//     │  (issue → Breaker/RingFull: 503)        pages().tryAcquire
//     ▼                                           │ ok            │ none (cap shrank, race)
//   Done (responded)                            Holding      WaitingForSlot ──deadline──▶ 503
//     (concert_admit issued or slid on Proceed)     │              │ slot freed (eventfd)
//                                                   ▼              ▼
//                                      release(): ticket finished, page slot back
//
//   queued: -queue-hold 0 (or the worker drains) → Done: 200 page / 429 JSON
//           -queue-hold > 0 → Held ──(ticket ready: claim)──▶ pages().tryAcquire
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
#include "admission/admission.h"
#include "admission/answers.h"
#include "admission/cookies.h"
#include "admission/pass.h"
#include "admission/saturation_log.h"

namespace concert::admission {
namespace {

class PageGuard final : public RequestGuard {
 public:
  explicit PageGuard(const AdmissionContext& context)
      : context_(context), config_(*context.config), waiters_(*context.waiters) {}
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
      if (!cookie_presented_) segment().tickets().retire(cookie_.ticket, true);
    }
    // The client went away while its ready ticket waited for a slot: the
    // ticket is retired and counted as a timeout.
    if (state_ == State::WaitingForSlot) giveUpSlot();
    // The ticket finishes before the page slot is returned, so the wake-up
    // pages().release() sends finds the window already moved: a held ticket that
    // this made ready is admitted on that wake-up, not on the fallback timer.
    const bool finished = finishTicket();
    if (holding_page_) {
      holding_page_ = false;
      // Edge-triggered like the original: only the full -> not-full step logs.
      bool was_full = segment().pages().occupancy() == segment().pages().cap();
      segment().pages().release(context_.slot);
      if (was_full) logEdge("draining");
    } else if (finished) {
      segment().slots().wake(shm::Resource::PageSlot);
    }
    state_ = State::Done;
  }

  Outcome outcome() const override { return outcome_; }

 private:
  enum class State { Start, Held, WaitingForSlot, Holding, Done };

  shm::Segment& segment() const { return *context_.segment; }

  Admission start(const http::Request& request, Millis now) {
    std::optional<std::string> value = cookieValue(request.headers, kTicketCookie);
    std::optional<shm::TicketCookie> cookie = value ? decodeTicketCookie(*value) : std::nullopt;
    if (cookie) {
      if (segment().tickets().claim(*cookie, context_.slot)) return takeSlot(cookie->ticket, request, now);
      // A request about to be held sends no cookie now: touch, not render.
      shm::TicketView view = holds() ? segment().tickets().touch(*cookie, now, config_.token_ttl)
                                     : segment().tickets().render(*cookie, now, config_.token_ttl);
      if (view.state == shm::TicketState::Waiting) return queued(request, *cookie, view.position, now, true);
      // Ready here means it turned ready between claim and render: one more try.
      if (view.state == shm::TicketState::Ready && segment().tickets().claim(*cookie, context_.slot))
        return takeSlot(cookie->ticket, request, now);
      // Unknown, expired, or claimed by a concurrent reload: a new arrival.
    }
    return arrive(request, now);
  }

  // A new arrival: the fast path, a waiting ticket, or the breaker.
  Admission arrive(const http::Request& request, Millis now) {
    shm::Issued issued = segment().tickets().issue(context_.slot, config_.max_queue, now);
    switch (issued.outcome) {
      case shm::IssueOutcome::Ready: return takeSlot(issued.cookie.ticket, request, now);
      case shm::IssueOutcome::Queued: return queued(request, issued.cookie, issued.position, now, false);
      case shm::IssueOutcome::Breaker:
      case shm::IssueOutcome::RingFull: break;
    }
    return respond(roomFullResponse(config_, request), Outcome::Rejected);
  }

  bool holds() const { return config_.queue_hold > 0 && !waiters_.draining(); }

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
    waiters_.park(shm::Resource::PageSlot);
    return retryHold(request, now);
  }

  // One recheck of a held request: touch the ticket (so the reaper never
  // takes it while held) and claim it once it is ready.
  Admission retryHold(const http::Request& request, Millis now) {
    if (waiters_.draining()) return holdExpired(request, now);
    shm::TicketView view = segment().tickets().touch(cookie_, now, config_.token_ttl);
    if (view.state == shm::TicketState::Ready) {
      if (segment().tickets().claim(cookie_, context_.slot)) {
        Admission a = takeSlot(cookie_.ticket, request, now);
        leaveHold();
        return a;
      }
      view = segment().tickets().touch(cookie_, now, config_.token_ttl);  // it changed under us: look again
    }
    if (view.state == shm::TicketState::Waiting || view.state == shm::TicketState::Ready) {
      if (view.state == shm::TicketState::Waiting) position_ = view.position;
      return holdOn();
    }
    // The ticket is gone (another request with the same cookie claimed it,
    // or it expired): a new arrival at the back, as without the hold, still
    // within the same hold deadline.
    shm::Issued issued = segment().tickets().issue(context_.slot, config_.max_queue, now);
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
    Admission a;
    a.kind = Admission::Kind::Wait;
    a.deadline = hold_deadline_;
    a.resource = shm::Resource::PageSlot;
    a.held_ticket = cookie_.ticket;
    return a;
  }

  // The hold ran out (or the worker drains) before the ticket's turn: the
  // answer the request would have had at once without -queue-hold, with the
  // cookies that keep the visitor's place. The ticket stays in line.
  Admission holdExpired(const http::Request& request, Millis now) {
    leaveHold();
    shm::TicketView view = segment().tickets().render(cookie_, now, config_.token_ttl);
    if (view.state == shm::TicketState::Waiting) position_ = view.position;
    return waiting(request, cookie_, position_);
  }

  void leaveHold() { waiters_.unpark(shm::Resource::PageSlot); }

  Admission takeSlot(uint64_t ticket, const http::Request& request, Millis now) {
    ticket_ = ticket;
    ticket_in_flight_ = true;
    if (segment().pages().tryAcquire(context_.slot)) return admitted(request);
    // Register before retrying, so a release between the two cannot be missed.
    waiters_.park(shm::Resource::PageSlot);
    if (segment().pages().tryAcquire(context_.slot)) {
      waiters_.unpark(shm::Resource::PageSlot);
      return admitted(request);
    }
    state_ = State::WaitingForSlot;
    deadline_ = now + (config_.upstream_timeout > 0 ? config_.upstream_timeout : 1000);
    return waitForSlot();
  }

  Admission waitForSlot() const {
    Admission a;
    a.kind = Admission::Kind::Wait;
    a.deadline = deadline_;
    a.resource = shm::Resource::PageSlot;
    return a;
  }

  Admission retrySlot(const http::Request& request, Millis) {
    if (segment().pages().tryAcquire(context_.slot)) {
      waiters_.unpark(shm::Resource::PageSlot);
      return admitted(request);
    }
    return waitForSlot();
  }

  Admission admitted(const http::Request& request) {
    holding_page_ = true;
    state_ = State::Holding;
    outcome_ = Outcome::Admitted;
    if (segment().pages().occupancy() == segment().pages().cap()) logEdge("upstream saturated");
    // Issue or slide the concert_admit pass before proxying, so it is
    // present even when the origin then fails.
    int64_t unix_now = unixSeconds();
    std::optional<std::string> presented = cookieValue(request.headers, kAdmitCookie);
    std::optional<AdmitPass> pass =
        presented ? verifyPass(config_.admit_secret, *presented, unix_now) : std::nullopt;
    pass_cookie_ = slidePass(config_.admit_secret, pass, unix_now, config_.admit_ttl / 1000, true);
    return proceed(request);
  }

  Admission proceed(const http::Request&) {
    Admission a;
    a.kind = Admission::Kind::Proceed;
    if (pass_cookie_) a.response_headers.push_back(http::Header{"Set-Cookie", admitSetCookie(config_, *pass_cookie_)});
    return a;
  }

  Admission waiting(const http::Request& request, const shm::TicketCookie& cookie, int64_t position) {
    return respond(waitingResponse(config_, request, cookie, position), Outcome::Queued);
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
    waiters_.unpark(shm::Resource::PageSlot);
    ticket_in_flight_ = false;
    segment().tickets().retire(ticket_, true);
  }

  bool finishTicket() {
    if (!ticket_in_flight_) return false;
    ticket_in_flight_ = false;
    segment().tickets().finish(ticket_, context_.slot);
    return true;
  }

  void logEdge(const char* what) const {
    if (context_.saturation) context_.saturation->edge(segment(), what, monotonicMs());
  }

  const AdmissionContext& context_;
  const config::Config& config_;
  Waiters& waiters_;
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

std::unique_ptr<RequestGuard> makePageGuard(const AdmissionContext& context) {
  return std::make_unique<PageGuard>(context);
}

}  // namespace concert::admission
