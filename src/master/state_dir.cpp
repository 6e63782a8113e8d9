// The state dir (see state_dir.h for its files and the rules of a start).
#include "master/state_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

#include "common/clock.h"

namespace concert::master {
namespace {

// A worker whose heartbeat is older than this is not running any more,
// whatever process has its pid now (the master's heartbeat timeout).
constexpr Millis kSilentLimit = 30'000;

std::string geometryText(const shm::Geometry& g) {
  return "ring " + std::to_string(g.ring_size) + ", " + std::to_string(g.worker_slots) + " worker slots, pass table " +
         std::to_string(g.pass_table_size) + ", revocations " + std::to_string(g.revocation_table_size) +
         ", clients " + std::to_string(g.client_table_size);
}

bool sameGeometry(const shm::Geometry& a, const shm::Geometry& b) {
  return a.ring_size == b.ring_size && a.worker_slots == b.worker_slots && a.pass_table_size == b.pass_table_size &&
         a.revocation_table_size == b.revocation_table_size && a.client_table_size == b.client_table_size;
}

// A new segment of `geometry` in DIR/segment.new, not yet in place.
std::unique_ptr<shm::Segment> createBeside(const std::string& dir, const shm::Geometry& geometry, int32_t page_cap,
                                           int32_t asset_cap, int32_t long_lived_cap, std::string* error) {
  const std::string path = dir + "/segment.new";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = "cannot create " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  try {
    return shm::Segment::create(geometry, page_cap, asset_cap, long_lived_cap, fd);
  } catch (const std::exception& e) {
    ::unlink(path.c_str());
    *error = path + ": " + e.what();
    return nullptr;
  }
}

bool putInPlace(const std::string& dir, std::string* error) {
  const std::string from = dir + "/segment.new";
  const std::string to = dir + "/segment";
  if (::rename(from.c_str(), to.c_str()) == 0) return true;
  *error = "cannot rename " + from + " to " + to + ": " + std::strerror(errno);
  ::unlink(from.c_str());
  return false;
}

}  // namespace

std::unique_ptr<shm::Segment> newStateSegment(const std::string& dir, const shm::Geometry& geometry,
                                              std::string* error) {
  return createBeside(dir, geometry, 1, 1, 1, error);
}

bool placeStateSegment(const std::string& dir, std::string* error) {
  return putInPlace(dir, error);
}

void discardStateSegment(const std::string& dir) {
  ::unlink((dir + "/segment.new").c_str());
}

bool processRunning(int pid) {
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno != EPERM)) return false;
  // A zombie (its parent has not reaped it yet) runs no more.
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return true;
  const std::string stat(buf, static_cast<size_t>(n));
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

shm::Geometry largerGeometry(const shm::Geometry& a, const shm::Geometry& b) {
  shm::Geometry g;
  g.ring_size = std::max(a.ring_size, b.ring_size);
  g.worker_slots = std::max(a.worker_slots, b.worker_slots);
  g.pass_table_size = std::max(a.pass_table_size, b.pass_table_size);
  g.revocation_table_size = std::max(a.revocation_table_size, b.revocation_table_size);
  g.client_table_size = std::max(a.client_table_size, b.client_table_size);
  return g;
}

int lockStateDir(const std::string& dir, std::string* error) {
  const std::string path = dir + "/lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = "state-dir " + dir + ": cannot open " + path + ": " + std::strerror(errno);
    return -1;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : std::string("?");
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    *error = "state-dir " + dir + " is in use by another Concert master (pid " + who + ")";
    ::close(fd);
    return -1;
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the pid in it; the pid is only for the message.
  }
  return fd;
}

bool openStateDir(const std::string& dir, const shm::Geometry& wanted, int32_t page_cap, int32_t asset_cap,
                  int32_t long_lived_cap, Millis quarantine_for, StateOpened* out, std::string* error) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = "state-dir " + dir + ": cannot create it: " + std::strerror(errno);
    return false;
  }
  out->lock_fd = lockStateDir(dir, error);
  if (out->lock_fd < 0) return false;
  auto fail = [&](const std::string& why) {
    *error = "state-dir " + dir + ": " + why;
    ::close(out->lock_fd);
    out->lock_fd = -1;
    out->segment.reset();
    return false;
  };

  const std::string path = dir + "/segment";
  std::string why;
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0 && errno != ENOENT) return fail("cannot open " + path + ": " + std::strerror(errno));
  if (fd >= 0) {
    try {
      out->segment = shm::Segment::attach(fd);
    } catch (const std::exception& e) {
      return fail(path + ": " + e.what() +
                  "; it was left as it is (move it away to start with an empty line, or run the binary that made it)");
    }
    if (!out->segment->thisBoot()) {
      out->segment.reset();
      const std::string aside = dir + "/segment.earlier-boot";
      if (::rename(path.c_str(), aside.c_str()) != 0)
        return fail("cannot move " + path + " aside: " + std::strerror(errno));
      out->notes.push_back("state-dir " + dir + ": the segment was made before this boot; moved to " + aside +
                           ", starting with an empty line");
    }
  }
  if (!out->segment) {
    out->segment = createBeside(dir, wanted, page_cap, asset_cap, long_lived_cap, &why);
    if (!out->segment || !putInPlace(dir, &why)) return fail(why);
    out->notes.push_back("state-dir " + dir + ": new segment, " + geometryText(wanted));
    return true;
  }

  out->attached = true;
  const Millis now = monotonicMs();
  const shm::Segment::Recovered recovered =
      out->segment->recover(processRunning, now, kSilentLimit, now + quarantine_for);
  out->draining = recovered.draining;
  const shm::ReclaimReport& r = recovered.reclaimed;
  out->notes.push_back(
      "state-dir " + dir + ": the line of the previous run kept (" +
      std::to_string(out->segment->tickets().liveQueueDepth()) + " waiting); reclaimed from " +
      std::to_string(recovered.slots_reclaimed) + " ended worker(s) " + std::to_string(r.page_slots) +
      " page slots (" + std::to_string(r.quarantined) + " in quarantine: the origin may still serve them), " + std::to_string(r.tickets_finished) + " tickets, " + std::to_string(r.asset_slots) +
      " asset slots, " + std::to_string(r.pass_holds) + " pass holds, " + std::to_string(r.long_lived_slots) +
      " long-lived connections" +
      (recovered.draining.empty() ? std::string()
                                  : "; " + std::to_string(recovered.draining.size()) + " still draining"));

  const shm::Geometry have = out->segment->geometry();
  const shm::Geometry target = largerGeometry(have, wanted);
  if (sameGeometry(have, target)) return true;
  if (!recovered.draining.empty()) {
    out->notes.push_back("state-dir " + dir + ": the configuration wants " + geometryText(target) + "; keeping " +
                         geometryText(have) + " while workers of the previous run still use it (restart again)");
    return true;
  }
  std::unique_ptr<shm::Segment> grown = createBeside(dir, target, page_cap, asset_cap, long_lived_cap, &why);
  if (!grown) return fail(why);
  if (!out->segment->copyInto(*grown, &why)) {
    ::unlink((dir + "/segment.new").c_str());
    out->notes.push_back("state-dir " + dir + ": keeping " + geometryText(have) + ": " + why);
    return true;
  }
  if (!putInPlace(dir, &why)) return fail(why);
  out->segment = std::move(grown);
  out->notes.push_back("state-dir " + dir + ": segment grown from " + geometryText(have) + " to " +
                       geometryText(target) + ", " + std::to_string(out->segment->tickets().liveQueueDepth()) +
                       " waiting kept in order");
  return true;
}

}  // namespace concert::master
