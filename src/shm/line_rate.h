// The line's pace: how fast the line in front of a waiting visitor moves,
// measured in the segment and shared by every worker, and the ETA a visitor
// at a given position is shown (eta_seconds in /queue/status, the JSON 429
// and the position events; the waiting page's {{.ETA}}).
//
// What is measured: admissions from the line, i.e. claims of Waiting tickets
// (TicketRing::claim). Each one moves every visitor behind it one place
// forward. Not counted:
//   * a Returned ticket's claim: it goes in ahead of the line and nobody's
//     position moves for it. It takes a slot the line would have had, so
//     the measured pace drops as the line's pace really does;
//   * abandonments, TTL expiries, first-poll ghosts, missed turns and bans.
//     A visitor's position drops for those too when they are ahead of it,
//     but they are not admissions: they come in bursts (the janitor's
//     sweep), and they happen anywhere in the line, so counting a ghost
//     evicted from behind a visitor would promise that visitor a pace its
//     part of the line does not have. Leaving them out means that when
//     people ahead give up the ETA errs long rather than short;
//   * visitors who go straight in while nobody waits: they take no ticket.
//
// Per second of what: of time during which somebody waited. The janitor
// (TicketRing::sweep, master, about once a second) adds the time since its
// last pass to the open bucket when the line (waiting + returned tickets)
// was non-empty at either end of that interval or an admission from the line
// was counted meanwhile. Other time does not count, so an idle room neither
// decays the pace toward zero nor feeds it: a line that forms after an hour
// of quiet starts from the pace of the last one.
//
// Smoothing: a bucket closes once it holds kBucketMs of waited time; its
// pace (admissions / waited seconds) is folded into two EWMAs: the pace
// itself, weight kAlpha (1/3: mostly the last 15 s of waiting), and a slow
// reference, weight kSlowAlpha (1/20: the last minutes). The first bucket
// sets both. A stall (the line waits, nobody gets in) closes buckets of zero
// and the pace falls, as the line's does: the ETA grows. A burst is spread
// over its bucket's 5 s, and a bucket counts for at most kBurstFactor (3)
// times the larger of the two EWMAs: 200 admissions in one instant after a
// long stall (the pace near zero, the reference still near the pace before
// the stall) count as a bucket at three times the old pace, not as 40/s, and
// the pace is back near the line's real one within a few buckets. A genuine
// rise in pace (a faster origin) is followed at up to 5/3 of the pace per
// bucket (tenfold in 25 s): the ETA errs long meanwhile, not short. Until
// the first bucket closes, the open bucket's own pace is used (its waited
// time counted as at least 1 s).
//
// Cap changes: the pace of a backlogged line is proportional to the cap, so
// both EWMAs are kept per page slot (a bucket's pace divided by the cap it
// was counted under) and every reader multiplies by the cap in force: a
// lowered or raised cap (POST /_room/cap, a reload) changes every ETA the
// moment it is set. At its next pass the janitor sees that the cap differs
// from the one the open bucket started under and restarts the bucket (its
// admissions were made under the old cap); further buckets then correct the
// proportional guess.
//
// The null rule: no ETA (nullopt; JSON null) until kMinAdmissions (20)
// admissions from the line have been counted since the segment was created;
// from then on always a number: ceil(position / pace) seconds, at least 1,
// at most kMaxEtaSeconds (one day; also when the line has not moved at all).
//
// Words (Header, layout.h) and their writers:
//   line_admitted     every claimer, one fetch_add after its claim
//   pace.estimate     the janitor: pace per slot (float32 bits) << 32 |
//                     slow reference per slot (float32 bits); 0 = none yet
//   pace.bucket       the janitor: waited ms << 32 | line_admitted at the
//                     bucket's start (mod 2^32)
//   pace.bucket_cap, last_pass, last_admitted, last_depth
//                     the janitor's own bookkeeping; nobody else reads them
// Readers load line_admitted, estimate, bucket and the page cap, one load
// each; each is meaningful alone, so a read racing the janitor sees the
// pace of one pass or the next.
//
// A SIGKILL: a claimer killed between its claim and its fetch_add leaves one
// admission uncounted (the pace is a shade low for one bucket); nothing here
// names a slot, so there is nothing to reclaim. The janitor is the master
// alone; every store it makes is one whole word that is valid by itself, so
// whatever instruction it stops at leaves an estimate readers can use.
#pragma once

#include <cstdint>
#include <optional>

#include "shm/handle.h"
#include "shm/types.h"

namespace concert::shm {

class LineRate final : public Handle {
 public:
  static constexpr uint64_t kMinAdmissions = 20;    // no ETA before this many admissions from the line
  static constexpr Millis kBucketMs = 5000;         // waited time per bucket
  static constexpr double kAlpha = 1.0 / 3.0;       // EWMA weight of a closed bucket
  static constexpr double kSlowAlpha = 1.0 / 20.0;  // the slow reference's weight
  static constexpr double kBurstFactor = 3.0;       // a bucket counts for at most this times the EWMAs
  static constexpr int64_t kMaxEtaSeconds = 86400;  // an ETA is never longer than this
  static constexpr Millis kMaxPassGap = 60000;      // waited time one janitor pass can add at most

  // TicketRing::claim, for a Waiting ticket it just took out of the line.
  void admitted();

  // The master's janitor (TicketRing::sweep), about once a second: counts
  // the time since its last pass as waited when the line was non-empty at
  // either end or somebody was admitted from it meanwhile; closes the bucket
  // into the estimate once it holds kBucketMs; follows a cap change.
  // `line_depth`: waiting + returned tickets now; `cap`: the page cap now.
  void roll(Millis now, int64_t line_depth, int32_t cap);

  // Admissions from the line counted so far.
  uint64_t admissions() const;

  // Admissions from the line per second of waiting, at the current page
  // cap; nullopt before kMinAdmissions admissions. May be 0 (the line has
  // not moved).
  std::optional<double> pace() const;

  // Seconds until a visitor at `position` (>= 1; lower is taken as 1) is
  // let in at the current pace: ceil(position / pace), in [1,
  // kMaxEtaSeconds]; nullopt before kMinAdmissions admissions.
  std::optional<int64_t> etaSeconds(int64_t position) const;

 private:
  friend class Segment;
  LineRate(Layout& layout, WorkerSlots& slots) : Handle(layout, slots) {}
  int64_t reclaim(WorkerSlot) override { return 0; }  // nothing names a slot
};

}  // namespace concert::shm
