// The dashboard's page, script, history and event stream; see dashboard.h.
//
// The page's own script is inline; its Content-Security-Policy names it by
// its SHA-256, taken once per process from the compiled-in page, so no other
// inline script (nor any from another origin) could run there. Styles may be
// inline: the page has a <style> block and Chart.js sizes its canvases with
// style attributes.
#include "admission/dashboard.h"

#include <openssl/evp.h>

#include <charconv>
#include <cmath>
#include <optional>

#include "admission/answers.h"
#include "common/json.h"

namespace concert::admission {

namespace {

constexpr std::string_view kScriptType = "text/javascript; charset=utf-8";

// The base64 SHA-256 of the page's one inline <script> element's text.
std::string inlineScriptHash(std::string_view html) {
  const size_t open = html.find("<script>");
  const size_t close = open == std::string_view::npos ? open : html.find("</script>", open);
  if (close == std::string_view::npos) return {};
  const std::string_view body = html.substr(open + 8, close - open - 8);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(body.data(), body.size(), digest, &length, EVP_sha256(), nullptr) != 1) return {};
  unsigned char encoded[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
  const int n = EVP_EncodeBlock(encoded, digest, static_cast<int>(length));
  return std::string(reinterpret_cast<const char*>(encoded), static_cast<size_t>(n));
}

const std::string& pagePolicy() {
  static const std::string policy =
      "default-src 'none'; script-src 'self' 'sha256-" + inlineScriptHash(kDashboardHtml) +
      "'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
      "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
  return policy;
}

void addCommonHeaders(http::LocalResponse& r, std::string_view type, std::string_view cache) {
  r.headers.push_back(http::Header{"Content-Type", std::string(type)});
  r.headers.push_back(http::Header{"Cache-Control", std::string(cache)});
  r.headers.push_back(http::Header{"X-Content-Type-Options", "nosniff"});
  r.headers.push_back(http::Header{"Referrer-Policy", "no-referrer"});
}

void addQuantile(common::JsonObject& o, std::string_view key, double seconds) {
  if (std::isnan(seconds))
    o.addNull(key);
  else
    o.add(key, std::round(seconds * 1e4) / 1e4);  // a tenth of a millisecond is plenty to draw
}

std::optional<uint64_t> parseIndex(std::string_view text) {
  uint64_t value = 0;
  if (text.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}


}  // namespace

std::string historySampleJson(const shm::HistorySample& s) {
  common::JsonObject o;
  o.add("i", s.index)
      .add("t", s.unix_seconds)
      .add("queue_depth", s.queue_depth)
      .add("occupancy", s.occupancy)
      .add("cap", s.cap)
      .add("admissions", s.admissions);
  addQuantile(o, "wait_p50", s.wait_p50);
  addQuantile(o, "wait_p95", s.wait_p95);
  addQuantile(o, "origin_p95", s.origin_p95);
  return o.str();
}

std::string historySamplesJson(const std::vector<shm::HistorySample>& samples) {
  std::string out = "[";
  for (const shm::HistorySample& s : samples) {
    if (out.size() > 1) out += ',';
    out += historySampleJson(s);
  }
  out += ']';
  return out;
}

http::LocalResponse handleDashboard(const AdmissionContext& context, const http::Request& request) {
  if (std::optional<http::LocalResponse> refused = adminRefusal(context, request)) return std::move(*refused);
  http::LocalResponse r;
  addCommonHeaders(r, kHtmlType, "no-store");
  r.headers.push_back(http::Header{"Content-Security-Policy", pagePolicy()});
  r.body = std::string(kDashboardHtml);
  return r;
}

http::LocalResponse handleDashboardScript(const AdmissionContext& context, const http::Request& request) {
  if (std::optional<http::LocalResponse> refused = adminRefusal(context, request)) return std::move(*refused);
  http::LocalResponse r;
  // Private: it was fetched with the admin's credentials. An hour is short
  // enough for an upgrade's new library to be picked up the same day.
  addCommonHeaders(r, kScriptType, "private, max-age=3600");
  r.body = std::string(kChartJs);
  return r;
}

http::LocalResponse handleHistory(const AdmissionContext& context, const http::Request& request) {
  if (std::optional<http::LocalResponse> refused = adminRefusal(context, request)) return std::move(*refused);
  const shm::History& history = context.segment->history();
  // `next` first: a sample written meanwhile then comes again on the stream
  // rather than not at all (the page drops the copy by its index).
  const uint64_t next = history.written();
  std::vector<shm::HistorySample> samples = history.since(0);
  while (!samples.empty() && samples.back().index >= next) samples.pop_back();
  std::string body = common::JsonObject()
                         .add("interval_seconds", int64_t{1})
                         .add("window_seconds", static_cast<uint64_t>(shm::HistorySampler::kWindow))
                         .add("capacity", static_cast<uint64_t>(shm::kHistorySamples))
                         .add("next", next)
                         .str();
  body.pop_back();  // the closing brace: the samples array goes last
  body += ",\"samples\":" + historySamplesJson(samples) + "}";
  http::LocalResponse r = jsonResponse(200, std::move(body));
  r.headers.push_back(http::Header{"X-Content-Type-Options", "nosniff"});
  return r;
}

// ------------------------------------------------------------ the stream

EventFeed::Opening HistoryEvents::open(const http::Request& request, Millis) {
  Opening opening;
  if (std::optional<http::LocalResponse> refused = adminRefusal(context_, request)) {
    opening.response = std::move(*refused);
    return opening;
  }
  const shm::History& history = context_.segment->history();
  const uint64_t written = history.written();
  const uint64_t newest = written > 0 ? written - 1 : 0;
  std::optional<uint64_t> from;
  if (http::hasHeader(request.headers, "Last-Event-ID")) {
    if (std::optional<uint64_t> last = parseIndex(request.header("Last-Event-ID"))) from = *last + 1;
  } else if (std::optional<std::string_view> query = http::queryValue(request.query, "from")) {
    from = parseIndex(*query);
  }
  const uint64_t oldest_kept = written > shm::kHistorySamples ? written - shm::kHistorySamples : 0;
  next_ = from && *from >= oldest_kept && *from <= written ? *from : newest;

  opening.stream = true;
  opening.response = eventStreamHead();
  opening.first = pending();
  return opening;
}

EventFeed::Event HistoryEvents::recheck(Millis, bool) {
  if (context_.waiters->draining()) return Event{Event::Kind::End};
  return pending();
}

EventFeed::Event HistoryEvents::pending() {
  std::vector<shm::HistorySample> samples = context_.segment->history().since(next_);
  if (samples.empty()) return {};
  if (samples.size() > kMaxSamplesPerEvent) samples.resize(kMaxSamplesPerEvent);
  next_ = samples.back().index + 1;
  return Event{Event::Kind::Samples, historySamplesJson(samples), std::to_string(samples.back().index)};
}

std::unique_ptr<EventFeed> makeHistoryEvents(const AdmissionContext& context) {
  return std::make_unique<HistoryEvents>(context);
}

}  // namespace concert::admission
