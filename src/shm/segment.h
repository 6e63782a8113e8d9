// The shared-memory segment: the state every Concert process shares.
//
// Created once by the master before the first fork (a shared mapping of a
// file, made through Boost.Interprocess: a memfd, or the segment file of
// -state-dir), carved once into fixed arrays and never allocated from again.
// Pointer-free: integers, 64-bit lock-free atomics and indices only, so it
// means the same thing in every process, and to a master that maps it again
// after a restart, a crash or a binary upgrade (attach).
//
// The segment is a set of subsystems, each a thin handle over its part of
// the carved layout (layout.h), each with its own header:
//   tickets()  the ticket ring: FIFO page admission        tickets.h
//   lineRate() the line's pace and visitors' ETA            line_rate.h
//   pages()    the page semaphore (the room's cap)          semaphore.h
//   assets()   the global asset semaphore                   semaphore.h
//   passes()   per-pass asset holds                         pass_table.h
//   revocations()  passes whose session the origin ended     revocations.h
//   once()         single-use tokens, promoted tickets         once.h
//   clients()  per-client live tickets, strikes and bans   clients.h
//   histograms()  queue wait and origin response times     histograms.h
//   history()  the dashboard's last hour, a sample a second  history.h
//   slots()    worker slots, heartbeats and wake-ups        worker_slots.h
//   stats()    counters, generation, the stats snapshot     stats.h
//   modes()    the room's mode (open, pause, ...)           modes.h
//   admitRate()  the admission rate's bucket                admit_rate.h
//   sale()     a scheduled sale's start and pre-queue        sale.h
//   cluster()  the engine's line cached, the host's share    cluster.h
//   line()     the line in effect: tickets() or cluster()    line.h
// The value types they take and return are in types.h; what every handle
// holds, and its duty towards a dead worker (reclaim), in handle.h.
//
// Crash safety is the organising rule. A worker can be SIGKILLed between any
// two instructions; whatever it held must be recoverable by the master from
// what is in the segment alone (reclaimDeadWorker). Hence:
//   * semaphores count per worker slot (each slot owns its own counter, the
//     total is the sum), so a dead worker's holds are exactly its counters;
//   * every ticket that is in flight records its owner slot;
//   * pass-table holds are per (entry, slot) cells;
//   * table entries being written (pass, revocation, client) and creation
//     locks name their writer's slot.
// Each subsystem's header says what a SIGKILL leaves in its words, and its
// reclaim(slot) undoes exactly that.
//
// These headers are the whole public surface of src/shm/. They include
// nothing from libevent, yaml-cpp, the HTTP code or the rest of Concert.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shm/admit_rate.h"
#include "shm/capacity.h"
#include "shm/clients.h"
#include "shm/cluster.h"
#include "shm/line.h"
#include "shm/histograms.h"
#include "shm/history.h"
#include "shm/line_rate.h"
#include "shm/modes.h"
#include "shm/pass_table.h"
#include "shm/once.h"
#include "shm/revocations.h"
#include "shm/sale.h"
#include "shm/semaphore.h"
#include "shm/sessions.h"
#include "shm/stats.h"
#include "shm/tickets.h"
#include "shm/types.h"
#include "shm/worker_slots.h"

namespace concert::shm {

class Segment {
 public:
  // Master only, before any fork. `page_cap`, `asset_cap` and
  // `long_lived_cap` are the starting caps; asset_cap is fixed while any
  // process maps the segment. Carved into `fd` (sized here; a file of the
  // state dir), or into a new memfd when fd < 0; the segment owns the fd.
  // Creates one eventfd per worker slot (inherited across fork).
  static std::unique_ptr<Segment> create(const Geometry& geometry, int32_t page_cap, int32_t asset_cap,
                                         int32_t long_lived_cap = 10000, int fd = -1);
  // Master only: maps the segment an earlier master made in `fd` (the state
  // dir's file after a restart; the fd handed over by a binary upgrade).
  // Throws std::runtime_error, leaving the file untouched, when its header
  // is not this binary's (checkHeader). `eventfds`: the slots' eventfds
  // handed over with it (an upgrade), else new ones. Owns fd and eventfds.
  static std::unique_ptr<Segment> attach(int fd, std::vector<int> eventfds = {});
  ~Segment();

