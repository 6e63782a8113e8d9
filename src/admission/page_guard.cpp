// The waiting room as a per-request guard.
//
// The line itself lives in shared memory (shm::Segment: ticket ring, page
// semaphore, counters); this file is the HTTP face of it for one request:
//
//   Start ──(nobody waits and a slot is free)──────────────────────────▶ Holding
//     │  (room_ticket, its turn: take a slot and claim) ─────────────────▶ Holding
//     │  (room_ticket, still waiting: queued)
//     │  (new arrival: issue; its turn at once: take a slot and claim) ───▶ Holding
//     │  (issue → queued)
//     │  (issue → Breaker/RingFull: 503)
//     ▼
//   Done (responded)        Holding: concert_admit issued or slid on Proceed;
//                           release() gives the page slot back
//
//   queued: -queue-hold 0 (or the worker drains) → Done: 200 page / 429 JSON
//           (with -cluster a ticket the engine has not placed yet is Held
//           first, until it is placed or for kPlaceWait, so that the page
//           shows its place rather than a guess)
//           -queue-hold > 0 → Held ──(its turn: take a slot and claim)──▶ Holding
//                               │ (ticket gone: issue again, as a new arrival)
//                               └──hold deadline──▶ Done: 200 page / 429 JSON
//
// Taking the turn: a page slot first, then the claim (the ticket leaves the
// line); if the claim fails the slot goes straight back. A request in flight
// holds a page slot and nothing in the line. A ticket whose turn has come
// but finds no slot (another worker's request took it a moment earlier) is
// held like a -queue-hold request until a slot frees, for at most
// -upstream-timeout without -queue-hold, and then gets the waiting page: the
// ticket keeps its place.
//
// A waiting ticket belongs to the visitor's cookie, not to this request;
// nothing is released for it when a hold runs out (the answer carries the
// cookie) or when the client of a held request that came with the cookie
// goes away. Only a ticket issued for a held request whose client left
// before any answer is retired then (counted in timeouts_total): no cookie
// for it exists. If the worker dies, the master returns its page slots from
// the slot's ledger.
//
// Who goes ahead of the line (shm/types.h ranks). A request with a valid room
// pass (room_pass.h: presented, or collected from a promoted ticket) or a
// valid unused invitation waits at rank 0; one whose session pass carries a
// priority cookie (priority.h) at 1 + its class; a plain session at
// kSessionRank. All of them wait like sessions below, and a freed slot goes
// to the best rank waiting (room.h). Reject mode lets every rank
// through, as it does sessions.
//
// Sessions. A request with a valid concert_admit pass (session.h) never gets
// the waiting page: it takes a slot when the line is not owed one
// (room.h), else it is held on its connection ahead of every ticket,
// for at most -session-hold, then answered 503 + Retry-After.
//
//   Start ──(session, slot for it)──────────────────────────────────────▶ Holding
//     └─(session, none)─▶ SessionHeld ──(a slot for it)──────────────────▶ Holding
//                              └──-session-hold, or the worker drains──▶ Done: 503
//
// Forms (a body, or a method other than GET/HEAD) and crawlers
// (-crawler-agents) never get the waiting page either. Without a pass a form
// that has to queue is held with -queue-hold and answered 503 when the hold
// runs out, else answered 503 at once; a crawler that would queue gets 503 and
// no ticket. Both go straight in like anyone when nobody waits.
//
// Held requests (-queue-hold). A page request whose ticket has to wait is
// parked on its connection instead of being answered, for at most
// -queue-hold. Every recheck (PageSlot wake-up, the worker's 250 ms timer)
// touches the ticket and takes its turn once it has come, so held requests
// are admitted in ticket order and exactly as a visitor reloading at that
// moment would be. The timer rechecks every held request, so a held ticket
// is touched at least every 250 ms and is never abandoned while it is held;
// but the hold of the request the ticket was issued to is no return
// (shm::Contact::Own): once that request is answered, a visitor who never
// comes back is reaped after -first-poll-grace like any other.
// When the hold runs out first, the request gets the answer it would have
// had at once without -queue-hold (waiting page or JSON 429 with room_ticket
// and room_probe), and the visitor keeps the same place in line through the
// cookie. Wake-ups cannot be lost: the guard registers as a PageSlot waiter
// before its first check, and every path that moves the line or frees a slot
// wakes PageSlot waiters (see shm/tickets.h).
//
// Counting (shm/counters.h). Each admission counts once, by how it got its
// slot: admissions_direct_total (arrive, nobody waiting), _line_total (a
// claim outside a hold), _held_total (a claim while Held), _session_total
// (takeSessionSlot). Each rejection here counts once by reason:
// rejected_full_total (issue() met the breaker or a full ring),
// _client_limit_total, _banned_total (banned while held; screen() counts
// the bans answered before any guard), _busy_total (busy()).
// Room modes (shm/modes.h) and the admission rate (shm/admit_rate.h).
//   pause        nobody goes straight in and no ticket's turn comes: new
//                arrivals queue, the waiting keep their places, sessions go
//                on (without the line's owed share, as the line takes none).
//   reject       a request without a session gets the maintenance page (503),
//                a held one too when it is next looked at; sessions go on.
//   passthrough  every page request goes to the origin, sessions or not, held
//                or not: it takes a page slot if one is free and goes without
//                one otherwise; a ticket it came with leaves the line.
//                A request without a session that found no free slot, or
//                found anybody waiting, counts in would_queue_total: the cap
//                would have queued it. Sessions are not counted (the cap
//                holds them, it never queues them).
//   -admit-rate  going straight in takes a token after the page slot (no
//                token: the slot goes back and the visitor takes a ticket);
//                a claim takes one in the ring. Sessions take none.
#include <algorithm>

