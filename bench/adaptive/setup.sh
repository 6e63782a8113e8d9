#!/usr/bin/env bash
# The origin of the -adaptive benchmark: a real php-fpm 8.2 pool behind nginx, both on 127.0.0.1
# and under one state directory, with their own masters and pid files (the packages' system
# services are never started).
#
#   bash bench/adaptive/setup.sh [-n MAX_CHILDREN] [-p PORT] [-d STATE_DIR]
#
#   -n  php-fpm's pm.max_children (pm = static), default 8 (env AD_CHILDREN)
#   -p  nginx's port on 127.0.0.1, default 8390 (env AD_PORT)
#   -d  state directory, default /tmp/concert-adaptive (env AD_STATE)
#
# What it does, each step skipped when already done:
#   * installs php8.2-fpm and nginx-light if missing (apt-get update first, no recommends, service
#     starts denied by a temporary /usr/sbin/policy-rc.d when there is none);
#   * STATE/www/page.php: sleeps 50 ms or 400 ms, half each, chosen by mt_rand per request, and
#     answers a small HTML page (`?ms=N` forces N ms, for checks);
#   * php-fpm: its own master (STATE/php-fpm.conf, pid STATE/php-fpm.pid) including one pool file
#     STATE/pool.conf (pm = static, pm.max_children = N, listen STATE/php-fpm.sock with backlog
#     4096, so requests beyond N wait in php-fpm's own listen queue). A different -n rewrites the
#     pool file and reloads php-fpm gracefully (SIGUSR2 to its master), as run.py does mid-run;
#   * nginx: STATE/nginx/nginx.conf, listen 127.0.0.1:PORT, keep-alive from the proxy, an access
#     log STATE/log/access.log with one line per request: $msec $request_time
#     $upstream_header_time $status $request_uri $sent_http_x_page_ms (the time at the origin:
#     php-fpm's queue wait and the script's run; and how long the script slept);
#   * a few checks; prints the URL and the pids.
#
# Stop with bash bench/adaptive/stop.sh [--purge]. Needs root.
set -euo pipefail

CHILDREN=${AD_CHILDREN:-8}
PORT=${AD_PORT:-8390}
STATE=${AD_STATE:-/tmp/concert-adaptive}
while getopts "n:p:d:h" opt; do
  case "$opt" in
    n) CHILDREN=$OPTARG ;;
    p) PORT=$OPTARG ;;
    d) STATE=$OPTARG ;;
    *) sed -n '2,27p' "$0"; exit 2 ;;
  esac
done
case "$CHILDREN" in ''|*[!0-9]*) echo "setup.sh: -n wants a number" >&2; exit 2 ;; esac
case "$PORT" in ''|*[!0-9]*) echo "setup.sh: -p wants a number" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "setup.sh: run as root" >&2; exit 1; }
mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd)

MARK="written by concert bench/adaptive/setup.sh"
FPM_SOCK=$STATE/php-fpm.sock
NGX=$STATE/nginx
LOG=$STATE/log
WWW=$STATE/www

mkdir -p "$LOG" "$WWW"
SETUP_LOG=$LOG/setup.log
: >"$SETUP_LOG"
say() { echo "setup.sh: $*"; }
fail() { echo "setup.sh: $*" >&2; echo "setup.sh: see $SETUP_LOG and $LOG/" >&2; exit 1; }
quiet() { "$@" >>"$SETUP_LOG" 2>&1; }

# shellcheck source=bench/stack.sh
. "$(dirname "${BASH_SOURCE[0]}")/../stack.sh"

# ------------------------------------------------------------------ packages
install_missing php8.2-fpm nginx-light

chmod 755 "$STATE" "$WWW"

# ------------------------------------------------------------------ the page
cat >"$WWW/page.php.tmp" <<'EOF'
<?php
// Half the requests take 50 ms, half 400 ms, chosen at random per request (?ms=N forces N).
$ms = isset($_GET['ms']) ? max(0, min(5000, (int)$_GET['ms'])) : (mt_rand(0, 1) ? 400 : 50);
usleep($ms * 1000);
header('Content-Type: text/html; charset=utf-8');
header('X-Page-Ms: ' . $ms);
echo "<!doctype html><html><head><title>page</title></head><body><p>slept $ms ms in pid " . getmypid() . "</p></body></html>\n";
EOF
mv "$WWW/page.php.tmp" "$WWW/page.php"
chmod 644 "$WWW/page.php"

