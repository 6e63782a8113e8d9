// A real in-process shared segment and worker context for the guard tests.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "config/config.h"
#include "shm/segment.h"
#include "admission/admission.h"
#include "admission/answers.h"
#include "admission/room.h"
#include "admission/cookies.h"
#include "admission/saturation_log.h"
#include "worker/waiters.h"

namespace concert::test {

constexpr const char* kTestSecret = "concert-test-secret-0123456789abcdef";

inline config::Config baseConfig(int32_t cap) {
  config::Config c;
  c.cap = cap;
  c.max_queue = 100;
  c.admit_secret = kTestSecret;
  c.upstream.raw = "http://127.0.0.1:3000";
  c.asset_cap = cap * c.asset_user_cap_h2;
  return c;
}

// One worker slot's view of the room: the context its guards get, with a
// real SlotWaiters (so parking raises the slot's shared waiting flag and
// releases elsewhere write its eventfd) and its own saturation log.
struct WorkerView {
  WorkerView(const config::ConfigPtr& config, shm::Segment* segment, shm::WorkerSlot slot)
      : waiters(segment, slot, &draining) {
    context.config = config;
    context.segment = segment;
    context.slot = slot;
    context.waiters = &waiters;
    context.saturation = &saturation;
  }
  WorkerView(const WorkerView&) = delete;
  WorkerView& operator=(const WorkerView&) = delete;

  int64_t parked(shm::Resource r) const { return waiters.count(r); }

  bool draining = false;
  worker::SlotWaiters waiters;
  admission::SaturationLog saturation;
  admission::AdmissionContext context;
};

struct Site {
  explicit Site(config::Config c, uint32_t slots = 4) {
    shm::Geometry g;
    g.ring_size = 1u << 12;
    g.worker_slots = slots;
    g.pass_table_size = 64;
    segment = shm::Segment::create(g, c.cap, c.asset_cap);
    room = std::make_unique<admission::Room>(*segment);
    segment->setGate(room.get());  // as the master does for every process
    segment->slots().started(0, static_cast<int>(getpid()), 1, monotonicMs());
    segment->stats().setGeneration(1);
    config = std::make_shared<const config::Config>(std::move(c));
    self = std::make_unique<WorkerView>(config, segment.get(), 0);
  }
  // A second worker slot sharing the same segment.
  std::unique_ptr<WorkerView> other(shm::WorkerSlot slot) const {
    return std::make_unique<WorkerView>(config, segment.get(), slot);
  }
  const admission::AdmissionContext& ctx() const { return self->context; }
  int64_t parked(shm::Resource r) const { return self->parked(r); }

  config::ConfigPtr config;
  std::unique_ptr<shm::Segment> segment;
  std::unique_ptr<admission::Room> room;  // the gate of the segment's lines
  std::unique_ptr<WorkerView> self;
};

inline http::Request get(std::string path, http::Headers headers = {}) {
  http::Request r;
  r.method = "GET";
  r.target = path;
  r.path = path;
  r.raw_path = path;
  r.headers = std::move(headers);
  r.peer_ip = "127.0.0.1";
  return r;
}

inline std::string headerValue(const http::Headers& headers, std::string_view name) {
  return std::string(http::findHeader(headers, name));
}

inline std::vector<std::string> setCookies(const http::Headers& headers) {
  std::vector<std::string> out;
  for (const auto& h : headers)
    if (http::equalsIgnoreCase(h.name, "Set-Cookie")) out.push_back(h.value);
  return out;
}

// The value of `name` in a list of Set-Cookie headers, "" when absent.
inline std::string setCookieValue(const http::Headers& headers, std::string_view name) {
  for (const std::string& c : setCookies(headers)) {
    if (c.compare(0, name.size() + 1, std::string(name) + "=") != 0) continue;
    size_t end = c.find(';');
    return c.substr(name.size() + 1, end == std::string::npos ? std::string::npos : end - name.size() - 1);
  }
  return "";
}

}  // namespace concert::test
