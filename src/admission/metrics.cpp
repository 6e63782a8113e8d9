// GET /_room/metrics (Prometheus text format 0.0.4) and GET /_room/report
// (the fairness report, behind the admin gate).
//
// Both read the shared segment only (counters, gauges, the histograms merged
// over every worker slot, the client table), so every worker gives the same
// answer; nothing here writes.
//
// The exposition is driven by tables, one row per series:
//   kLabelled   counters that are one member of a labelled family
//               (concert_admissions_total{via="line"} ...) or renamed
//               (queued_total -> concert_tickets_issued_total);
//   kCovered    counters that are the sum of a family (evicted_total,
//               timeouts_total): not exported again;
//   every other counter of shm/counters.h: concert_<key>, so a counter added
//               to the table shows up here with no change to this file;
//   the gauge table of shm/gauges.h: every gauge of /_room/stats, under its
//               metric name, in table order;
//   kHistograms the histograms, as _bucket{le}, _sum, _count.
// Label values come only from these tables: the label sets are fixed.
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "admission/admission.h"
#include "admission/answers.h"
#include "http/client_address.h"

#ifndef CONCERT_VERSION
#define CONCERT_VERSION "unknown"
#endif

namespace concert::admission {
namespace {

using shm::Counter;

struct Family {
  std::string_view name;
  std::string_view type;  // "counter", "gauge", "histogram"
  std::string_view help;
};

// A counter as one series of a family: `label` is `name="value"`, or empty
// for a family of one series.
struct Labelled {
  Counter counter;
  Family family;
  std::string_view label;
};

constexpr Family kAdmissions{"concert_admissions_total", "counter",
                             "Page requests admitted to the origin, by how they got their slot."};
constexpr Family kRejected{"concert_rejected_total", "counter",
                           "Page requests answered without the origin, by reason."};
constexpr Family kEvicted{"concert_tickets_evicted_total", "counter",
                          "Tickets that lost their place in line without their holder's turn, by reason."};
constexpr Family kResponses{"concert_upstream_responses_total", "counter",
                            "Final origin response heads, by status class."};
constexpr Family kErrors{"concert_upstream_errors_total", "counter", "Origin errors, by kind."};
constexpr Family kTimeouts{"concert_timeouts_total", "counter", "Timeouts, by phase."};
constexpr Family kIssued{"concert_tickets_issued_total", "counter", "Tickets issued (places in line given out)."};

constexpr Labelled kLabelled[] = {
    {Counter::AdmissionsDirectTotal, kAdmissions, "via=\"direct\""},
    {Counter::AdmissionsLineTotal, kAdmissions, "via=\"line\""},
    {Counter::AdmissionsHeldTotal, kAdmissions, "via=\"held\""},
    {Counter::AdmissionsSessionTotal, kAdmissions, "via=\"session\""},
    {Counter::AdmissionsPriorityTotal, kAdmissions, "via=\"priority\""},
    {Counter::RejectedFullTotal, kRejected, "reason=\"full\""},
    {Counter::RejectedClientLimitTotal, kRejected, "reason=\"client_limit\""},
    {Counter::RejectedBannedTotal, kRejected, "reason=\"banned\""},
    {Counter::RejectedBusyTotal, kRejected, "reason=\"busy\""},
    {Counter::LongLivedRefusedTotal, kRejected, "reason=\"long_lived\""},
    {Counter::RejectedMaintenanceTotal, kRejected, "reason=\"maintenance\""},
    {Counter::EvictedTtlTotal, kEvicted, "reason=\"ttl\""},
    {Counter::GhostEvictedTotal, kEvicted, "reason=\"ghost\""},
    {Counter::MissedTurnsTotal, kEvicted, "reason=\"missed\""},
    {Counter::EvictedBannedTotal, kEvicted, "reason=\"banned\""},
    {Counter::EvictedRemovedTotal, kEvicted, "reason=\"removed\""},
    {Counter::UpstreamResponses1xxTotal, kResponses, "code_class=\"1xx\""},
    {Counter::UpstreamResponses2xxTotal, kResponses, "code_class=\"2xx\""},
    {Counter::UpstreamResponses3xxTotal, kResponses, "code_class=\"3xx\""},
    {Counter::UpstreamResponses4xxTotal, kResponses, "code_class=\"4xx\""},
    {Counter::UpstreamResponses5xxTotal, kResponses, "code_class=\"5xx\""},
    {Counter::UpstreamErrorsConnectTotal, kErrors, "kind=\"connect\""},
    {Counter::UpstreamErrorsTimeoutTotal, kErrors, "kind=\"timeout\""},
    {Counter::UpstreamErrorsResetTotal, kErrors, "kind=\"reset\""},
    {Counter::TimeoutsClientHeaderTotal, kTimeouts, "phase=\"client_header\""},
    {Counter::TimeoutsClientBodyTotal, kTimeouts, "phase=\"client_body\""},
    {Counter::TimeoutsSendTotal, kTimeouts, "phase=\"send\""},
    {Counter::TimeoutsKeepaliveTotal, kTimeouts, "phase=\"keepalive\""},
    {Counter::TimeoutsUpstreamReadTotal, kTimeouts, "phase=\"upstream_read\""},
    {Counter::TimeoutsTunnelTotal, kTimeouts, "phase=\"tunnel\""},
    {Counter::TimeoutsQueueHoldTotal, kTimeouts, "phase=\"queue_hold\""},
    {Counter::QueuedTotal, kIssued, ""},
};

// Sums of a family above: sum(concert_tickets_evicted_total{reason=~"ttl|ghost"})
// and sum(concert_timeouts_total).
constexpr Counter kCovered[] = {Counter::EvictedTotal, Counter::TimeoutsTotal};

// HELP for the counters exported under their own key; one missing here gets
// a generic line naming its /_room/stats key.
struct CounterHelp {
  Counter counter;
  std::string_view help;
};
constexpr CounterHelp kCounterHelp[] = {
    {Counter::PromotedTotal, "Tickets promoted ahead of the line (POST /_room/promote, /queue/promote)."},
    {Counter::InvitationsUsedTotal, "Invitations (concert -invite) honoured, each once."},
    {Counter::AssetServedTotal, "Asset requests served through the asset tier."},
    {Counter::AssetDeniedTotal, "Private asset requests denied for want of a pass."},
    {Counter::AssetUserThrottledTotal, "Asset requests held or refused by the per-user asset cap."},
    {Counter::AssetGlobalThrottledTotal, "Asset requests held or refused by the global asset cap."},
    {Counter::RingFullTotal, "Tickets refused because the ticket ring was full."},
    {Counter::PassTableFullTotal, "Passes refused because the pass table was full."},
    {Counter::ReloadsTotal, "Configuration reloads accepted."},
    {Counter::WorkerRestartsTotal, "Workers restarted after they died."},
    {Counter::SlotsReclaimedTotal, "Slots returned to the pools from dead workers."},
    {Counter::ConnectionsRefusedTotal, "Connections refused over -max-connections."},
    {Counter::PassEvictedTotal, "Idle passes evicted from a full pass table."},
    {Counter::AbuseStrikesTotal, "Abuse strikes counted (by weight)."},
    {Counter::AbuseBansTotal, "Clients banned."},
    {Counter::ClientTableFullTotal, "Requests not tracked per client because the client table was full."},
    {Counter::ProxyProtocolRejectedTotal, "Connections refused for a bad PROXY protocol header."},
    {Counter::ConnectionsFloodedTotal,
     "Connections closed while waiting in line (held request, event stream) for sending more than a request head "
     "ahead."},
    {Counter::FifoInversionsTotal, "Line admissions of a ticket with a whole cap of waiting tickets ahead of it."},
    {Counter::PageErrorsTotal,
     "Page requests the origin failed: a 5xx response head, no head within -upstream-timeout, a reset, or no "
     "connection."},
    {Counter::AdaptiveChangesTotal, "Changes of the cap made by -adaptive."},
};

const Labelled* labelled(Counter c) {
  for (const Labelled& l : kLabelled)
    if (l.counter == c) return &l;
  return nullptr;
}

bool covered(Counter c) {
  return std::find(std::begin(kCovered), std::end(kCovered), c) != std::end(kCovered);
}

// A gauge's /_room/metrics value by its kind (shm/gauges.h).
template <shm::GaugeKind kKind, typename T>
double gaugeMetricValue(T value) {
  if constexpr (kKind == shm::GaugeKind::Duration)
    return static_cast<double>(value) / 1000.0;  // milliseconds -> seconds
  else if constexpr (kKind == shm::GaugeKind::Flag)
    return value ? 1 : 0;
  else
    return static_cast<double>(value);
}

struct HistogramRow {
  Family family;
  shm::Histogram which;
  bool cluster_only = false;
};
constexpr HistogramRow kHistograms[] = {
    {{"concert_queue_wait_seconds", "histogram",
      "Time from a ticket's issue to its admission from the line (all workers)."},
     shm::Histogram::QueueWait},
    {{"concert_upstream_response_seconds", "histogram",
      "Time from the whole request queued toward the origin to its final response head (all workers)."},
     shm::Histogram::UpstreamResponse},
    {{"concert_page_first_byte_seconds", "histogram",
      "Page requests only (no assets, no long-lived paths): from the request sent to the origin to its response head "
      "(all workers); what -adaptive and the capacity advisor read."},
     shm::Histogram::PageFirstByte},
    {{"concert_cluster_engine_seconds", "histogram", "Round trips to the cluster engine (-cluster only)."},
     shm::Histogram::EngineRoundTrip,
     true},
};

// Shortest round-trip text of a value, as Prometheus writes it.
void appendNumber(std::string& out, double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, res.ptr);
}

void appendHeader(std::string& out, const Family& f) {
  out.append("# HELP ").append(f.name).append(" ").append(f.help).append("\n");
  out.append("# TYPE ").append(f.name).append(" ").append(f.type).append("\n");
}

void appendSample(std::string& out, std::string_view name, std::string_view label, std::string_view value) {
  out.append(name);
  if (!label.empty()) out.append("{").append(label).append("}");
  out.append(" ").append(value).append("\n");
}

// The 16-byte client key as text: a dotted quad for an IPv4-mapped key, else
// the IPv6 /64 it stands for ("2001:db8:1:2::/64").
std::string clientText(const std::array<uint8_t, 16>& key) {
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  std::memcpy(&address.sin6_addr, key.data(), 16);
  std::string text = http::socketAddressText(reinterpret_cast<const sockaddr*>(&address));
  if (!IN6_IS_ADDR_V4MAPPED(&address.sin6_addr)) text += "/64";
  return text;
}

}  // namespace

