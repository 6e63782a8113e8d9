#!/usr/bin/env bash
# Builds every fuzz target with clang + libFuzzer + ASan + UBSan and runs each
# for a bounded time (`make fuzz`).
#
#   FUZZ_SECONDS=60     seconds per target (default 60)
#   FUZZ_TARGETS="..."  subset of: request response cookies pass ticket config pathlist path proxy_protocol
#   FUZZ_BUILD=dir      where binaries and the growing work corpora go (default build-fuzz)
#
# Inputs: the checked-in seeds in tests/fuzz/corpus/<target>/ (read only) plus
# the work corpus in $FUZZ_BUILD/corpus/<target>/ (libFuzzer adds what it
# finds there, so later runs start from it). Crash, leak and timeout inputs
# land in tests/fuzz/artifacts/<target>/ (gitignored). A finding must be
# minimised into tests/fuzz/corpus/<target>/ by hand once the bug is fixed;
# test_fuzz_corpus then replays it on every `make test`.
#
# The sources each target needs are compiled directly from src/ and
# /usr/share/llhttp (Debian's node-llhttp); nothing is vendored. Exits 1 when
# any target found something, 2 when a build failed.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
SECONDS_PER_TARGET=${FUZZ_SECONDS:-60}
TARGETS=${FUZZ_TARGETS:-"request response cookies pass ticket config pathlist path proxy_protocol"}
OUT=${FUZZ_BUILD:-build-fuzz}
LLHTTP_SRC=${LLHTTP_SRC:-/usr/share/llhttp}
LLHTTP_INC=${LLHTTP_INC:-/usr/share/include/llhttp}
CXX=${FUZZ_CXX:-clang++}
CC=${FUZZ_CC:-clang}

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
CXXFLAGS="-std=c++20 -O1 -g $SAN -fsanitize=fuzzer-no-link -Isrc -isystem $LLHTTP_INC -DCONCERT_VERSION=\"fuzz\" -DCONCERT_LIBFUZZER -Wno-unused-command-line-argument"
CFLAGS="-O1 -g $SAN -fsanitize=fuzzer-no-link -isystem $LLHTTP_INC -w"
LDFLAGS="$SAN -fsanitize=fuzzer"

# Sources from src/ per target (the link pulls in nothing else).
declare -A SOURCES=(
  [request]="src/http/parser.cpp src/http/path.cpp src/http/request.cpp"
  [response]="src/http/parser.cpp src/http/path.cpp src/http/request.cpp"
  [cookies]="src/admission/cookies.cpp src/http/request.cpp"
  [pass]="src/admission/pass.cpp"
  [ticket]="src/admission/cookies.cpp src/http/request.cpp"
  [config]="src/config/*.cpp src/common/*.cpp"
  [pathlist]="src/config/parse.cpp src/config/config.cpp"
  [path]="src/http/path.cpp"
  [proxy_protocol]="src/http/proxy_protocol.cpp"
)
declare -A LIBS=(
  [request]="llhttp" [response]="llhttp" [cookies]="" [pass]="-lssl -lcrypto"
  [ticket]="" [config]="-lyaml-cpp -lssl -lcrypto" [pathlist]="" [path]=""
  [proxy_protocol]=""
)
declare -A MAXLEN=(
  [request]=36000 [response]=16384 [cookies]=4096 [pass]=256 [ticket]=128 [config]=8192 [pathlist]=2048 [path]=1024
  [proxy_protocol]=2200
)
declare -A DICT=([request]=tests/fuzz/http.dict [response]=tests/fuzz/http.dict [config]=tests/fuzz/config.dict
  [path]=tests/fuzz/path.dict)

command -v "$CXX" >/dev/null || { echo "run.sh: $CXX not found (make deps-fuzz installs clang)"; exit 2; }
mkdir -p "$OUT/obj" "$OUT/corpus" tests/fuzz/artifacts