#include "admission/admission.h"
#include "admission/abuse.h"
#include "admission/answers.h"
#include "admission/cookies.h"
#include "admission/origin_policy.h"
#include "admission/pass.h"
#include "admission/priority.h"
#include "admission/room.h"
#include "admission/room_pass.h"
#include "admission/saturation_log.h"
#include "admission/session.h"

namespace concert::admission {
namespace {

class PageGuard final : public RequestGuard {
 public:
  // -cluster: how long a new ticket's first answer waits for the engine to
  // place it (one round of the cluster agent, cluster/agent.h, is 100 ms).
  static constexpr Millis kPlaceWait = 1'000;

  PageGuard(const AdmissionContext& context, bool long_lived, std::optional<Visitor> visitor)
      : long_lived_(long_lived),
        context_(context),
        config_(*context.config),
        waiters_(*context.waiters),
        room_(*context.segment),
        visitor_(std::move(visitor)) {}
  ~PageGuard() override { release(); }

  Admission admit(const http::Request& request, Millis now) override {
    Admission a = next(request, now);
    if (a.kind == Admission::Kind::Proceed && long_lived_ && !long_lived_slot_ && !takeLongLivedSlot())
      return longLivedRefused();
    return a;
  }

  // What admit() answers, -long-lived-cap aside.
  Admission next(const http::Request& request, Millis now) {
    switch (state_) {
      case State::Start: return start(request, now);
      case State::Held: return retryHold(request, now);
      case State::SessionHeld: return retrySession(request);
      case State::Holding: return proceed(request);
      case State::Done: break;
    }
    return respond(roomFullResponse(config_, request), Outcome::Rejected);
  }

  http::LocalResponse timedOut(const http::Request& request, Millis now) override {
    if (state_ == State::Held) return holdExpired(request, now).response;
    if (state_ == State::SessionHeld) {
      leaveSessionWait();
      unspend();
      return busy(request, "no slot freed in time").response;
    }
    state_ = State::Done;
    outcome_ = Outcome::Rejected;
    return roomFullResponse(config_, request);
  }

  void release() override {
    // A held request's client went away. A ticket it came with stays in
    // line: the visitor holds its cookie and may come back. A ticket issued
    // for this request never reached anyone (its cookie goes out only with
    // the answer), so nobody can ever claim it: it leaves the line at once
    // instead of standing in everyone's way until the janitor finds it.
    if (state_ == State::Held) {
      leaveHold();
      if (!cookie_presented_) tickets().retire(cookie_.ticket, true);
    }
    if (state_ == State::SessionHeld) unspend();
    leaveSessionWait();
    releasePage();
    if (long_lived_slot_) {
      long_lived_slot_ = false;
      segment().longLived().release(context_.slot);
    }
    state_ = State::Done;
  }

