#include "common/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace concert::log {
namespace {

std::string g_role = "master";
unsigned g_generation = 1;
int g_fd = STDERR_FILENO;
std::string g_path;

const char* levelName(Level level) {
  switch (level) {
    case Level::Debug: return "debug";
    case Level::Info: return "info";
    case Level::Warn: return "warn";
    case Level::Error: return "error";
  }
  return "info";
}

}  // namespace

void setRole(const std::string& role) {
  g_role = role;
}
void setGeneration(unsigned generation) {
  g_generation = generation;
}
int errorLogFd() {
  return g_fd;
}

bool openErrorLog(const std::string& path) {
  if (path.empty()) {
    if (g_fd != STDERR_FILENO) close(g_fd);
    g_fd = STDERR_FILENO;
    g_path.clear();
    return true;
  }
  int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  if (g_fd != STDERR_FILENO) close(g_fd);
  g_fd = fd;
  g_path = path;
  return true;
}

bool reopenErrorLog() {
  if (g_path.empty()) return true;
  std::string path = g_path;
  return openErrorLog(path);
}

void write(Level level, const char* fmt, ...) {
  int saved_errno = errno;
  char line[4096];
  time_t now = time(nullptr);
  struct tm tm;
  localtime_r(&now, &tm);
  int n = static_cast<int>(strftime(line, sizeof line, "%Y/%m/%d %H:%M:%S", &tm));
  n += snprintf(line + n, sizeof line - n, " [%s] %s %d gen %u: ", levelName(level), g_role.c_str(),
                static_cast<int>(getpid()), g_generation);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
  va_end(ap);
  if (m < 0) m = 0;
  n += m;
  if (n > static_cast<int>(sizeof line) - 2) n = static_cast<int>(sizeof line) - 2;
  line[n++] = '\n';
  ssize_t ignored = ::write(g_fd, line, static_cast<size_t>(n));
  (void)ignored;
  errno = saved_errno;
}

}  // namespace concert::log
