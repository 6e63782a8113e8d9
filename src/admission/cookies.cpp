// Cookie parsing, Concert-cookie stripping and Set-Cookie formatting.
//
// Parsing follows Go's net/http readCookies closely enough for the five
// names Concert cares about: each Cookie header is split on ';', pieces are
// trimmed of spaces and tabs, empty pieces are skipped, the name is what
// precedes the first '='. Stripping keeps every other piece byte for byte and
// in order, so the origin sees its own cookies exactly as the client sent
// them (Go re-serialised them, which could alter unusual values).
#include "admission/cookies.h"

#include <charconv>

namespace concert::admission {
namespace {

std::string_view trimSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string_view pieceName(std::string_view piece) {
  return trimSpace(piece.substr(0, piece.find('=')));
}

bool isConcertCookie(std::string_view name) {
  return name == kTicketCookie || name == kPassCookie || name == kProbeCookie || name == kAdmitCookie ||
         name == kPriorityCookie;
}

// Calls fn(piece) for every non-empty trimmed piece of one Cookie header value;
// stops early when fn returns false.
template <typename Fn>
void forEachPiece(std::string_view header, Fn&& fn) {
  while (!header.empty()) {
    size_t semi = header.find(';');
    std::string_view piece = trimSpace(header.substr(0, semi));
    header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    if (!piece.empty() && !fn(piece)) return;
  }
}

std::string_view pieceValue(std::string_view piece) {
  size_t eq = piece.find('=');
  std::string_view value = eq == std::string_view::npos ? std::string_view() : trimSpace(piece.substr(eq + 1));
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
  return value;
}

}  // namespace

std::optional<std::string> cookieValue(const http::Headers& headers, std::string_view name) {
  std::optional<std::string> found;
  cookieValues(headers, {{name, &found}});
  return found;
}

void cookieValues(const http::Headers& headers, std::initializer_list<CookieWanted> wanted) {
  size_t left = wanted.size();
  for (const CookieWanted& w : wanted) w.value->reset();
  for (const http::Header& h : headers) {
    if (left == 0) return;
    if (!http::equalsIgnoreCase(h.name, "Cookie")) continue;
    forEachPiece(h.value, [&](std::string_view piece) {
      const std::string_view name = pieceName(piece);
      for (const CookieWanted& w : wanted) {
        if (w.name != name || w.value->has_value()) continue;  // the first of a name wins
        *w.value = std::string(pieceValue(piece));
        --left;
      }
      return left > 0;
    });
  }
}

std::optional<std::string> stripConcertCookies(std::string_view cookie_header) {
  std::string out;
  forEachPiece(cookie_header, [&](std::string_view piece) {
    if (isConcertCookie(pieceName(piece))) return true;
    if (!out.empty()) out += "; ";
    out += piece;
    return true;
  });
  if (out.empty()) return std::nullopt;
  return out;
}

std::string formatSetCookie(std::string_view name, std::string_view value, const CookieAttributes& attributes) {
  std::string out;
  out.reserve(160);
  out.append(name).append("=").append(value);
  if (!attributes.path.empty()) out.append("; Path=").append(attributes.path);
  if (!attributes.domain.empty()) {
    // Go drops one leading dot: browsers treat ".example.com" and "example.com" alike.
    std::string_view domain = attributes.domain;
    if (domain.front() == '.') domain.remove_prefix(1);
    out.append("; Domain=").append(domain);
  }
  if (attributes.max_age > 0) out.append("; Max-Age=").append(std::to_string(attributes.max_age));
  if (attributes.max_age < 0) out.append("; Max-Age=0");
  if (attributes.http_only) out.append("; HttpOnly");
  if (attributes.secure) out.append("; Secure");
  out.append("; SameSite=Lax");
  return out;
}

namespace {

CookieAttributes roomAttributes(const config::Config& config, bool https, bool http_only) {
  CookieAttributes a;
  a.path = config.cookie_path;
  a.domain = config.cookie_domain;
  a.max_age = config.token_ttl / 1000;
  a.http_only = http_only;
  a.secure = config.secure_cookie || https;
  return a;
}

}  // namespace

std::string ticketSetCookie(const config::Config& config, std::string_view value, bool https) {
  return formatSetCookie(kTicketCookie, value, roomAttributes(config, https, true));
}

std::string probeSetCookie(const config::Config& config, bool https) {
  return formatSetCookie(kProbeCookie, "1", roomAttributes(config, https, false));
}

namespace {

// The original set Secure on the pass only for -secure-cookie; a client on
// https gets it too (https on a TLS connection, or as a trusted proxy reports
// it: http/client_address.h), so a pass never travels in clear text once the
// visitor is on https.
CookieAttributes admitAttributes(const config::Config& config, bool https) {
  CookieAttributes a;
  a.path = config.cookie_path;
  a.domain = config.cookie_domain;
  a.max_age = config.admit_ttl / 1000;
  a.http_only = true;
  a.secure = config.secure_cookie || https;
  return a;
}

}  // namespace

std::string admitSetCookie(const config::Config& config, std::string_view value, bool https) {
  return formatSetCookie(kAdmitCookie, value, admitAttributes(config, https));
}

std::string expiredAdmitSetCookie(const config::Config& config, bool https) {
  CookieAttributes a = admitAttributes(config, https);
  a.max_age = -1;
  return formatSetCookie(kAdmitCookie, "", a);
}

std::string prioritySetCookie(const config::Config& config, std::string_view value, int64_t max_age, bool https) {
  CookieAttributes a = admitAttributes(config, https);
  a.max_age = max_age > 0 ? max_age : -1;
  return formatSetCookie(kPriorityCookie, value, a);
}

std::string roomPassSetCookie(const config::Config& config, std::string_view value, int64_t max_age, bool https) {
  CookieAttributes a = admitAttributes(config, https);
  a.max_age = max_age > 0 ? max_age : -1;
  return formatSetCookie(kPassCookie, value, a);
}

std::string expiredPrioritySetCookie(const config::Config& config, bool https) {
  CookieAttributes a = admitAttributes(config, https);
  a.max_age = -1;
  return formatSetCookie(kPriorityCookie, "", a);
}

bool setsAdmitCookie(std::string_view set_cookie) {
  const size_t eq = set_cookie.find('=');
  return eq != std::string_view::npos && trimSpace(set_cookie.substr(0, eq)) == kAdmitCookie;
}

// The ticket number and the nonce, each as 16 lower-case hex digits.
std::string encodeTicketCookie(const shm::TicketCookie& cookie) {
  std::string out(32, '0');
  for (auto [word, end] : {std::pair{cookie.ticket, 16}, std::pair{cookie.nonce, 32}}) {
    char digits[16];
    auto [ptr, ec] = std::to_chars(digits, digits + sizeof digits, word, 16);
    const size_t n = static_cast<size_t>(ptr - digits);
    out.replace(static_cast<size_t>(end) - n, n, digits, n);
  }
  return out;
}

std::optional<shm::TicketCookie> decodeTicketCookie(std::string_view value) {
  if (value.size() != 32) return std::nullopt;
  for (char c : value)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  uint64_t words[2] = {0, 0};
  for (int i = 0; i < 2; ++i) std::from_chars(value.data() + 16 * i, value.data() + 16 * (i + 1), words[i], 16);
  return shm::TicketCookie{words[0], words[1]};
}

}  // namespace concert::admission