# Compiles one source into $OUT/obj (once per run: sources change between
# runs) and leaves the object's path in OBJ.
declare -A BUILT=()
OBJ=
object() {
  local src=$1
  OBJ="$OUT/obj/$(echo "$src" | tr '/.' '__').o"
  [ -n "${BUILT[$src]:-}" ] && return 0
  case "$src" in
    *.c) $CC $CFLAGS -c "$src" -o "$OBJ" || return 1 ;;
    *) $CXX $CXXFLAGS -c "$src" -o "$OBJ" || return 1 ;;
  esac
  BUILT[$src]=1
}

build_target() {
  local t=$1 objs=() src libs=() lib
  for src in tests/fuzz/fuzz_$t.cpp ${SOURCES[$t]}; do
    object "$src" || return 1
    objs+=("$OBJ")
  done
  for lib in ${LIBS[$t]}; do
    if [ "$lib" = llhttp ]; then
      for src in "$LLHTTP_SRC"/api.c "$LLHTTP_SRC"/http.c "$LLHTTP_SRC"/llhttp.c; do
        object "$src" || return 1
        objs+=("$OBJ")
      done
    else
      libs+=("$lib")
    fi
  done
  $CXX $LDFLAGS "${objs[@]}" "${libs[@]}" -o "$OUT/fuzz_$t"
}

declare -A RESULT=()
found=0
build_failed=0
for t in $TARGETS; do
  if [ -z "${SOURCES[$t]+x}" ]; then echo "run.sh: unknown target $t"; exit 2; fi
  echo "=== building fuzz_$t"
  if ! build_target "$t"; then
    echo "=== fuzz_$t: BUILD FAILED"
    RESULT[$t]="build failed"
    build_failed=1
    continue
  fi
  mkdir -p "$OUT/corpus/$t" "tests/fuzz/artifacts/$t"
  touch "$OUT/fuzz_$t.log.start"
  dict=()
  [ -n "${DICT[$t]:-}" ] && dict=("-dict=${DICT[$t]}")
  echo "=== running fuzz_$t for ${SECONDS_PER_TARGET}s"
  log="$OUT/fuzz_$t.log"
  # Fork mode with -ignore_crashes: one known bug must not stop the search
  # for the next one. Every finding is replayed below to name its cause.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$OUT/fuzz_$t" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
    -max_len="${MAXLEN[$t]}" "${dict[@]}" \
    -artifact_prefix="tests/fuzz/artifacts/$t/" "$OUT/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1
  runs=$(grep -o '^#[0-9]*: cov' "$log" | tail -1 | tr -dc '0-9')
  corpus=$(find "$OUT/corpus/$t" -type f | wc -l)
  seeds=$(find "tests/fuzz/corpus/$t" -type f | wc -l)
  new_findings=$(find "tests/fuzz/artifacts/$t" -type f -newer "$log.start" | sort)
  if [ -n "$new_findings" ]; then
    found=1
    RESULT[$t]="FINDINGS ($(echo "$new_findings" | wc -l) files in tests/fuzz/artifacts/$t/), ${runs:-?} executions"
    # One line per distinct cause: the property, sanitizer report or crash kind.
    for f in $new_findings; do
      ASAN_OPTIONS=detect_leaks=1 "$OUT/fuzz_$t" -runs=1 "$f" 2>&1 |
        grep -m1 -E 'fuzz property violated|ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error|ERROR: libFuzzer' |
        sed -E 's/==[0-9]+==//; s/0x[0-9a-f]+/ADDR/g'
    done | sort | uniq -c | sed 's/^/    /'
  else
    RESULT[$t]="ok: ${runs:-?} executions in ${SECONDS_PER_TARGET}s, work corpus $corpus files, seeds $seeds"
  fi
  echo "=== fuzz_$t: ${RESULT[$t]}"
done

echo
echo "fuzz summary (${SECONDS_PER_TARGET}s per target):"
for t in $TARGETS; do printf '  %-14s %s\n' "$t" "${RESULT[$t]}"; done
[ "$build_failed" -eq 1 ] && exit 2
[ "$found" -eq 1 ] && exit 1
exit 0
