#!/usr/bin/env bash
# A flash crowd at a real origin: WordPress on php-fpm (pm = static, max_children 4) behind nginx,
# reached three ways in one run, each row with a fresh start of its proxy:
#
#   no proxy   the crowd straight at nginx
#   HAProxy    HAProxy (Debian's 2.6) in HTTP mode, `maxconn 4` on the server line
#   Concert    Concert -cap 4; visitors follow the waiting page to their turn
#
#   bash bench/wordpress/run.sh
#
# Knobs (environment): WP_VISITORS (1500), WP_WITHIN (seconds over which they arrive, 2),
# WP_CHILDREN (php-fpm max_children and the proxies' cap, 4), WP_PORT (nginx, 8380), WP_STATE
# (/tmp/concert-wp), CONCERT (the binary, default build/concert; it is copied into the state
# directory first, so a rebuild during the run does not change it), WP_PROTOCOL (how Concert's
# visitors learn their turn: events, as the waiting page does, or poll: /queue/status once a
# second), WP_POLL_ROW=1 (adds a fourth row: Concert with visitors polling /queue/status),
# WP_TIMEOUT (seconds a visitor may take after the last arrival, 600), WP_KEEP=1 (leave the
# WordPress stack running at the end; by default it is stopped if this script started it).
#
# The stack comes from bench/wordpress/setup.sh (installs the Debian packages if missing, haproxy
# too); the crowd is bench/wordpress/crowd.py. Everything is on 127.0.0.1. Only processes this
# script started are stopped, by their pids. The table is also written to STATE/results.md.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VISITORS=${WP_VISITORS:-1500}
WITHIN=${WP_WITHIN:-2}
CHILDREN=${WP_CHILDREN:-4}
PORT=${WP_PORT:-8380}
STATE=${WP_STATE:-/tmp/concert-wp}
PROTOCOL=${WP_PROTOCOL:-events}
TIMEOUT=${WP_TIMEOUT:-600}
CONCERT_BIN=${CONCERT:-$ROOT/build/concert}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

[ "$(id -u)" = 0 ] || { echo "run.sh: run as root (setup.sh installs packages and runs services as www-data/mysql)" >&2; exit 1; }
[ -x "$CONCERT_BIN" ] || { echo "run.sh: no Concert binary at $CONCERT_BIN (build it with make, or set CONCERT=)" >&2; exit 1; }

T_START=$(date +%s)
STARTED_STACK=1
if [ -s "$STATE/nginx/nginx.pid" ] && kill -0 "$(cat "$STATE/nginx/nginx.pid")" 2>/dev/null; then
  STARTED_STACK=0
fi
WP_EXTRA_PACKAGES=haproxy bash "$HERE/setup.sh" -n "$CHILDREN" -p "$PORT" -d "$STATE"
command -v haproxy >/dev/null || { echo "run.sh: haproxy is not installed" >&2; exit 1; }
STATE=$(cd "$STATE" && pwd)
RUN=$STATE/run
LOG=$STATE/log
mkdir -p "$RUN"
rm -f "$RUN"/row-*.json "$RUN"/row-*.out
cp "$CONCERT_BIN" "$RUN/concert.bin"
NGINX_URL="http://127.0.0.1:$PORT/"
STATUS_URL="http://127.0.0.1:$PORT/nginx-status"
FPM_SOCK=$STATE/php-fpm.sock
NGX_PIDFILE=$STATE/nginx/nginx.pid

PROXY_PID=""
DRIVER=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$DRIVER" ]; then
    kill -TERM "$DRIVER" 2>/dev/null || true
    wait "$DRIVER" 2>/dev/null || true
  fi
  stop_proxy
  if [ "$STARTED_STACK" = 1 ] && [ "${WP_KEEP:-0}" != 1 ]; then
    bash "$HERE/stop.sh" -d "$STATE" || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# shellcheck source=bench/stack.sh
. "$(dirname "${BASH_SOURCE[0]}")/../stack.sh"

