// Listening sockets, master only. They are bound once at startup, before the
// first fork, and stay open for the master's whole life: a reload never
// closes or re-binds one, so no connection waiting in the accept queue is
// ever reset. Workers inherit the descriptors and accept on them; a draining
// worker just stops accepting.
#pragma once

#include <string>
#include <vector>

namespace concert::master {

struct BoundListener {
  int fd = -1;
  std::string display;  // actual bound address, "127.0.0.1:41234" or "[::]:8080"
};

struct ListenResult {
  std::vector<BoundListener> listeners;
  std::string error;  // Go-like: "listen tcp :8080: bind: Address already in use"
  bool ok() const { return error.empty(); }
};

// Binds and listens on `spec`, as config::parseListenAddress splits it
// (SO_REUSEADDR, non-blocking, close-on-exec, large backlog).
// ":port" tries one dual-stack [::] socket first and falls back to 0.0.0.0
// when the host has no IPv6. A host name binds its first resolved address.
ListenResult bindListeners(const std::string& spec);

void closeListeners(std::vector<BoundListener>* listeners);

}  // namespace concert::master
