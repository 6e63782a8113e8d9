// Page and asset semaphores: caps across slots, runtime grow/shrink, wake-ups.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "shm/segment.h"

using namespace concert::shm;

namespace {

std::unique_ptr<Segment> makeSegment(int32_t cap, int32_t asset_cap = 3) {
  Geometry g;
  g.ring_size = 1u << 12;
  g.worker_slots = 4;
  g.pass_table_size = 64;
  return Segment::create(g, cap, asset_cap);
}

bool readable(int fd, uint64_t* value) {
  return read(fd, value, sizeof(*value)) == sizeof(*value);
}

}  // namespace

TEST_CASE("the page cap bounds the sum over every slot") {
  auto s = makeSegment(3);
  CHECK(s->pages().tryAcquire(0));
  CHECK(s->pages().tryAcquire(1));
  CHECK(s->pages().tryAcquire(3));
  CHECK_FALSE(s->pages().tryAcquire(2));
  CHECK_FALSE(s->pages().tryAcquire(0));
  CHECK(s->pages().occupancy() == 3);
  s->pages().release(1);
  CHECK(s->pages().occupancy() == 2);
  CHECK(s->pages().tryAcquire(2));
  CHECK(s->pages().cap() == 3);
}

TEST_CASE("shrinking the cap keeps in-flight slots and admits nobody until below the new cap") {
  auto s = makeSegment(3);
  for (WorkerSlot slot : {0u, 1u, 2u}) REQUIRE(s->pages().tryAcquire(slot));
  s->pages().setCap(1);
  CHECK(s->pages().cap() == 1);
  CHECK(s->pages().occupancy() == 3);
  CHECK_FALSE(s->pages().tryAcquire(3));
  s->pages().release(0);
  CHECK_FALSE(s->pages().tryAcquire(3));
  s->pages().release(1);
  CHECK_FALSE(s->pages().tryAcquire(3));
  s->pages().release(2);
  CHECK(s->pages().tryAcquire(3));
  CHECK_FALSE(s->pages().tryAcquire(0));
  CHECK(s->pages().occupancy() == 1);

  s->pages().setCap(4);  // growing admits at once
  CHECK(s->pages().tryAcquire(0));
  CHECK(s->pages().tryAcquire(1));
  CHECK(s->pages().tryAcquire(2));
  CHECK_FALSE(s->pages().tryAcquire(2));
}

TEST_CASE("configured page cap is kept apart from the runtime cap") {
  auto s = makeSegment(5);
  CHECK(s->pages().configuredCap() == 5);
  s->pages().setCap(9);
  CHECK(s->pages().configuredCap() == 5);
  s->pages().setConfiguredCap(7);
  CHECK(s->pages().configuredCap() == 7);
  CHECK(s->pages().cap() == 9);
}

TEST_CASE("the global asset semaphore") {
  auto s = makeSegment(1, 2);
  CHECK(s->assets().cap() == 2);
  CHECK(s->assets().tryAcquire(0));
  CHECK(s->assets().tryAcquire(1));
  CHECK_FALSE(s->assets().tryAcquire(2));
  CHECK(s->assets().occupancy() == 2);
  s->assets().release(0);
  CHECK(s->assets().tryAcquire(2));
}

TEST_CASE("a release wakes exactly the slots waiting for that resource") {
  auto s = makeSegment(1);
  uint64_t value = 0;
  for (WorkerSlot slot = 0; slot < 4; ++slot) CHECK_FALSE(readable(s->slots().eventFd(slot), &value));
  s->slots().setWaiting(1, Resource::PageSlot, true);
  s->slots().setWaiting(2, Resource::AssetSlot, true);
  REQUIRE(s->pages().tryAcquire(0));
  s->pages().release(0);
  CHECK(readable(s->slots().eventFd(1), &value));
  CHECK(value >= 1);
  CHECK_FALSE(readable(s->slots().eventFd(2), &value));
  CHECK_FALSE(readable(s->slots().eventFd(0), &value));
  REQUIRE(s->assets().tryAcquire(3));
  s->assets().release(3);
  CHECK(readable(s->slots().eventFd(2), &value));
  s->slots().setWaiting(1, Resource::PageSlot, false);
  s->slots().wake(Resource::PageSlot);
  CHECK_FALSE(readable(s->slots().eventFd(1), &value));
}

