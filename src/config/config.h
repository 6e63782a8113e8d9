// The immutable configuration snapshot. Built only by the loader
// (config/loader.h) from one schema table (config/schema.h); every process
// reads it, nothing writes it after load. A reload builds a whole new Config
// beside the old one.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "config/cidr.h"

namespace concert::config {

// One entry of a path list (-bypass, -assets, -asset-public, -long-lived).
// "/static/*" is a prefix rule for "/static/" (matches "/static/x", not
// "/static"); anything else matches the whole decoded path exactly.
struct PathRule {
  std::string path;  // exact path, or the prefix *with* its trailing '/'
  bool prefix = false;
  bool matches(std::string_view decoded_path) const {
    return prefix ? decoded_path.substr(0, path.size()) == path : decoded_path == path;
  }
};
using PathList = std::vector<PathRule>;

// -cluster: redis://host:port[/db] or
// redis+sentinel://host:port,host:port,.../master[/db] (parse.h:
// parseClusterUrl).
struct ClusterEndpoint {
  std::string host;  // a name or an address, IPv6 without brackets
  uint16_t port = 0;
};
struct ClusterUrl {
  std::string host;  // redis://: the engine; "" = off, or asked of the sentinels
  uint16_t port = 6379;
  int db = 0;
  std::vector<ClusterEndpoint> sentinels;  // redis+sentinel://: whom to ask for the engine, in order
  std::string master;                      // redis+sentinel://: the name the sentinels monitor it by
  bool viaSentinels() const { return !sentinels.empty(); }
};

struct Upstream {
  std::string raw;  // as configured, e.g. "http://127.0.0.1:3000/base?x=1"
  bool https = false;
  std::string host;       // host name or address, without brackets
  uint16_t port = 80;     // explicit or the scheme's default
  std::string host_port;  // "host:port" as sent in Host when preserve-host is off
  std::string path;       // base path, "" or "/base"
  std::string query;      // target query without '?', "" when none
};

// -crawler-agents' default: the major search and link-preview crawlers.
inline constexpr const char kDefaultCrawlerAgents[] =
    "Googlebot,bingbot,DuckDuckBot,Baiduspider,YandexBot,Applebot,facebookexternalhit,Twitterbot,Slackbot,"
    "LinkedInBot";

struct Config {
  // -- network and process model
  std::string listen = ":8080";  // restart-only
  std::string admin_listen;      // restart-only; "" = the admin endpoints on the public listener
  int workers = 0;               // resolved: 1..64 ("auto" = CPUs)
  bool daemon = false;
  std::string pid_file;
  std::string state_dir;  // empty: the segment is anonymous (a memfd)
  std::string user;
  std::string error_log;        // "" = stderr
  std::string access_log_file;  // "" = stdout
  Millis shutdown_grace = 30'000;
  int64_t max_body = 64LL << 20;
  int32_t max_connections = 10000;  // per worker
  Millis client_header_timeout = 10'000;
  Millis client_body_timeout = 30'000;
  Millis send_timeout = 60'000;
  Millis keepalive_timeout = 75'000;
  Millis tunnel_timeout = 3'600'000;

  // -- origin
  Upstream upstream;
  Millis upstream_timeout = 30'000;
  Millis upstream_read_timeout = 60'000;
  bool preserve_host = true;

  // -- clients
  CidrList trusted_proxies;  // peers whose X-Forwarded-* / Forwarded are believed
  CidrList bypass_cidrs;     // clients proxied without the room
  bool proxy_protocol = false;       // the listener expects a PROXY header from trusted peers
  int32_t max_tickets_per_client = 0;  // 0 = unlimited
  int32_t abuse_threshold = 0;       // strikes within 10 minutes that ban a client (0 = off)
  Millis abuse_ban = 600'000;        // first ban; doubles per repeat, at most 24 h
  CidrList abuse_allow;              // never struck, banned or limited per client

