// The answers the room gives without the origin: the waiting page, the JSON
// 429, the "room is full" 503, and the small helpers the guards and the ops
// endpoints share to build them. Pure functions of the configuration and the
// request.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

// The waiting page with {{.Position}} and {{.SkipURL}} substituted verbatim
// (the configured -html template, else the built-in page). SkipURL is empty
// unless -rate > 0.
std::string renderWaitingPage(const config::Config& config, int64_t position);

// "You are in line": the waiting page (200) for browsers, the JSON 429 for
// API clients (-api-json), both with the room_ticket and room_probe cookies
// that keep the visitor's place.
http::LocalResponse waitingResponse(const config::Config& config, const http::Request& request,
                                    const shm::TicketCookie& cookie, int64_t position);

// The answer for "no room for you": breaker, ring full, slot-wait timeout.
// API clients (with -api-json) get 503 JSON, everyone else the small HTML page;
// both carry Retry-After: -retry-after and Cache-Control: no-store.
http::LocalResponse roomFullResponse(const config::Config& config, const http::Request& request);

// An empty-bodied response with an optional Retry-After (asset tier, ops).
http::LocalResponse emptyResponse(int status, int retry_after = 0);

// A JSON body with Cache-Control: no-store.
http::LocalResponse jsonResponse(int status, std::string body);

}  // namespace concert::admission