# ------------------------------------------------------------------ php-fpm
FPM_CONF=$STATE/php-fpm.conf
POOL=$STATE/pool.conf
NEWFPM=$(cat <<EOF
; $MARK
[global]
pid = $STATE/php-fpm.pid
error_log = $LOG/php-fpm.log
daemonize = yes
process_control_timeout = 10s
include = $POOL
EOF
)
NEWPOOL=$(cat <<EOF
; $MARK
[page]
user = www-data
group = www-data
listen = $FPM_SOCK
listen.owner = www-data
listen.group = www-data
listen.mode = 0660
listen.backlog = 4096
pm = static
pm.max_children = $CHILDREN
pm.max_requests = 0
pm.status_path = /fpm-status
request_terminate_timeout = 0
catch_workers_output = yes
EOF
)
FPM_PID=$(config_pid "$STATE/php-fpm.pid" "$FPM_CONF" "$NEWFPM") || exit 1
if [ -n "$FPM_PID" ] && [ "$(cat "$POOL" 2>/dev/null)" != "$NEWPOOL" ]; then
  printf '%s\n' "$NEWPOOL" >"$POOL"
  kill -USR2 "$FPM_PID"
  # With daemonize = yes the master re-executes and forks again: a new pid in the pid file.
  sleep 1
  wait_for 10 test -S "$FPM_SOCK" || fail "php-fpm's socket is gone after the reload"
  old=$FPM_PID
  FPM_PID=$(live_pid "$STATE/php-fpm.pid" "$FPM_CONF") || fail "no php-fpm after the reload"
  say "pool file changed: php-fpm $old reloaded (SIGUSR2), now pid $FPM_PID"
fi
printf '%s\n' "$NEWPOOL" >"$POOL"
if [ -z "$FPM_PID" ]; then
  rm -f "$FPM_SOCK" "$STATE/php-fpm.pid"
  quiet timeout 30 php-fpm8.2 --fpm-config "$FPM_CONF" || fail "php-fpm8.2 did not start"
  wait_for 20 test -S "$FPM_SOCK" || fail "php-fpm's socket $FPM_SOCK did not appear"
  wait_for 10 test -s "$STATE/php-fpm.pid" || fail "php-fpm wrote no pid file"
  FPM_PID=$(live_pid "$STATE/php-fpm.pid" "$FPM_CONF") || fail "php-fpm's pid file names no php-fpm"
fi

# ------------------------------------------------------------------ nginx
mkdir -p "$NGX"/{client_body,proxy,fastcgi,uwsgi,scgi}
chown -R www-data:www-data "$NGX"/{client_body,proxy,fastcgi,uwsgi,scgi}
touch "$LOG/access.log"
NGX_CONF=$NGX/nginx.conf
NEWNGX=$(cat <<EOF
# $MARK
user www-data;
worker_processes 1;
worker_rlimit_nofile 20000;
pid $NGX/nginx.pid;
error_log $LOG/nginx-error.log warn;
events { worker_connections 4000; }
http {
  default_type text/html;
  client_body_temp_path $NGX/client_body;
  proxy_temp_path $NGX/proxy;
  fastcgi_temp_path $NGX/fastcgi;
  uwsgi_temp_path $NGX/uwsgi;
  scgi_temp_path $NGX/scgi;
  keepalive_timeout 120s;
  keepalive_requests 1000000;
  log_format timing '\$msec \$request_time \$upstream_header_time \$status \$request_uri \$sent_http_x_page_ms';
  access_log off;
  server {
    listen 127.0.0.1:$PORT backlog=4096;
    server_name _;
    root $WWW;
    location = /nginx-status { stub_status; allow 127.0.0.1; deny all; }
    location = /fpm-status {
      allow 127.0.0.1; deny all;
      include /etc/nginx/fastcgi_params;
      fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
      fastcgi_pass unix:$FPM_SOCK;
    }
    location ~ \.php\$ {
      access_log $LOG/access.log timing;
      try_files \$uri =404;
      include /etc/nginx/fastcgi_params;
      fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
      fastcgi_pass unix:$FPM_SOCK;
      fastcgi_connect_timeout 60s;
      fastcgi_send_timeout 600s;
      fastcgi_read_timeout 600s;
    }
  }
}
EOF
)
NGX_PID=$(config_pid "$NGX/nginx.pid" "$NGX_CONF" "$NEWNGX") || exit 1
[ -n "$NGX_PID" ] || NGX_PID=$(start_nginx "$NGX" "$NGX_CONF" "$LOG" "$PORT") || exit 1

# ------------------------------------------------------------------ check
out=$(curl -sS --max-time 10 -D - -o /dev/null "http://127.0.0.1:$PORT/page.php?ms=50") || fail "GET page.php failed"
printf '%s\n' "$out" | grep -q '^HTTP/1.1 200' || fail "page.php answered: $(printf '%s' "$out" | head -1)"
printf '%s\n' "$out" | grep -qi '^X-Page-Ms: 50' || fail "page.php did not run PHP"
got=$(curl -sS --max-time 10 "http://127.0.0.1:$PORT/fpm-status" | sed -n 's/^total processes: *//p')
printf 'setup.sh: page at http://127.0.0.1:%s/page.php, php-fpm max_children=%s (%s processes), state %s\n' \
  "$PORT" "$CHILDREN" "${got:-?}" "$STATE"
printf 'setup.sh: pids: nginx %s, php-fpm %s\n' "$NGX_PID" "$FPM_PID"
