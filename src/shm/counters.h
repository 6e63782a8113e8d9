// The counter table: every monotonic total Concert keeps in the segment,
// declared once.
//
// Each entry is X(Name, key): `Counter::Name` is what code counts with, and
// `key` is both the StatsSnapshot field and the /_room/stats key
// (counterKey()). The Counter enum, the segment's counter array (layout.h),
// the snapshot's fields (types.h), the stats keys (admission/ops.cpp) and
// the metrics (admission/metrics.cpp) are all generated from this one list:
// adding a line here is the whole change for a new counter. Gauges have
// their own table (gauges.h).
//
// States: a counter only grows (fetch_add, relaxed), from 0 at create; it is
// never reset, not even by a reload. Who writes: anyone, master or worker.
// A SIGKILL leaves every counter as it was: an increment is one atomic
// instruction, so it is either counted or not, never torn.
//
// The families /_room/metrics labels (admission/metrics.cpp), each a fixed
// set, every request or ticket in at most one member:
//   admissions_*   how a page request got its slot: direct (nobody waited,
//                  no ticket), line (its ticket's turn, on a reload or at
//                  issue), held (its turn while parked on its connection:
//                  -queue-hold, or a turn that found no slot), session (a
//                  concert_admit pass and nothing more), priority (a ranked
//                  slot ahead of plain sessions: a room_pass, or a
//                  -priority-classes class from a concert_priority cookie);
//   rejected_*     a page request answered without the origin: full (breaker
//                  or full ring, 503), client_limit (-max-tickets-per-client,
//                  429), banned (403), busy (a crawler, a form that could not
//                  wait, a session hold run out or cut by a drain: 503),
//                  maintenance (reject mode, 503); long_lived is the existing
//                  long_lived_refused_total;
//   evicted_*      a ticket taken out of the line for good by someone else
//                  than its holder: ttl (unseen for -token-ttl), banned (its
//                  client was banned), removed (DELETE /_room/queue); ghost
//                  (ghost_evicted_total) and missed turns (missed_turns_total)
//                  are older counters; evicted_total is ttl + ghost;
//   upstream_responses_*  final origin response heads by status class (101
//                  counts as 1xx; interim 100/103 do not count), detached
//                  exchanges included;
//   upstream_errors_*  connect: an origin connection attempt failed (each
//                  address tried); timeout: no response head within
//                  -upstream-timeout, the client got 504; reset: an open
//                  origin connection broke before or during the response a
//                  client was waiting for (502 or a cut body);
//   page_errors_total  page requests (not assets) the origin failed: a 5xx
//                  head, no head within -upstream-timeout, or a reset;
//   adaptive_changes_total  cap changes made by -adaptive;
//   timeouts_*     one per phase a connection can time out in
//                  (worker/timeouts.h: client header, client body, send,
//                  keep-alive, upstream read, tunnel), plus queue_hold: a
//                  ticket issued for a held request that never reached its
//                  visitor (the client left, or a form's hold ran out) and
//                  was retired; timeouts_total is their sum.
#pragma once

#include <cstddef>
#include <string_view>

