// -adaptive and the capacity advisor; see adaptive.h.
#include "master/adaptive.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace concert::master {

namespace {

constexpr double kErrorCut = 0.75;       // origin errors keep this share
constexpr double kChangedThroughput = 0.6;  // throughput below this share of the knee's, queued: the origin changed
constexpr uint64_t kLowerBasePages = 150;  // pages a decision needs before it may lower S
constexpr uint64_t kBasePages = 120;       // pages S is measured from at the knee
constexpr double kKneeShare = 0.3;         // a descent step whose latency fell by less than this share of the cap's step
constexpr double kKneeThroughput = 0.7;    // or whose throughput fell below this share of the peak: the knee

std::string fmt(const char* format, double a, double b) {
  char buf[160];
  std::snprintf(buf, sizeof buf, format, a, b);
  return buf;
}

// Latency followed a cap that went from `from` to `to` (to < from) down, as
// it does while the origin is queued (latency ∝ cap), if it fell by at
// least `share` of that.
bool latencyFollowed(double from_cap, double from_latency, double to_cap, double to_latency, double share = 0.5) {
  const double ratio = to_cap / from_cap;
  return to_latency <= from_latency * (1 - (1 - ratio) * share);
}

}  // namespace

void AdaptiveCap::Sum::add(const OriginWindow& w) {
  ++windows;
  length += w.length;
  pages += w.pages;
  first_byte_us += static_cast<double>(w.first_byte_us);
  errors += w.errors;
  limited = limited || w.limited;
}

AdaptiveCap::AdaptiveCap(int32_t start, int32_t min, int32_t max)
    : min_(std::max(1, min)), max_(std::max(std::max(1, min), max)), cap_(std::clamp(start, min_, max_)) {}

int32_t AdaptiveCap::clamp(int64_t cap) const {
  return static_cast<int32_t>(std::clamp<int64_t>(cap, min_, max_));
}

AdaptiveCap::Change AdaptiveCap::move(int32_t to, std::string why) {
  to = clamp(to);
  sum_ = Sum{};
  cut_for_errors_ = false;
  if (to == cap_) return {cap_, ""};
  cap_ = to;
  settling_ = true;
  settle_left_ms_ = -1;
  return {cap_, std::move(why)};
}

AdaptiveCap::Change AdaptiveCap::observe(const OriginWindow& window) {
  // Errors cut at once, but once per settling: the windows after a cut
  // still hold requests the old cap let in.
  const bool errors = window.errors > 0 && window.errors * 100 >= window.pages + window.errors;
  if (errors && !(settling_ && cut_for_errors_)) {
    direction_ = -1;
    step_ = 1;
    pending_ = 0;
    before_cap_ = 0;
    last_from_ = 0;
    last_paid_off_ = false;
    const int32_t to = clamp(static_cast<int64_t>(std::floor(cap_ * kErrorCut)));
    const Change change = move(to, fmt("the origin failed %.0f of %.0f page requests",
                                       static_cast<double>(window.errors), static_cast<double>(window.pages)));
    cut_for_errors_ = true;
    return change;
  }
  if (settling_) {
    if (settle_left_ms_ < 0) {
      if (window.in_flight <= cap_) {
        const double latency = window.pages ? static_cast<double>(window.first_byte_us) / window.pages : 0;
        settle_left_ms_ = std::max(latency_us_, latency) / 1000;
      }
    } else {
      settle_left_ms_ -= static_cast<double>(window.length);
      if (settle_left_ms_ <= 0) settling_ = false;
    }
    return {cap_, ""};
  }
  sum_.add(window);
  const Sum now = sum_;
  if (now.pages < kMinPages) return {cap_, ""};
  latency_us_ = now.latencyUs();
  if (now.windows < kDecisionWindows) return {cap_, ""};
  return descending_ ? descend(now) : hold(now);
}

