#!/usr/bin/env python3
"""Runs every Concert test suite and prints one closing line: `N passed, N failed`.

Suites:
  * doctest binaries named test_* under the build directory (unit and
    multi-process tests, built with ASan+UBSan);
  * Python suites tests/integration/test_*.py and tests/browser/test_*.py,
    each run in its own interpreter through tests/pysuite.py.

The data-path suites (EPOLL_RERUN) run a second time with CONCERT_IO_URING=off,
so that both the io_uring and the epoll path of the workers are covered;
those reruns are named "... (-io-uring off)" and counted on a line of their
own as well as in the total.

Suites run side by side, `--jobs` at a time: every suite starts its own
Concert, origins and Redis on ports the kernel picks, so they do not meet.
A Python suite that measures timing or memory (or loads the machine on
purpose) says so with a module-level line

    SERIAL = "why it must run alone"

and runs alone, after the others. The longest suites start first: their
times from the last run are kept in BUILD/test-logs/durations.json, and
tests/suite_times.json holds them for a fresh clone.

Output is one line per suite in a fixed order (binaries, then Python suites
by path), whatever order they finish in. A suite that crashes, times out or
prints no summary counts as one failure, and its whole output is printed.
The full output of every suite is kept in BUILD/test-logs/<suite>.log.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

# Lines that name a failure: doctest's failed checks, pytest's failed tests
# and errors, a crash.
FAILURE_LINE = re.compile(r"ERROR: |FATAL ERROR|^FAILED |^ERROR |^E  |Sanitizer|Traceback|timed out")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCTEST_RE = re.compile(r"test cases:\s*(\d+)\s*\|\s*(\d+) passed\s*\|\s*(\d+) failed")
PYSUITE_RE = re.compile(r"^PYSUITE passed=(\d+) failed=(\d+) skipped=(\d+)$", re.M)
SERIAL_RE = re.compile(r"^SERIAL\s*=\s*['\"](.+)['\"]\s*$", re.M)
DEFAULT_JOBS = 8  # the suites mostly wait on timers and sockets: 8 keep two cores busy
EPOLL_RERUN = ("test_proxy.py", "test_smuggling.py", "test_bounds.py", "test_connection_limit.py")
EPOLL_ENV = {"CONCERT_IO_URING": "off"}


class Suite:
    def __init__(self, kind, path, build, extra_env=None):
        self.kind = kind
        self.path = path
        self.name = os.path.relpath(path, ROOT) if kind == "py" else os.path.relpath(path, build)
        self.extra_env = extra_env or {}
        if self.extra_env:
            self.name += " (-io-uring off)"
        self.serial = None
        if kind == "py":
            with open(path, encoding="utf-8") as f:
                m = SERIAL_RE.search(f.read())
            self.serial = m.group(1) if m else None
        self.passed = self.failed = self.skipped = 0
        self.secs = 0.0
        self.out = ""
        self.done = threading.Event()

    def command(self):
        if self.kind == "bin":
            return [self.path]
        return [sys.executable, os.path.join(ROOT, "tests", "pysuite.py"), self.path]

    def run(self, env, timeout, log_dir):
        start = time.monotonic()
        try:
            proc = subprocess.run(self.command(), env=dict(env, **self.extra_env), cwd=ROOT, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
            out, rc = proc.stdout.decode("utf-8", "replace"), proc.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode("utf-8", "replace") + "\n*** suite timed out after %ds\n" % timeout
            rc = -1
        self.secs = time.monotonic() - start
        if self.kind == "bin":
            m = DOCTEST_RE.findall(out)
            self.passed, self.failed = (int(m[-1][1]), int(m[-1][2])) if m else (0, 0)
        else:
            m = PYSUITE_RE.findall(out)
            if m:
                self.passed, self.failed, self.skipped = (int(x) for x in m[-1])
        if not m or (rc != 0 and self.failed == 0):
            self.failed += 1  # crashed, timed out, or exited non-zero without a failing case
        self.out = out
        with open(os.path.join(log_dir, self.name.replace("/", "_").replace(" ", "_") + ".log"), "w") as f:
            f.write(out)
        self.done.set()


def find_binaries(build):
    found = []
    for dirpath, _, files in os.walk(os.path.join(build, "tests")):
        for name in files:
            path = os.path.join(dirpath, name)
            if name.startswith("test_") and os.access(path, os.X_OK) and "." not in name:
                found.append(path)
    return sorted(found)


def find_python_suites(soak):
    suites = []
    dirs = ["tests/integration", "tests/browser"] + (["tests/soak"] if soak else [])
    for d in dirs:
        full = os.path.join(ROOT, d)
        if os.path.isdir(full):
            suites += [os.path.join(full, n) for n in sorted(os.listdir(full))
                       if n.startswith("test_") and n.endswith(".py")]
    return suites


def schedule(suites, durations, jobs, env, timeout, log_dir):
    """Run the parallel suites `jobs` at a time, longest first, then each serial suite alone."""
    parallel = sorted((s for s in suites if not s.serial), key=lambda s: -durations.get(s.name, 60.0))
    serial = [s for s in suites if s.serial]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not parallel:
                    return
                suite = parallel.pop(0)
            suite.run(env, timeout, log_dir)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for suite in serial:
        suite.run(env, timeout, log_dir)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--soak", action="store_true")
    ap.add_argument("--only", default="", help="substring filter on suite paths (a comma list: any of them)")
    ap.add_argument("--jobs", "-j", type=int, default=int(os.environ.get("CONCERT_TEST_JOBS", DEFAULT_JOBS)),
                    help="suites run at once (default %(default)s; 1 runs them one after another)")
    args = ap.parse_args()
    build = os.path.abspath(args.build)

    env = dict(os.environ)
    env["CONCERT_BIN"] = os.path.join(build, "concert")
    env["CONCERT_BUILD"] = build
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    timeout = 1800 if args.soak else 600

    log_dir = os.path.join(build, "test-logs")
    os.makedirs(log_dir, exist_ok=True)
    # Suite times of the last run here, else the ones kept with the tests.
    durations_path = os.path.join(log_dir, "durations.json")
    durations = {}
    for path in (os.path.join(ROOT, "tests", "suite_times.json"), durations_path):
        try:
            with open(path) as f:
                durations.update(json.load(f))
        except (OSError, ValueError):
            pass

    suites = [Suite("bin", p, build) for p in find_binaries(build)]
    python_suites = find_python_suites(args.soak)
    suites += [Suite("py", p, build) for p in python_suites]
    suites += [Suite("py", p, build, EPOLL_ENV) for p in python_suites if os.path.basename(p) in EPOLL_RERUN]
    wanted = [w for w in args.only.split(",") if w]
    suites = [s for s in suites if not wanted or any(w in s.path for w in wanted)]

    started = time.monotonic()
    runner = threading.Thread(target=schedule, args=(suites, durations, args.jobs, env, timeout, log_dir),
                              daemon=True)
    runner.start()

    failed_suites = []
    for s in suites:  # report in a fixed order as each suite (and all before it) finishes
        s.done.wait()
        ok = s.failed == 0
        print("%-4s %-48s %4d passed %3d failed %3d skipped  %6.1fs%s" % (
            "ok" if ok else "FAIL", s.name, s.passed, s.failed, s.skipped, s.secs,
            "  (alone)" if s.serial else ""), flush=True)
        if not ok:
            failed_suites.append(s.name)
            sys.stdout.write("---- output of %s ----\n%s\n---- end of %s ----\n" % (s.name, s.out, s.name))
            sys.stdout.flush()
    runner.join()

    for s in suites:
        durations[s.name] = round(s.secs, 1)
    try:
        with open(durations_path, "w") as f:
            json.dump(durations, f, indent=1, sort_keys=True)
    except OSError:
        pass

    total_passed = sum(s.passed for s in suites)
    total_failed = sum(s.failed for s in suites)
    total_skipped = sum(s.skipped for s in suites)
    print("suites: %d in %.1fs wall, %d at a time" % (len(suites), time.monotonic() - started, args.jobs))
    reruns = [s for s in suites if s.extra_env]
    if reruns:
        print("epoll path (-io-uring off) reruns: %d passed, %d failed" % (
            sum(s.passed for s in reruns), sum(s.failed for s in reruns)))
    if failed_suites:
        # Repeated at the end, where a log cut in the middle still shows it.
        for s in suites:
            if s.failed:
                lines = [l for l in s.out.splitlines() if FAILURE_LINE.search(l)]
                print("failures in %s:" % s.name)
                for line in lines[:20] or ["(no failure line; see its output above)"]:
                    print("  " + line.strip()[:300])
        print("failed suites: " + ", ".join(failed_suites))
    if total_skipped:
        print("%d passed, %d failed, %d skipped" % (total_passed, total_failed, total_skipped))
    else:
        print("%d passed, %d failed" % (total_passed, total_failed))
    return 1 if total_failed or not suites else 0


if __name__ == "__main__":
    sys.exit(main())
