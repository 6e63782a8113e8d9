// Access log formatting and buffered writing; see access_log.h.
#include "worker/access_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace concert::worker {

namespace {

constexpr size_t kFlushThreshold = 64 * 1024;

// Quoted fields escape '"', '\' and control bytes as \xHH (nginx style), so
// a client cannot forge a line or a field.
void appendEscaped(std::string& out, std::string_view value) {
  static const char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : value) {
    if (c == '"' || c == '\\' || c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
}

void appendQuotedOrDash(std::string& out, const http::Request& request, std::string_view name) {
  out += '"';
  if (http::hasHeader(request.headers, name))
    appendEscaped(out, request.header(name));
  else
    out += '-';
  out += '"';
}

}  // namespace

void formatAccessLine(std::string& out, const http::Request& request, int status, uint64_t bytes, double seconds,
                      admission::Outcome outcome, time_t wall) {
  static thread_local time_t cached_wall = -1;
  static thread_local char cached_time[40];
  if (wall != cached_wall) {
    struct tm tm;
    localtime_r(&wall, &tm);
    strftime(cached_time, sizeof cached_time, "[%d/%b/%Y:%H:%M:%S %z]", &tm);
    cached_wall = wall;
  }
  // The client address (after -trusted-proxies); a head refused before
  // dispatch has none yet, its peer stands in.
  appendEscaped(out, request.client_ip.empty() ? request.peer_ip : request.client_ip);
  out += " - - ";
  out += cached_time;
  out += " \"";
  appendEscaped(out, request.method);
  out += ' ';
  appendEscaped(out, request.target);
  out += request.http_minor == 0 ? " HTTP/1.0\" " : " HTTP/1.1\" ";
  out += std::to_string(status);
  out += ' ';
  out += std::to_string(bytes);
  out += ' ';
  appendQuotedOrDash(out, request, "Referer");
  out += ' ';
  appendQuotedOrDash(out, request, "User-Agent");
  char tail[48];
  snprintf(tail, sizeof tail, " %.3f ", seconds < 0 ? 0.0 : seconds);
  out += tail;
  out += admission::outcomeName(outcome);
  out += '\n';
}

AccessLog::~AccessLog() {
  flush();
  if (fd_ > STDOUT_FILENO) close(fd_);
}

bool AccessLog::open(bool enabled, const std::string& path) {
  enabled_ = enabled;
  path_ = path;
  if (!enabled_) return true;
  if (path_.empty() || path_ == "-" || path_ == "/dev/stdout") {
    fd_ = STDOUT_FILENO;
    return true;
  }
  int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  if (fd_ > STDOUT_FILENO) close(fd_);
  fd_ = fd;
  return true;
}

bool AccessLog::reopen() {
  if (!enabled_) return true;
  flush();
  if (fd_ == STDOUT_FILENO) return true;
  return open(enabled_, path_);  // on failure the previous descriptor (if any) stays in use
}

void AccessLog::record(const http::Request& request, int status, uint64_t bytes, double seconds, admission::Outcome outcome,
                       time_t wall) {
  if (!enabled_) return;
  formatAccessLine(buffer_, request, status, bytes, seconds, outcome, wall);
  if (buffer_.size() >= kFlushThreshold) flush();
}

void AccessLog::flush() {
  if (buffer_.empty() || fd_ < 0) {  // fd_ < 0: the file could not be opened; lines are dropped
    buffer_.clear();
    return;
  }
  // One write(2) for the whole buffer: O_APPEND keeps it contiguous in the file.
  size_t off = 0;
  while (off < buffer_.size()) {
    ssize_t n = ::write(fd_, buffer_.data() + off, buffer_.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;  // disk full or closed: drop rather than block the event loop
    }
    off += static_cast<size_t>(n);
  }
  buffer_.clear();
}

}  // namespace concert::worker
