// The access log: Combined Log Format, then the request time in seconds and
// the outcome word:
//   127.0.0.1 - - [30/Nov/2026:03:10:16 +0000] "GET /p?q=1 HTTP/1.1" 200 1234 "ref" "ua" 0.001 admitted
// The first field is the client address: the peer, or behind a trusted proxy
// the client it names (-trusted-proxies, http/client_address.h).
// Each worker appends to the same file (O_APPEND) from its own buffer; lines
// are whole in every write(2), so workers never interleave mid-line. The
// buffer is flushed at least every 100 ms (the worker's timer), when it
// passes 64 KiB, and on exit. SIGUSR1 reopens the file (logrotate). A worker
// that dies loses at most the last 100 ms of its lines.
#pragma once

#include <ctime>
#include <string>

#include "admission/guard.h"
#include "http/request.h"

namespace concert::worker {

// Appends one line (with '\n') for `request` to `out`. `wall` is the time the
// request arrived; `seconds` its duration; `bytes` the body bytes sent.
void formatAccessLine(std::string& out, const http::Request& request, int status, uint64_t bytes, double seconds,
                      admission::Outcome outcome, time_t wall);

class AccessLog {
 public:
  AccessLog() = default;
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  // `enabled` false: every call is a no-op. An empty path means stdout.
  bool open(bool enabled, const std::string& path);
  bool reopen();
  bool enabled() const { return enabled_; }
  void record(const http::Request& request, int status, uint64_t bytes, double seconds, admission::Outcome outcome, time_t wall);
  void flush();

 private:
  bool enabled_ = false;
  std::string path_;
  int fd_ = -1;
  std::string buffer_;
};

}  // namespace concert::worker
