#!/usr/bin/env bash
# Stops what bench/adaptive/setup.sh (and run.py) started, by their pid files, and nothing else:
# a pid is signalled only if its command line still names what this state directory started.
#
#   bash bench/adaptive/stop.sh [-d STATE_DIR] [--purge]
#
#   -d       state directory, default /tmp/concert-adaptive (env AD_STATE)
#   --purge  also remove the state directory
#
# Each process gets SIGTERM and up to 30 s to exit, then SIGKILL. Running it again is harmless.
set -euo pipefail

STATE=${AD_STATE:-/tmp/concert-adaptive}
PURGE=0
while [ $# -gt 0 ]; do
  case "$1" in
    -d) STATE=$2; shift 2 ;;
    --purge) PURGE=1; shift ;;
    *) sed -n '2,10p' "$0"; exit 2 ;;
  esac
done
if [ ! -d "$STATE" ]; then
  echo "stop.sh: $STATE does not exist; nothing to stop"
  exit 0
fi
STATE=$(cd "$STATE" && pwd)

# shellcheck source=bench/stack.sh
. "$(dirname "${BASH_SOURCE[0]}")/../stack.sh"

# A Concert run.py started, in case run.py was itself killed before it could stop it.
stop_pid concert "$STATE/run/concert.pid" "$STATE/run/concert.bin"
stop_pid nginx "$STATE/nginx/nginx.pid" "$STATE/nginx/nginx.conf"
stop_pid php-fpm "$STATE/php-fpm.pid" "$STATE/php-fpm.conf"

echo "stop.sh: stopped:${stopped:- nothing was running}"

if [ "$PURGE" = 1 ]; then
  if [ -e "$STATE/php-fpm.conf" ] || [ -z "$(ls -A "$STATE")" ]; then
    rm -rf "$STATE"
    echo "stop.sh: removed $STATE"
  else
    echo "stop.sh: $STATE does not look like setup.sh's state directory; left in place" >&2
  fi
fi
