// The phases a connection can time out in, with their settings, counters and
// log names. A timeout closes the connection and frees every slot it held,
// except that a page slot whose request already reached the origin whole
// stays taken until the origin's response has ended (see
// OriginExchange::detach).
//
//   phase           setting                   clock
//   ClientHeader    -client-header-timeout    from the connection's start, or
//                                             the first byte of the next request
//   ClientBody      -client-body-timeout      gap between two reads of the body
//   Send            -send-timeout             the client takes no response byte
//   Keepalive       -keepalive-timeout        idle between requests
//   UpstreamRead    -upstream-read-timeout    the origin sends nothing after its head
//   Tunnel          -tunnel-timeout           no traffic either way (tunnel or
//                                             proxied event stream)
#pragma once

#include "config/config.h"
#include "shm/counters.h"

namespace concert::worker {

enum class TimeoutPhase { ClientHeader, ClientBody, Send, Keepalive, UpstreamRead, Tunnel };

constexpr const char* timeoutName(TimeoutPhase phase) {
  switch (phase) {
    case TimeoutPhase::ClientHeader: return "client header";
    case TimeoutPhase::ClientBody: return "client body";
    case TimeoutPhase::Send: return "send";
    case TimeoutPhase::Keepalive: return "keep-alive";
    case TimeoutPhase::UpstreamRead: return "upstream read";
    case TimeoutPhase::Tunnel: return "tunnel";
  }
  return "?";
}

constexpr shm::Counter timeoutCounter(TimeoutPhase phase) {
  switch (phase) {
    case TimeoutPhase::ClientHeader: return shm::Counter::TimeoutsClientHeaderTotal;
    case TimeoutPhase::ClientBody: return shm::Counter::TimeoutsClientBodyTotal;
    case TimeoutPhase::Send: return shm::Counter::TimeoutsSendTotal;
    case TimeoutPhase::Keepalive: return shm::Counter::TimeoutsKeepaliveTotal;
    case TimeoutPhase::UpstreamRead: return shm::Counter::TimeoutsUpstreamReadTotal;
    case TimeoutPhase::Tunnel: return shm::Counter::TimeoutsTunnelTotal;
  }
  return shm::Counter::TimeoutsTotal;
}

inline Millis timeoutSetting(const config::Config& config, TimeoutPhase phase) {
  switch (phase) {
    case TimeoutPhase::ClientHeader: return config.client_header_timeout;
    case TimeoutPhase::ClientBody: return config.client_body_timeout;
    case TimeoutPhase::Send: return config.send_timeout;
    case TimeoutPhase::Keepalive: return config.keepalive_timeout;
    case TimeoutPhase::UpstreamRead: return config.upstream_read_timeout;
    case TimeoutPhase::Tunnel: return config.tunnel_timeout;
  }
  return 0;
}

}  // namespace concert::worker
