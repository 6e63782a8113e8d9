// Benchmarks of the shared-memory admission core (src/shm), single process
// and with a second process hammering the same segment ("/contended": a
// forked child runs the same operation in a loop on another worker slot for
// the whole measurement). Results and targets: bench/README.md.
#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "shm/segment.h"

using namespace concert;
using namespace concert::shm;

namespace {

constexpr Millis kTtl = 300000;

Geometry geometry(uint32_t ring, uint32_t table = 1u << 16) {
  Geometry g;
  g.ring_size = ring;
  g.worker_slots = 4;
  g.pass_table_size = table;
  return g;
}

// A second process running `op` in a loop on slot 1 until stopped.
class Contender {
 public:
  explicit Contender(const std::function<void()>& op) {
    stop_ = static_cast<std::atomic<int>*>(
        mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    stop_->store(0);
    pid_ = fork();
    if (pid_ == 0) {
      while (stop_->load(std::memory_order_relaxed) == 0) op();
      _exit(0);
    }
  }
  ~Contender() {
    stop_->store(1);
    int status;
    waitpid(pid_, &status, 0);
    munmap(stop_, sizeof(std::atomic<int>));
  }

 private:
  std::atomic<int>* stop_;
  pid_t pid_;
};

uint8_t passId(int n, int byte) {
  return static_cast<uint8_t>((n * 131 + byte * 7) & 0xff);
}

// ---------------------------------------------------------------- tickets
// A visit as the page guard makes it: a ticket; on its turn a page slot and
// the claim, then the request ends (page release). A visitor whose turn has
// not come leaves at once (retire), so nothing piles up in the ring.
void visit(Segment& s, WorkerSlot slot) {
  const Issued issued = s.tickets().issue(slot, 0, 0);
  if (issued.outcome != IssueOutcome::Queued) return;
  if (issued.ready && s.pages().tryAcquire(slot)) {
    if (!s.tickets().claim(issued.cookie)) s.tickets().retire(issued.cookie.ticket, false);
    s.pages().release(slot);
  } else {
    s.tickets().retire(issued.cookie.ticket, false);
  }
}

void BM_IssueClaimRelease(benchmark::State& state) {
  // An empty line and a wide room: issue (ready at once), page slot, claim,
  // page release.
  auto s = Segment::create(geometry(1u << 16), 1 << 20, 100);
  std::unique_ptr<Contender> other;
  if (state.range(0)) other = std::make_unique<Contender>([&s] { visit(*s, 1); });
  for (auto _ : state) {
    const Issued issued = s->tickets().issue(0, 0, 0);
    if (s->pages().tryAcquire(0)) {
      if (!s->tickets().claim(issued.cookie)) s->tickets().retire(issued.cookie.ticket, false);
      s->pages().release(0);
    }
  }
}
BENCHMARK(BM_IssueClaimRelease)->Arg(0)->Arg(1)->ArgName("contended");

void BM_IssueQueued(benchmark::State& state) {
  // Each iteration hands out one waiting ticket (random nonce included)
  // behind a full room: one request in flight that never ends.
  constexpr uint32_t kRing = 1u << 20;
  std::unique_ptr<Segment> s;
  std::unique_ptr<Contender> other;
  auto fresh = [&] {
    other.reset();
    s = Segment::create(geometry(kRing), 1, 100);
    s->pages().tryAcquire(0);
    if (state.range(0)) other = std::make_unique<Contender>([&s] { visit(*s, 1); });
  };
  fresh();
  for (auto _ : state) {
    const Issued i = s->tickets().issue(0, 0, 0);
    benchmark::DoNotOptimize(i);
    if (i.outcome != IssueOutcome::Queued || i.cookie.ticket > kRing / 2) {
      state.PauseTiming();
      fresh();
      state.ResumeTiming();
    }
  }
}
BENCHMARK(BM_IssueQueued)->Arg(0)->Arg(1)->ArgName("contended");

void BM_ClaimRelease(benchmark::State& state) {
  // Waiting tickets made ready by a wide cap, taken in order: page slot,
  // claim, page release.
  constexpr int kBatch = 1 << 16;
  auto s = Segment::create(geometry(1u << 18), 1, 100);
  std::unique_ptr<Contender> other;
  if (state.range(0)) other = std::make_unique<Contender>([&s] { visit(*s, 1); });
  std::vector<TicketCookie> cookies;
  auto refill = [&] {
    s->pages().setCap(1);
    cookies.clear();
    while (!s->pages().tryAcquire(0)) {  // a request in flight: the rest queue
    }
    for (int i = 0; i < kBatch; ++i) cookies.push_back(s->tickets().issue(0, 0, 0).cookie);
    s->pages().release(0);
    s->pages().setCap(1 << 30);
  };
  refill();
  size_t next = 0;
  for (auto _ : state) {
    if (next == cookies.size()) {
      state.PauseTiming();
      refill();
      next = 0;
      state.ResumeTiming();
    }
    const TicketCookie& c = cookies[next++];
    if (s->pages().tryAcquire(0)) {
      if (!s->tickets().claim(c)) s->tickets().retire(c.ticket, false);
      s->pages().release(0);
    }
  }
}
BENCHMARK(BM_ClaimRelease)->Arg(0)->Arg(1)->ArgName("contended");

void BM_PollMillionWaiting(benchmark::State& state) {
  constexpr int kWaiting = 1000000;
  auto s = Segment::create(computeGeometry(kWaiting, 500, 2, 1024), 500, 100);
  for (int i = 0; i < 500; ++i) s->pages().tryAcquire(0);  // the room, full: requests in flight
  std::vector<TicketCookie> cookies;
  cookies.reserve(kWaiting);
  for (int i = 0; i < kWaiting; ++i) cookies.push_back(s->tickets().issue(0, 0, 0).cookie);
  // Scatter some finished tickets through the line, as abandoned visitors do.
  for (int i = 0; i < kWaiting; i += 97) s->tickets().retire(cookies[i].ticket, false);
  std::unique_ptr<Contender> other;
  std::mt19937_64 other_rng(2);
  if (state.range(0))
    other = std::make_unique<Contender>([&] { s->tickets().poll(cookies[other_rng() % kWaiting], 0, kTtl); });
  std::mt19937_64 rng(1);
  Millis now = 0;
  int64_t positions = 0;
  for (auto _ : state) {
    now += 7;  // mostly rate-limited polls; the position is computed either way
    const TicketView v = s->tickets().poll(cookies[rng() % kWaiting], now % 100000, kTtl);
    positions += v.position;
  }
  benchmark::DoNotOptimize(positions);
  state.counters["queue_depth"] = static_cast<double>(s->tickets().queueDepth());
}
BENCHMARK(BM_PollMillionWaiting)->Arg(0)->Arg(1)->ArgName("contended");

// ---------------------------------------------------------------- semaphores
void BM_PageAcquireRelease(benchmark::State& state) {
  auto s = Segment::create(geometry(1u << 12), 1000, 1000);
  std::unique_ptr<Contender> other;
  if (state.range(0))
    other = std::make_unique<Contender>([&s] {
      if (s->pages().tryAcquire(1)) s->pages().release(1);
    });
  for (auto _ : state)
    if (s->pages().tryAcquire(0)) s->pages().release(0);
}
BENCHMARK(BM_PageAcquireRelease)->Arg(0)->Arg(1)->ArgName("contended");

void BM_AssetAcquireRelease(benchmark::State& state) {
  auto s = Segment::create(geometry(1u << 12), 1000, 1000);
  std::unique_ptr<Contender> other;
  if (state.range(0))
    other = std::make_unique<Contender>([&s] {
      if (s->assets().tryAcquire(1)) s->assets().release(1);
    });
  for (auto _ : state)
    if (s->assets().tryAcquire(0)) s->assets().release(0);
}
BENCHMARK(BM_AssetAcquireRelease)->Arg(0)->Arg(1)->ArgName("contended");

// ---------------------------------------------------------------- passes
void BM_PassAcquireRelease(benchmark::State& state) {
  constexpr int kPasses = 20000;
  auto s = Segment::create(geometry(1u << 12, 1u << 16), 1000, 1000);
  std::vector<std::array<uint8_t, 16>> ids(kPasses);
  for (int n = 0; n < kPasses; ++n) {
    for (int b = 0; b < 16; ++b) ids[n][b] = passId(n, b);
    std::memcpy(ids[n].data(), &n, sizeof(n));
    PassHold h;
    s->passes().tryAcquire(ids[n].data(), PassProto::H1, 8, 0, 0, &h);
    s->passes().release(h, 0, 0);
  }
  std::unique_ptr<Contender> other;
  std::mt19937 other_rng(2);
  if (state.range(0))
    other = std::make_unique<Contender>([&] {
      PassHold h;
      if (s->passes().tryAcquire(ids[other_rng() % kPasses].data(), PassProto::H1, 8, 1, 0, &h) ==
          PassAcquire::Acquired)
        s->passes().release(h, 1, 0);
    });
  std::mt19937 rng(1);
  for (auto _ : state) {
    PassHold h;
    if (s->passes().tryAcquire(ids[rng() % kPasses].data(), PassProto::H1, 8, 0, 0, &h) == PassAcquire::Acquired)
      s->passes().release(h, 0, 0);
  }
}
BENCHMARK(BM_PassAcquireRelease)->Arg(0)->Arg(1)->ArgName("contended");

// ---------------------------------------------------------------- memory
void BM_SegmentBytesPerTicket(benchmark::State& state) {
  // The geometry a deployment with -max-queue 1000000 gets (cap 500, 4
  // workers; ring = 2^21 by the 2x headroom rule): bytes of the whole
  // mapping per waiting visitor, with the pass table sized for
  // state.range(0) passes (it does not grow with the queue).
  constexpr int64_t kLive = 1000000;
  const Geometry g = computeGeometry(kLive, 500, 4, static_cast<int32_t>(state.range(0)));
  auto s = Segment::create(g, 500, 64000);
  const Geometry no_passes = computeGeometry(kLive, 500, 4, 1);
  auto ring_only = Segment::create(no_passes, 500, 64000);
  for (auto _ : state) benchmark::DoNotOptimize(s->bytes());
  state.counters["ring"] = g.ring_size;
  state.counters["segment_MiB"] = static_cast<double>(s->bytes()) / (1024.0 * 1024.0);
  state.counters["bytes_per_live_ticket"] = static_cast<double>(s->bytes()) / static_cast<double>(kLive);
  state.counters["ring_bytes_per_entry"] = static_cast<double>(ring_only->bytes()) / g.ring_size;
}
BENCHMARK(BM_SegmentBytesPerTicket)->Iterations(1)->Arg(1024)->Arg(65536)->ArgName("passes");

}  // namespace

BENCHMARK_MAIN();
