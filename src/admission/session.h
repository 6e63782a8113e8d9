// Visitor sessions: a request that carries a valid concert_admit pass belongs
// to a visitor the room already admitted. Such a page request is never sent
// to the waiting page while the pass is valid; it waits for a slot ahead of
// the line instead (page_guard.cpp), and the asset tier lets it through. A
// pass is valid when its signature and expiry check out (pass.h) and no
// origin has ended its session (Concert-Session: end).
#pragma once

#include <cstdint>
#include <optional>

#include "admission/context.h"
#include "admission/pass.h"
#include "http/request.h"

namespace concert::admission {

// The request's pass when it opens a session; nullopt otherwise (no pass, a
// forged or expired one, or one whose session was ended).
std::optional<AdmitPass> sessionPass(const AdmissionContext& context, const http::Request& request, int64_t unix_now);

// Whether the session of a genuine pass was ended (here, or on another host).
bool sessionEnded(const AdmissionContext& context, const AdmitPass& pass, int64_t unix_now);

// The origin ended the request's session (Concert-Session: end): its pass,
// if it verifies, is revoked on every worker until now + -admit-ttl, the
// latest a pass of that id could have been slid to. True when a revocation
// was recorded.
bool endSession(const AdmissionContext& context, const http::Request& request, int64_t unix_now);

}  // namespace concert::admission
