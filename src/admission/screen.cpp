// The gate before routing, and the strike for a refused request; see
// admission.h.
#include "admission/abuse.h"
#include "admission/admission.h"

namespace concert::admission {

std::optional<http::LocalResponse> screen(const AdmissionContext& context, const http::Request& request,
                                          const Visitor& visitor, http::Route route, Millis now, int64_t unix_now) {
  // A load balancer's health check is never refused.
  if (context.config->abuse_threshold <= 0 || route == http::Route::Healthz) return std::nullopt;
  if (strikable(*context.config, request) && visitor.carriesForged(unix_now))
    strike(context, request, Strike::ForgedPass, now);
  if (!banned(context, request, now)) return std::nullopt;
  context.segment->stats().count(shm::Counter::RejectedBannedTotal);
  return banResponse();
}

void refused(const AdmissionContext& context, const http::Request& request, int status, Millis now) {
  if (status == 400 || status == 413 || status == 414 || status == 431)
    strike(context, request, Strike::BadRequest, now);
}

}  // namespace concert::admission