# Stops the proxy of the current row (by its pid), SIGKILL after 40 s.
stop_proxy() {
  [ -n "$PROXY_PID" ] || return 0
  kill -TERM "$PROXY_PID" 2>/dev/null || true
  wait_for 40 sh -c "! kill -0 $PROXY_PID" || kill -KILL "$PROXY_PID" 2>/dev/null || true
  wait "$PROXY_PID" 2>/dev/null || true
  rm -f "$RUN"/*.pid
  PROXY_PID=""
}

# nginx holds no request but the status request itself (the crowd of the previous row is gone).
nginx_idle() {
  curl -fsS --max-time 2 "$STATUS_URL" | grep -q 'Reading: 0 Writing: 1 '
}

# A few sequential requests for the front page through $1; all must be answered 200.
warm() {
  local code
  for _ in 1 2 3 4 5 6; do
    code=$(curl -sS -o /dev/null --max-time 60 -H 'Accept: text/html' -w '%{http_code}' "$1") || code=000
    [ "$code" = 200 ] || { echo "run.sh: warm-up request to $1 answered $code" >&2; return 1; }
  done
}

# row KEY LABEL URL [crowd args]
row() {
  local key=$1 label=$2 url=$3; shift 3
  wait_for 120 nginx_idle || echo "run.sh: nginx still busy from the previous row after 120 s" >&2
  warm "$url"
  sleep 2
  echo "== $label (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  # In the background and waited for, so a signal reaches the trap at once.
  timeout $((TIMEOUT + 120)) "$PY" "$HERE/crowd.py" --url "$url" --visitors "$VISITORS" --within "$WITHIN" \
    --timeout "$TIMEOUT" --nginx-status "$STATUS_URL" --fpm-socket "$FPM_SOCK" --label "$label" \
    --own "php-fpm=$STATE/php-fpm.pid" --own "nginx=$NGX_PIDFILE" --own "mariadbd=$STATE/db/mariadbd.pid" \
    --json "$RUN/row-$key.json" "$@" >"$RUN/row-$key.out" 2>&1 &
  DRIVER=$!
  local rc=0
  wait "$DRIVER" || rc=$?
  DRIVER=""
  grep -v '^CROWD_JSON' "$RUN/row-$key.out" || true
  [ "$rc" = 0 ] || { echo "run.sh: crowd.py exited with $rc" >&2; return "$rc"; }
}

start_haproxy() {
  local port=$1 cfg=$RUN/haproxy.cfg
  cat >"$cfg" <<EOF
global
  maxconn 8000
defaults
  mode http
  option http-keep-alive
  timeout connect 5s
  timeout client ${TIMEOUT}s
  timeout server ${TIMEOUT}s
  timeout queue ${TIMEOUT}s
  timeout http-request 30s
  timeout http-keep-alive 120s
frontend fe
  bind 127.0.0.1:$port
  default_backend wordpress
backend wordpress
  server nginx 127.0.0.1:$PORT maxconn $CHILDREN
EOF
  haproxy -db -f "$cfg" >"$LOG/haproxy.log" 2>&1 &
  PROXY_PID=$!
  echo "$PROXY_PID" >"$RUN/haproxy.pid"
  wait_for 20 curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$port/nginx-status" \
    || { echo "run.sh: haproxy did not come up (see $LOG/haproxy.log)" >&2; return 1; }
}

start_concert() {
  local port=$1
  CONCERT_ADMIT_SECRET=$(head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9') \
    "$RUN/concert.bin" -listen "127.0.0.1:$port" -upstream "http://127.0.0.1:$PORT" -cap "$CHILDREN" \
    -access-log=false >"$LOG/concert.log" 2>&1 &
  PROXY_PID=$!
  echo "$PROXY_PID" >"$RUN/concert.pid"
  wait_for 20 curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$port/_room/healthz" \
    || { echo "run.sh: concert did not come up (see $LOG/concert.log)" >&2; return 1; }
}

echo "run.sh: $VISITORS visitors within $WITHIN s, php-fpm max_children $CHILDREN, $(nproc) CPUs, $("$RUN/concert.bin" -version 2>&1 | head -1), $(haproxy -v 2>&1 | head -1 | cut -d' ' -f1-3)"

row none "no proxy" "$NGINX_URL"

P=$(free_port)
start_haproxy "$P"
row haproxy "HAProxy maxconn $CHILDREN" "http://127.0.0.1:$P/" --own "haproxy=$RUN/haproxy.pid"
stop_proxy

P=$(free_port)
start_concert "$P"
row concert "Concert -cap $CHILDREN" "http://127.0.0.1:$P/" --protocol "$PROTOCOL" --own "concert=$RUN/concert.pid"
stop_proxy

if [ "${WP_POLL_ROW:-0}" = 1 ]; then
  P=$(free_port)
  start_concert "$P"
  row concert-poll "Concert -cap $CHILDREN, polling" "http://127.0.0.1:$P/" --protocol poll \
    --own "concert=$RUN/concert.pid"
  stop_proxy
fi

"$PY" - "$RUN" "$VISITORS" "$WITHIN" "$CHILDREN" "$(nproc)" "$(date -u '+%Y-%m-%d %H:%M UTC')" <<'EOF' | tee "$STATE/results.md"
import json, os, sys
run, visitors, within, children, nproc, when = sys.argv[1:]
rows = [("none", "no proxy"), ("haproxy", "HAProxy `maxconn %s`" % children),
        ("concert", "Concert `-cap %s`" % children), ("concert-poll", "Concert `-cap %s`, visitors polling /queue/status" % children)]
def s(v):
    return "—" if v is None else "%.1f s" % v
found = []
for key, name in rows:
    path = os.path.join(run, "row-%s.json" % key)
    if os.path.exists(path):
        with open(path) as f:
            found.append((name, json.load(f)))
print()
print("%s visitors within %s s, php-fpm max_children %s, %s CPUs, %s:" % (f"{int(visitors):,}", within, children, nproc, when))
print()
print("| | all served in | visit p99 | most requests in nginx/php-fpm at once |")
print("|---|---|---|---|")
for name, r in found:
    served = s(r["last_served_at_s"]) if not r["failed"] else "%s (%d failed)" % (s(r["last_served_at_s"]), r["failed"])
    print("| %s | %s | %s | %s |" % (name, served, s(r["visit_p99_s"]), f"{r['peak_nginx_in_flight']:,}" if r["peak_nginx_in_flight"] is not None else "—"))
print()
print("| | visit p50 | failures | php-fpm at once (accepted + listen queue) | page requests | CPU s: php-fpm, nginx, MariaDB, proxy, crowd | other work's CPU s | load average after |")
print("|---|---|---|---|---|---|---|---|")
for name, r in found:
    fails = ", ".join("%s: %d" % kv for kv in sorted(r["failures"].items())) or "0"
    fpm = "—" if r["peak_fpm_in_flight"] is None else "%s (peaks %s + %s)" % (
        f"{r['peak_fpm_in_flight']:,}", r["peak_fpm_accepted"], f"{r['peak_fpm_listen_queue']:,}")
    c = r["cpu"]
    pr = c["processes"]
    proxy = pr.get("haproxy", pr.get("concert"))
    cpu = ", ".join("—" if v is None else "%.1f" % v for v in
                    (pr.get("php-fpm"), pr.get("nginx"), pr.get("mariadbd"), proxy, c["crowd_cpu_s"]))
    print("| %s | %s | %s | %s | %s | %s | %.1f in %.1f s (%.0f %% of the CPUs) | %s |" % (
        name, s(r["visit_p50_s"]), fails, fpm, f"{r['page_requests']:,}", cpu, c["others_cpu_s"],
        c["wall_s"], 100.0 * c["others_cpu_s"] / (c["wall_s"] * int(nproc)) if c["wall_s"] else 0, r["load_average"]))
EOF
echo "run.sh: took $(( $(date +%s) - T_START )) s; table also in $STATE/results.md"