  Outcome outcome() const override { return outcome_; }
  bool isPage() const override { return !long_lived_; }

  void onResponseHead(const http::Request& request, const http::ResponseHead& head, bool detached,
                      http::Headers& response_headers) override {
    heedOrigin(context_, request, head, detached, response_headers);
  }

  // A long-lived path's tunnel or event stream is open: its page slot goes
  // back to the room, the long-lived slot stays until it closes. Elsewhere a
  // tunnel keeps its page slot, as any request does.
  void onLongLived() override {
    if (long_lived_) releasePage();
  }

 private:
  enum class State { Start, Held, SessionHeld, Holding, Done };

  void releasePage() {
    if (!holding_page_) return;
    holding_page_ = false;
    // Edge-triggered like the original: only the full -> not-full step logs.
    bool was_full = segment().pages().occupancy() == segment().pages().cap();
    segment().pages().release(context_.slot);
    if (was_full) logEdge("draining");
  }

  // One of -long-lived-cap, taken once the request is admitted.
  bool takeLongLivedSlot() {
    if (!segment().longLived().tryAcquire(context_.slot)) {
      count(shm::Counter::LongLivedRefusedTotal);
      return false;
    }
    long_lived_slot_ = true;
    return true;
  }

  // -long-lived-cap is reached: the page slot goes straight back. The request
  // was admitted (and counted so) before the cap refused it.
  Admission longLivedRefused() {
    release();
    http::LocalResponse r = http::plainText(503, "too many long-lived connections\n");
    r.headers.push_back({"Retry-After", std::to_string(std::max(1, config_.retry_after))});
    return respond(std::move(r), outcome_);
  }

  shm::Segment& segment() const { return *context_.segment; }
  shm::Line& tickets() const { return segment().line(); }

  Admission start(const http::Request& request, Millis now) {
    if (!visitor_) visitor_.emplace(context_, request);
    const shm::RoomMode mode = room_.mode();
    if (mode == shm::RoomMode::Passthrough) return passthrough(request);
    if (std::optional<int> rank = rankOf(request, now)) {
      rank_ = *rank;
      return session(request, now);
    }
    if (mode == shm::RoomMode::Reject) return maintenance(request);
    form_ = request.hasBody() || (request.method != "GET" && request.method != "HEAD");
    crawler_ = isCrawler(request);
    const std::optional<shm::TicketCookie>& cookie = visitor_->ticket();
    if (cookie) {
      // A request about to be held sends no cookie now: touch, not render.
      // Either way a page request: a missed turn comes back (once).
      shm::TicketView view = holds() ? tickets().touch(*cookie, now, config_.token_ttl, shm::Contact::Page)
                                     : tickets().render(*cookie, now, config_.token_ttl, shm::Contact::Page);
      if (view.state == shm::TicketState::Ready && takeTurn(*cookie)) return admitted(request);
      if (view.state == shm::TicketState::Ready || view.state == shm::TicketState::Waiting)
        return queued(request, *cookie, view.raw_position, now, true, view.state == shm::TicketState::Ready,
                      view.placed);
      // Unknown, expired, or claimed by a concurrent reload: a new arrival.
    }
    return arrive(request, now);
  }

