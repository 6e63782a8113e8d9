// GET /queue/events: what one waiting page's event stream says; see
// admission.h for the contract and worker/worker.h for how the worker keeps
// its streams.
//
// Why a recheck is cheap enough to run on every wake-up: touch() is one
// lookup and one window count in the ring (O(log R)), and the worker stops
// its wake-up walk at the first stream whose ticket still waits (every later
// ticket has that one ahead of it), so one admission costs each worker one
// such recheck beyond the streams that turned ready, and one write per
// stream that turned ready. Position changes are coalesced per stream: at
// most one `position` event every kPositionEvery, sent by the worker's
// one-second walk, however many admissions moved the line meanwhile; the
// walk caps how many go out in one tick (worker.cpp, recheckStreams).
#include <variant>

#include "admission/admission.h"
#include "admission/answers.h"

namespace concert::admission {

namespace {

constexpr Millis kRetryMs = 1'000;  // reconnection delay hinted when a stream ends without `ready`

}  // namespace

std::string EventFeed::Event::text() const {
  const std::string id_line = id.empty() ? std::string() : "id: " + id + "\n";
  switch (kind) {
    case Kind::Position: return id_line + "event: position\ndata: " + data + "\n\n";
    case Kind::Ready: return id_line + "event: ready\ndata: " + data + "\n\n";
    case Kind::Samples: return id_line + "event: samples\ndata: " + data + "\n\n";
    case Kind::End: return "retry: " + std::to_string(kRetryMs) + "\n\n";
    case Kind::None: break;
  }
  return {};
}

QueueEvents::QueueEvents(const AdmissionContext& context) : context_(context) {}

QueueEvents::~QueueEvents() {
  if (parked_) context_.waiters->unpark(shm::Resource::PageSlot);
}

QueueEvents::Opening QueueEvents::open(const http::Request& request, Millis now) {
  const config::Config& config = *context_.config;
  Opening opening;
  std::variant<shm::TicketCookie, http::LocalResponse> ticket = statusTicket(request);
  if (auto* answer = std::get_if<http::LocalResponse>(&ticket)) {
    opening.response = std::move(*answer);
    return opening;
  }
  cookie_ = std::get<shm::TicketCookie>(ticket);
  // Registered before the first look, so a ticket that turns ready between
  // the look and the worker filing the stream still wakes the worker.
  context_.waiters->park(shm::Resource::PageSlot);
  parked_ = true;
  // render(): the head re-sends the cookie, so the ring records it as sent.
  shm::TicketView view = context_.segment->line().render(cookie_, now, config.token_ttl, shm::Contact::Look);
  if (view.state == shm::TicketState::Unknown || view.state == shm::TicketState::Expired) {
    ended(Event{});
    opening.response = promotedOrReady(context_, request, cookie_);
    return opening;
  }
  opening.stream = true;
  opening.response = eventStreamHead();
  http::LocalResponse& head = opening.response;
  addPlaceCookies(config, request, cookie_, head.headers);
  renew_at_ = now + config.token_ttl / 3;
  if (view.state == shm::TicketState::Ready)
    opening.first = ended(Event{Event::Kind::Ready, statusReadyBody()});
  else if (view.placed)
    opening.first = position(view.position, now);
  // else (-cluster) the first position goes out once the engine placed the ticket
  return opening;
}

QueueEvents::Event QueueEvents::recheck(Millis now, bool may_send_position) {
  if (!parked_) return {};
  shm::TicketView view = context_.segment->line().touch(cookie_, now, context_.config->token_ttl, shm::Contact::Look);
  if (view.state != shm::TicketState::Waiting) return ended(Event{Event::Kind::Ready, statusReadyBody()});
  if (context_.waiters->draining() || now >= renew_at_) return ended(Event{Event::Kind::End, {}});
  if (may_send_position && view.placed && view.position != position_sent_ &&
      now - position_sent_at_ >= kPositionEvery)
    return position(view.position, now);
  return {};
}

QueueEvents::Event QueueEvents::ended(Event event) {
  if (parked_) context_.waiters->unpark(shm::Resource::PageSlot);
  parked_ = false;
  return event;
}

QueueEvents::Event QueueEvents::position(int64_t position, Millis now) {
  position_sent_ = position;
  position_sent_at_ = now;
  return Event{Event::Kind::Position, statusWaitingBody(*context_.config, *context_.segment, position)};
}

}  // namespace concert::admission
