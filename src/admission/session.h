// Visitor sessions (traffic.md §3): a request that carries a valid
// concert_admit pass belongs to a visitor the room already admitted. Such a
// page request is never sent to the waiting page while the pass is valid; it
// waits for a slot ahead of the line instead (page_guard.cpp), and the asset
// tier lets it through. A pass is valid when its signature and expiry check
// out (pass.h) and no origin has ended its session (Concert-Session: end).
#pragma once

#include <cstdint>
#include <optional>

#include "admission/context.h"
#include "admission/pass.h"
#include "http/request.h"

namespace concert::admission {

// The request's pass when it opens a session; nullopt otherwise.
std::optional<AdmitPass> sessionPass(const AdmissionContext& context, const http::Request& request, int64_t unix_now);

}  // namespace concert::admission