  // Where the request goes ahead of the line (shm/types.h, ranks): a room
  // pass (presented, or collected now from a promoted ticket) or a valid
  // invitation at rank 0, then priority classes, then a plain session;
  // nullopt for the line. A single-use room pass or an invitation is spent
  // here, and handed back if the request is not admitted after all.
  std::optional<int> rankOf(const http::Request& request, Millis now) {
    const int64_t unix_now = unixSeconds();
    const std::string& secret = config_.admit_secret;
    const Visitor& visitor = *visitor_;
    if (const std::optional<std::string>& value = visitor.roomPass()) {
      std::optional<RoomPass> pass = verifyRoomPass(secret, *value, unix_now);
      if (pass && spendRoomPass(*pass, unix_now)) return shm::kRoomPassRank;
    }
    if (visitor.ticket() && collectRoomPass(request, *visitor.ticket(), unix_now)) return shm::kRoomPassRank;
    if (const std::optional<std::string>& token = visitor.invitation()) {
      Invitation invite = checkInvitation(secret, *token, unix_now);
      const uint64_t key = onceKeyFor(OnceLabel::Invitation, invite.id, static_cast<uint64_t>(invite.expiry));
      if (invite.check == PassCheck::Valid && segment().once().claim(key, invite.expiry, unix_now)) {
        spent_ = key;
        count(shm::Counter::InvitationsUsedTotal);
        return shm::kRoomPassRank;
      }
      // Used, expired or forged: as if the request had none, and a strike.
      strike(context_, request, Strike::Invitation, now);
    }
    if (std::optional<AdmitPass> pass = visitor.session(unix_now)) {
      if (std::optional<int> priority = visitor.priority(*pass, unix_now))
        return std::min(shm::kRoomPassRank + 1 + *priority, shm::kPriorityRanks - 1);
      return shm::kSessionRank;
    }
    return std::nullopt;
  }

  // The visitor holding this ticket cookie was promoted (room_pass.h): its
  // room pass, spent at once when single use, else sent with the admission.
  bool collectRoomPass(const http::Request& request, const shm::TicketCookie& cookie, int64_t unix_now) {
    std::optional<RoomPass> pass = collectPromotion(context_, cookie, unix_now);
    if (!pass || !spendRoomPass(*pass, unix_now)) return false;
    if (!pass->single_use) extra_headers_.push_back(roomPassHeader(config_, *pass, request.client_https, unix_now));
    return true;
  }

  // A room pass is good for this request: always, unless it is single use
  // and spent already (then it is ignored).
  bool spendRoomPass(const RoomPass& pass, int64_t unix_now) {
    if (!pass.single_use) return true;
    const uint64_t key = onceKeyFor(OnceLabel::RoomPassUsed, pass.id);
    if (!segment().once().claim(key, pass.expiry, unix_now)) return false;
    spent_ = key;
    return true;
  }

  // The request was not admitted after all: its single-use token is good again.
  void unspend() {
    if (spent_) segment().once().forget(*spent_, unixSeconds());
    spent_.reset();
  }

  // A new arrival: straight in when nobody waits and a slot is free, else a
  // ticket at the back of the line (or the breaker).
  Admission arrive(const http::Request& request, Millis now) {
    if (straightIn()) {
      count(shm::Counter::AdmissionsDirectTotal);
      return admitted(request);
    }
    // No ticket for what will never wait in line.
    if (crawler_) return busy(request, "crawlers are not queued");
    if (form_ && !holds()) return formRefused(request);
    shm::Issued issued = issue(request, now);
    switch (issued.outcome) {
      case shm::IssueOutcome::Queued:
        if (issued.ready && takeTurn(issued.cookie)) return admitted(request);
        return queued(request, issued.cookie, issued.position, now, false, issued.ready,
                      !segment().cluster().enabled());
      case shm::IssueOutcome::ClientLimit: return ticketLimit(request, now);
      case shm::IssueOutcome::Breaker:
      case shm::IssueOutcome::RingFull: break;
    }
    return respond(roomFullResponse(config_, request), Outcome::Rejected);
  }

  // Straight in (Room::straightIn): the slot is ours to release.
  bool straightIn() {
    holding_page_ = room_.straightIn(context_.slot);
    return holding_page_;
  }

  // Passthrough: to the origin whatever the cap says (see the top of the file).
  Admission passthrough(const http::Request& request) {
    // Its turn has come: the ticket leaves the line.
    if (const std::optional<shm::TicketCookie>& cookie = visitor_->ticket()) tickets().claim(*cookie);
    const bool counted = !visitor_->session(unixSeconds());
    const bool nobody_waits = room_.nobodyWaits();
    const bool slot = goThrough();
    if (counted && (!slot || !nobody_waits)) segment().stats().count(shm::Counter::WouldQueueTotal);
    count(counted ? shm::Counter::AdmissionsDirectTotal : shm::Counter::AdmissionsSessionTotal);
    return admitted(request);
  }

  // Passthrough: a page slot if one is free (released as usual), else none.
  bool goThrough() {
    holding_page_ = segment().pages().tryAcquire(context_.slot);
    return holding_page_;
  }

