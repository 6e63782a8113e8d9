// Promotions: POST /_room/promote for an operator, GET /queue/promote for a
// payment page's signed link. What a promotion does to the line and how the
// visitor collects its room pass is in room_pass.h.
#include <charconv>

#include <nlohmann/json.hpp>

#include "admission/admission.h"
#include "admission/answers.h"
#include "admission/cookies.h"
#include "admission/room_pass.h"
#include "common/json.h"
#include "common/log.h"

namespace concert::admission {
namespace {

http::LocalResponse jsonError(int status, std::string_view error) {
  return jsonResponse(status, common::JsonObject().add("error", error).str());
}

// Unix seconds, digits only.
std::optional<int64_t> parseSeconds(std::string_view text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

}  // namespace

http::LocalResponse handlePromote(const AdmissionContext& context, const http::Request& request,
                                  std::string_view body) {
  if (std::optional<http::LocalResponse> refused = adminRefusal(context, request)) return std::move(*refused);
  constexpr std::string_view kExpected = R"(expected {"ticket": "<reference from {{.Ticket}}>"})";
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("ticket"))
    return jsonError(400, "invalid body: " + std::string(kExpected));
  const nlohmann::json& ticket = doc["ticket"];
  const int64_t now = unixSeconds();
  if (ticket.is_number_unsigned()) {
    // A ticket number, as /_room/queue lists them: the admin token is the proof.
    const uint64_t number = ticket.get<uint64_t>();
    std::optional<uint64_t> nonce = context.segment->line().nonceOf(number);
    if (!nonce) return jsonError(404, "no ticket " + std::to_string(number) + " in line");
    shm::TicketCookie cookie{number, *nonce};
    if (!promoteRef(context, ticketRef(context.config->admit_secret, cookie), now))
      return jsonError(404, "no ticket " + std::to_string(number) + " in line");
    LOG_INFO("ticket %llu promoted via /_room/promote", static_cast<unsigned long long>(number));
    return jsonResponse(200, common::JsonObject().add("promoted", number).str());
  }
  if (!ticket.is_string()) return jsonError(400, "\"ticket\" must be a string: " + std::string(kExpected));
  const std::string& ref = ticket.get_ref<const std::string&>();
  std::optional<uint64_t> number = refTicket(ref);
  if (!number) return jsonError(400, "not a ticket reference: " + std::string(kExpected));
  if (!promoteRef(context, ref, now)) return jsonError(404, "no such ticket in line");
  LOG_INFO("ticket %llu promoted via /_room/promote", static_cast<unsigned long long>(*number));
  return jsonResponse(200, common::JsonObject().add("promoted", *number).str());
}

http::LocalResponse handleQueuePromote(const AdmissionContext& context, const http::Request& request) {
  const config::Config& config = *context.config;
  const int64_t now = unixSeconds();
  const std::string_view ref = http::queryValue(request.query, "ticket").value_or("");
  const std::string_view exp_text = http::queryValue(request.query, "exp").value_or("");
  const std::string_view sig = http::queryValue(request.query, "sig").value_or("");
  std::optional<uint64_t> ticket = refTicket(ref);
  std::optional<int64_t> exp = parseSeconds(exp_text);
  // The signature first (constant time), then its expiry, then its single use.
  const bool valid = ticket && exp && promoteSignatureValid(config.promote_secret, ref, exp_text, sig);
  if (!valid || *exp <= now ||
      !context.segment->once().claim(onceKeyFor(OnceLabel::PromoteLink, *ticket, static_cast<uint64_t>(*exp)), *exp,
                                     now)) {
    return http::plainText(403, "this promote link is not valid (forged, expired or used already)\n");
  }
  promoteTicket(context, *ticket);
  const RoomPass pass = promotedPass(config, *ticket, now);
  http::LocalResponse r;
  r.status = 303;
  r.headers.push_back(http::Header{"Location", "/"});
  r.headers.push_back(http::Header{"Cache-Control", "no-store"});
  r.headers.push_back(roomPassHeader(config, pass, request.client_https, now));
  LOG_INFO("ticket %llu promoted via /queue/promote", static_cast<unsigned long long>(*ticket));
  return r;
}

}  // namespace concert::admission
