// Fuzz target: Cookie header reading and Concert-cookie stripping
// (cookieValue, stripConcertCookies). The input is split on '\n' into
// several Cookie headers, as a client may send them.
// Properties:
//   * the value the admission code reads for each of Concert's four cookies
//     is a substring of some Cookie header (nothing invented);
//   * what goes to the origin never contains one of Concert's cookies, is
//     never an empty header (nullopt instead), never grows, and stripping it
//     again changes nothing.
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "admission/admission.h"
#include "admission/cookies.h"

namespace concert::fuzz {
namespace {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void checkStripped(std::string_view header) {
  std::optional<std::string> stripped = admission::stripConcertCookies(header);
  if (!stripped) return;
  FUZZ_ASSERT(!stripped->empty());
  // Pieces are kept byte for byte; only the separators may widen (";" -> "; ").
  size_t separators = 0;
  for (char c : header) separators += c == ';';
  FUZZ_ASSERT(stripped->size() <= header.size() + separators);
  std::string_view rest = *stripped;
  while (!rest.empty()) {
    size_t semi = rest.find(';');
    std::string_view piece = trimmed(rest.substr(0, semi));
    std::string_view name = trimmed(piece.substr(0, piece.find('=')));
    FUZZ_ASSERT(name != admission::kTicketCookie && name != admission::kPassCookie && name != admission::kProbeCookie &&
                name != admission::kAdmitCookie);
    if (semi == std::string_view::npos) break;
    rest.remove_prefix(semi + 1);
  }
  std::optional<std::string> again = admission::stripConcertCookies(*stripped);
  FUZZ_ASSERT(again && *again == *stripped);
}

}  // namespace

int fuzzCookies(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  http::Headers headers;
  while (true) {
    size_t nl = input.find('\n');
    headers.push_back({headers.size() % 3 == 2 ? "cookie" : "Cookie", std::string(input.substr(0, nl))});
    if (nl == std::string_view::npos) break;
    input.remove_prefix(nl + 1);
  }
  headers.push_back({"X-Not-Cookie", "room_ticket=decoy"});

  for (std::string_view name :
       {admission::kTicketCookie, admission::kPassCookie, admission::kProbeCookie, admission::kAdmitCookie}) {
    std::optional<std::string> value = admission::cookieValue(headers, name);
    if (!value) continue;
    bool found = false;
    for (size_t i = 0; i + 1 < headers.size() && !found; ++i)
      found = headers[i].value.find(*value) != std::string::npos;
    FUZZ_ASSERT(found);
  }
  for (size_t i = 0; i + 1 < headers.size(); ++i) checkStripped(headers[i].value);
  return 0;
}

}  // namespace concert::fuzz

CONCERT_FUZZ_ENTRY(fuzzCookies)
