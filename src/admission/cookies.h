// Reading the Cookie header and writing Concert's Set-Cookie headers.
// Pure string functions; no state.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"
#include "shm/segment.h"
#include "http/request.h"

namespace concert::admission {

inline constexpr std::string_view kTicketCookie = "room_ticket";
inline constexpr std::string_view kProbeCookie = "room_probe";
inline constexpr std::string_view kPassCookie = "room_pass";
inline constexpr std::string_view kAdmitCookie = "concert_admit";
inline constexpr std::string_view kPriorityCookie = "concert_priority";

// The value of the first cookie called `name` across every Cookie header
// (pieces separated by ';', surrounding spaces ignored, one pair of double
// quotes around the value removed); nullopt when absent.
std::optional<std::string> cookieValue(const http::Headers& headers, std::string_view name);
// Several cookies in one scan, each as cookieValue would find it.
struct CookieWanted {
  std::string_view name;
  std::optional<std::string>* value;
};
void cookieValues(const http::Headers& headers, std::initializer_list<CookieWanted> wanted);

// The Cookie header value with room_ticket, room_pass, room_probe,
// concert_admit and concert_priority removed and the rest kept in order ("a=1; b=2"); nullopt when
// nothing is left (the header is then dropped, never invented).
std::optional<std::string> stripConcertCookies(std::string_view cookie_header);

struct CookieAttributes {
  std::string path;     // omitted when empty
  std::string domain;   // omitted when empty
  int64_t max_age = 0;  // seconds; emitted when > 0; < 0 expires the cookie now (Max-Age=0), as in Go
  bool http_only = false;
  bool secure = false;
};

// "name=value; Path=/; Domain=x; Max-Age=300; HttpOnly; Secure; SameSite=Lax"
// (Go's net/http attribute order; no Expires).
std::string formatSetCookie(std::string_view name, std::string_view value, const CookieAttributes& attributes);

// Every cookie is Secure when -secure-cookie is set or the client used https
// (`https`: Request::client_https, the connection's TLS or a trusted proxy's
// X-Forwarded-Proto; see http/client_address.h).
std::string ticketSetCookie(const config::Config& config, std::string_view value, bool https);
std::string probeSetCookie(const config::Config& config, bool https);
std::string admitSetCookie(const config::Config& config, std::string_view value, bool https);
// Expires the admission pass in the browser (an ended session): the pass
// cookie's Path, Domain, HttpOnly and Secure, an empty value and Max-Age=0.
std::string expiredAdmitSetCookie(const config::Config& config, bool https);
// The priority cookie (admission/priority.h) with the pass cookie's Path,
// Domain, HttpOnly and Secure, living `max_age` seconds.
std::string prioritySetCookie(const config::Config& config, std::string_view value, int64_t max_age, bool https);
// The room_pass cookie (room_pass.h): the pass cookie's attributes, Max-Age = `max_age`.
std::string roomPassSetCookie(const config::Config& config, std::string_view value, int64_t max_age, bool https);
// Expires the priority cookie in the browser (Concert-Priority: none).
std::string expiredPrioritySetCookie(const config::Config& config, bool https);
// Does this Set-Cookie header value set (or expire) the concert_admit cookie?
bool setsAdmitCookie(std::string_view set_cookie);

// The room_ticket cookie's value: 32 lower-case hex characters, the ticket
// number (16) then its nonce (16). Decoding is strict: exactly 32 [0-9a-f].
std::string encodeTicketCookie(const shm::TicketCookie& cookie);
std::optional<shm::TicketCookie> decodeTicketCookie(std::string_view value);

}  // namespace concert::admission
