// The error/lifecycle log. One line per event:
//   2026/11/30 03:10:16 [info] master 4242 gen 1: worker 0 started pid 4243
// time, level, role (master / worker N), pid, generation, then the message.
// Lifecycle messages are worded stably so tests and runbooks can grep them.
// Writes are single write(2) calls on an O_APPEND descriptor, so lines from
// the master and every worker never interleave mid-line.
#pragma once

#include <string>

namespace concert::log {

enum class Level { Debug, Info, Warn, Error };

// Identity printed on every line; set once per process (after fork).
void setRole(const std::string& role);  // "master", "worker 3"
void setGeneration(unsigned generation);

// Where lines go. An empty path means stderr. Returns false (errno set) when
// the file cannot be opened; the previous destination stays in use.
bool openErrorLog(const std::string& path);
bool reopenErrorLog();  // SIGUSR1; same path as the last successful open
int errorLogFd();

void write(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace concert::log

#define LOG_DEBUG(...) ::concert::log::write(::concert::log::Level::Debug, __VA_ARGS__)
#define LOG_INFO(...) ::concert::log::write(::concert::log::Level::Info, __VA_ARGS__)
#define LOG_WARN(...) ::concert::log::write(::concert::log::Level::Warn, __VA_ARGS__)
#define LOG_ERROR(...) ::concert::log::write(::concert::log::Level::Error, __VA_ARGS__)