std::string renderMetrics(const AdmissionContext& context) {
  const shm::Segment& segment = *context.segment;
  const shm::StatsSnapshot stats = roomStats(context);
  std::string out;
  out.reserve(16 * 1024);

  // The gauge table (shm/gauges.h), in its order.
  auto gauge = [&out](const Family& family, double v) {
    appendHeader(out, family);
    std::string value;
    appendNumber(value, v);
    appendSample(out, family.name, "", value);
  };
#define CONCERT_GAUGE_METRIC(key, kind, source, metric, help)       \
  if (shm::gaugeReported(shm::GaugeSource::source, stats.cluster)) \
    gauge(Family{metric, "gauge", help}, gaugeMetricValue<shm::GaugeKind::kind>(stats.key));
  CONCERT_GAUGES(CONCERT_GAUGE_METRIC)
#undef CONCERT_GAUGE_METRIC
  if (stats.cluster) {
    const std::string trips = "concert_cluster_engine_round_trips_total";
    appendHeader(out, Family{trips, "counter", "Round trips to the cluster engine."});
    appendSample(out, trips, "", std::to_string(segment.cluster().roundTrips()));
  }
  appendHeader(out, Family{"concert_build_info", "gauge", "Always 1; the version of the running binary."});
  appendSample(out, "concert_build_info", "version=\"" CONCERT_VERSION "\"", "1");

  // Labelled families, each whole in one place (the format wants a family's
  // samples together), in the order of kLabelled.
  for (size_t i = 0; i < std::size(kLabelled); ++i) {
    const Family& family = kLabelled[i].family;
    bool first = true;
    for (size_t j = 0; j < i; ++j) first = first && kLabelled[j].family.name != family.name;
    if (!first) continue;
    appendHeader(out, family);
    for (const Labelled& l : kLabelled)
      if (l.family.name == family.name)
        appendSample(out, family.name, l.label, std::to_string(stats.counter(l.counter)));
  }

  // Every other counter under its own key.
  for (Counter c : shm::kAllCounters) {
    if (labelled(c) || covered(c)) continue;
    const std::string name = "concert_" + std::string(shm::counterKey(c));
    std::string help = "Counter " + std::string(shm::counterKey(c)) + " of /_room/stats.";
    for (const CounterHelp& h : kCounterHelp)
      if (h.counter == c) help = h.help;
    appendHeader(out, Family{name, "counter", help});
    appendSample(out, name, "", std::to_string(stats.counter(c)));
  }

  for (const HistogramRow& row : kHistograms) {
    if (row.cluster_only && !stats.cluster) continue;
    const shm::HistogramSnapshot h = segment.histograms().merged(row.which);
    const std::array<double, shm::kHistogramBounds> bounds = shm::histogramBounds(row.which);
    appendHeader(out, row.family);
    const std::string bucket = std::string(row.family.name) + "_bucket";
    for (size_t i = 0; i <= shm::kHistogramBounds; ++i) {
      std::string label = "le=\"";
      if (i < shm::kHistogramBounds)
        appendNumber(label, bounds[i]);
      else
        label += "+Inf";
      label += "\"";
      appendSample(out, bucket, label, std::to_string(h.cumulative(i)));
    }
    std::string sum;
    appendNumber(sum, h.sumSeconds());
    appendSample(out, std::string(row.family.name) + "_sum", "", sum);
    appendSample(out, std::string(row.family.name) + "_count", "", std::to_string(h.count()));
  }
  return out;
}