#define CONCERT_COUNTERS(X)                                  \
  X(QueuedTotal, queued_total)                               \
  X(EvictedTotal, evicted_total)                             \
  X(TimeoutsTotal, timeouts_total)                           \
  X(PromotedTotal, promoted_total)                           \
  X(AssetServedTotal, asset_served_total)                    \
  X(AssetDeniedTotal, asset_denied_total)                    \
  X(AssetUserThrottledTotal, asset_user_throttled_total)     \
  X(AssetGlobalThrottledTotal, asset_global_throttled_total) \
  X(RingFullTotal, ring_full_total)                          \
  X(PassTableFullTotal, pass_table_full_total)               \
  X(ReloadsTotal, reloads_total)                             \
  X(WorkerRestartsTotal, worker_restarts_total)              \
  X(SlotsReclaimedTotal, slots_reclaimed_total)              \
  X(MissedTurnsTotal, missed_turns_total)                    \
  X(GhostEvictedTotal, ghost_evicted_total)                  \
  X(ConnectionsRefusedTotal, connections_refused_total)      \
  X(LongLivedRefusedTotal, long_lived_refused_total)         \
  X(TimeoutsClientHeaderTotal, timeouts_client_header_total) \
  X(TimeoutsClientBodyTotal, timeouts_client_body_total)     \
  X(TimeoutsSendTotal, timeouts_send_total)                  \
  X(TimeoutsKeepaliveTotal, timeouts_keepalive_total)        \
  X(TimeoutsUpstreamReadTotal, timeouts_upstream_read_total) \
  X(TimeoutsTunnelTotal, timeouts_tunnel_total)              \
  X(PassEvictedTotal, pass_evicted_total)                    \
  X(AbuseStrikesTotal, abuse_strikes_total)                  \
  X(AbuseBansTotal, abuse_bans_total)                        \
  X(ClientTableFullTotal, client_table_full_total)           \
  X(WouldQueueTotal, would_queue_total)                      \
  X(ProxyProtocolRejectedTotal, proxy_protocol_rejected_total) \
  X(FifoInversionsTotal, fifo_inversions_total)                \
  X(AdmissionsDirectTotal, admissions_direct_total)            \
  X(AdmissionsLineTotal, admissions_line_total)                \
  X(AdmissionsHeldTotal, admissions_held_total)                \
  X(AdmissionsSessionTotal, admissions_session_total)          \
  X(AdmissionsPriorityTotal, admissions_priority_total)        \
  X(InvitationsUsedTotal, invitations_used_total)              \
  X(RejectedFullTotal, rejected_full_total)                    \
  X(RejectedClientLimitTotal, rejected_client_limit_total)     \
  X(RejectedBannedTotal, rejected_banned_total)                \
  X(RejectedBusyTotal, rejected_busy_total)                    \
  X(RejectedMaintenanceTotal, rejected_maintenance_total)      \
  X(EvictedTtlTotal, evicted_ttl_total)                        \
  X(EvictedBannedTotal, evicted_banned_total)                  \
  X(EvictedRemovedTotal, evicted_removed_total)                \
  X(UpstreamResponses1xxTotal, upstream_responses_1xx_total)   \
  X(UpstreamResponses2xxTotal, upstream_responses_2xx_total)   \
  X(UpstreamResponses3xxTotal, upstream_responses_3xx_total)   \
  X(UpstreamResponses4xxTotal, upstream_responses_4xx_total)   \
  X(UpstreamResponses5xxTotal, upstream_responses_5xx_total)   \
  X(UpstreamErrorsConnectTotal, upstream_errors_connect_total) \
  X(UpstreamErrorsTimeoutTotal, upstream_errors_timeout_total) \
  X(UpstreamErrorsResetTotal, upstream_errors_reset_total)   \
  X(TimeoutsQueueHoldTotal, timeouts_queue_hold_total)       \
  X(ConnectionsFloodedTotal, connections_flooded_total)      \
  X(PageErrorsTotal, page_errors_total)                      \
  X(AdaptiveChangesTotal, adaptive_changes_total)

namespace concert::shm {

enum class Counter {
#define CONCERT_COUNTER_ENUM(name, key) name,
  CONCERT_COUNTERS(CONCERT_COUNTER_ENUM)
#undef CONCERT_COUNTER_ENUM
};

#define CONCERT_COUNTER_ONE(name, key) +1
constexpr size_t kCounterCount = 0 CONCERT_COUNTERS(CONCERT_COUNTER_ONE);
#undef CONCERT_COUNTER_ONE

// Every counter, in table order.
constexpr Counter kAllCounters[] = {
#define CONCERT_COUNTER_VALUE(name, key) Counter::name,
    CONCERT_COUNTERS(CONCERT_COUNTER_VALUE)
#undef CONCERT_COUNTER_VALUE
};

// The counter's /_room/stats key (and StatsSnapshot field name).
constexpr std::string_view counterKey(Counter c) {
  constexpr std::string_view kKeys[] = {
#define CONCERT_COUNTER_KEY(name, key) #key,
      CONCERT_COUNTERS(CONCERT_COUNTER_KEY)
#undef CONCERT_COUNTER_KEY
  };
  return kKeys[static_cast<size_t>(c)];
}

}  // namespace concert::shm
