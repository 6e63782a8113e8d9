// test_fuzz_corpus: replays every file of every fuzz corpus once through the
// same entry functions libFuzzer drives (tests/fuzz/fuzz_*.cpp), under
// ASan+UBSan, as part of `make test`. The corpus holds hand-written seeds and
// the minimal regression input of every bug the fuzzers found, so a
// regression fails here without a fuzzing run. A property violation or a
// sanitizer report aborts (that is what libFuzzer needs), so every file is
// replayed in a forked child: one failing input is reported by name and the
// rest of the corpus still runs.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_target.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace {

namespace fs = std::filesystem;
using Entry = int (*)(const uint8_t*, size_t);

size_t replayCorpus(const char* target, Entry entry) {
  fs::path dir = fs::path(CONCERT_FUZZ_CORPUS) / target;
  REQUIRE_MESSAGE(fs::is_directory(dir), "missing corpus directory " << dir.string());
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // doctest's crash handlers would report a second, bogus run from the
      // child; let the abort (after the property or sanitizer message) kill it.
      for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE}) std::signal(sig, SIG_DFL);
      int rc = entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      std::fflush(nullptr);
#if defined(__SANITIZE_ADDRESS__)
      // _exit skips LeakSanitizer's exit-time check; run it here.
      if (__lsan_do_recoverable_leak_check() != 0) ::_exit(4);
#endif
      ::_exit(rc == 0 ? 0 : 3);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0),
                  "corpus file " << file.string() << " failed (see the message above)");
  }
  CHECK(!files.empty());
  return files.size();
}

}  // namespace

TEST_CASE("request corpus") {
  replayCorpus("request", &concert::fuzz::fuzzRequest);
}
TEST_CASE("response corpus") {
  replayCorpus("response", &concert::fuzz::fuzzResponse);
}
TEST_CASE("cookies corpus") {
  replayCorpus("cookies", &concert::fuzz::fuzzCookies);
}
TEST_CASE("pass corpus") {
  replayCorpus("pass", &concert::fuzz::fuzzPass);
}
TEST_CASE("config corpus") {
  replayCorpus("config", &concert::fuzz::fuzzConfig);
}
TEST_CASE("pathlist corpus") {
  replayCorpus("pathlist", &concert::fuzz::fuzzPathList);
}
TEST_CASE("path corpus") {
  replayCorpus("path", &concert::fuzz::fuzzPath);
}
TEST_CASE("proxy_protocol corpus") {
  replayCorpus("proxy_protocol", &concert::fuzz::fuzzProxyProtocol);
}
TEST_CASE("ticket corpus") {
  replayCorpus("ticket", &concert::fuzz::fuzzTicket);
}