  // The file the segment is mapped from, close-on-exec (a binary upgrade
  // clears the flag to hand it over), and the slots' eventfds.
  int fd() const;
  const std::vector<int>& eventFds() const { return slots_.eventFds(); }
  // Made since this machine booted: its times are of this boot's monotonic
  // clock. A segment of an earlier boot (a state dir that is not a tmpfs)
  // is not used.
  bool thisBoot() const;

  // A restart: the previous master and its workers are gone (`alive(pid)`
  // says false for the pid a slot names, or the slot's heartbeat is older
  // than `silent_limit`) or still draining (their slots stay theirs,
  // returned in `draining`). Returns what dead
  // processes held (reclaimDeadWorker per slot) and finishes what the
  // previous master's janitor left half done.
  struct Recovered {
    ReclaimReport reclaimed;
    int slots_reclaimed = 0;
    std::vector<WorkerSlot> draining;
  };
  Recovered recover(bool (*alive)(int pid), Millis now, Millis silent_limit, Millis quarantine_until = 0);

  // A restart into another geometry (a larger -max-queue, more workers):
  // copies this segment's state into `to`, a fresh segment. Every live
  // ticket keeps its number, nonce, state and place; clients, bans, passes,
  // revocations, counters, marks, the history and the cluster cache come
  // along, and each slot's holds as they are. Nothing may move meanwhile:
  // no process runs on this segment (recover() first), or every one that
  // maps it is parked between two of its events; nobody maps `to` yet.
  // False, `to` to be thrown away, when some table of `to` is smaller or a
  // sale's pre-queue block is open; `why` says which.
  bool copyInto(Segment& to, std::string* why) const;

  // A segment grown while Concert runs (a reload with a longer
  // -max-queue): the master parks every process that maps this segment
  // between two of its events, copies it into a larger one (copyInto: every
  // slot's holds come along), and each process moves its view to the copy.
  // The handles stay the same objects. Same worker slots only; throws
  // (std::runtime_error) when the copy cannot be mapped: the process must
  // then stop, as it would go on alone on the old segment.
  void moveTo(std::unique_ptr<Segment> grown);  // the master: the copy it made
  void moveTo(int fd);                          // the others: the copy's fd, handed to them; owns it
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const Geometry& geometry() const;
  size_t bytes() const;  // mapped size

  // The header of the mapping at `address` (`bytes` long) against this
  // binary: its magic, its layout version, and its geometry and size as
  // this binary carves them. A segment of another layout is never used:
  // throws std::runtime_error naming what differs ("shared segment at
  // 0x7f... has layout version 7, this binary expects 8"). create() checks
  // the header it has just written; a process that takes over a mapping it
  // did not carve checks it before any use.
  static void checkHeader(const void* address, size_t bytes);
  // The same for a header read (`readable` bytes at `address`) from a file
  // of `bytes` bytes.
  static void checkHeader(const void* address, size_t readable, size_t bytes);
  void checkHeader() const { checkHeader(address(), bytes()); }
  // The segment file in `fd` as this binary would map it: its geometry and
  // size, once its header passed checkHeader. Throws std::runtime_error
  // naming what is wrong; the fd stays open and untouched.
  struct FileHeader {
    Geometry geometry;
    size_t bytes = 0;
  };
  static FileHeader checkFile(int fd);
  // Where the mapping starts: its header (layout.h).
  void* address();
  const void* address() const;

