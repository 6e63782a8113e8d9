// The state dir (-state-dir): where the waiting line outlives the process.
//
// It holds three files:
//   segment       the shared segment itself (shm/segment.h), mapped by
//                 every Concert process; its header names its layout
//                 version and geometry.
//   admit-secret  the generated admit secret (config/loader.cpp), when
//                 CONCERT_ADMIT_SECRET is not set.
//   lock          held (flock) by the running master: two masters never
//                 share a line.
// On a tmpfs (/run/concert) the segment lives in memory and goes with a
// reboot; on a disk it would outlive one, so a segment made before this
// boot (its times are of an earlier boot's monotonic clock) is not used.
//
// Opening it at start:
//   no segment            a new one, written beside and renamed into place;
//   another layout        refused: the start fails, naming both versions,
//                         and the file is left as it was;
//   an earlier boot       set aside as segment.earlier-boot, a new one made;
//   this binary's layout  attached; what the previous master's processes held
//                         is reclaimed (those still draining keep their
//                         slots); if the configuration needs a larger
//                         geometry (a longer -max-queue, more workers), the
//                         state is copied in order into a new segment of the
//                         larger geometry, renamed over the old one.
// A geometry never shrinks across a restart: each table keeps the larger of
// its old and its configured size, so nobody's ticket has to go.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shm/segment.h"

namespace concert::master {

struct StateOpened {
  std::unique_ptr<shm::Segment> segment;
  int lock_fd = -1;         // close-on-exec; released when the master exits
  bool attached = false;    // the line of an earlier master
  std::vector<shm::WorkerSlot> draining;  // slots of the earlier master's workers still running
  std::vector<std::string> notes;         // what happened, for the log
};

// Opens (or makes) the segment in `dir` for a configuration wanting
// `wanted`; the caps apply to a new segment. False with `error` set (naming
// the state dir) when the start must fail.
// The page slots of requests that died with the previous run's workers stay
// in quarantine for `quarantine_for` (shm/semaphore.h).
bool openStateDir(const std::string& dir, const shm::Geometry& wanted, int32_t page_cap, int32_t asset_cap,
                  int32_t long_lived_cap, Millis quarantine_for, StateOpened* out, std::string* error);

// Takes the state dir's lock again (a binary upgrade: the new image of the
// same master); -1 with `error` set when another master holds it.
int lockStateDir(const std::string& dir, std::string* error);

// A reload that grows the segment: a new segment of `geometry` in
// DIR/segment.new, then put in place of DIR/segment once filled.
std::unique_ptr<shm::Segment> newStateSegment(const std::string& dir, const shm::Geometry& geometry,
                                              std::string* error);
bool placeStateSegment(const std::string& dir, std::string* error);
void discardStateSegment(const std::string& dir);

// Whether `pid` is a running process (not a zombie).
bool processRunning(int pid);

// The larger of two geometries, table by table.
shm::Geometry largerGeometry(const shm::Geometry& a, const shm::Geometry& b);

}  // namespace concert::master
