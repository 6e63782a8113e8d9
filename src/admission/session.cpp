// Visitor sessions; see session.h.
#include "admission/session.h"

#include "admission/cookies.h"

namespace concert::admission {

std::optional<AdmitPass> sessionPass(const AdmissionContext& context, const http::Request& request, int64_t unix_now) {
  std::optional<std::string> presented = cookieValue(request.headers, kAdmitCookie);
  if (!presented) return std::nullopt;
  return verifyPass(context.config->admit_secret, *presented, unix_now);
}

}  // namespace concert::admission
