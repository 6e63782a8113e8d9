// The event loop of the worker unit tests, on either data path: a test
// case that makes a Loop runs twice, on epoll and with the process's io_uring
// running (on epoll again, with a message, where the kernel refuses
// io_uring).
#pragma once

#include <doctest/doctest.h>
#include <event2/event.h>

#include <functional>
#include <string>

#include "worker/stream.h"

namespace concert::worker {

// Which data path this run of the test case takes.
inline bool ringPath() {
  bool ring = false;
  SUBCASE("epoll") {}
  SUBCASE("io_uring") { ring = true; }
  return ring;
}

struct Loop {
  event_base* base = event_base_new();
  bool ring = false;  // the io_uring runs (declared first, so streams go before it stops)
  Loop() {
    if (!ringPath()) return;
    std::string error;
    ring = Stream::startRing(base, &error);
    if (!ring) MESSAGE("io_uring unavailable, the case runs on epoll: ", error);
  }
  ~Loop() {
    Stream::stopRing();
    event_base_free(base);
  }
  // Runs the loop until `done` holds or `turns` iterations passed.
  void runUntil(const std::function<bool()>& done, int turns = 2000) {
    for (int i = 0; i < turns && !done(); ++i) event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
  }
};

}  // namespace concert::worker