TEST_CASE("wake-ups: one eventfd write until the worker reads; its own slot is woken without one") {
  auto s = makeSegment(1);
  uint64_t value = 0;
  s->slots().setWaiting(1, Resource::PageSlot, true);
  for (int i = 0; i < 5; ++i) s->slots().wake(Resource::PageSlot);
  CHECK(readable(s->slots().eventFd(1), &value));
  CHECK(value == 1);  // five wake-ups before the read: one write
  // Read without saying so first: the flag is still up, nothing is written.
  s->slots().wake(Resource::PageSlot);
  CHECK_FALSE(readable(s->slots().eventFd(1), &value));
  s->slots().wakeConsumed(1);
  s->slots().wake(Resource::PageSlot);
  CHECK(readable(s->slots().eventFd(1), &value));

  int local_calls = 0;
  s->slots().setLocalWake(
      0, [](void* arg) { ++*static_cast<int*>(arg); }, &local_calls);
  s->slots().setWaiting(0, Resource::PageSlot, true);
  s->slots().wakeConsumed(1);
  s->slots().wake(Resource::PageSlot);
  CHECK(local_calls == 1);
  CHECK_FALSE(readable(s->slots().eventFd(0), &value));  // no system call for oneself
  CHECK(readable(s->slots().eventFd(1), &value));        // the other slot still gets its write
  s->slots().setLocalWake(0, nullptr, nullptr);
  s->slots().wake(Resource::PageSlot);
  CHECK(readable(s->slots().eventFd(0), &value));
}

TEST_CASE("smoothed utilization stays in [0, 1] and follows occupancy") {
  auto s = makeSegment(2);
  CHECK(s->stats().snapshot().utilization == doctest::Approx(0.0));
  REQUIRE(s->pages().tryAcquire(0));
  for (int i = 0; i < 100; ++i) {
    REQUIRE(s->pages().tryAcquire(1));
    s->pages().release(1);
  }
  const double busy = s->stats().snapshot().utilization;
  CHECK(busy > 0.5);
  CHECK(busy <= 1.0);
  s->pages().release(0);
  for (int i = 0; i < 100; ++i) {
    REQUIRE(s->pages().tryAcquire(0));
    s->pages().release(0);
  }
  CHECK(s->stats().snapshot().utilization < busy);
  CHECK(s->stats().snapshot().utilization >= 0.0);
}

TEST_CASE("a release without its acquire is a broken invariant: the process says so and aborts") {
  for (const bool asset : {false, true}) {
    CAPTURE(asset);
    auto s = makeSegment(2);
    REQUIRE(s->pages().tryAcquire(0));
    REQUIRE(s->assets().tryAcquire(0));
    int err[2];
    REQUIRE(pipe(err) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      std::signal(SIGABRT, SIG_DFL);  // doctest's crash report belongs to the parent
      dup2(err[1], STDERR_FILENO);    // the error log line goes to the parent
      // Slot 1 never acquired: its count goes below zero (the sum would not yet).
      if (asset) {
        s->assets().release(1);
        (void)s->assets().occupancy();
      } else {
        s->pages().release(1);  // its utilization update reads the occupancy
      }
      _exit(0);
    }
    close(err[1]);
    std::string said;
    char buf[512];
    for (ssize_t n; (n = read(err[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(n));
    close(err[0]);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGABRT);
    CHECK(said.find(asset ? "broken invariant: asset semaphore count of slot 1 is -1"
                          : "broken invariant: page semaphore count of slot 1 is -1") != std::string::npos);
  }
}