AdaptiveCap::Change AdaptiveCap::descend(const Sum& now) {
  const double latency = now.latencyUs();
  // The level that bound this window: the cap, or fewer requests when fewer came.
  const double level = now.limited ? cap_ : std::min<double>(cap_, std::ceil(now.inOrigin()));
  // Past the knee latency stays where it was, and throughput falls.
  // (Throughput only once both sides have enough pages to tell.)
  const double peak = peak_pages_ >= kMinPages
                          ? static_cast<double>(peak_pages_) * 1000.0 / static_cast<double>(peak_ms_)
                          : 0;
  const bool knee = before_cap_ > 0 && level < before_cap_ &&
                    (!latencyFollowed(before_cap_, before_latency_us_, level, latency, kKneeShare) ||
                     now.throughput() < kKneeThroughput * peak);
  if (knee || cap_ == min_) {
    // S is measured longer than a step: the cap follows from it.
    if (now.pages < kBasePages) return {cap_, ""};
    double pages = static_cast<double>(now.pages);
    double first_byte_us = now.first_byte_us;
    // A level before that was not queued either says the same: counted in.
    if (before_pages_ > 0 && before_latency_us_ <= latency * 1.1) {
      pages += static_cast<double>(before_pages_);
      first_byte_us += before_first_byte_us_;
    }
    descending_ = false;
    base_us_ = first_byte_us / pages;
    before_cap_ = 0;
    direction_ = 0;
    last_from_ = 0;
    // The origin's throughput while it was queued, times S: the requests it
    // serves at once; one more keeps it from idling between two.
    const double queued = peak_ms_ > 0 ? static_cast<double>(peak_pages_) * 1000.0 / static_cast<double>(peak_ms_) : 0;
    knee_throughput_ = queued > 0 ? queued : now.throughput();
    const double served = knee_throughput_ * base_us_ / 1e6;
    return move(static_cast<int32_t>(std::lround(served)) + 1,
                fmt("the knee: %.1f pages at once without queueing, %.0f ms each", served, base_us_ / 1000));
  }
  peak_pages_ += now.pages;
  peak_ms_ += now.length;
  before_cap_ = static_cast<int32_t>(level);
  before_latency_us_ = latency;
  before_pages_ = now.pages;
  before_first_byte_us_ = now.first_byte_us;
  const int32_t to = static_cast<int32_t>(std::floor(level * kDescentStep));
  if (to >= cap_ || clamp(to) == cap_) {
    sum_ = Sum{};
    return {cap_, ""};
  }
  return move(to, fmt("the origin is queued: %.0f ms to first byte at %.1f pages/s", latency / 1000, now.throughput()));
}

AdaptiveCap::Change AdaptiveCap::hold(const Sum& now) {
  const double latency = now.latencyUs();
  const double throughput = now.throughput();
  if (last_from_ > 0) {
    const double step = static_cast<double>(cap_ - last_from_) / last_from_;
    last_paid_off_ = direction_ > 0 ? throughput >= last_throughput_ * (1 + step / 2)
                                    : latencyFollowed(last_from_, last_latency_us_, cap_, latency);
    last_from_ = 0;
  }
  if (now.pages >= kLowerBasePages && latency < base_us_) base_us_ = latency;  // pages got faster
  queue_ = now.inOrigin() - throughput * base_us_ / 1e6;
  // The origin changed (fewer workers, slower pages): its throughput fell
  // well below what it served at the knee while requests queue in it. S and
  // the knee are learned again by a descent from here.
  if (queue_ > kQueueHigh && throughput < kChangedThroughput * knee_throughput_ && now.pages >= kMinPages) {
    descending_ = true;
    before_cap_ = 0;
    peak_pages_ = 0;
    peak_ms_ = 0;
    direction_ = 0;
    pending_ = 0;
    last_from_ = 0;
    return descend(now);
  }

  int want = 0;
  if (queue_ > kQueueHigh) want = -1;
  // Room: few requests wait in the origin. Right after an increase that
  // brought more pages, a little more is room too: below the knee the
  // estimate is smallest against a slightly low S.
  const double low = direction_ > 0 && last_paid_off_ ? 2 * kQueueLow : kQueueLow;
  if (now.limited && queue_ < low) want = +1;
  if (want == 0) {
    pending_ = 0;
    before_cap_ = 0;
    last_paid_off_ = false;
    sum_ = Sum{};
    return {cap_, ""};
  }
  // One decision moves the cap only in the direction of a move that paid
  // off (more cap brought more pages, less cap less latency); anything else
  // waits for a second decision in a row.
  const bool paid_off = want == direction_ && direction_ != 0 && last_paid_off_;
  if (!paid_off && pending_ != want) {
    pending_ = want;
    last_paid_off_ = false;
    sum_ = Sum{};
    return {cap_, ""};
  }
  pending_ = 0;
  step_ = paid_off ? std::min(step_ * 2, std::max(1, cap_ / 2)) : 1;
  const int32_t from = cap_;
  last_from_ = from;
  last_throughput_ = throughput;
  last_latency_us_ = latency;
  if (want > 0) {
    direction_ = +1;
    return move(from + step_, fmt("the origin has room: %.1f requests queued in it at %.1f pages/s", queue_, throughput));
  }
  direction_ = -1;
  const int32_t by = std::max(step_, static_cast<int32_t>(std::lround((queue_ - 1) / 2)));
  return move(from - by, fmt("%.1f requests queued inside the origin, %.0f ms to first byte", queue_, latency / 1000));
}

