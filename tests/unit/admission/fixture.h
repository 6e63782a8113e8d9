// A real in-process shared segment and worker context for the guard tests.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "config/config.h"
#include "shm/segment.h"
#include "worker/admission.h"
#include "worker/context.h"
#include "worker/cookies.h"
#include "worker/room.h"

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

struct Room {
  explicit Room(config::Config c, uint32_t slots = 4) {
    shm::Geometry g;
    g.ring_size = 1u << 12;
    g.worker_slots = slots;
    g.pass_table_size = 64;
    segment = shm::Segment::create(g, c.cap, c.asset_cap);
    segment->slotStarted(0, static_cast<int>(getpid()), 1, monotonicMs());
    segment->setGeneration(1);
    config = std::make_shared<const config::Config>(std::move(c));
    context.config = config;
    context.segment = segment.get();
    context.slot = 0;
    worker::resetUtilizationCache();
    worker::HeldPages::take();
    worker::HeldPages::setDraining(false);
  }
  // A second worker slot sharing the same segment.
  worker::WorkerContext other(shm::WorkerSlot slot) const {
    worker::WorkerContext c = context;
    c.slot = slot;
    return c;
  }

  std::shared_ptr<const config::Config> config;
  std::unique_ptr<shm::Segment> segment;
  worker::WorkerContext context;
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
