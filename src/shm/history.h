// History: the room's last hour, one sample a second, behind the dashboard
// (GET /_room/, admission/dashboard.h).
//
// Layout (HistoryRing, layout.h, carved after the client tags): the count of
// samples ever written, then kHistorySamples entries; sample n (from 0) lives
// in entry n mod kHistorySamples. An entry is a sequence word and the
// sample's eight words (times and gauges as integers, the quantiles as the
// bit patterns of doubles).
//
// Who writes: the master's janitor alone, once a second (record()). With one
// writer there is nothing to CAS; each entry is a seqlock:
//   seq = 2n + 1 (sample n is being written), release fence, the words,
//   seq = 2n + 2 (release), then written = n + 1 (release).
// Readers (any process; the workers serving /_room/history and its event
// stream) load written, then copy each entry they want: seq (acquire), the
// words, an acquire fence, seq again. The copy is sample n when both loads
// say 2n + 2; anything else means the entry is being rewritten or holds a
// later lap (the reader was more than an hour behind), and the reader leaves
// that sample out. A reader never waits for the writer, and the writer never
// waits for anyone.
//
// States: an entry's seq is 0 (never written, fresh anonymous pages are
// zero), odd (being written) or 2n + 2 (holds sample n). Nothing resets the
// ring: a reload (SIGHUP) keeps the segment and the master, so the hour goes
// on across reloads; a restart starts an empty one.
//
// A SIGKILL: workers only read, and a reader leaves nothing behind, so there
// is nothing to reclaim. A master killed inside record() leaves one entry
// odd, which readers skip; but the segment then goes with the workers anyway.
//
// HistorySampler is process-local (the master's): it turns what the janitor
// reads each second into one sample, keeping the earlier merged histograms
// the trailing quantiles are taken over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <vector>

#include "shm/handle.h"
#include "shm/histograms.h"
#include "shm/types.h"

namespace concert::shm {

// kHistorySamples (one hour at one sample a second) is in types.h, with the
// segment's other sizes.

struct HistorySample {
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

  uint64_t index = 0;        // the index-th sample ever written (from 0)
  int64_t unix_seconds = 0;  // wall-clock time of the sample
  int64_t queue_depth = 0;   // visitors waiting in line now (live_queue_depth)
  int64_t occupancy = 0;     // page slots in use now
  int64_t cap = 0;           // the page cap now
  uint64_t admissions = 0;   // admissions since the previous sample (admissionsSoFar)
  // Over the trailing window (HistorySampler::kWindow samples): the queue
  // wait's median and 95th percentile and the origin response time's 95th
  // percentile, in seconds; kNone (NaN) when nothing was observed in it.
  double wait_p50 = kNone;
  double wait_p95 = kNone;
  double origin_p95 = kNone;
};

// Everything admitted so far (direct, line, held, session and priority
// admissions), the sum the dashboard's "admissions per second" is the
// difference of.
uint64_t admissionsSoFar(const StatsSnapshot& snapshot);

class History final : public Handle {
 public:
  using Handle::Handle;

  // Master only (the janitor): appends `sample` as the next one and returns
  // it with its index set.
  HistorySample record(HistorySample sample);

  // Samples ever written; the newest is written() - 1.
  uint64_t written() const;
  // Copies of samples from index `from` on, oldest first: at most the newest
  // `max`, and only those still in the ring and not being rewritten.
  std::vector<HistorySample> since(uint64_t from, size_t max = kHistorySamples) const;
  // The newest `n` samples (fewer when fewer were kept), oldest first.
  std::vector<HistorySample> last(size_t n) const;

 private:
  friend class Segment;
  int64_t reclaim(WorkerSlot) override { return 0; }  // workers never write here
};

// The master's janitor: one sample from what it read this second. The
// quantiles cover the last kWindow samples' worth of observations (the
// difference between the merged histograms now and kWindow samples ago,
// fewer right after start), and admissions are the difference of
// admissionsSoFar from the previous sample's (0 for the first).
class HistorySampler {
 public:
  static constexpr size_t kWindow = 10;

  HistorySample next(int64_t unix_seconds, const StatsSnapshot& stats, const HistogramSnapshot& wait,
                     const HistogramSnapshot& origin);

 private:
  std::deque<HistogramSnapshot> waits_;    // the last kWindow + 1 merged snapshots, oldest first
  std::deque<HistogramSnapshot> origins_;  // the same for the origin's response time
  std::optional<uint64_t> admissions_;     // admissionsSoFar at the previous sample
};

}  // namespace concert::shm
