// GET /queue/status: the waiting page's poll.
//
// Answers from the shared segment only: the ticket's state and position, the
// smoothed utilization, and the skip-the-line figures when -rate is set.
// Field order is the original's struct order; zero values are omitted.
#include "admission/admission.h"
#include "admission/answers.h"
#include "admission/cookies.h"
#include "common/json.h"

namespace concert::admission {

http::LocalResponse handleQueueStatus(const AdmissionContext& context, const http::Request& request, Millis now) {
  const config::Config& config = *context.config;
  http::LocalResponse r;
  if (request.method == "OPTIONS") {
    r.status = 204;
    return r;
  }
  r.headers.push_back(http::Header{"Content-Type", std::string(kJsonType)});
  r.headers.push_back(http::Header{"Cache-Control", "no-store"});

  // Field order is the original's struct order: ready, position, utilization,
  // skip_cost, rate_per_pos, has_pass, cookies_required; zero values omitted.
  std::optional<std::string> value = cookieValue(request.headers, kTicketCookie);
  if (!value) {
    r.body = common::JsonObject().add("ready", false).add("cookies_required", true).str();
    return r;
  }
  std::optional<shm::TicketCookie> cookie = decodeTicketCookie(*value);
  if (!cookie) {
    r.body = common::JsonObject().add("ready", true).str();
    return r;
  }
  shm::TicketView view = context.segment->tickets().poll(*cookie, now, config.token_ttl);
  if (view.state == shm::TicketState::Unknown || view.state == shm::TicketState::Expired) {
    r.body = common::JsonObject().add("ready", true).str();
    return r;
  }
  if (view.rate_limited) {
    r.status = 429;
    r.headers.push_back(http::Header{"Retry-After", "1"});
    common::JsonObject body;
    body.add("ready", false);
    // A ticket whose turn has come has no position to report.
    if (view.state == shm::TicketState::Waiting) body.add("position", view.raw_position);
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
  double utilization = context.segment->stats().utilization();
  if (utilization != 0) body.add("utilization", utilization);
  if (config.rate > 0) {
    double rate_per_pos = config.rate + static_cast<double>(context.segment->tickets().queueDepth()) * config.surge;
    double skip_cost = view.position > 1 ? static_cast<double>(view.position - 1) * rate_per_pos : 0;
    if (skip_cost != 0) body.add("skip_cost", skip_cost);
    if (rate_per_pos != 0) body.add("rate_per_pos", rate_per_pos);
  }
  r.body = body.str();
  if (view.refresh_cookie) {
    r.headers.push_back(http::Header{"Set-Cookie", ticketSetCookie(config, encodeTicketCookie(*cookie), request.tls)});
    r.headers.push_back(http::Header{"Set-Cookie", probeSetCookie(config, request.tls)});
  }
  return r;
}

}  // namespace concert::admission
