// Rate-limited saturation edges; see saturation_log.h.
#include "admission/saturation_log.h"

#include <cstring>

#include "common/log.h"

namespace concert::admission {
namespace {

void logSaturation(const shm::Segment& segment, const char* what) {
  LOG_INFO("%s: %lld/%d slots, %lld queued (%lld live)", what, static_cast<long long>(segment.pages().occupancy()),
           segment.pages().cap(), static_cast<long long>(segment.line().queueDepth()),
           static_cast<long long>(segment.line().liveQueueDepth()));
}

}  // namespace

void SaturationLog::edge(const shm::Segment& segment, const char* what, Millis now) {
  if (now - last_ms_ >= kSaturationLogGapMs) {
    logSaturation(segment, what);
    last_logged_ = what;
    pending_ = nullptr;
    last_ms_ = now;
    return;
  }
  // Too soon after the last line: remember where the room ended up; an edge
  // back to what the log already says needs no line at all.
  pending_ = (last_logged_ && std::strcmp(last_logged_, what) == 0) ? nullptr : what;
}

void SaturationLog::flush(const shm::Segment& segment, Millis now) {
  if (!pending_ || now - last_ms_ < kSaturationLogGapMs) return;
  logSaturation(segment, pending_);
  last_logged_ = pending_;
  pending_ = nullptr;
  last_ms_ = now;
}

}  // namespace concert::admission
