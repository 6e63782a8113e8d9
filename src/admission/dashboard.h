// The dashboard: a live picture of the last hour, drawn in the operator's
// browser from the history ring the master's janitor fills (shm/history.h).
//
//   GET /_room/                the page (html/dashboard.html, compiled in)
//   GET /_room/chart.js        Chart.js, compiled in from Debian's libjs-chart.js
//   GET /_room/history         the last hour's samples, JSON
//   GET /_room/history/events  each new sample as it is written (text/event-stream)
//
// All four are admin endpoints (adminRefusal): the token or -admin-listen.
// The page carries no token of its own and asks for the other three
// same-origin, so whatever let the operator's browser fetch the page (the
// admin listener, or a proxy or browser setting that adds the Authorization
// header to each request) lets it fetch them too; nothing that grants access
// is ever in a URL. The script sits behind the gate too, because with
// -admin-listen every /_room/ path but healthz is off the public listener.
//
// Pure logic over the segment; the worker owns the stream's connection
// (EventFeed, admission.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "admission/admission.h"
#include "shm/history.h"

namespace concert::admission {

// Compiled in from html/dashboard.html and the libjs-chart.js file (html/embed.py).
extern const std::string_view kDashboardHtml;
extern const std::string_view kChartJs;

http::LocalResponse handleDashboard(const AdmissionContext& context, const http::Request& request);
http::LocalResponse handleDashboardScript(const AdmissionContext& context, const http::Request& request);
// {"interval_seconds":1,"window_seconds":10,"capacity":3600,"next":N,"samples":[...]}:
// every sample kept, oldest first; `next` is the index the next sample will
// have (what GET /_room/history/events?from= takes).
http::LocalResponse handleHistory(const AdmissionContext& context, const http::Request& request);

// One sample as JSON: {"i":index,"t":unix seconds,"queue_depth":…,
// "occupancy":…,"cap":…,"admissions":…,"wait_p50":…,"wait_p95":…,
// "origin_p95":…}, a quantile null when nothing was observed in its window.
std::string historySampleJson(const shm::HistorySample& sample);
std::string historySamplesJson(const std::vector<shm::HistorySample>& samples);  // a JSON array

// GET /_room/history/events. open(): the gate's answer when refused (not a
// stream); else a stream that starts at the sample after Last-Event-ID (a
// reconnecting EventSource), else at ?from=N (the page passes the history's
// `next`), else at the newest sample. A start the ring no longer holds, or
// that is not yet written (another Concert's ids), starts at the newest. Each
// recheck sends a `samples` event with every sample written since the last
// one (at most kMaxSamplesPerEvent; the rest follow one event a recheck),
// its id the last sample's index; on drain the stream ends with a retry hint
// and the browser reconnects to another worker, where Last-Event-ID resumes it.
class HistoryEvents final : public EventFeed {
 public:
  static constexpr size_t kMaxSamplesPerEvent = 60;

  explicit HistoryEvents(const AdmissionContext& context) : context_(context) {}
  Opening open(const http::Request& request, Millis now) override;
  Event recheck(Millis now, bool may_send_position) override;
  uint64_t ticket() const override { return kLast; }

 private:
  Event pending();

  const AdmissionContext& context_;
  uint64_t next_ = 0;  // the index of the next sample to send
};

std::unique_ptr<EventFeed> makeHistoryEvents(const AdmissionContext& context);

}  // namespace concert::admission
