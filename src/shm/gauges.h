// The gauge table: every level /_room/stats and /_room/metrics report,
// declared once.
//
// Each entry is X(key, Kind, Source, metric, help):
//   key     the StatsSnapshot field (types.h) and the /_room/stats key;
//   Kind    what the value is, which fixes the field's type and how each
//           endpoint writes it (GaugeKind below);
//   Source  who fills the field and when it is reported (GaugeSource below);
//   metric  the /_room/metrics series (TYPE gauge), help its HELP line.
// The snapshot's fields (types.h), the /_room/stats keys (admission/ops.cpp)
// and the /_room/metrics gauges (admission/metrics.cpp, in table order) are
// all generated from this list. A new gauge is one entry here plus the one
// line that reads its value: in Stats::snapshot (shm/stats.cpp) for Room and
// Cluster gauges, in roomStats (admission/ops.cpp) for Setting gauges.
//
// With -cluster, cap is the room's (global) cap and occupancy this host's.
// utilization is smoothed (EWMA, alpha 0.1, on each page acquire and release).
//
// Counters, which only grow, are in counters.h; this table is for values
// that go up and down (or are set), read fresh on every snapshot.
#pragma once

#include <cstdint>

#define CONCERT_GAUGES(X)                                                                                              \
  X(occupancy, Count, Room, "concert_page_slots_in_use", "Page slots taken (requests at the origin).")                 \
  X(cap, Count, Room, "concert_page_slots_limit", "Page slots (the cap).")                                             \
  X(live_queue_depth, Count, Room, "concert_queue_waiting", "Tickets waiting in line (waiting and returned).")         \
  X(queue_depth, Count, Room, "concert_queue_depth", "Tickets in line, missed turns included.")                        \
  X(max_queue_depth, Count, Setting, "concert_max_queue_depth",                                                        \
    "The breaker: tickets in line beyond which arrivals get 503.")                                                     \
  X(utilization, Ratio, Room, "concert_utilization", "Smoothed page slot utilization (0..1).")                         \
  X(asset_cap, Count, Room, "concert_asset_cap", "Asset slots.")                                                       \
  X(asset_in_flight, Count, Room, "concert_asset_in_flight", "Asset slots taken.")                                     \
  X(asset_users, Count, Room, "concert_asset_users", "Users holding asset slots.")                                     \
  X(asset_user_cap_h1, Count, Setting, "concert_asset_user_cap_h1", "Asset slots per HTTP/1 user.")                    \
  X(asset_user_cap_h2, Count, Setting, "concert_asset_user_cap_h2", "Asset slots per HTTP/2 user.")                    \
  X(long_lived_cap, Count, Room, "concert_long_lived_cap", "Long-lived connection slots.")                             \
  X(long_lived_in_use, Count, Room, "concert_long_lived_in_use",                                                       \
    "Open long-lived connections (tunnels, event streams).")                                                           \
  X(banned_clients, Count, Room, "concert_banned_clients", "Clients banned now.")                                      \
  X(workers, Count, Room, "concert_workers", "Live worker processes.")                                                 \
  X(generation, Count, Room, "concert_generation", "Configuration generation (1 at start, +1 per reload).")            \
  X(token_ttl, Duration, Setting, "concert_token_ttl_seconds",                                                         \
    "How long an unseen ticket keeps its place (-token-ttl).")                                                         \
  X(cluster_engine_up, Flag, Cluster, "concert_cluster_engine_up",                                                     \
    "1 while the cluster engine answers in time, else 0.")                                                             \
  X(cluster_hosts, Count, Cluster, "concert_cluster_hosts", "Hosts sharing the room, as last seen in the engine.")     \
  X(cluster_slots_reserved, Count, Cluster, "concert_cluster_slots_reserved",                                          \
    "Slots of the room's cap this host holds.")                                                                        \
  X(adaptive_active, Flag, Room, "concert_adaptive_active", "1 while -adaptive moves the cap, else 0.")               \
  X(adaptive_base_latency, Duration, Room, "concert_adaptive_base_latency_seconds",                                    \
    "-adaptive: a page's time to first byte when nothing waits in the origin (0 until found).")                      \
  X(adaptive_origin_queue, Ratio, Room, "concert_adaptive_origin_queue",                                               \
    "-adaptive: page requests estimated to wait inside the origin (its own queue), last window.")                    \
  X(adaptive_recommended_cap, Count, Room, "concert_adaptive_recommended_cap",                                         \
    "The capacity advisor's cap: the origin's knee plus one (0 until it has seen the origin queued).")

namespace concert::shm {

// What a gauge's value is:
//   Count     a number of things (int64_t): an integer in both endpoints;
//   Ratio     a fraction (double): a JSON number, a Prometheus float;
//   Flag      yes or no (bool): 1 or 0 in both endpoints;
//   Duration  milliseconds (int64_t): a Go duration string ("5m0s") in
//             /_room/stats, seconds in /_room/metrics (the metric's name
//             ends in _seconds).
enum class GaugeKind { Count, Ratio, Flag, Duration };

// Who fills a gauge's field and when it is reported:
//   Room     Stats::snapshot, from the segment; always reported;
//   Cluster  Stats::snapshot, from the cluster cache (cluster.h), with
//            -cluster only: reported only while StatsSnapshot::cluster is set
//            (0 otherwise);
//   Setting  the configuration in effect, copied in by the admission layer
//            (Stats::snapshot leaves it 0); always reported.
enum class GaugeSource { Room, Cluster, Setting };

template <GaugeKind>
struct GaugeField {
  using type = int64_t;  // Count, Duration
};
template <>
struct GaugeField<GaugeKind::Ratio> {
  using type = double;
};
template <>
struct GaugeField<GaugeKind::Flag> {
  using type = bool;
};

// Whether a gauge of `source` is reported by a room that runs with -cluster
// (`cluster`) or not.
constexpr bool gaugeReported(GaugeSource source, bool cluster) {
  return source != GaugeSource::Cluster || cluster;
}

}  // namespace concert::shm
