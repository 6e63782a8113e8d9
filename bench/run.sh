#!/usr/bin/env bash
# `make bench`: its sections, each printing its Markdown table (also written to
# bench/results/):
#
#   shm     shared-memory micro-benchmarks (BUILD/bench/shm_bench, if built)
#           -> results/shm_bench.json
#   model   the room's rules against their reference model: the randomized
#           differential test of make test with MODEL_STEPS steps (default
#           50,000,000, about 8 minutes)
#   e2e     end-to-end proxy comparison against HAProxy and nginx: proxy, cap5
#           (HAProxy maxconn 5 vs Concert -cap 5 -queue-hold 30s), assets
#           (bench/e2e.py) -> results/latest.md
#   churn   admission under churn: origin delaying every response 1-20 ms,
#           HAProxy maxconn N vs Concert -cap N -queue-hold 30s with 2N
#           connections, admissions/s against the Little's-law bound N / mean
#           measured service time (bench/churn.py) -> results/churn.md
#   queue   queue scale: 1,000 to 1,000,000 visitors joining through GET /,
#           then polling /queue/status; CPU per poll, latency, memory and
#           segment bytes per visitor (bench/queue_scale.py) -> results/queue_scale.md
#   cluster several hosts: one Concert against three sharing one line and cap
#           through a local redis-server (-cluster); visitors through the
#           waiting room (ticket, polls, back when ready), engine round trips
#           per admission and per poll, an offered-rate sweep
#           (bench/cluster.py) -> results/cluster.md; skipped with a message
#           when redis-server is not installed
#   wordpress  a real origin: WordPress (Debian's wordpress, php8.2-fpm with
#           pm = static and 4 children, MariaDB, nginx, all on loopback under
#           /tmp/concert-wp) under 1,500 visitors arriving within 2 s, with no
#           proxy, behind HAProxy maxconn 4 and behind Concert -cap 4
#           (bench/wordpress/run.sh, which installs the packages when missing)
#           -> results/wordpress.md
#   adaptive  -adaptive against a real php-fpm (Debian's php8.2-fpm, pm = static,
#           8 children, pages sleeping 50 or 400 ms, behind nginx, all on loopback
#           under /tmp/concert-adaptive): a sweep of fixed caps, -cap 64 -adaptive
#           under 16 closed-loop visitors, the pool changed to 4 and 16 children
#           under it (SIGUSR2), the capacity advisor after a ramp in passthrough
#           mode (bench/adaptive/run.sh, which installs the packages when
#           missing; about 10 minutes, AD_QUICK=1 about 2.5) -> results/adaptive.md
#   chaos   three hosts under looping visitors with random faults (agents and
#           the engine stopped, killed, restarted empty; hosts killed;
#           reloads), CHAOS_SECONDS (300) of them, fail open: the test suite's
#           chaos test run longer; fails the run on any broken promise
#
#   bash bench/run.sh BUILD_DIR
#
# Knobs (environment): BENCH_DURATION (measured seconds per setup, e2e and churn,
# default 10), BENCH_WARMUP (default 3), BENCH_CONNECTIONS (e2e, default 100),
# CHURN_CAP (origin concurrency N of the churn section, default 20; wrk uses 2N
# connections), QUEUE_N (visitor counts for the queue-scale run, default
# 1000,10000,100000,1000000), QUEUE_POLL_SECONDS (seconds per poll phase,
# default 15), BENCH_SKIP (comma list of shm,model,e2e,churn,queue,cluster,wordpress,adaptive,chaos), MODEL_STEPS, BENCH_NICE (run
# every benchmark process at this nice level, e.g. -5 as root on a machine that
# is busy with other work; every setup gets the same level; with the kernel's
# session autogroups the session's group nice is set too, since plain nice only
# ranks tasks within one group, and restored at exit). The cluster section reads
# its own: CLUSTER_CONCERT (the binary, default BUILD/concert), CLUSTER_CAP (10),
# CLUSTER_DELAY_MS (250), CLUSTER_VISITORS (60), CLUSTER_DURATION (15),
# CLUSTER_WARMUP (6), CLUSTER_POLL_SECONDS (1), CLUSTER_RATES (offered visits/s,
# 100,200,400,800,1600,3200), CLUSTER_SWEEP_CAP (200), CLUSTER_SWEEP_DELAY_MS (20),
# CLUSTER_SWEEP_LEASES (4,64), CLUSTER_STEP_SECONDS (8), CLUSTER_STEP_WARMUP (2).
#
# With the defaults the whole run takes about 7 minutes on a 2-CPU machine
# (shm ~1, e2e ~2, churn ~1, queue ~3.5), plus about 4 for the cluster section
# and 5.5 for chaos;
# each section prints its own time.
#
# Everything runs on 127.0.0.1. The Python drivers stop what they start; if they
# are killed themselves, the trap below stops every process they recorded in the
# pid file, by pid, after checking it is still one of ours (nginx, haproxy, wrk,
# concert, the churn origin, redis-server). Scratch files live in one mktemp directory, removed
# at exit.
set -euo pipefail

BUILD=${1:-build}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac

CONCERT="$BUILD/concert"
MODEL_STEPS=${MODEL_STEPS:-50000000}
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
      *nginx*|*haproxy*|*wrk*|*concert*|*delay_origin.py*|*redis-server*) kill -TERM "$pid" 2>/dev/null || true ;;
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
RUN_START=$SECONDS
SECTION_START=$SECONDS
section_start() { SECTION_START=$SECONDS; }
section_end() {
  echo "($1: $((SECONDS - SECTION_START)) s)"
  echo
}

