// The answers the room gives without the origin: the waiting page, the JSON
// 429, the "room is full" 503, and the small helpers the guards and the ops
// endpoints share to build them. Pure functions of the configuration and the
// request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "admission/context.h"
#include "common/languages.h"
#include "config/config.h"
#include "http/request.h"
#include "http/response.h"
#include "shm/segment.h"

namespace concert::admission {

inline constexpr std::string_view kJsonType = "application/json; charset=utf-8";
inline constexpr std::string_view kHtmlType = "text/html; charset=utf-8";
inline constexpr std::string_view kTextType = "text/plain; charset=utf-8";

// A browser, as the original tells one: the joined Accept values contain
// "text/html" (case-sensitive).
bool wantsHtml(const http::Request& request);

// The language of the room's pages for this request (its Accept-Language).
common::Language pageLanguage(const http::Request& request);

// The ETA of a visitor at `position` (>= 1) in line, in seconds, or nullopt
// while Concert has seen too few admissions from the line to say (JSON
// null): the line's measured pace, shm/line_rate.h. The one source of every
// eta_seconds (/queue/status, the position events, the JSON 429) and of what
// the waiting page shows. With -cluster the pace is this host's, so the
// position counts for position / hosts.
std::optional<int64_t> etaSeconds(const shm::Segment& segment, int64_t position);

// The waiting page (the configured -html template, else the built-in page)
// with its placeholders filled (common/page_template.h): {{.Position}} (at
// least 1), {{.SkipURL}} (skipUrl; empty unless -rate > 0), {{.Lang}} (the
// language's code), {{.ETA}} (the estimated wait in words in that language,
// empty while unknown), {{.Strings}} (the script's strings as JSON) and
// {{.Text.NAME}} (the page's strings in that language).
// During a scheduled sale's pre-queue (`sale`) positions mean nothing yet:
// {{.StartsIn}} is the seconds until the start and {{.SaleStarts}} says when
// it starts in words (both empty otherwise); the built-in page shows that
// instead of the position, and counts down with its script.
struct SaleCountdown {
  int64_t starts_in = 0;      // seconds until the start; 0: no pre-queue now
  int64_t start_unix_ms = 0;  // the start
};
SaleCountdown saleCountdown(const shm::Segment& segment);

std::string renderWaitingPage(const config::Config& config, int64_t position, common::Language language,
                              std::optional<int64_t> eta_seconds, const SaleCountdown& sale = {},
                              std::string_view ticket_ref = {});

// -skip-url with every {{.Ticket}} replaced by `ticket_ref` (room_pass.h: a
// signed reference to the visitor's ticket, never its cookie); empty unless
// -rate > 0.
inline constexpr std::string_view kTicketPlaceholder = "{{.Ticket}}";
std::string skipUrl(const config::Config& config, std::string_view ticket_ref);

// The Refresh interval of the waiting page, in seconds, for a browser without
// JavaScript: 5 up to position 10, one more for every 10 places behind that,
// at most two thirds of -first-poll-grace (so that the first reload, the
// first sign that the visitor is still there, comes in time); never below 1.
int64_t refreshSeconds(const config::Config& config, int64_t position);

// "You are in line": the waiting page (-queue-status, normally 200) for
// browsers, in the language of their Accept-Language and with a Refresh
// header, or the JSON 429 for API clients (-api-json); both with the
// room_ticket and room_probe cookies that keep the visitor's place.
// eta_seconds: etaSeconds(segment, position), nullopt while the room cannot say.
// During a sale's pre-queue the JSON carries starts_in (seconds).
http::LocalResponse waitingResponse(const config::Config& config, const http::Request& request,
                                    const shm::TicketCookie& cookie, int64_t position,
                                    std::optional<int64_t> eta_seconds, const SaleCountdown& sale = {});

// Appends the Set-Cookie headers that keep a visitor's place: room_ticket
// (Max-Age -token-ttl) and room_probe.
void addPlaceCookies(const config::Config& config, const http::Request& request, const shm::TicketCookie& cookie,
                     http::Headers& headers);

// The answer for "no room for you": breaker, ring full, slot-wait timeout.
// API clients (with -api-json) get 503 JSON, everyone else the small HTML page
// (in the language of their Accept-Language);
// both carry Retry-After: -retry-after and Cache-Control: no-store.
http::LocalResponse roomFullResponse(const config::Config& config, const http::Request& request);

// The answer for a request that cannot wait in line: a session held past
// -session-hold, a form that would queue, a crawler. 503 with Retry-After,
// JSON {"error": error, ...} or the small "busy" HTML page.
http::LocalResponse busyResponse(const config::Config& config, const http::Request& request, std::string_view error);

// The answer for a page request without a session while the room rejects
// (-mode reject): 503 with Retry-After, JSON {"error": "down for
// maintenance", ...} or the maintenance page (-maintenance-html, else built in).
http::LocalResponse maintenanceResponse(const config::Config& config, const http::Request& request);

// roomFullResponse, busyResponse and maintenanceResponse: 503 +
// Retry-After, JSON or the page template `html` ({{.Lang}} and
// {{.Text.NAME}} filled).
http::LocalResponse unavailableResponse(const config::Config& config, const http::Request& request,
                                        std::string_view error, std::string_view html);

// The stats snapshot the ops endpoints report (/_room/stats,
// /_room/metrics): the segment's counters and gauges, and the Setting gauges
// (shm/gauges.h) from the configuration in effect.
shm::StatsSnapshot roomStats(const AdmissionContext& context);

// An empty-bodied response with an optional Retry-After (asset tier, ops).
http::LocalResponse emptyResponse(int status, int retry_after = 0);

// A JSON body with Cache-Control: no-store.
http::LocalResponse jsonResponse(int status, std::string body);
// The head of a 200 text/event-stream (no-store, and no buffering by an
// nginx in front); the body follows as events.
http::LocalResponse eventStreamHead();

// The bodies of GET /queue/status, which GET /queue/events sends as its
// events' data. Field order is the original's struct order: ready, position,
// utilization, skip_cost, rate_per_pos, has_pass, cookies_required, with
// Concert's eta_seconds right after position; zero values are omitted,
// except eta_seconds, always present for a waiting ticket (an integer or
// null: shm/line_rate.h).
std::string statusReadyBody();            // {"ready":true}
std::string statusCookiesRequiredBody();  // {"ready":false,"cookies_required":true}
// A waiting ticket at `position`: the position, its ETA, the room's smoothed
// utilization, and the skip-the-line figures when -rate is set. During a
// sale's pre-queue: {"ready":false,"starts_in":N} (no position yet).
std::string statusWaitingBody(const config::Config& config, const shm::Segment& segment, int64_t position);
// The answer to a poll or event stream whose ticket left the line: the ready
// body, with the room_pass cookie when the ticket was promoted (room_pass.h).
http::LocalResponse promotedOrReady(const AdmissionContext& context, const http::Request& request,
                                    const shm::TicketCookie& cookie);

// The room_ticket a /queue/status or /queue/events request presents, or the
// answer both give without a usable one: cookies_required when there is no
// cookie, {"ready":true} when its value does not decode.
std::variant<shm::TicketCookie, http::LocalResponse> statusTicket(const http::Request& request);

}  // namespace concert::admission
