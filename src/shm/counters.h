// The counter table: every monotonic total Concert keeps in the segment,
// declared once.
//
// Each entry is X(Name, key): `Counter::Name` is what code counts with, and
// `key` is both the StatsSnapshot field and the /_room/stats key
// (counterKey()). The Counter enum, the segment's counter array (layout.h),
// the snapshot's fields (types.h) and the stats keys (admission/ops.cpp)
// are all generated from this one list: adding a line here is the whole
// change for a new counter.
//
// States: a counter only grows (fetch_add, relaxed), from 0 at create; it is
// never reset, not even by a reload. Who writes: anyone, master or worker.
// A SIGKILL leaves every counter as it was: an increment is one atomic
// instruction, so it is either counted or not, never torn.
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
  X(ProxyProtocolRejectedTotal, proxy_protocol_rejected_total)

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
