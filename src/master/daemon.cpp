// Daemonising, the pid file and the worker user (see daemon.h).
#include "master/daemon.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace concert::master {
namespace {

// The pid recorded in `path`, 0 when the file is missing or unreadable.
pid_t readPid(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[32] = {};
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  char* end = nullptr;
  long pid = std::strtol(buf, &end, 10);
  return pid > 0 && pid < (1L << 30) ? static_cast<pid_t>(pid) : 0;
}

}  // namespace

bool daemonize(int* ready_fd, std::string* error) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    *error = std::string("daemon: pipe: ") + std::strerror(errno);
    return false;
  }
  pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("daemon: fork: ") + std::strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return false;
  }
  if (pid > 0) {
    // The original process: wait for the verdict of the daemon ('0', or '1'
    // and the error text). EOF without a verdict means it died during startup.
    close(fds[1]);
    std::string reply;
    char buf[512];
    for (;;) {
      ssize_t n = read(fds[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      reply.append(buf, static_cast<size_t>(n));
    }
    if (!reply.empty() && reply.front() == '0') _exit(0);
    if (reply.size() > 1)
      std::fprintf(stderr, "concert: %s\n", reply.c_str() + 1);
    else if (reply.empty())
      std::fprintf(stderr, "concert: the daemon exited during startup\n");
    _exit(1);
  }
  close(fds[0]);
  setsid();
  pid = fork();
  if (pid < 0) _exit(1);  // the original process reads EOF and exits 1
  if (pid > 0) _exit(0);
  if (chdir("/") != 0) _exit(1);
  umask(022);
  int null_fd = open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
    dup2(null_fd, STDERR_FILENO);
    if (null_fd > STDERR_FILENO) close(null_fd);
  }
  *ready_fd = fds[1];
  return true;
}

void reportDaemonReady(int ready_fd, bool ok, const std::string& error) {
  if (ready_fd < 0) return;
  std::string message = (ok ? "0" : "1") + (ok ? std::string() : error);
  ssize_t ignored = ::write(ready_fd, message.data(), message.size());
  (void)ignored;
  close(ready_fd);
}

bool PidFile::check(std::string* error) const {
  if (path_.empty()) return true;
  pid_t pid = readPid(path_);
  if (pid == 0 || pid == getpid()) return true;
  if (kill(pid, 0) == 0 || errno == EPERM) {
    *error = "-pid-file " + path_ + ": concert is already running as pid " + std::to_string(pid);
    return false;
  }
  return true;  // stale file of a dead process: overwritten by write()
}

bool PidFile::write(std::string* error) {
  if (path_.empty()) return true;
  int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = "-pid-file " + path_ + ": " + std::strerror(errno);
    return false;
  }
  std::string text = std::to_string(getpid()) + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int saved = errno;
  close(fd);
  if (!ok) {
    *error = "-pid-file " + path_ + ": " + std::strerror(saved);
    return false;
  }
  written_ = true;
  return true;
}

void PidFile::remove() {
  if (!written_) return;
  written_ = false;
  if (readPid(path_) == getpid()) unlink(path_.c_str());
}

bool resolveRunAs(const std::string& user, RunAs* out, std::string* error, std::string* warning) {
  *out = RunAs{};
  if (user.empty()) return true;
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  int rc = getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found);
  if (rc != 0 || found == nullptr) {
    *error = "-user " + user + ": no such user";
    return false;
  }
  if (geteuid() != 0) {
    *warning = "-user " + user + " ignored: not started as root";
    return true;
  }
  out->active = true;
  out->name = user;
  out->uid = pw.pw_uid;
  out->gid = pw.pw_gid;
  return true;
}

bool dropPrivileges(const RunAs& run_as, std::string* error) {
  if (!run_as.active) return true;
  if (initgroups(run_as.name.c_str(), run_as.gid) != 0) {
    *error = "-user " + run_as.name + ": initgroups: " + std::strerror(errno);
    return false;
  }
  if (setgid(run_as.gid) != 0) {
    *error = "-user " + run_as.name + ": setgid: " + std::strerror(errno);
    return false;
  }
  if (setuid(run_as.uid) != 0) {
    *error = "-user " + run_as.name + ": setuid: " + std::strerror(errno);
    return false;
  }
  if (run_as.uid != 0 && setuid(0) == 0) {
    *error = "-user " + run_as.name + ": root privileges could be regained";
    return false;
  }
  return true;
}

}  // namespace concert::master
