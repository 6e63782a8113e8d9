// GET /queue/status: the waiting page's poll.
//
// Answers from the shared segment only: the ticket's state, position and
// ETA, the smoothed utilization, and the skip-the-line figures when -rate is
// set. The bodies are built in answers.cpp (GET /queue/events sends the same
// ones).
#include "admission/admission.h"
#include "admission/answers.h"
#include "admission/room_pass.h"
#include "common/json.h"

namespace concert::admission {

http::LocalResponse handleQueueStatus(const AdmissionContext& context, const http::Request& request, Millis now) {
  const config::Config& config = *context.config;
  if (request.method == "OPTIONS") return emptyResponse(204);

  std::variant<shm::TicketCookie, http::LocalResponse> ticket = statusTicket(request);
  if (auto* answer = std::get_if<http::LocalResponse>(&ticket)) return std::move(*answer);
  const shm::TicketCookie& cookie = std::get<shm::TicketCookie>(ticket);
  shm::TicketView view = context.segment->line().poll(cookie, now, config.token_ttl);
  if (view.state == shm::TicketState::Unknown || view.state == shm::TicketState::Expired)
    return promotedOrReady(context, request, cookie);
  if (view.state == shm::TicketState::Waiting && !view.placed) {
    // -cluster: the engine has not placed the ticket yet (its next round):
    // no position rather than one that could grow. Ask again in a second.
    http::LocalResponse r = jsonResponse(429, common::JsonObject().add("ready", false).str());
    r.headers.push_back(http::Header{"Retry-After", "1"});
    return r;
  }
  if (view.rate_limited) {
    common::JsonObject body;
    body.add("ready", false);
    // A ticket whose turn has come has no position (nor ETA) to report,
    // nor has one during a sale's pre-queue (answers.h).
    if (const SaleCountdown sale = saleCountdown(*context.segment); sale.starts_in > 0) {
      body.add("starts_in", sale.starts_in);
    } else if (view.state == shm::TicketState::Waiting) {
      body.add("position", view.raw_position);
      body.add("eta_seconds", etaSeconds(*context.segment, view.raw_position));
    }
    http::LocalResponse r = jsonResponse(429, body.str());
    r.headers.push_back(http::Header{"Retry-After", "1"});
    return r;
  }
  if (view.state == shm::TicketState::Ready) return jsonResponse(200, statusReadyBody());
  http::LocalResponse r = jsonResponse(200, statusWaitingBody(config, *context.segment, view.position));
  if (view.refresh_cookie) addPlaceCookies(config, request, cookie, r.headers);
  return r;
}

}  // namespace concert::admission
