#!/usr/bin/env bash
# -adaptive against a real php-fpm (pm = static, max_children 8, pages of 50 or 400 ms):
# a sweep of fixed caps, -cap 64 -adaptive under a 2x overload, the pool changed to 4 and 16
# children under it, and the capacity advisor after a ramp in passthrough mode
# (bench/adaptive/run.py says how each is measured).
#
#   bash bench/adaptive/run.sh
#
# Knobs (environment): AD_QUICK=1 (every phase shortened: a smoke run of about 2.5 minutes;
# the full run takes about 10), AD_PORT (nginx, 8390), AD_STATE (/tmp/concert-adaptive),
# CONCERT (the binary, default build/concert; copied into the state directory first, so a
# rebuild during the run does not change it), AD_KEEP=1 (leave php-fpm and nginx running at the
# end; by default they are stopped if this script started them).
#
# The stack comes from bench/adaptive/setup.sh (installs php8.2-fpm and nginx-light if missing).
# Everything is on 127.0.0.1; only processes started here are stopped, by their pids. The table
# is also written to STATE/results.md.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PORT=${AD_PORT:-8390}
STATE=${AD_STATE:-/tmp/concert-adaptive}
CONCERT_BIN=${CONCERT:-$ROOT/build/concert}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

[ "$(id -u)" = 0 ] || { echo "run.sh: run as root (setup.sh installs packages and runs php-fpm as www-data)" >&2; exit 1; }
[ -x "$CONCERT_BIN" ] || { echo "run.sh: no Concert binary at $CONCERT_BIN (build it with make, or set CONCERT=)" >&2; exit 1; }

T_START=$(date +%s)
STARTED_STACK=1
if [ -s "$STATE/nginx/nginx.pid" ] && kill -0 "$(cat "$STATE/nginx/nginx.pid")" 2>/dev/null; then
  STARTED_STACK=0
fi
DRIVER=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$DRIVER" ]; then
    kill -TERM "$DRIVER" 2>/dev/null || true
    wait "$DRIVER" 2>/dev/null || true
  fi
  if [ "$STARTED_STACK" = 1 ] && [ "${AD_KEEP:-0}" != 1 ]; then
    bash "$HERE/stop.sh" -d "$STATE" || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bash "$HERE/setup.sh" -n 8 -p "$PORT" -d "$STATE"
STATE=$(cd "$STATE" && pwd)
mkdir -p "$STATE/run"
rm -f "$STATE/run/results.json" "$STATE/results.md"
cp "$CONCERT_BIN" "$STATE/run/concert.bin"

ARGS=(--concert "$STATE/run/concert.bin" --state "$STATE" --port "$PORT")
[ "${AD_QUICK:-0}" = 1 ] && ARGS+=(--quick)
# Bounded: the full run takes about 10 minutes.
timeout 1200 "$PY" "$HERE/run.py" "${ARGS[@]}" &
DRIVER=$!
rc=0
wait "$DRIVER" || rc=$?
DRIVER=""
[ "$rc" = 0 ] || { echo "run.sh: run.py exited with $rc" >&2; exit "$rc"; }
echo "run.sh: took $(( $(date +%s) - T_START )) s; table also in $STATE/results.md"
