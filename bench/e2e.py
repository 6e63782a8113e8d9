#!/usr/bin/env python3
"""End-to-end proxy comparison: Concert against HAProxy and nginx, in one run.

One nginx (one worker, access log off) serves a static 1 KB file as the origin.
wrk drives each setup in turn with the same threads, connections, warm-up and
duration; every proxy runs one worker/thread, pinned to the same CPU (see
benchlib.Pinning). For each setup it records wrk's request count and exact
latency percentiles (printed by a Lua done() hook), and the CPU time that the
proxy's process tree (master + workers) spent during the measured window, read
from /proc before and after, divided by the requests served.

Workloads:
  proxy   1 KB static page, proxy capacity far above the load
          (a) nginx direct, (b) HAProxy, (c) nginx reverse proxy, (d) Concert, then
          (e) HAProxy `busy-polling` and (f) Concert -busy-poll 1ms (poll instead of sleeping);
          with --io-paths instead: nginx direct, then --rounds alternating rounds of
          HAProxy, Concert -io-uring on and Concert -io-uring off
  cap5    origin concurrency limited to 5: HAProxy `maxconn 5` on the server
          (+ timeout queue 30s) against Concert -cap 5 -queue-hold 30s (a page
          request that cannot be admitted waits on its connection for its FIFO
          turn, as in HAProxy's queue); reports total and 2xx req/s, p99/p50, and
          each proxy's 2xx req/s against its own uncapped proxy row
  cap5-nohold (not in the default set) Concert -cap 5 without -queue-hold:
          cookie-less clients are answered 429 at once and keep no place
  assets  private asset /assets/* with a valid concert_admit pass in a Cookie
          header (256 passes, minted here per the pass format) against HAProxy
          proxying the same requests

Output: Markdown tables on stdout and in bench/results/latest.md.
Concert rows are skipped, with the reason printed, if the binary does not run.
"""
import argparse
import datetime
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = b"<!doctype html><title>bench</title>" + b"x" * (1024 - 35)
PAGE_PATH = "/page.html"
ASSET_PATH = "/assets/page.css"
PASSES = 256


class Row:
    def __init__(self, setup, workers, wrk, proxy_cpu_s, origin_cpu_s):
        self.setup = setup
        # Which proxy this is ("HAProxy", "Concert", ...): the first word of the setup.
        self.family = setup.split()[0]
        self.workers = workers
        self.wrk = wrk
        secs = wrk["duration_us"] / 1e6
        self.requests = wrk["requests"]
        self.rps = self.requests / secs if secs else 0.0
        ok = self.requests - wrk["status"]
        self.rps_2xx = ok / secs if secs else 0.0
        self.errors = wrk["connect"] + wrk["read"] + wrk["write"] + wrk["timeout"]
        self.proxy_us = proxy_cpu_s * 1e6 / self.requests if proxy_cpu_s is not None and self.requests else None
        self.proxy_util = proxy_cpu_s / secs if proxy_cpu_s is not None and secs else None
        self.origin_us = origin_cpu_s * 1e6 / self.requests if self.requests else None
        self.others_util = None


def fmt_ms(us):
    return "%.2f" % (us / 1000.0)


def fmt_opt(v, pattern):
    return pattern % v if v is not None else "—"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "—"
    return "%.2f×" % (a / b)


