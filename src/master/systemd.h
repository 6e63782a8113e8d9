// systemd integration, master only, without libsystemd: plain syscalls.
//
// Socket activation. systemd passes the listening sockets of the service's
// socket units as descriptors 3, 4, ... and says so in the environment:
//   LISTEN_PID=<pid>      the process they are meant for; any other process
//                         (a child that inherited the environment, a wrapper
//                         shell) must ignore them
//   LISTEN_FDS=<n>        how many: fds 3 .. 3+n-1
//   LISTEN_FDNAMES=a:b:c  one name per fd (FileDescriptorName= in the socket
//                         unit, the unit's name by default)
// An fd named "admin" is the admin listener; every other name is a public
// one. Without LISTEN_FDNAMES all of them are public. Every fd must be a
// listening stream socket, and is made close-on-exec and non-blocking like
// the ones bindListeners opens. The three variables are removed from the
// environment whatever they said, so no process started later believes it
// was activated.
//
// Readiness. The master tells the service manager what it is doing by
// sending one datagram per change to the AF_UNIX socket in $NOTIFY_SOCKET
// (a path, or an abstract name when it starts with '@'):
//   READY=1                              started, listeners open
//   RELOADING=1\nMONOTONIC_USEC=<µs>     a reload began (READY=1 ends it)
//   STOPPING=1                           draining before exit
//   STATUS=<text>                        one line for `systemctl status`
// Without $NOTIFY_SOCKET (not under systemd, or not Type=notify) nothing is
// sent. Sending never blocks: a busy manager loses a message, the master
// never waits for it.
#pragma once

#include <string>
#include <vector>

namespace concert::master::systemd {

struct InheritedListeners {
  std::vector<int> pub;    // public listeners, in fd order
  std::vector<int> admin;  // fds named "admin"
  std::string error;       // "LISTEN_FDS: fd 4 is not a listening stream socket"; the lists are then empty
  bool ok() const { return error.empty(); }
};

// The listeners systemd passed to this process; empty lists (and no error)
// when it passed none or they were meant for another process.
InheritedListeners inheritedListeners();

// The address `fd` is bound to: "127.0.0.1:8080", "[::]:8080",
// "unix:/run/concert.sock", "unix:@name" (abstract); "fd N" if unknown.
std::string listenerDisplay(int fd);

// Sends `state` to $NOTIFY_SOCKET. False when it is unset or invalid, or the
// datagram could not be sent right away.
bool notify(const std::string& state) noexcept;

// "MONOTONIC_USEC=<CLOCK_MONOTONIC in microseconds>", sent with RELOADING=1.
std::string monotonicUsecField();

}  // namespace concert::master::systemd
