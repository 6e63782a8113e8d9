// Per-client limits, strikes and bans: what a client (http::clientKey: an
// IPv4 address or an IPv6 /64) may hold in line, and what it earns by
// misbehaving. The counts live in the segment's client table (shm/clients.h),
// so every worker sees the same ones.
//
// Strikes, by weight:
//   a forged, tampered or foreign-key concert_admit pass or
//   concert_priority cookie (one strike per request for both)  5
//   a wrong admin token                                         5
//   a forged, tampered or foreign-key room_pass                5
//   a used, expired or forged invitation (?concert_invite=)     1
//   a cookie-less page request refused by -max-tickets-per-client  1
//   a request refused with 400, 413, 414 or 431                 1
// -abuse-threshold strikes within 10 minutes ban the client for -abuse-ban
// (doubling per repeat, at most 24 h): every request but /_room/healthz gets
// 403 and its tickets leave the line. -abuse-threshold 0 turns strikes and
// bans off. Clients in -abuse-allow or -bypass-cidrs, and requests whose
// client is not an IP address, are never struck, banned or limited
// (Request::abuse_exempt, Request::client_keyed).
//
// A head refused before dispatch names no trusted client yet: it is struck
// against its TCP peer, and not at all when that peer is a trusted proxy
// (the proxy is not the one misbehaving).
#pragma once

#include <optional>

#include "admission/context.h"
#include "common/clock.h"
#include "http/request.h"
#include "http/response.h"

namespace concert::admission {

enum class Strike : int {
  ForgedPass = 5,
  AdminToken = 5,
  TicketLimit = 1,
  BadRequest = 1,
  Invitation = 1,
};

// Counts a strike against the request's client when strikes are on and the
// client can be struck; logs the ban a strike starts.
void strike(const AdmissionContext& context, const http::Request& request, Strike weight, Millis now);

// The client is banned now: the request gets banResponse().
bool banned(const AdmissionContext& context, const http::Request& request, Millis now);
http::LocalResponse banResponse();

// Whether strikes count against the request's client (-abuse-threshold is on,
// the client has an address key, and it is not exempt). A forged
// concert_admit, room_pass or concert_priority cookie (Visitor::carriesForged:
// not an expired one; a genuine priority cookie bound to another pass or
// naming a class no longer configured only grants nothing) is a strike,
// checked once per request by screen(), whether or not -priority-classes is set.
bool strikable(const config::Config& config, const http::Request& request);

// What TicketRing::issue needs to charge a new ticket to its client; nullopt
// when the client's tickets are not counted (an exempt client, no address).
// Counted even with no limit and no bans: the operator's views of the line
// (/_room/queue, the report's tickets per client) name the client.
std::optional<shm::ClientTicketing> ticketing(const AdmissionContext& context, const http::Request& request);

// "You hold enough places in line": 429 + Retry-After, no ticket.
http::LocalResponse ticketLimitResponse(const config::Config& config, const http::Request& request);

}  // namespace concert::admission
