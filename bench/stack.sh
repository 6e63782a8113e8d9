# shellcheck shell=bash
# Shell functions shared by the real-origin benches (bench/wordpress, bench/adaptive), sourced by
# their scripts. The caller defines say, quiet and fail (install_missing uses them).

# pid from a pid file if that process is alive and its command line contains $2.
live_pid() {
  local file=$1 want=$2 pid
  [ -s "$file" ] || return 1
  pid=$(tr -dc '0-9' <"$file")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$want" || return 1
  echo "$pid"
}

# Waits up to $1 seconds for the command "$@" to succeed.
wait_for() {
  local secs=$1; shift
  local end=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.2
  done
}

# Installs those of the Debian packages "$@" that are missing (apt-get update first, no
# recommends). The packages' own system services are never started: service starts are denied
# by a temporary /usr/sbin/policy-rc.d for the duration of the install, if there is none.
install_missing() {
  local p missing="" policy="" rc=0
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  [ -n "$missing" ] || return 0
  say "installing$missing (apt-get, log in $SETUP_LOG)"
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    policy=/usr/sbin/policy-rc.d
  fi
  export DEBIAN_FRONTEND=noninteractive
  quiet timeout 600 apt-get update -q || rc=$?
  # shellcheck disable=SC2086  # the package names, one word each
  [ "$rc" = 0 ] && { quiet timeout 1200 apt-get install -y -q --no-install-recommends $missing || rc=$?; }
  [ -n "$policy" ] && rm -f "$policy"
  [ "$rc" = 0 ] || fail "apt-get failed (exit $rc)"
}

# stop_pid NAME PIDFILE TEXT: TERM the pid in PIDFILE if its command line contains TEXT, KILL
# after 30 s; appends "NAME PID" to $stopped and removes the pid file.
stopped=""
stop_pid() {
  local name=$1 file=$2 want=$3 pid
  [ -s "$file" ] || return 0
  if ! pid=$(live_pid "$file" "$want"); then
    rm -f "$file"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    stopped="$stopped $name $pid (killed)"
  else
    stopped="$stopped $name $pid"
  fi
  rm -f "$file"
}

# config_pid PIDFILE CONF NEWTEXT: writes NEWTEXT to the daemon's configuration file CONF and
# prints the pid of the daemon still running on it (pid in PIDFILE, CONF on its command line),
# or nothing. A daemon whose CONF held other text is stopped first (TERM, KILL after 20 s), so
# that the caller starts it anew on the new text.
config_pid() {
  local file=$1 conf=$2 text=$3 pid
  pid=$(live_pid "$file" "$conf" || true)
  if [ -n "$pid" ] && [ "$(cat "$conf" 2>/dev/null)" != "$text" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait_for 20 sh -c "! kill -0 $pid" || kill -KILL "$pid" 2>/dev/null || true
    pid=""
  fi
  printf '%s\n' "$text" >"$conf"
  echo "$pid"
}

# start_nginx PREFIX CONF LOGDIR PORT: starts nginx on CONF (its pid file in PREFIX), waits until
# /nginx-status answers on PORT and prints its pid; fails otherwise.
start_nginx() {
  local prefix=$1 conf=$2 log=$3 port=$4
  rm -f "$prefix/nginx.pid"
  quiet timeout 30 nginx -p "$prefix" -c "$conf" -e "$log/nginx-error.log" || fail "nginx did not start (port $port taken?)"
  wait_for 20 curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$port/nginx-status" || fail "nginx does not answer on $port"
  live_pid "$prefix/nginx.pid" "$conf" || fail "nginx wrote no pid file"
}
