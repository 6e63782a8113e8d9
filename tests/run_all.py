#!/usr/bin/env python3
"""Runs every Concert test suite and prints one closing line: `N passed, N failed`.

Suites:
  * doctest binaries named test_* under the build directory (unit and
    multi-process tests, built with ASan+UBSan);
  * Python suites tests/integration/test_*.py and tests/browser/test_*.py,
    each run in its own interpreter through tests/pysuite.py.
A suite that crashes or prints no summary counts as one failure. The full
output of every suite is kept in BUILD/test-logs/<suite>.log.
"""
import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCTEST_RE = re.compile(r"test cases:\s*(\d+)\s*\|\s*(\d+) passed\s*\|\s*(\d+) failed")
PYSUITE_RE = re.compile(r"^PYSUITE passed=(\d+) failed=(\d+) skipped=(\d+)$", re.M)


def find_binaries(build):
    found = []
    for sub in ("tests",):
        for dirpath, _, files in os.walk(os.path.join(build, sub)):
            for name in files:
                path = os.path.join(dirpath, name)
                if name.startswith("test_") and os.access(path, os.X_OK) and "." not in name:
                    found.append(path)
    return sorted(found)


def find_python_suites(soak):
    suites = []
    dirs = ["tests/integration", "tests/browser"]
    if soak:
        dirs.append("tests/soak")
    for d in dirs:
        full = os.path.join(ROOT, d)
        if not os.path.isdir(full):
            continue
        for name in sorted(os.listdir(full)):
            if name.startswith("test_") and name.endswith(".py"):
                suites.append(os.path.join(full, name))
    return suites


def run(cmd, env, timeout):
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout)
        out = proc.stdout.decode("utf-8", "replace")
        rc = proc.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace") + "\n*** suite timed out after %ds\n" % timeout
        rc = -1
    return rc, out, time.monotonic() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--soak", action="store_true")
    ap.add_argument("--only", default="", help="substring filter on suite paths")
    args = ap.parse_args()
    build = os.path.abspath(args.build)

    env = dict(os.environ)
    env["CONCERT_BIN"] = os.path.join(build, "concert")
    env["CONCERT_BUILD"] = build
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    env["PYTHONDONTWRITEBYTECODE"] = "1"

    log_dir = os.path.join(build, "test-logs")
    os.makedirs(log_dir, exist_ok=True)
    total_passed = total_failed = total_skipped = 0
    failed_suites = []

    suites = [("bin", p) for p in find_binaries(build)] + [("py", p) for p in find_python_suites(args.soak)]
    suites = [s for s in suites if args.only in s[1]]
    for kind, path in suites:
        name = os.path.relpath(path, ROOT) if kind == "py" else os.path.relpath(path, build)
        if kind == "bin":
            rc, out, secs = run([path], env, 900)
            m = DOCTEST_RE.findall(out)
            passed, failed, skipped = (int(m[-1][1]), int(m[-1][2]), 0) if m else (0, 0, 0)
        else:
            rc, out, secs = run([sys.executable, os.path.join(ROOT, "tests", "pysuite.py"), path], env,
                                1800 if args.soak else 600)
            m = PYSUITE_RE.findall(out)
            passed, failed, skipped = (int(m[-1][0]), int(m[-1][1]), int(m[-1][2])) if m else (0, 0, 0)
        with open(os.path.join(log_dir, name.replace("/", "_") + ".log"), "w") as f:
            f.write(out)
        if not m or (rc != 0 and failed == 0):
            failed += 1  # crashed, timed out, or exited non-zero without a failing case
        ok = failed == 0
        print("%-4s %-48s %4d passed %3d failed %3d skipped  %6.1fs" % ("ok" if ok else "FAIL", name, passed,
                                                                      failed, skipped, secs), flush=True)
        if not ok:
            failed_suites.append(name)
            sys.stdout.write("---- output of %s ----\n%s\n---- end of %s ----\n" % (name, out[-20000:], name))
        total_passed += passed
        total_failed += failed
        total_skipped += skipped

    if failed_suites:
        print("failed suites: " + ", ".join(failed_suites))
    if total_skipped:
        print("%d passed, %d failed, %d skipped" % (total_passed, total_failed, total_skipped))
    else:
        print("%d passed, %d failed" % (total_passed, total_failed))
    return 1 if total_failed or not suites else 0


if __name__ == "__main__":
    sys.exit(main())