  // -- waiting room
  int32_t cap = 500;
  bool adaptive = false;  // -adaptive: the master moves the cap (master/adaptive.h)
  int32_t cap_min = 1;
  int32_t cap_max = 0;    // 0: 4 x cap
  std::string origin_status;  // -origin-status URL; "" = none
  Upstream origin_status_url;  // derived from it
  // -adaptive's ceiling: cap-max, or 4 x cap when it is 0.
  int32_t adaptiveCeiling() const {
    return cap_max > 0 ? cap_max : static_cast<int32_t>(std::min<int64_t>(int64_t{cap} * 4, INT32_MAX));
  }
  int64_t max_queue = 10000;   // 0 = unlimited
  Millis reaper = 30'000;      // effective (0 in the file means 5m)
  Millis token_ttl = 300'000;  // effective (0 in the file means 5m)
  Millis queue_hold = 0;       // 0 = a page request that has to queue is answered at once
  Millis claim_window = 10'000;      // a turn not taken within this stops holding the line
  Millis first_poll_grace = 15'000;  // a ticket never seen again is abandoned after this
  Millis busy_poll = 0;        // 0 = a worker with nothing to do sleeps in epoll_wait at once
  std::string io_uring = "auto";  // the data path's system calls: auto, on (io_uring) or off (epoll)
  Millis session_hold = 15'000;  // a session page request waits this long for a slot, then 503
  double newcomer_share = 0.2;   // 0..1: the line's least share of freed slots while sessions wait
  int32_t queue_status = 200;    // the waiting page's status for browsers: 200, 429 or 503
  std::string crawler_agents = kDefaultCrawlerAgents;  // comma list as configured
  std::vector<std::string> crawler_agent_list;  // derived: lower-case, trimmed, non-empty
  PathList long_lived;  // WebSocket / event-stream paths
  int32_t long_lived_cap = 10000;
  bool secure_cookie = false;
  std::string cookie_path = "/";
  std::string cookie_domain;
  std::string html_file;      // custom waiting page ("" = built in)
  std::string html_template;  // loaded contents of html_file (or the built-in page)
  std::string skip_url;
  double rate = 0;
  double surge = 0;
  Millis pass_duration = 0;
  std::string priority_classes;                // -priority-classes as configured: "" (off) or "staff,checkout"
  std::vector<std::string> priority_class_list;  // derived: the names, highest priority first
  bool api_json = true;
  int retry_after = 5;  // clamped to >= 1
  std::string mode = "open";          // the room's mode at start and after a reload that changes it (shm/modes.h)
  std::string maintenance_html_file;  // custom maintenance page for -mode reject ("" = built in)
  std::string maintenance_template;   // loaded contents of maintenance_html_file ("" = the built-in page)
  std::string admit_rate;             // -admit-rate as configured: "" (off), "N/s" or "N/m"
  int32_t admit_burst = 0;            // as configured; 0 = one second's worth
  int64_t admit_interval_ns = 0;      // derived from admit_rate: ns between admissions, 0 = no limit
  int64_t admit_burst_tokens = 0;     // derived: the burst in effect (>= 1 when limited)
  std::string event_start;            // -event-start as configured: "" (no sale) or an RFC 3339 time
  int64_t event_start_ms = 0;         // derived: the sale's start, Unix ms; 0 = no sale (shm/sale.h)
  Millis prequeue = 0;                // before event_start_ms, arrivals wait for the start; 0 = no pre-queue
  bool shuffle_prequeue = true;       // pre-queue arrivals take random places (shm/tickets.h)
  bool access_log = true;

  // -- several hosts (src/cluster/)
  std::string cluster;                 // -cluster as configured: "" (this host alone) or redis://host:port[/db]
  ClusterUrl cluster_url;              // derived from cluster
  std::string cluster_room = "concert";  // the engine's key prefix
  int32_t cluster_lease = 4;
  Millis cluster_lease_ttl = 10'000;
  std::string cluster_fail = "open";  // open | closed

  // -- asset tier
  PathList bypass;
  PathList assets;
  PathList asset_public;
  int32_t asset_cap = 0;  // effective (0 in the file: cap * asset-user-cap-h2, clamped)
  bool asset_cap_derived = true;
  Millis asset_wait = 2'000;
  int32_t asset_user_cap_h1 = 8;
  int32_t asset_user_cap_h2 = 128;
  Millis asset_user_wait = 2'000;
  Millis admit_ttl = 600'000;
  std::string client_proto_header;
  int32_t asset_users_max = 65536;  // pass-table capacity; restart-only

  // -- secrets (environment only)
  std::string admit_secret;  // CONCERT_ADMIT_SECRET, else 32 random bytes from the loader
  bool admit_secret_generated = false;
  bool admit_secret_in_state_dir = false;  // read from (or made in) state_dir/admit-secret
  std::string admin_token;  // "" => POST /_room/cap answers 404
  std::string promote_secret;  // CONCERT_PROMOTE_SECRET; "" => /queue/promote answers 403

  // -- where it came from (for reload and the log)
  std::string config_file;  // -c FILE, "" if none
};

using ConfigPtr = std::shared_ptr<const Config>;

// Go's time.Duration String() form: "5m0s", "1h30m0s", "500ms", "0s".
std::string goDurationString(Millis ms);

}  // namespace concert::config