  // A held request (ticket or session) looked at again after the mode
  // changed to reject or passthrough: the answer it gets now, if any.
  std::optional<Admission> modeChanged(const http::Request& request) {
    const shm::RoomMode mode = room_.mode();
    if (mode == shm::RoomMode::Passthrough) {
      if (state_ == State::Held) {
        leaveHold();
        tickets().claim(cookie_);
      }
      leaveSessionWait();
      goThrough();
      return admitted(request);
    }
    if (mode == shm::RoomMode::Reject && state_ == State::Held) {
      leaveHold();
      // Nobody holds a cookie for a ticket issued for this request: it leaves.
      if (!cookie_presented_) tickets().retire(cookie_.ticket, false);
      return maintenance(request);
    }
    return std::nullopt;
  }

  // A ticket at the back of the line, charged to the request's client.
  shm::Issued issue(const http::Request& request, Millis now) {
    std::optional<shm::ClientTicketing> client = ticketing(context_, request);
    shm::Issued issued = tickets().issue(context_.slot, config_.max_queue, now, client ? &*client : nullptr);
    // Both callers answer the breaker and a full ring with roomFullResponse.
    if (issued.outcome == shm::IssueOutcome::Breaker || issued.outcome == shm::IssueOutcome::RingFull)
      count(shm::Counter::RejectedFullTotal);
    return issued;
  }

  // The client holds -max-tickets-per-client places already: 429, a strike.
  Admission ticketLimit(const http::Request& request, Millis now) {
    strike(context_, request, Strike::TicketLimit, now);
    count(shm::Counter::RejectedClientLimitTotal);
    return respond(ticketLimitResponse(config_, request), Outcome::Rejected);
  }

  // The ticket's turn (Room::takeTurn): a page slot, then the claim.
  bool takeTurn(const shm::TicketCookie& cookie) {
    shm::Claimed claimed;
    if (!room_.takeTurn(context_.slot, cookie, &claimed)) return false;
    holding_page_ = true;
    segment().histograms().observe(shm::Histogram::QueueWait, context_.slot, claimed.waited * 1000);
    count(state_ == State::Held ? shm::Counter::AdmissionsHeldTotal : shm::Counter::AdmissionsLineTotal);
    return true;
  }

  bool holds() const { return config_.queue_hold > 0 && !waiters_.draining(); }

  // The ticket has to wait: answer now, or hold the request for -queue-hold.
  // A ticket whose turn has come but found no slot is held in any case (for
  // -upstream-timeout without -queue-hold). `presented`: the visitor sent
  // this ticket's cookie (they hold it already). A ticket the engine has not
  // placed yet (-cluster: `placed` false) is held until it is, at most
  // kPlaceWait, so that the first position the visitor sees is its place.
  Admission queued(const http::Request& request, const shm::TicketCookie& cookie, int64_t position, Millis now,
                   bool presented, bool turn_came, bool placed) {
    const bool hold = holds();
    const bool place = !placed && !turn_came && !form_ && !waiters_.draining();
    if (!hold && !place && (!turn_came || waiters_.draining())) {
      if (form_) return formRefused(request);
      return waiting(request, cookie, position);
    }
    cookie_ = cookie;
    cookie_presented_ = presented;
    position_ = position;
    state_ = State::Held;
    placing_ = !hold && place;
    hold_deadline_ = now + (hold ? config_.queue_hold : placing_ ? kPlaceWait : config_.upstream_timeout);
    // Register before the first check, so a ticket that turns ready between
    // the two is not missed: its wake-up finds the flag raised.
    waiters_.park(shm::Resource::PageSlot);
    return retryHold(request, now);
  }

