// The asset tier as a per-request guard.
//
// Private assets (-assets) need a valid concert_admit pass and go through two
// pools; public assets (-asset-public) only through the second:
//
//   Start ─(private: pass missing/invalid/expired/ended)──▶ 403, asset_denied_total
//     │ private                                    │ public
//     ▼                                            ▼
//   PassPool: tryAcquirePass(id, h1|h2)  ──ok──▶ GlobalPool: tryAcquireAsset ──ok──▶ Holding
//     │ AtCap: wait ≤ -asset-user-wait              │ none: wait ≤ -asset-wait       (asset_served_total)
//     │   deadline → 429 Retry-After: 1             │   deadline → 503 Retry-After: 1
//     │ TableFull (all busy) → 503 Retry-After: 1   │
//
// Waiting means parking on the worker's eventfd (Resource PassSlot or
// AssetSlot); whoever releases a slot anywhere wakes the workers that parked.
// Every hold (pass cell, asset slot) is recorded per worker slot in the
// segment, so release() returns it here and reclaimDeadWorker returns it if
// the worker dies. A new pass in a full pass table takes the entry of the
// least recently used idle pass (pass_evicted_total, shm/pass_table.h);
// only when every pass there has a request in flight is the answer 503
// (TableFull, fail closed: an untracked pass would escape its per-user cap),
// counted in pass_table_full_total.
//
// A valid pass past half its lifetime is re-minted (same id) and sent on the
// response, whatever the outcome; no room cookie is ever set here.
#include "admission/admission.h"
#include "admission/answers.h"
#include "admission/cookies.h"
#include "admission/origin_policy.h"
#include "admission/pass.h"
#include "admission/session.h"

namespace concert::admission {
namespace {

// Protocol detection: the configured header wins when it names a
// known protocol, otherwise the client connection's own version decides.
shm::PassProto passProtocol(const config::Config& config, const http::Request& request) {
  if (!config.client_proto_header.empty()) {
    std::string_view v = request.header(config.client_proto_header);
    if (v.substr(0, 6) == "HTTP/1") return shm::PassProto::H1;
    if (v.substr(0, 6) == "HTTP/2" || v.substr(0, 6) == "HTTP/3") return shm::PassProto::H2;
  }
  return request.http_major >= 2 ? shm::PassProto::H2 : shm::PassProto::H1;
}

class AssetGuard final : public RequestGuard {
 public:
  AssetGuard(const AdmissionContext& context, bool private_asset, std::optional<Visitor> visitor)
      : context_(context),
        config_(*context.config),
        waiters_(*context.waiters),
        private_(private_asset),
        visitor_(std::move(visitor)) {}
  ~AssetGuard() override { release(); }

  Admission admit(const http::Request& request, Millis now) override {
    switch (state_) {
      case State::Start: return start(request, now);
      case State::WaitingPass: return retryPass(now);
      case State::WaitingGlobal: return retryGlobal(now);
      case State::Holding: return proceed();
      case State::Done: break;
    }
    return respond(emptyResponse(503, 1));
  }

  http::LocalResponse timedOut(const http::Request&, Millis) override {
    http::LocalResponse r;
    if (state_ == State::WaitingPass) {
      waiters_.unpark(shm::Resource::PassSlot);
      segment().stats().count(shm::Counter::AssetUserThrottledTotal);
      r = emptyResponse(429, 1);
    } else {
      // Only a parked request has a deadline; WaitingGlobal is the other case.
      if (state_ == State::WaitingGlobal) {
        waiters_.unpark(shm::Resource::AssetSlot);
        segment().stats().count(shm::Counter::AssetGlobalThrottledTotal);
      }
      r = emptyResponse(503, 1);
    }
    // Give back the pass hold now rather than at release: the response is final.
    releaseHolds();
    state_ = State::Done;
    outcome_ = Outcome::Rejected;
    addPassCookie(r.headers);
    return r;
  }

  void release() override {
    if (state_ == State::WaitingPass) waiters_.unpark(shm::Resource::PassSlot);
    if (state_ == State::WaitingGlobal) waiters_.unpark(shm::Resource::AssetSlot);
    releaseHolds();
    state_ = State::Done;
  }

  Outcome outcome() const override { return outcome_; }

  void onResponseHead(const http::Request& request, const http::ResponseHead& head, bool detached,
                      http::Headers& response_headers) override {
    heedOrigin(context_, request, head, detached, response_headers);
  }

 private:
  enum class State { Start, WaitingPass, WaitingGlobal, Holding, Done };

  shm::Segment& segment() const { return *context_.segment; }

  Admission start(const http::Request& request, Millis now) {
    if (!private_) return tryGlobal(now);
    int64_t unix_now = unixSeconds();
    if (!visitor_) visitor_.emplace(context_, request);
    std::optional<AdmitPass> pass = visitor_->session(unix_now);
    if (!pass) {
      segment().stats().count(shm::Counter::AssetDeniedTotal);
      return respond(emptyResponse(403));
    }
    pass_id_ = pass->id;
    https_ = request.client_https;
    pass_cookie_ = slidePass(config_.admit_secret, pass, unix_now, config_.admit_ttl / 1000, false);
    proto_ = passProtocol(config_, request);
    return tryPass(now);
  }

