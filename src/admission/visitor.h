// Visitor: what one request says about who sent it, read once.
//
// A page request's cookies and tokens are read by several rules: the screen
// (a forged pass is a strike), the order of admission (room pass, priority
// class, session), the ticket, sliding the pass on admission. A Visitor reads
// the Cookie headers in one scan when the request is dispatched and verifies
// each signed token at most once (the HMAC is the costly part), so every rule
// asks it instead of the request. It lives as long as the request's exchange.
//
//   ticket()        room_ticket, decoded (not looked up in the line)
//   session()       concert_admit, genuine and unexpired, unless its session
//                   was ended here or on another host (asked each time: an
//                   end may come while it waits)
//   priority()      concert_priority's class, bound to session()'s pass
//   roomPass()      room_pass as sent (verified by its rule, once spent)
//   invitation()    ?concert_invite= as sent
//   carriesForged() any of the room's signed cookies is not ours
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "admission/context.h"
#include "admission/pass.h"
#include "admission/priority.h"
#include "http/request.h"
#include "shm/types.h"

namespace concert::admission {

class Visitor {
 public:
  Visitor(const AdmissionContext& context, const http::Request& request);

  const std::optional<shm::TicketCookie>& ticket() const { return ticket_; }
  std::optional<AdmitPass> session(int64_t unix_now) const;
  std::optional<int> priority(const AdmitPass& pass, int64_t unix_now) const;
  const std::optional<std::string>& roomPass() const { return room_pass_; }
  const std::optional<std::string>& invitation() const { return invitation_; }
  bool carriesForged(int64_t unix_now) const;

 private:
  const std::optional<AdmitPass>& pass(int64_t unix_now) const;  // genuine and unexpired
  const CheckedPass& checkedPass(int64_t unix_now) const;
  const CheckedPriority& checkedPriority(int64_t unix_now) const;

  const AdmissionContext* context_;
  std::optional<shm::TicketCookie> ticket_;
  std::optional<std::string> admit_, priority_, room_pass_, invitation_;
  // Verified once, when first asked.
  mutable std::optional<CheckedPass> checked_pass_;
  mutable std::optional<AdmitPass> valid_pass_;
  mutable std::optional<CheckedPriority> checked_priority_;
};

}  // namespace concert::admission