def table(rows, with_2xx=False, uncapped=None):
    """uncapped: {family: the same proxy's row in the uncapped proxy table}, for the capped workload."""
    base = next((r for r in rows if r.setup.startswith("HAProxy")), None)
    head = ["setup", "workers", "req/s"]
    if with_2xx:
        head.append("2xx req/s")
    if uncapped is not None:
        head.append("2xx req/s vs same proxy uncapped")
    head += ["p50 ms", "p99 ms", "p99.9 ms"]
    if uncapped is not None:
        head.append("p99/p50")
    head += ["proxy CPU µs/req", "proxy CPU %", "others on proxy CPU %", "origin CPU µs/req",
             "socket errors", "req/s vs HAProxy", "CPU/req vs HAProxy"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        cells = [r.setup, str(r.workers), "%.0f" % r.rps]
        if with_2xx:
            cells.append("%.0f" % r.rps_2xx)
        if uncapped is not None:
            ref = uncapped.get(r.family)
            cells.append(ratio(r.rps_2xx, ref.rps_2xx) if ref else "—")
        cells += [fmt_ms(r.wrk["p50"]), fmt_ms(r.wrk["p99"]), fmt_ms(r.wrk["p999"])]
        if uncapped is not None:
            cells.append("%.2f" % (r.wrk["p99"] / r.wrk["p50"]) if r.wrk["p50"] else "—")
        cells += [fmt_opt(r.proxy_us, "%.1f"), fmt_opt(r.proxy_util and r.proxy_util * 100, "%.0f"),
                  fmt_opt(r.others_util and r.others_util * 100, "%.0f"),
                  fmt_opt(r.origin_us, "%.1f"), str(r.errors),
                  ratio(r.rps, base.rps) if base else "—",
                  ratio(r.proxy_us, base.proxy_us) if base else "—"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


class Bench:
    def __init__(self, args, tmp, procs, pin):
        self.args = args
        self.tmp = tmp
        self.procs = procs
        self.pin = pin
        self.origin_proc = None
        self.origin_port = None
        self.notes = []

    def measure(self, setup, workers, url, proxy_proc, script=None, script_args=None):
        """Warm up, then one measured wrk run; CPU of the proxy tree and the origin over that run."""
        a = self.args
        if a.warmup > 0:
            benchlib.run_wrk(self.procs, self.pin, url, self.tmp, a.threads, a.connections, a.warmup,
                             script_args=script_args, script=script)
        proxy_cpu = self.pin.proxy_cpu if self.pin.enabled else None
        t0 = time.time()
        b0 = benchlib.cpu_busy_seconds(proxy_cpu)
        p0 = benchlib.tree_cpu_seconds(proxy_proc.pid) if proxy_proc else None
        o0 = benchlib.tree_cpu_seconds(self.origin_proc.pid)
        wrk = benchlib.run_wrk(self.procs, self.pin, url, self.tmp, a.threads, a.connections, a.duration,
                               script_args=script_args, script=script)
        p1 = benchlib.tree_cpu_seconds(proxy_proc.pid) if proxy_proc else None
        o1 = benchlib.tree_cpu_seconds(self.origin_proc.pid)
        b1 = benchlib.cpu_busy_seconds(proxy_cpu)
        wall = time.time() - t0
        row = Row(setup, workers, wrk, (p1 - p0) if proxy_proc else None, o1 - o0)
        if proxy_proc:
            # Both over the same wall-clock window as the /proc readings (wrk's start and exit included).
            row.proxy_util = (p1 - p0) / wall
            if proxy_cpu is not None:
                # Whatever else ran on the proxy's CPU meanwhile (other work on a shared machine).
                row.others_util = max(0.0, (b1 - b0) - (p1 - p0)) / wall
        print("  %-40s %8.0f req/s  2xx %8.0f  p99 %s ms  proxy %s µs/req" % (
            setup, row.rps, row.rps_2xx, fmt_ms(wrk["p99"]), fmt_opt(row.proxy_us, "%.1f")), file=sys.stderr)
        return row

    def with_proc(self, start, fn):
        proc, port = start()
        try:
            return fn(proc, port)
        finally:
            self.procs.stop(proc)

    def haproxy(self, setup, path, server_maxconn=None, script=None, script_args=None, busy_polling=False):
        def start():
            proc, port = benchlib.start_haproxy(self.procs, self.tmp, self.pin, self.origin_port, server_maxconn,
                                                busy_polling)
            benchlib.wait_http("http://127.0.0.1:%d%s" % (port, PAGE_PATH), proc=proc)
            return proc, port
        return self.with_proc(start, lambda proc, port: self.measure(
            setup, 1, "http://127.0.0.1:%d%s" % (port, path), proc, script, script_args))

    def concert(self, setup, path, extra, script=None, script_args=None, check_headers=None, held=False, binary=None):
        """held: a -queue-hold run; afterwards, tickets left waiting by closed connections are noted.
        binary: another Concert binary than --concert (the --baseline rows)."""
        def measure(proc, port):
            row = self.measure(setup, 1, "http://127.0.0.1:%d%s" % (port, path), proc, script, script_args)
            left = benchlib.leftover_waiting(port) if held else None
            if left and left[0] > 0 and left[1] == 0:
                self.notes.append("%s: %d tickets were still waiting 1 s after wrk closed every connection, with "
                                  "no page request in flight (tickets of held requests whose clients left are "
                                  "not given up; they block later arrivals until the token TTL)."
                                  % (setup, left[0]))
            return row

        def start():
            proc, port, _ = benchlib.start_concert(self.procs, self.tmp, self.pin, binary or self.args.concert,
                                                   ["-upstream", "http://127.0.0.1:%d" % self.origin_port,
                                                    "-workers", "1"] + extra)
            if check_headers is not None:
                # A pass Concert refuses would turn the whole run into fast 403s: check one first.
                benchlib.wait_http("http://127.0.0.1:%d%s" % (port, path), proc=proc, timeout=5,
                                   headers=check_headers)
            return proc, port
        return self.with_proc(start, measure)

    def run(self):
        a = self.args
        self.origin_proc, self.origin_port = benchlib.start_nginx_origin(
            self.procs, self.tmp, self.pin, {PAGE_PATH: PAGE, ASSET_PATH: PAGE})
        have_concert = benchlib.concert_usable(a.concert)
        results = {"proxy": [], "cap5": [], "assets": []}
        notes = self.notes

        def add(rows, label, measure):
            # One setup failing (a proxy that does not start, wrk printing nothing) costs
            # that row only; the reason goes under the tables.
            try:
                rows.append(measure())
            except (RuntimeError, OSError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                notes.append("%s row missing: %s" % (label, first))
                print("  %s failed: %s" % (label, e), file=sys.stderr)

        if not have_concert:
            notes.append("Concert rows missing: `%s -version` did not run (binary absent or not linked yet)."
                         % a.concert)

        if "proxy" in a.workloads and a.io_paths:
            print("workload: proxy, 1 KB static, the two data paths", file=sys.stderr)
            rows = results["proxy"]
            add(rows, "nginx direct", lambda: self.measure(
                "nginx direct (no proxy)", 1, "http://127.0.0.1:%d%s" % (self.origin_port, PAGE_PATH), None))
            for i in range(a.rounds):
                add(rows, "HAProxy", lambda i=i: self.haproxy("HAProxy → nginx #%d" % (i + 1), PAGE_PATH))
                if have_concert:
                    for mode in ("on", "off"):
                        add(rows, "Concert -io-uring " + mode, lambda i=i, mode=mode: self.concert(
                            "Concert -io-uring %s → nginx #%d" % (mode, i + 1), PAGE_PATH,
                            ["-cap", "100000", "-io-uring", mode]))
        elif "proxy" in a.workloads:
            print("workload: proxy, 1 KB static", file=sys.stderr)
            rows = results["proxy"]
            add(rows, "nginx direct", lambda: self.measure(
                "nginx direct (no proxy)", 1, "http://127.0.0.1:%d%s" % (self.origin_port, PAGE_PATH), None))
            add(rows, "HAProxy", lambda: self.haproxy("HAProxy → nginx", PAGE_PATH))

            def start_nginx_proxy():
                proc, port = benchlib.start_nginx_proxy(self.procs, self.tmp, self.pin, self.origin_port)
                benchlib.wait_http("http://127.0.0.1:%d%s" % (port, PAGE_PATH), proc=proc)
                return proc, port
            add(rows, "nginx proxy", lambda: self.with_proc(start_nginx_proxy, lambda proc, port: self.measure(
                "nginx proxy → nginx", 1, "http://127.0.0.1:%d%s" % (port, PAGE_PATH), proc)))
            if have_concert:
                add(rows, "Concert", lambda: self.concert("Concert → nginx", PAGE_PATH, ["-cap", "100000"]))
                # A change measured against the binary before it, in the same minutes: the two
                # alternate, --rounds times, each against HAProxy's row of this run.
                for i in range(a.rounds if a.baseline else 0):
                    add(rows, "Concert baseline", lambda i=i: self.concert(
                        "Concert baseline → nginx #%d" % (i + 1), PAGE_PATH, ["-cap", "100000"], binary=a.baseline))
                    add(rows, "Concert", lambda i=i: self.concert(
                        "Concert → nginx #%d" % (i + 2), PAGE_PATH, ["-cap", "100000"]))
            # Both proxies again, polling instead of sleeping between events (a proxy with CPUs of its own).
            add(rows, "HAProxy busy-polling", lambda: self.haproxy("HAProxy busy-polling → nginx", PAGE_PATH,
                                                                    busy_polling=True))
            if have_concert:
                add(rows, "Concert -busy-poll", lambda: self.concert("Concert -busy-poll 1ms → nginx", PAGE_PATH,
                                                                     ["-cap", "100000", "-busy-poll", "1ms"]))

        if "cap5" in a.workloads or "cap5-nohold" in a.workloads:
            print("workload: cap 5, %d connections" % a.connections, file=sys.stderr)
            rows = results["cap5"]
            if "cap5" in a.workloads:
                add(rows, "HAProxy maxconn 5",
                    lambda: self.haproxy("HAProxy maxconn 5 → nginx", PAGE_PATH, server_maxconn=5))
                if have_concert and benchlib.concert_has_flag(a.concert, "-queue-hold"):
                    add(rows, "Concert -cap 5 -queue-hold 30s", lambda: self.concert(
                        "Concert -cap 5 -queue-hold 30s → nginx", PAGE_PATH, ["-cap", "5", "-queue-hold", "30s"],
                        held=True))
                elif have_concert:
                    notes.append("Concert -cap 5 -queue-hold row missing: this binary has no -queue-hold "
                                 "(`concert --help`).")
            if "cap5-nohold" in a.workloads and have_concert:
                add(rows, "Concert -cap 5", lambda: self.concert(
                    "Concert -cap 5 (no hold) → nginx", PAGE_PATH, ["-cap", "5"]))

        if "assets" in a.workloads:
            print("workload: private asset with pass", file=sys.stderr)
            rows = results["assets"]
            values = os.path.join(self.tmp, "passes.txt")
            with open(values, "w") as f:
                for _ in range(PASSES):
                    f.write(benchlib.mint_pass(ttl=600) + "\n")
            template = os.path.join(self.tmp, "asset-request.txt")
            with open(template, "wb") as f:
                f.write(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: concert_admit=@VALUE@\r\n\r\n"
                         % ASSET_PATH).encode())
            script = benchlib.lines_script(self.tmp)
            sargs = [values, template, a.threads, 0]
            with open(values) as f:
                check = {"Cookie": "concert_admit=" + f.readline().strip()}
            add(rows, "HAProxy (assets)", lambda: self.haproxy("HAProxy → nginx (same requests)", ASSET_PATH,
                                                               script=script, script_args=sargs))
            if have_concert:
                add(rows, "Concert (assets)", lambda: self.concert(
                    "Concert -assets /assets/* → nginx", ASSET_PATH, ["-cap", "100000", "-assets", "/assets/*"],
                    script=script, script_args=sargs, check_headers=check))
        return results, notes


def report(args, results, notes, pin):
    m = benchlib.machine_description()
    out = []
    out.append("# End-to-end proxy comparison — %s" % datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"))
    out.append("")
    out.append("* Machine: %s CPUs, %s, kernel %s. Pinning: %s." % (m["nproc"], m["model"], m["kernel"],
                                                                 pin.describe()))
    out.append("* Tools: %s; %s; %s; %s." % (
        benchlib.tool_version(["nginx", "-v"]), benchlib.tool_version(["haproxy", "-v"]),
        benchlib.tool_version(["wrk", "-v"]),
        benchlib.tool_version([args.concert, "-version"]) if benchlib.concert_usable(args.concert)
        else "concert unavailable"))
    out.append("* Load: `wrk -t%d -c%d -d%ds --latency` after a %ds warm-up; every proxy 1 worker/thread; origin "
               "nginx 1 worker serving a 1 KB file." % (args.threads, args.connections, args.duration, args.warmup))
    out.append("* System load average (1 min) before / after the run: %s / %s (2 CPUs: anything well above 2 "
               "means other work competed with the benchmark)." % (args.load_before, benchlib.load_average()))
    out.append("")
    if results["proxy"]:
        out.append("## Proxy, 1 KB static file, capacity above load")
        out.append("")
        out.append(table(results["proxy"]))
        out.append("")
    if results["cap5"]:
        out.append("## Origin concurrency 5, %d connections (cookie-less clients)" % args.connections)
        out.append("")
        # The plain row of each proxy (the first one), not its busy-polling variant.
        uncapped = {}
        for r in results["proxy"]:
            uncapped.setdefault(r.family, r)
        out.append(table(results["cap5"], with_2xx=True, uncapped=uncapped))
        out.append("")
        for r in results["cap5"]:
            ref = uncapped.get(r.family)
            if ref and ref.rps_2xx and "queue-hold" in r.setup:
                out.append("Concert at cap 5 served %.1f %% of its uncapped 2xx req/s (target: within 5 %%, "
                           "i.e. at least 95 %%)." % (r.rps_2xx / ref.rps_2xx * 100))
                out.append("")
    if results["assets"]:
        out.append("## Private asset with a valid concert_admit pass (%d passes)" % PASSES)
        out.append("")
        out.append(table(results["assets"], with_2xx=True))
        out.append("")
    for n in notes:
        out.append("Note: " + n)
    return "\n".join(out).rstrip() + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concert", default=os.path.join(os.path.dirname(HERE), "build", "concert"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--connections", type=int, default=100)
    p.add_argument("--duration", type=int, default=10, help="measured seconds per setup")
    p.add_argument("--warmup", type=int, default=3, help="warm-up seconds per setup (not measured)")
    p.add_argument("--workloads", default="proxy,cap5,assets")
    p.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    p.add_argument("--tmp", help="scratch directory (default: a new temporary directory, removed at the end)")
    p.add_argument("--pid-file", help="append the pid of every started process here")
    p.add_argument("--out", default=os.path.join(HERE, "results", "latest.md"))
    p.add_argument("--baseline", help="proxy workload: also measure this Concert binary (the one before a change), "
                                      "alternating with --concert")
    p.add_argument("--rounds", type=int, default=3, help="with --baseline: pairs of alternating Concert rows; "
                                                          "with --io-paths: rounds of the three rows")
    p.add_argument("--io-paths", action="store_true",
                   help="proxy workload: HAProxy, Concert -io-uring on and Concert -io-uring off, alternating "
                        "--rounds times (instead of the usual rows)")
    args = p.parse_args()
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    benchlib.run_driver("e2e", args, ("wrk", "nginx", "haproxy"), "concert-bench-",
                        lambda tmp, procs, pin: Bench(args, tmp, procs, pin).run(),
                        lambda result, pin: report(args, result[0], result[1], pin))


if __name__ == "__main__":
    main()
