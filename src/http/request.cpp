// Header lookups over a parsed request head. Names compare ASCII
// case-insensitively (RFC 9110 field names); values are returned as sent.
#include "http/request.h"

namespace concert::http {

namespace {
inline char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
}
}  // namespace

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

std::string_view findHeader(const Headers& headers, std::string_view name) {
  for (const Header& h : headers)
    if (equalsIgnoreCase(h.name, name)) return h.value;
  return {};
}

bool hasHeader(const Headers& headers, std::string_view name) {
  for (const Header& h : headers)
    if (equalsIgnoreCase(h.name, name)) return true;
  return false;
}

std::optional<std::string_view> queryValue(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) return eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
  }
  return std::nullopt;
}

void Request::keepForLog() {
  Headers kept;
  for (Header& h : headers)
    if (equalsIgnoreCase(h.name, "Referer") || equalsIgnoreCase(h.name, "User-Agent")) kept.push_back(std::move(h));
  kept.shrink_to_fit();
  headers.swap(kept);
  for (std::string* s : {&raw_path, &query}) {
    s->clear();
    s->shrink_to_fit();
  }
}

std::string joinHeader(const Headers& headers, std::string_view name, std::string_view sep) {
  std::string out;
  bool first = true;
  for (const Header& h : headers) {
    if (!equalsIgnoreCase(h.name, name)) continue;
    if (!first) out += sep;
    out += h.value;
    first = false;
  }
  return out;
}

}  // namespace concert::http
