// The room's own answers; see answers.h.
#include "admission/answers.h"

#include "admission/cookies.h"
#include "admission/pages.h"
#include "common/json.h"

namespace concert::admission {
namespace {

void replaceAll(std::string& text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

http::Header header(std::string_view name, std::string value) {
  return http::Header{std::string(name), std::move(value)};
}

}  // namespace

bool wantsHtml(const http::Request& request) {
  return http::joinHeader(request.headers, "Accept").find("text/html") != std::string::npos;
}

std::string renderWaitingPage(const config::Config& config, int64_t position) {
  std::string page = config.html_template.empty() ? std::string(kWaitingRoomHtml) : config.html_template;
  replaceAll(page, "{{.Position}}", std::to_string(position < 1 ? 1 : position));
  replaceAll(page, "{{.SkipURL}}", config.rate > 0 ? config.skip_url : std::string());
  return page;
}

std::optional<int64_t> etaSeconds(const shm::Segment& segment, int64_t position) {
  return segment.lineRate().etaSeconds(position);
}

http::LocalResponse waitingResponse(const config::Config& config, const http::Request& request,
                                    const shm::TicketCookie& cookie, int64_t position,
                                    std::optional<int64_t> eta_seconds) {
  http::LocalResponse r;
  if (config.api_json && !wantsHtml(request)) {
    // Byte-exact: Go marshals this map with its keys sorted (eta_seconds,
    // Concert's, sorted in with them).
    r.status = 429;
    r.headers.push_back(header("Content-Type", std::string(kJsonType)));
    r.headers.push_back(header("Cache-Control", "no-store"));
    r.headers.push_back(header("Retry-After", std::to_string(config.retry_after)));
    r.body = common::JsonObject()
                 .add("eta_seconds", eta_seconds)
                 .add("hint", "keep the room_ticket cookie and retry to hold your position")
                 .add("queued", true)
                 .add("retry_after_seconds", config.retry_after)
                 .add("status_url", "/queue/status")
                 .str();
  } else {
    r.status = config.queue_status;  // -queue-status: 200, 429 or 503
    r.headers.push_back(header("Content-Type", std::string(kHtmlType)));
    r.headers.push_back(header("Cache-Control", "no-store"));
    if (r.status != 200) r.headers.push_back(header("Retry-After", std::to_string(config.retry_after)));
    r.body = renderWaitingPage(config, position);
  }
  addPlaceCookies(config, request, cookie, r.headers);
  return r;
}

void addPlaceCookies(const config::Config& config, const http::Request& request, const shm::TicketCookie& cookie,
                     http::Headers& headers) {
  headers.push_back(header("Set-Cookie", ticketSetCookie(config, encodeTicketCookie(cookie), request.client_https)));
  headers.push_back(header("Set-Cookie", probeSetCookie(config, request.client_https)));
}

http::LocalResponse roomFullResponse(const config::Config& config, const http::Request& request) {
  return unavailableResponse(config, request, "waiting room is full", kQueueFullHtml);
}

http::LocalResponse busyResponse(const config::Config& config, const http::Request& request, std::string_view error) {
  return unavailableResponse(config, request, error, kBusyHtml);
}

http::LocalResponse unavailableResponse(const config::Config& config, const http::Request& request,
                                        std::string_view error, std::string_view html) {
  http::LocalResponse r;
  r.status = 503;
  if (config.api_json && !wantsHtml(request)) {
    r.headers.push_back(header("Content-Type", std::string(kJsonType)));
    r.body = common::JsonObject()
                 .add("error", error)
                 .add("queued", false)
                 .add("retry_after_seconds", config.retry_after)
                 .str();
  } else {
    r.headers.push_back(header("Content-Type", std::string(kHtmlType)));
    r.body = std::string(html);
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

http::LocalResponse jsonResponse(int status, std::string body) {
  http::LocalResponse r;
  r.status = status;
  r.headers.push_back(header("Content-Type", std::string(kJsonType)));
  r.headers.push_back(header("Cache-Control", "no-store"));
  r.body = std::move(body);
  return r;
}

std::string statusReadyBody() {
  return common::JsonObject().add("ready", true).str();
}

std::string statusCookiesRequiredBody() {
  return common::JsonObject().add("ready", false).add("cookies_required", true).str();
}

std::string statusWaitingBody(const config::Config& config, const shm::Segment& segment, int64_t position) {
  common::JsonObject body;
  body.add("ready", false);
  if (position != 0) body.add("position", position);
  body.add("eta_seconds", etaSeconds(segment, position));
  double utilization = segment.stats().utilization();
  if (utilization != 0) body.add("utilization", utilization);
  if (config.rate > 0) {
    double rate_per_pos = config.rate + static_cast<double>(segment.tickets().queueDepth()) * config.surge;
    double skip_cost = position > 1 ? static_cast<double>(position - 1) * rate_per_pos : 0;
    if (skip_cost != 0) body.add("skip_cost", skip_cost);
    if (rate_per_pos != 0) body.add("rate_per_pos", rate_per_pos);
  }
  return body.str();
}

std::variant<shm::TicketCookie, http::LocalResponse> statusTicket(const http::Request& request) {
  std::optional<std::string> value = cookieValue(request.headers, kTicketCookie);
  if (!value) return jsonResponse(200, statusCookiesRequiredBody());
  std::optional<shm::TicketCookie> cookie = decodeTicketCookie(*value);
  if (!cookie) return jsonResponse(200, statusReadyBody());
  return *cookie;
}

}  // namespace concert::admission
