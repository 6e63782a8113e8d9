// -adaptive: the page cap found from the origin's own answers, and the
// capacity advisor, which recommends a cap from the same measurements.
//
// Both read what the origin did in each janitor window (OriginWindow): how
// many page responses came back, their time to first byte summed, and how
// many page requests failed (a 5xx, a timeout, a reset). Slot hold time is
// never used: it includes slow clients, which say nothing about the origin.
//
// The model. An origin with K workers (php-fpm's max_children) and an
// unqueued time to first byte S serves min(N, K) / S pages a second with N
// requests in it; beyond K the extra requests wait in its listen queue, the
// throughput stays at K / S and the time to first byte grows to N × S / K.
// By Little's law the mean number of requests inside the origin over a
// window is the summed time to first byte divided by the window's length,
// so the requests waiting in the origin's own queue are
//     q = N − X × S        (X: pages per second in the window).
// The cap is right when q is small but above zero: the origin never idles
// for want of a request, and everybody else waits in Concert's line, in
// order, with a place, instead of in the origin's queue.
//
// The controller (AdaptiveCap) never probes by pinning the cap low: a room
// that pins its cap stalls its line. It starts from `cap` by descending
// multiplicatively while the origin stays queued (each step the time to
// first byte falls with the cap; after each step the windows until the
// origin is down to the new cap are not used); the first step after which latency no
// longer follows the cap down means the cap reached the knee, and that
// window's latency is S. The cap then goes to X × S + 1 and is held there
// by q: above kQueueHigh it comes down, below kQueueLow (with visitors held
// back by the cap) it goes up. A move that reverses the last one waits for
// two decisions in a row to agree; a move in the direction of one that paid
// off (more cap brought more pages, less cap less latency) follows at once,
// with steps that grow (1, 2, 4, ...), so a larger origin is followed
// quickly. Origin errors (at least 1 % of a window's page requests) cut the
// cap by a quarter at once. An origin that changed underneath (fewer
// workers, slower pages: its throughput below 60 % of the knee's while
// requests queue in it) is learned again by a descent from the cap it has.
//
// The advisor (CapacityAdvisor) keeps, per level of requests inside the
// origin, the pages and time to first byte it saw, with old windows fading
// (half-life ten minutes). It fits the model's two lines (flat latency
// below the knee, latency rising with N above it) and recommends the knee
// plus one. It needs several levels, some of them past the knee: live
// traffic with a cap above the knee, a -adaptive descent, or passthrough
// mode while traffic ramps up.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/clock.h"

namespace concert::master {

// What the origin did in one window.
struct OriginWindow {
  Millis length = 0;              // how long the window lasted
  uint64_t pages = 0;             // page responses (their heads) in it
  uint64_t first_byte_us = 0;     // their times to first byte, summed
  uint64_t errors = 0;            // page requests the origin failed
  bool limited = false;           // the cap held visitors back (a line, or every slot taken)
  int32_t cap = 0;                // the cap in force
  int64_t in_flight = 0;          // page requests at the origin when it ended
};

class AdaptiveCap {
 public:
  static constexpr double kQueueLow = 0.5;   // below: the origin may idle, the cap goes up
  static constexpr double kQueueHigh = 2.5;  // above: visitors wait inside the origin, the cap goes down
  static constexpr uint64_t kMinPages = 50;  // fewer pages since the last decision: no decision yet
  static constexpr int kDecisionWindows = 2; // nor fewer windows
  static constexpr double kDescentStep = 0.5;  // each descent step keeps this share of the cap

  AdaptiveCap(int32_t start, int32_t min, int32_t max);

  struct Change {
    int32_t cap = 0;
    std::string why;  // empty: the cap stays
  };
  // One window; what the cap should be from now on.
  Change observe(const OriginWindow& window);

  int32_t cap() const { return cap_; }
  bool descending() const { return descending_; }
  // The unqueued time to first byte (µs; 0 until the knee was found).
  int64_t baseLatencyUs() const { return static_cast<int64_t>(base_us_); }
  double originQueue() const { return queue_; }

 private:
  struct Sum {
    int windows = 0;
    Millis length = 0;
    uint64_t pages = 0;
    double first_byte_us = 0;
    uint64_t errors = 0;
    bool limited = false;

    void add(const OriginWindow& w);
    double latencyUs() const { return pages ? first_byte_us / static_cast<double>(pages) : 0; }
    double throughput() const { return length > 0 ? static_cast<double>(pages) * 1000.0 / static_cast<double>(length) : 0; }
    double inOrigin() const { return length > 0 ? first_byte_us / 1000.0 / static_cast<double>(length) : 0; }
  };

  Change move(int32_t to, std::string why);
  Change descend(const Sum& now);
  Change hold(const Sum& now);
  int32_t clamp(int64_t cap) const;

  const int32_t min_;
  const int32_t max_;
  int32_t cap_;
  bool descending_ = true;
  double base_us_ = 0;       // S, in µs
  double queue_ = 0;         // the last q
  // Pages and time while descending with the origin queued: its peak throughput.
  uint64_t peak_pages_ = 0;
  Millis peak_ms_ = 0;
  double knee_throughput_ = 0;  // pages per second the origin served queued, when the knee was found
  // After a change (and at the start) windows are thrown away until the
  // origin holds no more than the cap and then for one time to first byte
  // more: what came back in them waited behind requests the old cap let in.
  bool settling_ = true;
  double settle_left_ms_ = -1;  // < 0: the origin is not down to the cap yet
  double latency_us_ = 0;       // the last decision's time to first byte
  bool cut_for_errors_ = false; // this settling follows a cut for origin errors
  Sum sum_;                  // since the last decision
  // Descending: the step before, for "did latency follow the cap?"
  int32_t before_cap_ = 0;
  double before_latency_us_ = 0;
  uint64_t before_pages_ = 0;       // descending: the pages and time to first byte of the level before
  double before_first_byte_us_ = 0;
  int direction_ = 0;        // the last move: +1, -1, 0 none yet
  int step_ = 1;             // the next move's size in the last move's direction
  int pending_ = 0;          // a move one decision has asked for, waiting for a second
  // The last move, to tell at the next decision whether it paid off.
  int32_t last_from_ = 0;    // 0: no move to judge
  double last_throughput_ = 0;
  double last_latency_us_ = 0;
  bool last_paid_off_ = false;
};

class CapacityAdvisor {
 public:
  static constexpr uint64_t kMinPages = 300;
  static constexpr double kFade = 0.99885;  // per one-second window: a half-life of ten minutes

  void observe(const OriginWindow& window);

  struct Advice {
    int32_t cap = 0;              // 0: not enough seen yet
    double knee = 0;              // requests the origin serves at once without queueing
    double base_latency_us = 0;   // unqueued time to first byte
    double peak_throughput = 0;   // pages per second past the knee
  };
  Advice advice() const;

 private:
  struct Level {
    double seconds = 0;
    double pages = 0;
    double first_byte_us = 0;
  };
  std::map<int, Level> levels_;  // by requests inside the origin, rounded
};

}  // namespace concert::master