http::LocalResponse handleMetrics(const AdmissionContext& context, const http::Request&) {
  http::LocalResponse r;
  r.headers.push_back(http::Header{"Content-Type", std::string(kMetricsType)});
  r.headers.push_back(http::Header{"Cache-Control", "no-store"});
  r.body = renderMetrics(context);
  return r;
}

namespace {

// The origin's capacity as the master learned it (shm/capacity.h): the
// advisor's recommended cap (null until it saw the origin queued) and
// -adaptive's state.
nlohmann::ordered_json capacityReport(const AdmissionContext& context) {
  const shm::CapacityReading r = context.segment->capacity().reading();
  const config::Config& config = *context.config;
  nlohmann::ordered_json capacity = {
      {"cap", context.segment->pages().cap()},
      {"recommended_cap", r.recommended_cap > 0 ? nlohmann::ordered_json(r.recommended_cap) : nullptr},
      {"unqueued_first_byte_seconds", static_cast<double>(r.knee_latency_us) / 1e6},
      {"peak_pages_per_second", r.peak_throughput},
  };
  capacity["recommended_by"] = r.recommended_cap <= 0 ? nlohmann::ordered_json(nullptr)
                               : r.origin_total > 0   ? nlohmann::ordered_json("origin status page")
                                                      : nlohmann::ordered_json("latency knee");
  if (config.origin_status.empty() || r.origin_total < 0) {
    capacity["origin_status"] = nullptr;
  } else {
    capacity["origin_status"] = {
        {"active_processes", r.origin_active},
        {"total_processes", r.origin_total},
        {"listen_queue", r.origin_listen_queue},
        {"max_children_reached", r.origin_max_children_reached},
    };
  }
  capacity["adaptive"] = {
      {"configured", config.adaptive},
      {"active", r.adaptive},
      {"cap_min", config.cap_min},
      {"cap_max", config.adaptiveCeiling()},
      {"unqueued_first_byte_seconds", static_cast<double>(r.base_latency_us) / 1e6},
      {"origin_queue", r.origin_queue},
  };
  return capacity;
}

}  // namespace

