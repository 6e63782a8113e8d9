// -origin-status: the origin's own status page (PHP-FPM's pm.status_path,
// e.g. http://127.0.0.1:8380/fpm-status), which the master reads once a
// janitor tick for the capacity advisor: how many processes the origin has,
// how many are busy, how many connections wait in its listen queue, and how
// often it ran out of processes.
//
// The page is read in the master's loop, so every step is bounded: one
// connection to an address (no name lookup), the whole exchange within
// `timeout`, at most 64 KiB. PHP-FPM answers JSON when asked with ?json
// (added when the URL has no query); its plain text ("listen queue: 0") is
// read as well.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "config/config.h"

namespace concert::master {

struct OriginStatus {
  bool ok = false;
  std::string error;  // !ok: why, for the log
  int64_t active = -1;                // "active processes"
  int64_t total = -1;                 // "total processes"
  int64_t listen_queue = -1;          // "listen queue"
  int64_t max_children_reached = -1;  // "max children reached"
};

// A status page's body, JSON or text; !ok when it names none of the four.
OriginStatus parseOriginStatus(std::string_view body);

OriginStatus fetchOriginStatus(const config::Upstream& url, Millis timeout);

}  // namespace concert::master
