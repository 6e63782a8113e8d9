#!/usr/bin/env bash
# `make bench`: the shared-memory micro-benchmarks (if built), the end-to-end
# proxy comparison (bench/e2e.py) and the queue-scale run (bench/queue_scale.py),
# each printing its Markdown table; the tables also land in bench/results/.
#
#   bash bench/run.sh BUILD_DIR
#
# Knobs (environment): BENCH_DURATION (measured seconds per setup, default 10),
# BENCH_WARMUP (default 3), BENCH_CONNECTIONS (default 100), QUEUE_N (visitor
# counts for the queue-scale run, default 1000,10000; e.g. QUEUE_N=100000,1000000),
# QUEUE_POLL_SECONDS (default 15), BENCH_SKIP (comma list of shm,e2e,queue),
# BENCH_NICE (run every benchmark process at this nice level, e.g. -5 as root on
# a machine that is busy with other work; every setup gets the same level; with
# the kernel's session autogroups the session's group nice is set too, since
# plain nice only ranks tasks within one group, and restored at exit).
#
# Everything runs on 127.0.0.1. The Python drivers stop what they start; if they
# are killed themselves, the trap below stops every process they recorded in the
# pid file, by pid, after checking it is still one of ours (nginx, haproxy, wrk,
# concert). Scratch files live in one mktemp directory, removed at exit.
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac

CONCERT="$BUILD/concert"
[ -x "$CONCERT" ] || CONCERT="$BUILD/src/concert"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/concert-bench.XXXXXX")
# nginx workers started by root run as nobody and must traverse to their files.
chmod 755 "$TMP"
PIDS="$TMP/pids"
: >"$PIDS"
DRIVER=""

AUTOGROUP_NICE=""

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ -n "$AUTOGROUP_NICE" ]; then
    echo "$AUTOGROUP_NICE" 2>/dev/null >/proc/self/autogroup || true
  fi
  if [ -n "$DRIVER" ] && kill -0 "$DRIVER" 2>/dev/null; then
    kill -TERM "$DRIVER" 2>/dev/null || true
    wait "$DRIVER" 2>/dev/null || true
  fi
  local pid cmd
  while read -r pid; do
    [ -n "$pid" ] || continue
    kill -0 "$pid" 2>/dev/null || continue
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
    case "$cmd" in
      *nginx*|*haproxy*|*wrk*|*concert*) kill -TERM "$pid" 2>/dev/null || true ;;
    esac
  done <"$PIDS"
  rm -rf "$TMP"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

skip() { case ",${BENCH_SKIP:-}," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# Runs a driver in the background and waits, so a signal reaches the trap at once.
run_driver() {
  if [ -n "${BENCH_NICE:-}" ]; then
    nice -n "$BENCH_NICE" "$@" &
  else
    "$@" &
  fi
  DRIVER=$!
  local rc=0
  wait "$DRIVER" || rc=$?
  DRIVER=""
  return "$rc"
}

if [ -n "${BENCH_NICE:-}" ] && [ -w /proc/self/autogroup ]; then
  previous=$(sed -n 's/.* nice \(-\{0,1\}[0-9]*\)$/\1/p' /proc/self/autogroup)
  if echo "$BENCH_NICE" 2>/dev/null >/proc/self/autogroup; then
    AUTOGROUP_NICE=${previous:-0}
  fi
fi

mkdir -p "$HERE/results"
echo "concert binary: $CONCERT"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), kernel $(uname -r)"
echo

status=0

if ! skip shm; then
  if [ -x "$BUILD/bench/shm_bench" ]; then
    echo "== shared-memory core (Google Benchmark: $BUILD/bench/shm_bench)"
    run_driver timeout 300 "$BUILD/bench/shm_bench" --benchmark_counters_tabular=true \
      --benchmark_out="$HERE/results/shm_bench.json" --benchmark_out_format=json || status=1
    echo
  else
    echo "== shared-memory core: $BUILD/bench/shm_bench not built, skipped"
    echo
  fi
fi

if ! skip e2e; then
  echo "== end-to-end proxy comparison (bench/e2e.py)"
  mkdir -p "$TMP/e2e"
  run_driver python3 "$HERE/e2e.py" --concert "$CONCERT" --tmp "$TMP/e2e" --pid-file "$PIDS" \
    --duration "${BENCH_DURATION:-10}" --warmup "${BENCH_WARMUP:-3}" \
    --connections "${BENCH_CONNECTIONS:-100}" --out "$HERE/results/latest.md" || status=1
  echo
fi

if ! skip queue; then
  echo "== queue scale (bench/queue_scale.py)"
  mkdir -p "$TMP/queue"
  run_driver python3 "$HERE/queue_scale.py" --concert "$CONCERT" --tmp "$TMP/queue" --pid-file "$PIDS" \
    --n "${QUEUE_N:-1000,10000}" --poll-seconds "${QUEUE_POLL_SECONDS:-15}" \
    --out "$HERE/results/queue_scale.md" || status=1
  echo
fi

echo "results: $HERE/results/"
exit "$status"