std::string renderReport(const AdmissionContext& context) {
  const shm::Segment& segment = *context.segment;
  const shm::StatsSnapshot stats = context.segment->stats().snapshot();
  const shm::HistogramSnapshot wait = segment.histograms().merged(shm::Histogram::QueueWait);
  nlohmann::ordered_json clients = nlohmann::ordered_json::array();
  for (const shm::ClientTickets& c : segment.clients().topByTickets(kReportClients))
    clients.push_back({{"client", clientText(c.key)}, {"tickets", c.tickets}});
  nlohmann::ordered_json report = {
      {"fifo_inversions", stats.fifo_inversions_total},
      {"ghost_share", stats.queued_total == 0 ? 0.0
                                              : std::min(1.0, static_cast<double>(stats.ghost_evicted_total) /
                                                                  static_cast<double>(stats.queued_total))},
      {"tickets_per_client", std::move(clients)},
      {"wait_seconds", {{"p50", wait.quantile(0.5)}, {"p90", wait.quantile(0.9)}, {"p99", wait.quantile(0.99)}}},
      {"capacity", capacityReport(context)},
  };
  return report.dump();
}

http::LocalResponse handleReport(const AdmissionContext& context, const http::Request& request) {
  if (std::optional<http::LocalResponse> refused = adminRefusal(context, request)) return std::move(*refused);
  return jsonResponse(200, renderReport(context));
}

}  // namespace concert::admission