  // One recheck of a held request: touch the ticket (so it is never taken
  // for abandoned while held) and take its turn once it has come.
  Admission retryHold(const http::Request& request, Millis now) {
    if (waiters_.draining()) return holdExpired(request, now);
    if (std::optional<Admission> answer = modeChanged(request)) return std::move(*answer);
    shm::TicketView view = tickets().touch(cookie_, now, config_.token_ttl, contact());
    if (view.state == shm::TicketState::Ready && takeTurn(cookie_)) {
      leaveHold();
      return admitted(request);
    }
    if (view.state == shm::TicketState::Waiting || view.state == shm::TicketState::Ready) {
      if (view.state == shm::TicketState::Waiting) position_ = view.position;
      // Held only until the engine placed it: its place is known now.
      if (placing_ && view.state == shm::TicketState::Waiting && view.placed) {
        leaveHold();
        return waiting(request, cookie_, position_);
      }
      return holdOn();
    }
    // The ticket is gone (another request with the same cookie claimed it,
    // or it expired): a new arrival at the back, as without the hold, still
    // within the same hold deadline. Unless its client was banned meanwhile
    // (which is what took the ticket out of the line), or it was promoted:
    // then it waits ahead of everyone with its room pass.
    if (cookie_presented_ && collectRoomPass(request, cookie_, unixSeconds())) {
      leaveHold();
      rank_ = shm::kRoomPassRank;
      return session(request, now);
    }
    if (banned(context_, request, now)) {
      leaveHold();
      count(shm::Counter::RejectedBannedTotal);
      return respond(banResponse(), Outcome::Rejected);
    }
    shm::Issued issued = issue(request, now);
    switch (issued.outcome) {
      case shm::IssueOutcome::Queued:
        cookie_ = issued.cookie;
        cookie_presented_ = false;
        position_ = issued.position;
        if (issued.ready && takeTurn(cookie_)) {
          leaveHold();
          return admitted(request);
        }
        return holdOn();
      case shm::IssueOutcome::ClientLimit: leaveHold(); return ticketLimit(request, now);
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
    if (form_) {
      // A ticket issued for this form was never seen by anyone: it leaves.
      if (!cookie_presented_) tickets().retire(cookie_.ticket, true);
      return formRefused(request);
    }
    shm::TicketView view = tickets().render(cookie_, now, config_.token_ttl, contact());
    if (view.state == shm::TicketState::Waiting) position_ = view.position;
    return waiting(request, cookie_, position_);
  }

  // What a held request is to its ticket: the page request of a visitor who
  // came back with it, or the request the ticket was just issued to, whose
  // hold is no return (the first-poll grace applies once it is answered).
  shm::Contact contact() const { return cookie_presented_ ? shm::Contact::Page : shm::Contact::Own; }

  void leaveHold() { waiters_.unpark(shm::Resource::PageSlot); }

  // A form never gets the waiting page: its reload would lose what was typed.
  Admission formRefused(const http::Request& request) { return busy(request, "the form could not wait in line"); }

  bool isCrawler(const http::Request& request) const {
    if (config_.crawler_agent_list.empty()) return false;
    std::string agent = http::joinHeader(request.headers, "User-Agent");
    for (char& c : agent) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const std::string& needle : config_.crawler_agent_list)
      if (agent.find(needle) != std::string::npos) return true;
    return false;
  }

  // ---------------------------------------------------------- sessions

  Admission session(const http::Request& request, Millis now) {
    if (takeSessionSlot()) return admitted(request);
    if (waiters_.draining()) {
      unspend();
      return busy(request, "no slot free");
    }
    state_ = State::SessionHeld;
    hold_deadline_ = now + config_.session_hold;
    segment().sessions().enter(context_.slot, rank_);
    in_session_wait_ = true;
    // Registered before the first check, as for held tickets.
    waiters_.park(shm::Resource::PageSlot);
    return retrySession(request);
  }

  Admission retrySession(const http::Request& request) {
    if (waiters_.draining()) {
      leaveSessionWait();
      unspend();
      return busy(request, "no slot free");
    }
    if (std::optional<Admission> answer = modeChanged(request)) return std::move(*answer);
    if (takeSessionSlot()) {
      leaveSessionWait();
      return admitted(request);
    }
    Admission a;
    a.kind = Admission::Kind::Wait;
    a.deadline = hold_deadline_;
    a.resource = shm::Resource::PageSlot;
    return a;
  }

  // A slot for a ranked request (Room::takeRankedSlot): any free one the
  // line is not owed and no better rank waits for.
  bool takeSessionSlot() {
    if (!room_.takeRankedSlot(context_.slot, rank_, config_.newcomer_share)) return false;
    holding_page_ = true;
    count(rank_ == shm::kSessionRank ? shm::Counter::AdmissionsSessionTotal : shm::Counter::AdmissionsPriorityTotal);
    spent_.reset();  // a single-use token used: it stays spent
    return true;
  }

