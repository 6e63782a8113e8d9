#!/usr/bin/env bash
# Stops what bench/wordpress/setup.sh (and run.sh) started, by their pid files, and nothing else:
# a pid is signalled only if its command line still names this state directory's files.
#
#   bash bench/wordpress/stop.sh [-d STATE_DIR] [--purge]
#
#   -d       state directory, default /tmp/concert-wp (env WP_STATE)
#   --purge  also remove the state directory (database included) and
#            /etc/wordpress/config-127.0.0.1.php if setup.sh wrote it
#
# Each process gets SIGTERM and up to 30 s to exit, then SIGKILL. Running it again is harmless.
set -euo pipefail

STATE=${WP_STATE:-/tmp/concert-wp}
PURGE=0
while [ $# -gt 0 ]; do
  case "$1" in
    -d) STATE=$2; shift 2 ;;
    --purge) PURGE=1; shift ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
  esac
done
MARK="written by concert bench/wordpress/setup.sh"
WPCONF=/etc/wordpress/config-127.0.0.1.php

if [ ! -d "$STATE" ]; then
  echo "stop.sh: $STATE does not exist; nothing to stop"
  exit 0
fi
STATE=$(cd "$STATE" && pwd)

# shellcheck source=bench/stack.sh
. "$(dirname "${BASH_SOURCE[0]}")/../stack.sh"

# Proxies run.sh started, in case it was itself killed before it could stop them.
for f in "$STATE"/run/*.pid; do
  [ -e "$f" ] || continue
  stop_pid "$(basename "$f" .pid)" "$f" "$STATE/"
done
stop_pid nginx "$STATE/nginx/nginx.pid" "$STATE/nginx/nginx.conf"
stop_pid php-fpm "$STATE/php-fpm.pid" "$STATE/php-fpm.conf"
stop_pid mariadbd "$STATE/db/mariadbd.pid" "--datadir=$STATE/db/data"

echo "stop.sh: stopped:${stopped:- nothing was running}"

if [ "$PURGE" = 1 ]; then
  if [ -e "$WPCONF" ] && grep -qF "$MARK" "$WPCONF" && grep -qF "$STATE" "$WPCONF"; then
    rm -f "$WPCONF"
  fi
  if [ -e "$STATE/php-fpm.conf" ] || [ -d "$STATE/db" ] || [ -z "$(ls -A "$STATE")" ]; then
    rm -rf "$STATE"
    echo "stop.sh: removed $STATE"
  else
    echo "stop.sh: $STATE does not look like setup.sh's state directory; left in place" >&2
  fi
fi
