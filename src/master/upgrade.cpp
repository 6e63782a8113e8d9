// Binary upgrade: the handover across exec (see upgrade.h).
#include "master/upgrade.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>

#include "common/clock.h"
#include "shm/segment.h"

namespace concert::master {
namespace {

constexpr const char* kHandoverVar = "CONCERT_UPGRADE";
constexpr const char* kCheckVar = "CONCERT_UPGRADE_CHECK";
constexpr Millis kCheckTimeout = 10'000;

void setCloexec(int fd, bool on) {
  if (fd < 0) return;
  const int flags = fcntl(fd, F_GETFD);
  if (flags >= 0) fcntl(fd, F_SETFD, on ? flags | FD_CLOEXEC : flags & ~FD_CLOEXEC);
}

std::vector<int> allFds(const Handover& h) {
  std::vector<int> fds = {h.segment_fd, h.secret_fd};
  fds.insert(fds.end(), h.eventfds.begin(), h.eventfds.end());
  fds.insert(fds.end(), h.listeners.begin(), h.listeners.end());
  fds.insert(fds.end(), h.admin_listeners.begin(), h.admin_listeners.end());
  for (const Handover::Worker& w : h.workers) fds.push_back(w.control_fd);
  return fds;
}

std::string joinInts(const std::vector<int>& values) {
  std::string out;
  for (int v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);
  }
  return out;
}

// segment=5;events=6,7;public=8;admin=;workers=0:123:2:1:0:9,1:124:1:1:1:10;generation=2;agent=125;secret=-1
// (a worker: slot:pid:generation:child:draining:control fd)
std::string encode(const Handover& h) {
  std::string workers;
  for (const Handover::Worker& w : h.workers) {
    if (!workers.empty()) workers += ',';
    workers.append(std::to_string(w.slot)).append(":").append(std::to_string(w.pid)).append(":");
    workers.append(std::to_string(w.generation)).append(w.child ? ":1" : ":0").append(w.draining ? ":1" : ":0");
    workers.append(":").append(std::to_string(w.control_fd));
  }
  return "segment=" + std::to_string(h.segment_fd) + ";events=" + joinInts(h.eventfds) +
         ";public=" + joinInts(h.listeners) + ";admin=" + joinInts(h.admin_listeners) + ";workers=" + workers +
         ";generation=" + std::to_string(h.generation) + ";agent=" + std::to_string(h.agent_pid) +
         ";secret=" + std::to_string(h.secret_fd);
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

std::vector<int> parseInts(const std::string& text) {
  std::vector<int> out;
  for (const std::string& part : split(text, ',')) out.push_back(std::stoi(part));
  return out;
}

std::vector<char*> argvOf(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

}  // namespace

std::string executablePath(const std::string& argv0, const std::string& start_dir) {
  if (argv0.empty()) return "/proc/self/exe";
  if (argv0.front() == '/') return argv0;
  if (argv0.find('/') != std::string::npos) return start_dir + "/" + argv0;
  const char* path = std::getenv("PATH");
  for (const std::string& dir : split(path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", ':')) {
    const std::string candidate = dir + "/" + argv0;
    if (access(candidate.c_str(), X_OK) == 0) return candidate.front() == '/' ? candidate : start_dir + "/" + candidate;
  }
  return argv0;
}

bool checkNewBinary(const std::string& exe, const std::vector<std::string>& args, int segment_fd,
                    std::string* output) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    *output = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  std::vector<std::string> check = args;
  if (check.empty()) check.push_back(exe);
  check.push_back("-t");
  const std::string fd_text = std::to_string(segment_fd);
  pid_t pid = fork();
  if (pid < 0) {
    *output = std::string("fork: ") + std::strerror(errno);
    close(out[0]);
    close(out[1]);
    return false;
  }
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    setCloexec(segment_fd, false);
    setenv(kCheckVar, fd_text.c_str(), 1);
    std::vector<char*> argv = argvOf(check);
    execv(exe.c_str(), argv.data());
    std::fprintf(stderr, "cannot execute %s: %s\n", exe.c_str(), std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  const Millis deadline = monotonicMs() + kCheckTimeout;
  char buf[4096];
  for (;;) {
    const Millis left = deadline - monotonicMs();
    if (left <= 0) break;
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    if (output->size() < 16384) output->append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  // Its output ends a moment before it can be reaped: waited for up to the
  // same deadline.
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 && monotonicMs() < deadline) usleep(5'000);
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    *output += "(no answer within 10 s)";
    return false;
  }
  while (!output->empty() && output->back() == '\n') output->pop_back();
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int secretMemfd(const std::string& secret) {
  int fd = memfd_create("concert-secret", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (write(fd, secret.data(), secret.size()) != static_cast<ssize_t>(secret.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string readSecretMemfd(int fd) {
  std::string secret;
  char buf[1024];
  ssize_t n;
  off_t at = 0;
  while ((n = pread(fd, buf, sizeof buf, at)) > 0) {
    secret.append(buf, static_cast<size_t>(n));
    at += n;
  }
  close(fd);
  return secret;
}

std::string execWithHandover(const std::string& exe, const std::vector<std::string>& args, const Handover& handover) {
  const std::vector<int> fds = allFds(handover);
  for (int fd : fds) setCloexec(fd, false);
  const std::string value = encode(handover);
  setenv(kHandoverVar, value.c_str(), 1);
  std::vector<std::string> copy = args;
  if (copy.empty()) copy.push_back(exe);
  std::vector<char*> argv = argvOf(copy);
  execv(exe.c_str(), argv.data());
  const int error = errno;
  unsetenv(kHandoverVar);
  for (int fd : fds) setCloexec(fd, true);
  return std::strerror(error);
}

std::optional<Handover> takeHandover(std::string* error) {
  const char* value = std::getenv(kHandoverVar);
  if (value == nullptr) return std::nullopt;
  const std::string text = value;
  unsetenv(kHandoverVar);
  Handover h;
  try {
    for (const std::string& field : split(text, ';')) {
      const size_t eq = field.find('=');
      if (eq == std::string::npos) continue;
      const std::string key = field.substr(0, eq);
      const std::string val = field.substr(eq + 1);
      if (key == "segment") h.segment_fd = std::stoi(val);
      if (key == "events") h.eventfds = parseInts(val);
      if (key == "public") h.listeners = parseInts(val);
      if (key == "admin") h.admin_listeners = parseInts(val);
      if (key == "generation") h.generation = static_cast<uint32_t>(std::stoul(val));
      if (key == "agent") h.agent_pid = std::stoi(val);
      if (key == "secret") h.secret_fd = std::stoi(val);
      if (key == "workers") {
        for (const std::string& w : split(val, ',')) {
          const std::vector<std::string> parts = split(w, ':');
          if (parts.size() != 6) throw std::invalid_argument(w);
          h.workers.push_back(Handover::Worker{static_cast<uint32_t>(std::stoul(parts[0])), std::stoi(parts[1]),
                                               static_cast<uint32_t>(std::stoul(parts[2])), parts[3] == "1",
                                               parts[4] == "1", std::stoi(parts[5])});
        }
      }
    }
  } catch (const std::exception&) {
    *error = std::string(kHandoverVar) + " is not a handover Concert wrote: " + text;
    return std::nullopt;
  }
  if (h.segment_fd < 0 || h.listeners.empty()) {
    *error = std::string(kHandoverVar) + " names no segment or no listener: " + text;
    return std::nullopt;
  }
  for (int fd : allFds(h)) setCloexec(fd, true);
  return h;
}

bool checkHandedSegment(std::string* error) {
  const char* value = std::getenv(kCheckVar);
  if (value == nullptr) return true;
  try {
    shm::Segment::checkFile(std::atoi(value));
  } catch (const std::exception& e) {
    *error = std::string("the running segment: ") + e.what();
    return false;
  }
  return true;
}

}  // namespace concert::master
