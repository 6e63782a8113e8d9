// Asking Redis Sentinels where the engine is (-cluster
// redis+sentinel://...). The agent asks before each connection attempt:
// the sentinels in their order, each given `timeout` to be connected to and
// answer `SENTINEL get-master-addr-by-name <master>`; the first that names
// an address is believed (a sentinel that does not know the name, or
// answers anything else, is passed over). Blocking: the agent is a process
// of its own, and waits at most `timeout` per sentinel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "config/config.h"

namespace concert::cluster {

struct SentinelAnswer {
  bool ok = false;
  std::string host;  // the master's address, as the sentinel gives it
  uint16_t port = 0;
  std::string error;  // when !ok: what each sentinel did, "; "-separated
};

SentinelAnswer askSentinels(const std::vector<config::ClusterEndpoint>& sentinels, const std::string& master,
                            Millis timeout);

// "host:port", an IPv6 address in brackets.
std::string endpointText(const std::string& host, uint16_t port);

}  // namespace concert::cluster
