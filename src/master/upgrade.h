// Binary upgrade (SIGUSR2): the master re-executes its binary in place.
//
// The path is the one Concert was started with, so a file replaced there is
// the new version; the PID stays (systemd's MAINPID, the pid file). What
// crosses the exec is the handover: the listening sockets, the segment's
// fd and the slots' eventfds (cleared of close-on-exec), the workers that
// keep running (still this process's children), the generation, the
// cluster agent, and a generated admit secret (in a memfd: it never shows in
// the environment). The new image reads it from CONCERT_UPGRADE, attaches
// the segment, starts its own generation of workers and drains the old one
// as on SIGHUP: no socket is closed, nobody's place moves.
//
// Before the exec, the new binary is run once with -t and the segment's fd
// (CONCERT_UPGRADE_CHECK): a configuration it refuses, a segment of another
// layout, or a binary that does not run at all ends the upgrade there,
// logged, and the running binary keeps serving. An exec that fails returns
// here and changes nothing either.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace concert::master {

struct Handover {
  struct Worker {
    uint32_t slot = 0;
    int pid = 0;
    uint32_t generation = 0;
    bool child = true;      // false: a previous run's worker, not this process's child
    bool draining = false;  // told to drain already (a second SIGTERM would stop it at once)
    int control_fd = -1;    // the master's end of its control channel
  };
  int segment_fd = -1;
  std::vector<int> eventfds;
  std::vector<int> listeners;
  std::vector<int> admin_listeners;
  std::vector<Worker> workers;
  uint32_t generation = 0;
  int agent_pid = 0;
  int secret_fd = -1;  // a memfd holding the generated admit secret; -1: none
};

// The absolute path of the binary, as started: argv[0] made absolute against
// the start directory, or looked up in PATH. Symbolic links are kept.
std::string executablePath(const std::string& argv0, const std::string& start_dir);

// Runs `exe` with `args` (args[0] is the program name) plus -t and the
// segment's fd; true when it accepts both. `output` gets what it printed.
bool checkNewBinary(const std::string& exe, const std::vector<std::string>& args, int segment_fd,
                    std::string* output);

// A memfd holding `secret`; -1 on failure.
int secretMemfd(const std::string& secret);
// The secret in such a memfd ("" on failure); closes it.
std::string readSecretMemfd(int fd);

// Executes `exe` with `args` and the handover. Returns only on failure,
// with the reason; every fd is close-on-exec again then.
std::string execWithHandover(const std::string& exe, const std::vector<std::string>& args, const Handover& handover);

// The handover of the image this one replaced (CONCERT_UPGRADE, removed
// from the environment); nullopt when started afresh. `error` is set when
// the variable is there but unreadable.
std::optional<Handover> takeHandover(std::string* error);

// -t under CONCERT_UPGRADE_CHECK: checks the segment's header against this
// binary; false with `error` when it would refuse it. True when the
// variable is not set.
bool checkHandedSegment(std::string* error);

}  // namespace concert::master
