// The cluster agent: the one process of a host that talks to the engine
// (-cluster). The master forks it next to the workers and starts another if
// it dies; a reload replaces it with one that reads the new configuration.
//
// Every kRound (100 ms) it runs one round with the engine (engine.h), all
// asynchronous on its own libevent loop (hiredis' libevent adapter):
//   1. the notes workers left since the last round (enrolments, touches,
//      departures, promotions, ended sessions; shm/cluster.h), as one NOTES
//      script
//   2. SYNC: renew the host's lease and report what it has in flight and
//      whether a request found no slot; send the bans that began here; get
//      its share of the cap, the line's figures, cap and mode, the room's
//      bans, promotions, ended sessions and full clients (only what changed
//      since this host's copy), a block of ticket numbers when the old one
//      runs low or grows old
//   3. FETCH, when the line moved since the last round: who left it and who
//      was placed in it since this host's copy (the agent keeps the whole
//      line; a copy too old, or none, is read anew, a page at a time)
// and then publishes what it learnt into the segment: the page semaphore's
// cap becomes the host's share, until half the lease TTL after that SYNC was
// sent (past it, workers fall back to the fail-mode share on their own:
// shm/cluster.h), the cache of the line is swapped, waiting pages and held
// requests are woken. The scripts are loaded once per connection and run by
// their SHA1 (engine.h).
//
// A round not answered within kRoundTimeout (or a connection that fails)
// takes the engine for away: the connection is dropped, the host goes Down
// (-cluster-fail open: its share becomes cap / hosts last seen, and every
// tick moves this host's own line, ClusterLine::publishAway; closed: 0)
// and the agent reconnects every kReconnect. Each host meters -admit-rate ÷
// hosts last seen. Notes taken meanwhile are kept
// (up to kMaxUnsent; touches are dropped first) and sent once it is back;
// if the engine lost the room (a new epoch), the agent re-enrolls the line it
// cached, in its order. Each change of state is logged once.
//
// Signals: SIGTERM ends the agent (a reload or a restart of it: the next one
// carries on with the same host name and the same reservation); SIGINT (the
// master's last act on a full stop, after every worker exited) gives the
// host's reservation back first.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/config.h"

namespace concert::shm {
class Segment;
}

namespace concert::cluster {

struct AgentContext {
  config::ConfigPtr config;
  shm::Segment* segment = nullptr;
  int master_pid = 0;
  std::vector<int> close_fds;  // the listeners and anything else the agent must not hold
  std::function<bool(std::string*)> drop_privileges;
};

// In the forked child: runs the agent and exits.
[[noreturn]] void runAgentProcess(const AgentContext& context);

// The host's name in the engine: the machine's name (for people reading the
// room's keys) and the segment's random host id (ClusterLine::hostId), so it
// is stable across a reload and an agent restart and distinct for any two
// Concerts, even two containers with one host name whose masters are pid 1.
std::string hostName(uint64_t host_id);

}  // namespace concert::cluster