// ------------------------------------------------------------------ advisor

void CapacityAdvisor::observe(const OriginWindow& w) {
  if (w.length <= 0) return;
  const double seconds = static_cast<double>(w.length) / 1000;
  const double fade = std::pow(kFade, seconds);
  for (auto it = levels_.begin(); it != levels_.end();) {
    Level& l = it->second;
    l.seconds *= fade;
    l.pages *= fade;
    l.first_byte_us *= fade;
    if (l.pages < 0.5)
      it = levels_.erase(it);
    else
      ++it;
  }
  if (w.pages == 0) return;
  const double in_origin = static_cast<double>(w.first_byte_us) / 1e6 / seconds;
  const int level = static_cast<int>(std::lround(in_origin));
  if (level < 1) return;
  Level& l = levels_[level];
  l.seconds += seconds;
  l.pages += static_cast<double>(w.pages);
  l.first_byte_us += static_cast<double>(w.first_byte_us);
}

CapacityAdvisor::Advice CapacityAdvisor::advice() const {
  constexpr double kLevelPages = 20;  // a level with fewer says too little
  struct Point {
    double n, seconds, pages, first_byte_us;
  };
  std::vector<Point> points;
  double total = 0;
  for (const auto& [level, l] : levels_) {
    if (l.pages < kLevelPages) continue;
    points.push_back({static_cast<double>(level), l.seconds, l.pages, l.first_byte_us});
    total += l.pages;
  }
  Advice best;
  if (points.size() < 3 || total < kMinPages) return best;
  double best_error = -1;
  // Each level in turn as the knee: S from the levels at or below it, the
  // peak throughput from those at or above it; the knee that explains the
  // latencies best wins.
  for (size_t k = 0; k < points.size(); ++k) {
    double below_pages = 0, below_us = 0, above_pages = 0, above_seconds = 0;
    for (size_t i = 0; i < points.size(); ++i) {
      if (i <= k) {
        below_pages += points[i].pages;
        below_us += points[i].first_byte_us;
      }
      if (i >= k) {
        above_pages += points[i].pages;
        above_seconds += points[i].seconds;
      }
    }
    const double base = below_us / below_pages;
    const double peak = above_pages / above_seconds;
    double error = 0;
    for (const Point& p : points) {
      const double model = std::max(base, p.n / peak * 1e6);
      const double latency = p.first_byte_us / p.pages;
      error += p.pages * std::pow((latency - model) / model, 2);
    }
    if (best_error < 0 || error < best_error) {
      best_error = error;
      best.knee = peak * base / 1e6;
      best.base_latency_us = base;
      best.peak_throughput = peak;
    }
  }
  // Without a level past the knee the origin was never queued: its
  // capacity is not known, only that it is above what was seen.
  if (points.back().n < best.knee * 1.2) return Advice{};
  best.cap = static_cast<int32_t>(std::lround(best.knee)) + 1;
  return best;
}

}  // namespace concert::master