  int32_t passCap() const {
    return proto_ == shm::PassProto::H2 ? config_.asset_user_cap_h2 : config_.asset_user_cap_h1;
  }

  shm::PassAcquire acquirePass(Millis now) {
    return segment().passes().tryAcquire(pass_id_.data(), proto_, passCap(), context_.slot, now, &hold_);
  }

  Admission tryPass(Millis now) {
    shm::PassAcquire result = acquirePass(now);
    if (result == shm::PassAcquire::AtCap) {
      waiters_.park(shm::Resource::PassSlot);
      result = acquirePass(now);
      if (result == shm::PassAcquire::AtCap && config_.asset_user_wait > 0) {
        state_ = State::WaitingPass;
        deadline_ = now + config_.asset_user_wait;
        return wait();
      }
      waiters_.unpark(shm::Resource::PassSlot);
    }
    return afterPass(result, now);
  }

  Admission retryPass(Millis now) {
    shm::PassAcquire result = acquirePass(now);
    if (result == shm::PassAcquire::AtCap) return wait();
    waiters_.unpark(shm::Resource::PassSlot);
    return afterPass(result, now);
  }

  Admission afterPass(shm::PassAcquire result, Millis now) {
    switch (result) {
      case shm::PassAcquire::Acquired: return tryGlobal(now);
      case shm::PassAcquire::AtCap:
        segment().stats().count(shm::Counter::AssetUserThrottledTotal);
        return respond(emptyResponse(429, 1));
      case shm::PassAcquire::TableFull: break;
    }
    return respond(emptyResponse(503, 1));
  }

  Admission tryGlobal(Millis now) {
    if (segment().assets().tryAcquire(context_.slot)) return served();
    waiters_.park(shm::Resource::AssetSlot);
    if (segment().assets().tryAcquire(context_.slot)) {
      waiters_.unpark(shm::Resource::AssetSlot);
      return served();
    }
    if (config_.asset_wait > 0) {
      state_ = State::WaitingGlobal;
      deadline_ = now + config_.asset_wait;
      return wait();
    }
    waiters_.unpark(shm::Resource::AssetSlot);
    segment().stats().count(shm::Counter::AssetGlobalThrottledTotal);
    releaseHolds();
    return respond(emptyResponse(503, 1));
  }

  Admission retryGlobal(Millis) {
    if (!segment().assets().tryAcquire(context_.slot)) return wait();
    waiters_.unpark(shm::Resource::AssetSlot);
    return served();
  }

  Admission served() {
    holding_asset_ = true;
    state_ = State::Holding;
    outcome_ = Outcome::Admitted;
    segment().stats().count(shm::Counter::AssetServedTotal);
    return proceed();
  }

  Admission proceed() {
    Admission a;
    a.kind = Admission::Kind::Proceed;
    addPassCookie(a.response_headers);
    return a;
  }

  Admission wait() const {
    Admission a;
    a.kind = Admission::Kind::Wait;
    a.deadline = deadline_;
    a.resource = state_ == State::WaitingPass ? shm::Resource::PassSlot : shm::Resource::AssetSlot;
    return a;
  }

  Admission respond(http::LocalResponse response) {
    state_ = State::Done;
    outcome_ = Outcome::Rejected;
    addPassCookie(response.headers);
    Admission a;
    a.kind = Admission::Kind::Respond;
    a.response = std::move(response);
    return a;
  }

  void addPassCookie(http::Headers& headers) const {
    if (pass_cookie_) headers.push_back(http::Header{"Set-Cookie", admitSetCookie(config_, *pass_cookie_, https_)});
  }

  void releaseHolds() {
    if (holding_asset_) {
      holding_asset_ = false;
      segment().assets().release(context_.slot);
    }
    if (hold_.valid()) {
      segment().passes().release(hold_, context_.slot, monotonicMs());
      hold_ = shm::PassHold{};
    }
  }

  const AdmissionContext& context_;
  const config::Config& config_;
  Waiters& waiters_;
  const bool private_;
  State state_ = State::Start;
  Outcome outcome_ = Outcome::Rejected;
  PassId pass_id_{};
  shm::PassProto proto_ = shm::PassProto::H1;
  shm::PassHold hold_;
  bool holding_asset_ = false;
  Millis deadline_ = 0;
  std::optional<std::string> pass_cookie_;
  bool https_ = false;  // the client used https: the pass cookie is Secure
  std::optional<Visitor> visitor_;  // the request's tokens, read once
};

}  // namespace

std::unique_ptr<RequestGuard> makeAssetGuard(const AdmissionContext& context, bool private_asset,
                                             std::optional<Visitor> visitor) {
  return std::make_unique<AssetGuard>(context, private_asset, std::move(visitor));
}

}  // namespace concert::admission
