// Buffered getrandom nonces; see nonce.h.
#include "shm/nonce.h"

#include <pthread.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace concert::shm {

namespace {

constexpr int kBuffered = 64;

// Workers have no threads, but the master and the tests might; the mutex is
// uncontended in the workers and costs a few nanoseconds.
std::mutex buffer_mutex;
uint64_t buffer[kBuffered];
int available = 0;
std::once_flag atfork_once;

void forgetBuffer() {
  available = 0;
}

void refill() {
  auto* out = reinterpret_cast<unsigned char*>(buffer);
  size_t need = sizeof(buffer);
  while (need > 0) {
    const ssize_t n = getrandom(out, need, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      // No kernel randomness means no unguessable cookies: a broken host.
      abort();
    }
    out += n;
    need -= static_cast<size_t>(n);
  }
  available = kBuffered;
}

}  // namespace

uint64_t randomNonce() {
  std::call_once(atfork_once, [] { pthread_atfork(nullptr, nullptr, forgetBuffer); });
  std::lock_guard<std::mutex> lock(buffer_mutex);
  for (;;) {
    if (available == 0) refill();
    const uint64_t value = buffer[--available];
    buffer[available] = 0;
    if (value != 0) return value;  // 0 is reserved for "no nonce"
  }
}

}  // namespace concert::shm
