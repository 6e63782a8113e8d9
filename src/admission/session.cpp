// Visitor sessions; see session.h.
#include "admission/session.h"

#include "admission/cookies.h"

namespace concert::admission {

namespace {

std::optional<AdmitPass> presentedPass(const AdmissionContext& context, const http::Request& request,
                                       int64_t unix_now) {
  std::optional<std::string> presented = cookieValue(request.headers, kAdmitCookie);
  if (!presented) return std::nullopt;
  return verifyPass(context.config->admit_secret, *presented, unix_now);
}

}  // namespace

bool sessionEnded(const AdmissionContext& context, const AdmitPass& pass, int64_t unix_now) {
  return context.segment->revocations().revoked(pass.id.data(), unix_now) ||
         context.segment->cluster().revokedElsewhere(pass.id.data(), unix_now);
}

std::optional<AdmitPass> sessionPass(const AdmissionContext& context, const http::Request& request, int64_t unix_now) {
  std::optional<AdmitPass> pass = presentedPass(context, request, unix_now);
  if (pass && sessionEnded(context, *pass, unix_now)) return std::nullopt;
  return pass;
}

bool endSession(const AdmissionContext& context, const http::Request& request, int64_t unix_now) {
  std::optional<AdmitPass> pass = presentedPass(context, request, unix_now);
  if (!pass) return false;
  const int64_t until = unix_now + context.config->admit_ttl / 1000;
  const shm::RevokeOutcome outcome =
      context.segment->revocations().revoke(pass->id.data(), until, unix_now, context.slot);
  context.segment->cluster().revoke(pass->id.data(), until);  // -cluster: every host refuses it too
  return outcome != shm::RevokeOutcome::Busy && outcome != shm::RevokeOutcome::Ignored;
}

}  // namespace concert::admission
