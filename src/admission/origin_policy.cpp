// The origin's word to Concert; see origin_policy.h.
#include "admission/origin_policy.h"

#include <array>
#include <optional>
#include <string>

#include "admission/admission.h"
#include "admission/cookies.h"
#include "admission/priority.h"
#include "admission/session.h"
#include "http/response.h"

namespace concert::admission {

namespace {

constexpr std::array<std::string_view, 2> kOriginOnlyHeaders = {kSessionHeader, kPriorityHeader};

}  // namespace

std::span<const std::string_view> originOnlyHeaders() {
  return kOriginOnlyHeaders;
}

std::optional<std::string> originCookie(const http::Request& request) {
  return stripConcertCookies(http::joinHeader(request.headers, "Cookie", "; "));
}

bool endsSession(const http::ResponseHead& origin) {
  for (const http::Header& h : origin.headers)
    if (http::equalsIgnoreCase(h.name, kSessionHeader) && http::headerHasToken(h.value, "end")) return true;
  return false;
}

http::Headers sessionEndHeaders(const http::Headers& extra, std::string_view expire_cookie) {
  http::Headers out;
  out.reserve(extra.size() + 1);
  for (const http::Header& h : extra)
    if (!(http::equalsIgnoreCase(h.name, "Set-Cookie") && setsAdmitCookie(h.value))) out.push_back(h);
  out.push_back(http::Header{"Set-Cookie", std::string(expire_cookie)});
  return out;
}

bool priorityHeader(const http::ResponseHead& origin, std::string_view& value) {
  for (const http::Header& h : origin.headers)
    if (http::equalsIgnoreCase(h.name, kPriorityHeader)) {
      value = h.value;
      return true;
    }
  return false;
}

// The pass is revoked before the head that expires its cookie goes out, and
// the guard's Set-Cookie for the pass (a slid or new one) gives way to that
// expiry. A response that ends the session grants nothing.
void heedOrigin(const AdmissionContext& context, const http::Request& request, const http::ResponseHead& head,
                bool detached, http::Headers& response_headers) {
  if (endsSession(head)) {
    endSession(context, request, unixSeconds());
    response_headers =
        sessionEndHeaders(response_headers, expiredAdmitSetCookie(*context.config, request.client_https));
    return;
  }
  std::string_view value;
  if (detached || !priorityHeader(head, value)) return;
  std::optional<std::string> set_cookie = grantPriority(context, request, response_headers, value, unixSeconds());
  if (set_cookie) response_headers.push_back(http::Header{"Set-Cookie", std::move(*set_cookie)});
}

}  // namespace concert::admission
