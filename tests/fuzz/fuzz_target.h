// Fuzz entry points shared by the libFuzzer builds (tests/fuzz/run.sh) and
// the corpus regression test (test_fuzz_corpus, built with g++ + ASan/UBSan).
//
// Every target is a plain function `int fuzzX(const uint8_t*, size_t)` that
// must never crash, leak or trip a sanitizer, whatever the bytes. Beyond "no
// crash", each target checks the properties its code promises (round trips,
// split-invariance, the framing rules for request heads) with FUZZ_ASSERT, which
// aborts so both libFuzzer and the corpus test see a failure with a message.
// CONCERT_FUZZ_ENTRY(fn) expands to LLVMFuzzerTestOneInput only in the
// libFuzzer build (-DCONCERT_LIBFUZZER), so the corpus test can link every
// target into one binary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace concert::fuzz {

int fuzzRequest(const uint8_t* data, size_t size);
int fuzzResponse(const uint8_t* data, size_t size);
int fuzzCookies(const uint8_t* data, size_t size);
int fuzzPass(const uint8_t* data, size_t size);
int fuzzTicket(const uint8_t* data, size_t size);
int fuzzConfig(const uint8_t* data, size_t size);
int fuzzPathList(const uint8_t* data, size_t size);
int fuzzPath(const uint8_t* data, size_t size);
int fuzzProxyProtocol(const uint8_t* data, size_t size);

[[noreturn]] inline void fuzzFail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: fuzz property violated: %s\n", file, line, what);
  std::abort();
}

// Deterministic split points taken from the input itself, so a crash file
// replays the same feeds: a small xorshift seeded from the first bytes.
class Splitter {
 public:
  explicit Splitter(uint64_t seed) : state_(seed | 1) {}
  // Next piece length in [1, remaining].
  size_t next(size_t remaining) {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    if (remaining <= 1) return remaining;
    // Mostly small pieces (byte-at-a-time edges), sometimes everything.
    switch (state_ % 4) {
      case 0: return 1;
      case 1: return 1 + (state_ >> 8) % (remaining < 16 ? remaining : 16);
      case 2: return 1 + (state_ >> 8) % remaining;
      default: return remaining;
    }
  }

 private:
  uint64_t state_;
};

inline uint64_t seedFrom(const uint8_t* data, size_t size) {
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < size && i < 8; ++i) seed = (seed ^ data[i]) * 0x100000001b3ull;
  return seed ^ size;
}

}  // namespace concert::fuzz

#define FUZZ_ASSERT(cond) \
  do {                    \
    if (!(cond)) ::concert::fuzz::fuzzFail(__FILE__, __LINE__, #cond); \
  } while (0)

#ifdef CONCERT_LIBFUZZER
#define CONCERT_FUZZ_ENTRY(fn) \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return ::concert::fuzz::fn(data, size); }
#else
#define CONCERT_FUZZ_ENTRY(fn)
#endif