  // The line the admission layer uses: the engine's (cluster()) with
  // -cluster, else this host's ticket ring.
  Line& line() { return cluster_.enabled() ? static_cast<Line&>(cluster_) : tickets_; }
  const Line& line() const { return cluster_.enabled() ? static_cast<const Line&>(cluster_) : tickets_; }
  ClusterLine& cluster() { return cluster_; }
  const ClusterLine& cluster() const { return cluster_; }
  TicketRing& tickets() { return tickets_; }
  // The room's rules, asked by both lines in this process (line_gate.h); a
  // process installs its gate once, before it serves (a child forked after
  // that inherits it). nullptr: the lines move by the cap alone.
  void setGate(LineGate* gate) {
    tickets_.setGate(gate);
    cluster_.setGate(gate);
  }
  const TicketRing& tickets() const { return tickets_; }
  // The line's measured pace and the ETA of a position in it (admissions
  // are counted by tickets().claim, buckets rolled by tickets().sweep).
  LineRate& lineRate() { return line_rate_; }
  const LineRate& lineRate() const { return line_rate_; }
  PageSemaphore& pages() { return pages_; }
  const PageSemaphore& pages() const { return pages_; }
  Semaphore& assets() { return assets_; }
  const Semaphore& assets() const { return assets_; }
  // Open long-lived connections (-long-lived, -long-lived-cap); nobody waits
  // for one: over the cap is a 503.
  Semaphore& longLived() { return long_lived_; }
  const Semaphore& longLived() const { return long_lived_; }
  void setLongLivedCap(int32_t cap);  // master, on reload
  PassTable& passes() { return passes_; }
  const PassTable& passes() const { return passes_; }
  Sessions& sessions() { return sessions_; }
  const Sessions& sessions() const { return sessions_; }
  Revocations& revocations() { return revocations_; }
  const Revocations& revocations() const { return revocations_; }
  OnceMarks& once() { return once_; }
  const OnceMarks& once() const { return once_; }
  Clients& clients() { return clients_; }
  const Clients& clients() const { return clients_; }
  Histograms& histograms() { return histograms_; }
  const Histograms& histograms() const { return histograms_; }
  // Written by the master's janitor only (record), read by anyone.
  History& history() { return history_; }
  const History& history() const { return history_; }
  WorkerSlots& slots() { return slots_; }
  const WorkerSlots& slots() const { return slots_; }
  Stats& stats() { return stats_; }
  const Stats& stats() const { return stats_; }
  Modes& modes() { return modes_; }
  const Modes& modes() const { return modes_; }
  AdmitRate& admitRate() { return admit_rate_; }
  const AdmitRate& admitRate() const { return admit_rate_; }
  Sale& sale() { return sale_; }
  const Sale& sale() const { return sale_; }
  Capacity& capacity() { return capacity_; }
  const Capacity& capacity() const { return capacity_; }

  // A strike of `weight` against a client (clients.h), from any worker.
  // abuse_strikes_total counts the weight. When it starts a ban
  // (abuse_bans_total), every live ticket of the client leaves the line at
  // once and PageSlot waiters are woken. Not recorded when the client table
  // has no room for the client (client_table_full_total).
  StrikeOutcome strike(const uint8_t key[16], int weight, const AbusePolicy& policy, Millis now, WorkerSlot slot);

  // Master only, after waitpid() reaped the slot's process: every subsystem
  // returns what the slot owned (page slots, in-flight tickets, asset slots,
  // pass holds, long-lived connections, a revocation or client entry it was
  // writing), the slot is marked free, slots_reclaimed_total counts it, and
  // waiters for every resource are woken.
  // `quarantine_until` > 0: its page slots stay counted until then (the
  // origin may still serve their requests; semaphore.h), as
  // report.quarantined.
  ReclaimReport reclaimDeadWorker(WorkerSlot slot, Millis quarantine_until = 0);

 private:
  struct Mapping;  // the mapped region and this process's Layout of it
  Segment(std::unique_ptr<Mapping> mapping, std::vector<int> eventfds);
  static std::unique_ptr<Mapping> map(int fd, const Geometry& geometry, size_t bytes);
  Layout& view();
  const Layout& view() const;
  void adopt(std::unique_ptr<Mapping> fresh);

  std::unique_ptr<Mapping> mapping_;  // first: every handle points into it
  WorkerSlots slots_;
  PageSemaphore pages_;
  Semaphore assets_;
  Semaphore long_lived_;
  Sessions sessions_;
  Clients clients_;     // before tickets_, which counts tickets on it
  LineRate line_rate_;  // before tickets_, which counts admissions on it
  Modes modes_;
  Sale sale_;
  AdmitRate admit_rate_;
  TicketRing tickets_;
  ClusterLine cluster_;
  PassTable passes_;
  Histograms histograms_;
  History history_;
  Revocations revocations_;
  OnceMarks once_;
  Capacity capacity_;
  Stats stats_;
};

}  // namespace concert::shm
