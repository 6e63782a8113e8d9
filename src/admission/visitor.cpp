// Visitor: see visitor.h.
#include "admission/visitor.h"

#include "admission/cookies.h"
#include "admission/room_pass.h"
#include "admission/session.h"

namespace concert::admission {

Visitor::Visitor(const AdmissionContext& context, const http::Request& request) : context_(&context) {
  std::optional<std::string> ticket;
  cookieValues(request.headers, {{kTicketCookie, &ticket},
                                 {kAdmitCookie, &admit_},
                                 {kPriorityCookie, &priority_},
                                 {kPassCookie, &room_pass_}});
  if (ticket) ticket_ = decodeTicketCookie(*ticket);
  if (std::optional<std::string_view> token = http::queryValue(request.query, "concert_invite"))
    invitation_ = std::string(*token);
}

const CheckedPass& Visitor::checkedPass(int64_t unix_now) const {
  if (!checked_pass_) checked_pass_ = checkPass(context_->config->admit_secret, admit_.value_or(""), unix_now);
  return *checked_pass_;
}

const std::optional<AdmitPass>& Visitor::pass(int64_t unix_now) const {
  if (admit_ && !valid_pass_ && checkedPass(unix_now).check == PassCheck::Valid) valid_pass_ = checked_pass_->pass;
  return valid_pass_;
}

std::optional<AdmitPass> Visitor::session(int64_t unix_now) const {
  const std::optional<AdmitPass>& presented = pass(unix_now);
  if (!presented || sessionEnded(*context_, *presented, unix_now)) return std::nullopt;
  return presented;
}

const CheckedPriority& Visitor::checkedPriority(int64_t unix_now) const {
  if (!checked_priority_)
    checked_priority_ = checkPriority(context_->config->admit_secret, priority_.value_or(""), unix_now);
  return *checked_priority_;
}

std::optional<int> Visitor::priority(const AdmitPass& pass, int64_t unix_now) const {
  const config::Config& config = *context_->config;
  if (config.priority_class_list.empty() || !priority_) return std::nullopt;
  const CheckedPriority& checked = checkedPriority(unix_now);
  if (checked.check != PassCheck::Valid || checked.cookie.pass_id != pass.id) return std::nullopt;
  return classIndex(config.priority_class_list, checked.cookie.class_name);
}

bool Visitor::carriesForged(int64_t unix_now) const {
  if (admit_ && checkedPass(unix_now).check == PassCheck::Forged) return true;
  if (priority_ && checkedPriority(unix_now).check == PassCheck::Forged) return true;
  return room_pass_ && checkRoomPass(context_->config->admit_secret, *room_pass_, unix_now) == PassCheck::Forged;
}

}  // namespace concert::admission