  void leaveSessionWait() {
    if (!in_session_wait_) return;
    in_session_wait_ = false;
    waiters_.unpark(shm::Resource::PageSlot);
    segment().sessions().leave(context_.slot, rank_);
  }

  Admission admitted(const http::Request& request) {
    state_ = State::Holding;
    outcome_ = Outcome::Admitted;
    if (segment().pages().occupancy() == segment().pages().cap()) logEdge("upstream saturated");
    // Issue or slide the concert_admit pass before proxying, so it is present
    // even when the origin then fails.
    int64_t unix_now = unixSeconds();
    // A pass whose session the origin ended is never slid back to life: a new one is minted.
    std::optional<AdmitPass> pass = visitor_->session(unix_now);
    pass_cookie_ = slidePass(config_.admit_secret, pass, unix_now, config_.admit_ttl / 1000, true);
    return proceed(request);
  }

  Admission proceed(const http::Request& request) {
    Admission a;
    a.kind = Admission::Kind::Proceed;
    a.response_headers = extra_headers_;
    if (pass_cookie_)
      a.response_headers.push_back(
          http::Header{"Set-Cookie", admitSetCookie(config_, *pass_cookie_, request.client_https)});
    return a;
  }

  Admission waiting(const http::Request& request, const shm::TicketCookie& cookie, int64_t position) {
    return respond(waitingResponse(config_, request, cookie, position, etaSeconds(segment(), position),
                                   saleCountdown(segment())),
                   Outcome::Queued);
  }

  Admission respond(http::LocalResponse response, Outcome outcome) {
    state_ = State::Done;
    outcome_ = outcome;
    Admission a;
    a.kind = Admission::Kind::Respond;
    a.response = std::move(response);
    return a;
  }

  // 503 + Retry-After for a request that cannot wait in line (rejected_busy_total).
  // Reject mode: the maintenance page (503), counted by reason.
  Admission maintenance(const http::Request& request) {
    count(shm::Counter::RejectedMaintenanceTotal);
    return respond(maintenanceResponse(config_, request), Outcome::Rejected);
  }

  Admission busy(const http::Request& request, const char* why) {
    count(shm::Counter::RejectedBusyTotal);
    return respond(busyResponse(config_, request, why), Outcome::Rejected);
  }

  void count(shm::Counter c) const { segment().stats().count(c); }

  void logEdge(const char* what) const {
    if (context_.saturation) context_.saturation->edge(segment(), what, monotonicMs());
  }

  const bool long_lived_;         // -long-lived: see makePageGuard
  bool long_lived_slot_ = false;  // holds one of -long-lived-cap
  const AdmissionContext& context_;
  const config::Config& config_;
  Waiters& waiters_;
  Room room_;
  State state_ = State::Start;
  Outcome outcome_ = Outcome::Rejected;
  bool holding_page_ = false;
  shm::TicketCookie cookie_;       // Held: the waiting ticket
  bool cookie_presented_ = false;  // Held: the request came with that ticket's cookie
  bool form_ = false;              // a body, or a method other than GET/HEAD
  bool crawler_ = false;           // User-Agent matches -crawler-agents
  bool in_session_wait_ = false;   // counted in Sessions::waiting()
  bool placing_ = false;           // Held only until the engine places the ticket (queued())
  int64_t position_ = 1;           // Held: its last known position
  Millis hold_deadline_ = 0;
  std::optional<std::string> pass_cookie_;
  int rank_ = shm::kSessionRank;             // SessionHeld: where it waits (shm/types.h, ranks)
  std::optional<uint64_t> spent_;            // a single-use token spent for this request (shm/once.h)
  std::vector<http::Header> extra_headers_;  // a room_pass cookie to send with the admission
  std::optional<Visitor> visitor_;           // the request's cookies and tokens, read once
};

}  // namespace

std::unique_ptr<RequestGuard> makePageGuard(const AdmissionContext& context, bool long_lived,
                                            std::optional<Visitor> visitor) {
  return std::make_unique<PageGuard>(context, long_lived, std::move(visitor));
}

}  // namespace concert::admission
