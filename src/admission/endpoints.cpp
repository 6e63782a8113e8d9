// What serves each route the router names (http/router.h): the guard of a
// proxied route, the handler of a local endpoint, the feed of an event
// stream; and the guard of a bypassed request. See admission.h.
#include "admission/admission.h"
#include "admission/dashboard.h"
#include "admission/origin_policy.h"

namespace concert::admission {

namespace {

// Proceeds at once and holds nothing; the origin's word is heeded all the same.
class BypassGuard final : public RequestGuard {
 public:
  explicit BypassGuard(const AdmissionContext& context) : context_(context) {}

  Admission admit(const http::Request&, Millis) override { return Admission{}; }
  http::LocalResponse timedOut(const http::Request&, Millis) override {  // never waits
    return http::plainText(503, "service unavailable\n");
  }
  void release() override {}
  Outcome outcome() const override { return Outcome::Bypass; }
  void onResponseHead(const http::Request& request, const http::ResponseHead& head, bool detached,
                      http::Headers& response_headers) override {
    heedOrigin(context_, request, head, detached, response_headers);
  }

 private:
  const AdmissionContext& context_;
};

}  // namespace

std::unique_ptr<RequestGuard> makeBypassGuard(const AdmissionContext& context) {
  return std::make_unique<BypassGuard>(context);
}

std::unique_ptr<RequestGuard> makeGuard(const AdmissionContext& context, http::Route route, Visitor visitor) {
  switch (route) {
    case http::Route::Page: return makePageGuard(context, false, std::move(visitor));
    case http::Route::LongLived: return makePageGuard(context, true, std::move(visitor));
    case http::Route::PrivateAsset: return makeAssetGuard(context, true, std::move(visitor));
    case http::Route::PublicAsset: return makeAssetGuard(context, false, std::move(visitor));
    case http::Route::Bypass: return makeBypassGuard(context);
    default: return nullptr;
  }
}

http::LocalResponse answer(const AdmissionContext& context, http::Route route, const http::Request& request,
                           const std::string& body, Millis now) {
  switch (route) {
    case http::Route::QueueStatus: return handleQueueStatus(context, request, now);
    case http::Route::QueuePromote: return handleQueuePromote(context, request);
    case http::Route::Promote: return handlePromote(context, request, body);
    case http::Route::Healthz: return handleHealthz(context, request);
    case http::Route::Stats: return handleStats(context, request);
    case http::Route::Cap: return handleCap(context, request, body);
    case http::Route::Mode: return handleMode(context, request, body);
    case http::Route::QueueList: return handleQueueList(context, request, now);
    case http::Route::QueueRemove: return handleQueueRemove(context, request);
    case http::Route::Metrics: return handleMetrics(context, request);
    case http::Route::Report: return handleReport(context, request);
    case http::Route::Dashboard: return handleDashboard(context, request);
    case http::Route::DashboardScript: return handleDashboardScript(context, request);
    case http::Route::History: return handleHistory(context, request);
    default: return http::plainText(404, "not found\n");
  }
}

std::unique_ptr<EventFeed> makeFeed(const AdmissionContext& context, http::Route route) {
  switch (route) {
    case http::Route::QueueEvents: return std::make_unique<QueueEvents>(context);
    case http::Route::HistoryEvents: return makeHistoryEvents(context);
    default: return nullptr;
  }
}

}  // namespace concert::admission
