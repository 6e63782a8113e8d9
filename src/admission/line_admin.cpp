// The line as the operator sees and steers it:
//   GET /_room/queue?limit=N     the head of the line, oldest first
//   DELETE /_room/queue/<ticket> one ticket out of the line
// Both behind the admin gate (adminRefusal). The ticket reference is the
// ticket number: it names a place, not a visitor; only the room_ticket
// cookie (number and nonce) lets anyone take that place.
#include <charconv>
#include <string>
#include <string_view>

#include "admission/admission.h"
#include "admission/answers.h"
#include "common/json.h"
#include "common/log.h"
#include "http/client_address.h"

namespace concert::admission {
namespace {

constexpr size_t kDefaultLimit = 50;
constexpr size_t kMaxLimit = 1000;
constexpr std::string_view kQueueItem = "/_room/queue/";


template <typename T>
std::optional<T> parseNumber(std::string_view text) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

http::LocalResponse badRequest(const std::string& message) {
  return jsonResponse(400, common::JsonObject().add("error", message).str());
}

}  // namespace

http::LocalResponse handleQueueList(const AdmissionContext& context, const http::Request& request, Millis now) {
  if (std::optional<http::LocalResponse> refused = adminRefusal(context, request)) return std::move(*refused);
  size_t limit = kDefaultLimit;
  if (std::optional<std::string_view> text = http::queryValue(request.query, "limit")) {
    std::optional<size_t> n = parseNumber<size_t>(*text);
    if (!n || *n < 1 || *n > kMaxLimit)
      return badRequest("limit must be a whole number from 1 to " + std::to_string(kMaxLimit));
    limit = *n;
  }
  std::string body = "[";
  for (const shm::LineEntry& e : context.segment->line().head(limit, now)) {
    common::JsonObject item;
    item.add("ticket", e.ticket);
    item.add("age_seconds", static_cast<double>(e.age) / 1000.0);
    if (e.has_client)
      item.add("client", http::clientKeyText(e.client));
    else
      item.addNull("client");
    item.add("last_seen_seconds", static_cast<double>(e.unseen) / 1000.0);
    item.add("returned", e.returned);
    if (body.size() > 1) body += ',';
    body += item.str();
  }
  body += ']';
  return jsonResponse(200, std::move(body));
}

http::LocalResponse handleQueueRemove(const AdmissionContext& context, const http::Request& request) {
  if (std::optional<http::LocalResponse> refused = adminRefusal(context, request)) return std::move(*refused);
  std::string_view ref = std::string_view(request.path).substr(kQueueItem.size());
  std::optional<uint64_t> ticket = parseNumber<uint64_t>(ref);
  if (!ticket) return badRequest("not a ticket: " + std::string(ref));
  if (!context.segment->line().remove(*ticket))
    return jsonResponse(404, common::JsonObject().add("error", "no ticket " + std::to_string(*ticket) + " in line").str());
  LOG_INFO("ticket %llu removed from the line via /_room/queue", static_cast<unsigned long long>(*ticket));
  return jsonResponse(200, common::JsonObject().add("removed", *ticket).str());
}

}  // namespace concert::admission
