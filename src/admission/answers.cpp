// The room's own answers; see answers.h.
#include "admission/answers.h"

#include <algorithm>
#include <cstdio>

#include "admission/cookies.h"
#include "admission/pages.h"
#include "admission/room_pass.h"
#include "common/json.h"
#include "common/page_template.h"

namespace concert::admission {
namespace {

// {{.Lang}} and {{.Text.NAME}}: what every page of the room has.
std::optional<std::string> pageValue(std::string_view name, common::Language language) {
  if (name == ".Lang") return std::string(common::languageCode(language));
  constexpr std::string_view kText = ".Text.";
  if (!name.starts_with(kText)) return std::nullopt;
  std::optional<common::Text> text = common::textByName(name.substr(kText.size()));
  if (!text) return std::nullopt;
  return std::string(common::text(language, *text));
}

http::Header header(std::string_view name, std::string value) {
  return http::Header{std::string(name), std::move(value)};
}

}  // namespace

bool wantsHtml(const http::Request& request) {
  return http::joinHeader(request.headers, "Accept").find("text/html") != std::string::npos;
}

common::Language pageLanguage(const http::Request& request) {
  return common::chooseLanguage(http::joinHeader(request.headers, "Accept-Language"));
}

std::string skipUrl(const config::Config& config, std::string_view ticket_ref) {
  if (config.rate <= 0) return std::string();
  const std::string_view skip = config.skip_url;
  std::string url;
  for (size_t from = 0;;) {
    const size_t at = skip.find(kTicketPlaceholder, from);
    url.append(skip.substr(from, at == std::string_view::npos ? std::string_view::npos : at - from));
    if (at == std::string_view::npos) return url;
    url.append(ticket_ref);
    from = at + kTicketPlaceholder.size();
  }
}

SaleCountdown saleCountdown(const shm::Segment& segment) {
  SaleCountdown sale;
  sale.starts_in = segment.sale().startsIn(unixMs());
  if (sale.starts_in > 0) sale.start_unix_ms = segment.sale().startMs();
  return sale;
}

namespace {

// "The sale starts at 18:00:00 UTC, in about 5 minutes." (empty without a pre-queue)
std::string saleStartsWords(common::Language language, const SaleCountdown& sale) {
  if (sale.starts_in <= 0) return std::string();
  const int64_t day_seconds = (sale.start_unix_ms / 1000) % 86400;
  char clock[16];
  std::snprintf(clock, sizeof clock, "%02d:%02d:%02d", static_cast<int>(day_seconds / 3600),
                static_cast<int>(day_seconds / 60 % 60), static_cast<int>(day_seconds % 60));
  std::string words(common::text(language, common::Text::SaleStarts));
  auto put = [&](std::string_view key, const std::string& value) {
    if (size_t at = words.find(key); at != std::string::npos) words.replace(at, key.size(), value);
  };
  put("{time}", clock);
  put("{in}", common::etaWords(language, sale.starts_in));
  return words;
}

}  // namespace

std::string renderWaitingPage(const config::Config& config, int64_t position, common::Language language,
                              std::optional<int64_t> eta_seconds, const SaleCountdown& sale,
                              std::string_view ticket_ref) {
  std::string_view page = config.html_template.empty() ? kWaitingRoomHtml : std::string_view(config.html_template);
  return common::renderTemplate(page, [&](std::string_view name) -> std::optional<std::string> {
    if (name == ".Position") return std::to_string(position < 1 ? 1 : position);
    if (name == ".StartsIn") return sale.starts_in > 0 ? std::to_string(sale.starts_in) : std::string();
    if (name == ".SaleStarts") return saleStartsWords(language, sale);
    if (name == ".SkipURL") return skipUrl(config, ticket_ref);
    if (name == ".ETA") return common::etaWords(language, eta_seconds);
    if (name == ".Strings") return common::scriptStrings(language);
    return pageValue(name, language);
  });
}

int64_t refreshSeconds(const config::Config& config, int64_t position) {
  const int64_t most = std::max<int64_t>(1, config.first_poll_grace * 2 / 3 / 1000);
  const int64_t least = std::min<int64_t>(5, most);
  const int64_t wanted = position <= 10 ? 5 : 5 + (position - 10 + 9) / 10;
  return std::clamp(wanted, least, most);
}

std::optional<int64_t> etaSeconds(const shm::Segment& segment, int64_t position) {
  // -cluster: this host measures its own admissions, about one host's share
  // of the room's; the line moves that many times faster.
  const shm::ClusterLine& cluster = segment.cluster();
  if (cluster.enabled() && cluster.hosts() > 1)
    return segment.lineRate().etaSeconds(std::max<int64_t>(1, (position + cluster.hosts() - 1) / cluster.hosts()));
  return segment.lineRate().etaSeconds(position);
}

http::LocalResponse waitingResponse(const config::Config& config, const http::Request& request,
                                    const shm::TicketCookie& cookie, int64_t position,
                                    std::optional<int64_t> eta_seconds, const SaleCountdown& sale) {
  http::LocalResponse r;
  if (config.api_json && !wantsHtml(request)) {
    // Byte-exact: Go marshals this map with its keys sorted (eta_seconds,
    // Concert's, sorted in with them).
    r.status = 429;
    r.headers.push_back(header("Content-Type", std::string(kJsonType)));
    r.headers.push_back(header("Cache-Control", "no-store"));
    r.headers.push_back(header("Retry-After", std::to_string(config.retry_after)));
    common::JsonObject body;
    body.add("eta_seconds", eta_seconds)
        .add("hint", "keep the room_ticket cookie and retry to hold your position")
        .add("queued", true)
        .add("retry_after_seconds", config.retry_after);
    if (sale.starts_in > 0) body.add("starts_in", sale.starts_in);
    r.body = body.add("status_url", "/queue/status").str();
  } else {
    r.status = config.queue_status;  // -queue-status: 200, 429 or 503
    r.headers.push_back(header("Content-Type", std::string(kHtmlType)));
    r.headers.push_back(header("Cache-Control", "no-store"));
    if (r.status != 200) r.headers.push_back(header("Retry-After", std::to_string(config.retry_after)));
    // Without JavaScript the browser reloads into its turn (a reload counts as coming back).
    r.headers.push_back(header("Refresh", std::to_string(refreshSeconds(config, position))));
    r.body = renderWaitingPage(config, position, pageLanguage(request), eta_seconds, sale,
                               ticketRef(config.admit_secret, cookie));
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

http::LocalResponse maintenanceResponse(const config::Config& config, const http::Request& request) {
  std::string_view page =
      config.maintenance_template.empty() ? kMaintenanceHtml : std::string_view(config.maintenance_template);
  return unavailableResponse(config, request, "down for maintenance", page);
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
    common::Language language = pageLanguage(request);
    r.body = common::renderTemplate(html, [&](std::string_view name) { return pageValue(name, language); });
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

http::LocalResponse eventStreamHead() {
  http::LocalResponse r;
  r.status = 200;
  r.headers.push_back(header("Content-Type", "text/event-stream"));
  r.headers.push_back(header("Cache-Control", "no-store"));
  r.headers.push_back(header("X-Accel-Buffering", "no"));  // nginx in front: do not buffer
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
  if (const SaleCountdown sale = saleCountdown(segment); sale.starts_in > 0)
    return body.add("starts_in", sale.starts_in).str();
  if (position != 0) body.add("position", position);
  body.add("eta_seconds", etaSeconds(segment, position));
  double utilization = segment.stats().utilization();
  if (utilization != 0) body.add("utilization", utilization);
  if (config.rate > 0) {
    double rate_per_pos = config.rate + static_cast<double>(segment.line().queueDepth()) * config.surge;
    double skip_cost = position > 1 ? static_cast<double>(position - 1) * rate_per_pos : 0;
    if (skip_cost != 0) body.add("skip_cost", skip_cost);
    if (rate_per_pos != 0) body.add("rate_per_pos", rate_per_pos);
  }
  return body.str();
}

http::LocalResponse promotedOrReady(const AdmissionContext& context, const http::Request& request,
                                    const shm::TicketCookie& cookie) {
  http::LocalResponse r = jsonResponse(200, statusReadyBody());
  const int64_t now = unixSeconds();
  // A single-use pass is spent by the page request; here it is only handed over.
  if (std::optional<RoomPass> pass = collectPromotion(context, cookie, now))
    r.headers.push_back(roomPassHeader(*context.config, *pass, request.client_https, now));
  return r;
}

std::variant<shm::TicketCookie, http::LocalResponse> statusTicket(const http::Request& request) {
  std::optional<std::string> value = cookieValue(request.headers, kTicketCookie);
  if (!value) return jsonResponse(200, statusCookiesRequiredBody());
  std::optional<shm::TicketCookie> cookie = decodeTicketCookie(*value);
  if (!cookie) return jsonResponse(200, statusReadyBody());
  return *cookie;
}

}  // namespace concert::admission