if ! skip shm; then
  if [ -x "$BUILD/bench/shm_bench" ]; then
    echo "== shared-memory core (Google Benchmark: $BUILD/bench/shm_bench)"
    section_start
    run_driver timeout 300 "$BUILD/bench/shm_bench" --benchmark_counters_tabular=true \
      --benchmark_out="$HERE/results/shm_bench.json" --benchmark_out_format=json || status=1
    section_end shm
  else
    echo "== shared-memory core: $BUILD/bench/shm_bench not built, skipped"
    echo
  fi
fi

if ! skip model; then
  # The room's rules against their reference model, far longer than in make test.
  if [ -x "$BUILD/tests/unit/shm/test_shm" ]; then
    echo "== the room's rules against the model ($MODEL_STEPS random steps)"
    section_start
    CONCERT_MODEL_STEPS=$MODEL_STEPS run_driver timeout 1800 "$BUILD/tests/unit/shm/test_shm" \
      -tc="*random differential run*" || status=1
    section_end model
  else
    echo "== the room's rules against the model: $BUILD/tests/unit/shm/test_shm not built, skipped"
    echo
  fi
fi

if ! skip e2e; then
  echo "== end-to-end proxy comparison (bench/e2e.py)"
  section_start
  mkdir -p "$TMP/e2e"
  run_driver python3 "$HERE/e2e.py" --concert "$CONCERT" --tmp "$TMP/e2e" --pid-file "$PIDS" \
    --duration "${BENCH_DURATION:-10}" --warmup "${BENCH_WARMUP:-3}" \
    --connections "${BENCH_CONNECTIONS:-100}" --out "$HERE/results/latest.md" || status=1
  section_end e2e
fi

if ! skip churn; then
  echo "== admission under churn (bench/churn.py)"
  section_start
  mkdir -p "$TMP/churn"
  run_driver python3 "$HERE/churn.py" --concert "$CONCERT" --tmp "$TMP/churn" --pid-file "$PIDS" \
    --cap "${CHURN_CAP:-20}" --duration "${BENCH_DURATION:-10}" --warmup "${BENCH_WARMUP:-3}" \
    --out "$HERE/results/churn.md" || status=1
  section_end churn
fi

if ! skip queue; then
  echo "== queue scale (bench/queue_scale.py)"
  section_start
  mkdir -p "$TMP/queue"
  run_driver python3 "$HERE/queue_scale.py" --concert "$CONCERT" --tmp "$TMP/queue" --pid-file "$PIDS" \
    --n "${QUEUE_N:-1000,10000,100000,1000000}" --poll-seconds "${QUEUE_POLL_SECONDS:-15}" \
    --out "$HERE/results/queue_scale.md" || status=1
  section_end queue
fi

if ! skip cluster; then
  echo "== several hosts (bench/cluster.py)"
  section_start
  if command -v redis-server >/dev/null 2>&1; then
    mkdir -p "$TMP/cluster"
    run_driver python3 "$HERE/cluster.py" --concert "${CLUSTER_CONCERT:-$CONCERT}" --tmp "$TMP/cluster" \
      --pid-file "$PIDS" --out "$HERE/results/cluster.md" || status=1
  else
    echo "redis-server not installed (apt-get install redis-server): skipped"
  fi
  section_end cluster
fi

if ! skip wordpress; then
  echo "== a real origin: WordPress on php-fpm (bench/wordpress/run.sh)"
  section_start
  WP_STATE=${WP_STATE:-/tmp/concert-wp} CONCERT="$(cd "$(dirname "$CONCERT")" && pwd)/$(basename "$CONCERT")" \
    bash "$HERE/wordpress/run.sh" || status=1
  cp "${WP_STATE:-/tmp/concert-wp}/results.md" "$HERE/results/wordpress.md" 2>/dev/null || true
  section_end wordpress
fi

if ! skip adaptive; then
  echo "== -adaptive against a real php-fpm (bench/adaptive/run.sh)"
  section_start
  AD_STATE=${AD_STATE:-/tmp/concert-adaptive} CONCERT="$(cd "$(dirname "$CONCERT")" && pwd)/$(basename "$CONCERT")" \
    bash "$HERE/adaptive/run.sh" || status=1
  cp "${AD_STATE:-/tmp/concert-adaptive}/results.md" "$HERE/results/adaptive.md" 2>/dev/null || true
  section_end adaptive
fi

if ! skip chaos; then
  echo "== chaos for hosts sharing a line (tests/integration/test_cluster_chaos.py, fail open, ${CHAOS_SECONDS:-300} s)"
  section_start
  if command -v redis-server >/dev/null 2>&1; then
    CHAOS_BIN="$(cd "$(dirname "$CONCERT")" && pwd)/$(basename "$CONCERT")"
    (cd "$HERE/../tests/integration" && CHAOS_SECONDS="${CHAOS_SECONDS:-300}" CONCERT_BIN="$CHAOS_BIN" \
      PYTHONPATH=../lib python3 -m unittest -v test_cluster_chaos.ClusterChaosTest.test_fail_open) || status=1
  else
    echo "redis-server not installed (apt-get install redis-server): skipped"
  fi
  section_end chaos
fi

echo "results: $HERE/results/ (whole run: $((SECONDS - RUN_START)) s)"
exit "$status"
