// Page and asset semaphores: caps across slots, runtime grow/shrink, wake-ups.
#include <doctest/doctest.h>
#include <unistd.h>

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
  CHECK(s->tryAcquirePage(0));
  CHECK(s->tryAcquirePage(1));
  CHECK(s->tryAcquirePage(3));
  CHECK_FALSE(s->tryAcquirePage(2));
  CHECK_FALSE(s->tryAcquirePage(0));
  CHECK(s->pageOccupancy() == 3);
  s->releasePage(1);
  CHECK(s->pageOccupancy() == 2);
  CHECK(s->tryAcquirePage(2));
  CHECK(s->pageCap() == 3);
}

TEST_CASE("shrinking the cap keeps in-flight slots and admits nobody until below the new cap") {
  auto s = makeSegment(3);
  for (WorkerSlot slot : {0u, 1u, 2u}) REQUIRE(s->tryAcquirePage(slot));
  s->setPageCap(1);
  CHECK(s->pageCap() == 1);
  CHECK(s->pageOccupancy() == 3);
  CHECK_FALSE(s->tryAcquirePage(3));
  s->releasePage(0);
  CHECK_FALSE(s->tryAcquirePage(3));
  s->releasePage(1);
  CHECK_FALSE(s->tryAcquirePage(3));
  s->releasePage(2);
  CHECK(s->tryAcquirePage(3));
  CHECK_FALSE(s->tryAcquirePage(0));
  CHECK(s->pageOccupancy() == 1);

  s->setPageCap(4);  // growing admits at once
  CHECK(s->tryAcquirePage(0));
  CHECK(s->tryAcquirePage(1));
  CHECK(s->tryAcquirePage(2));
  CHECK_FALSE(s->tryAcquirePage(2));
}

TEST_CASE("configured page cap is kept apart from the runtime cap") {
  auto s = makeSegment(5);
  CHECK(s->configuredPageCap() == 5);
  s->setPageCap(9);
  CHECK(s->configuredPageCap() == 5);
  s->setConfiguredPageCap(7);
  CHECK(s->configuredPageCap() == 7);
  CHECK(s->pageCap() == 9);
}

TEST_CASE("the global asset semaphore") {
  auto s = makeSegment(1, 2);
  CHECK(s->assetCap() == 2);
  CHECK(s->tryAcquireAsset(0));
  CHECK(s->tryAcquireAsset(1));
  CHECK_FALSE(s->tryAcquireAsset(2));
  CHECK(s->assetInFlight() == 2);
  s->releaseAsset(0);
  CHECK(s->tryAcquireAsset(2));
}

TEST_CASE("a release wakes exactly the slots waiting for that resource") {
  auto s = makeSegment(1);
  uint64_t value = 0;
  for (WorkerSlot slot = 0; slot < 4; ++slot) CHECK_FALSE(readable(s->eventFd(slot), &value));
  s->setWaiting(1, Resource::PageSlot, true);
  s->setWaiting(2, Resource::AssetSlot, true);
  REQUIRE(s->tryAcquirePage(0));
  s->releasePage(0);
  CHECK(readable(s->eventFd(1), &value));
  CHECK(value >= 1);
  CHECK_FALSE(readable(s->eventFd(2), &value));
  CHECK_FALSE(readable(s->eventFd(0), &value));
  REQUIRE(s->tryAcquireAsset(3));
  s->releaseAsset(3);
  CHECK(readable(s->eventFd(2), &value));
  s->setWaiting(1, Resource::PageSlot, false);
  s->wake(Resource::PageSlot);
  CHECK_FALSE(readable(s->eventFd(1), &value));
}

TEST_CASE("wake-ups: one eventfd write until the worker reads; its own slot is woken without one") {
  auto s = makeSegment(1);
  uint64_t value = 0;
  s->setWaiting(1, Resource::PageSlot, true);
  for (int i = 0; i < 5; ++i) s->wake(Resource::PageSlot);
  CHECK(readable(s->eventFd(1), &value));
  CHECK(value == 1);  // five wake-ups before the read: one write
  // Read without saying so first: the flag is still up, nothing is written.
  s->wake(Resource::PageSlot);
  CHECK_FALSE(readable(s->eventFd(1), &value));
  s->wakeConsumed(1);
  s->wake(Resource::PageSlot);
  CHECK(readable(s->eventFd(1), &value));

  int local_calls = 0;
  s->setLocalWake(
      0, [](void* arg) { ++*static_cast<int*>(arg); }, &local_calls);
  s->setWaiting(0, Resource::PageSlot, true);
  s->wakeConsumed(1);
  s->wake(Resource::PageSlot);
  CHECK(local_calls == 1);
  CHECK_FALSE(readable(s->eventFd(0), &value));  // no system call for oneself
  CHECK(readable(s->eventFd(1), &value));        // the other slot still gets its write
  s->setLocalWake(0, nullptr, nullptr);
  s->wake(Resource::PageSlot);
  CHECK(readable(s->eventFd(0), &value));
}

TEST_CASE("smoothed utilization stays in [0, 1] and follows occupancy") {
  auto s = makeSegment(2);
  CHECK(s->snapshot().utilization == doctest::Approx(0.0));
  REQUIRE(s->tryAcquirePage(0));
  for (int i = 0; i < 100; ++i) {
    REQUIRE(s->tryAcquirePage(1));
    s->releasePage(1);
  }
  const double busy = s->snapshot().utilization;
  CHECK(busy > 0.5);
  CHECK(busy <= 1.0);
  s->releasePage(0);
  for (int i = 0; i < 100; ++i) {
    REQUIRE(s->tryAcquirePage(0));
    s->releasePage(0);
  }
  CHECK(s->snapshot().utilization < busy);
  CHECK(s->snapshot().utilization >= 0.0);
}
