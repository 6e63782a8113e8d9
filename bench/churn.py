#!/usr/bin/env python3
"""Admission under churn: how close Concert keeps a capped origin to full use.

The origin (bench/delay_origin.py) answers every page request after a delay drawn
uniformly from 1–20 ms and records each request's service time. In front of it,
with the origin's concurrency limited to N (--cap, default 20):

  origin direct      wrk with exactly N connections straight to the origin:
                     the closed-loop ceiling of this origin and load generator
  HAProxy            `maxconn N` on the server line, `timeout queue 30s`,
                     2N wrk connections
  Concert            -cap N -queue-hold 30s -workers 1, 2N wrk connections
                     without cookies: a page request that cannot be admitted
                     waits on its connection and is proxied when its FIFO turn
                     comes

With 2N connections there are always about N requests waiting, so every slot the
origin frees should be taken again at once. By Little's law the origin can serve
at most N / (mean service time) requests per second at concurrency N; the report
gives, over the measured window:

  admissions/s     responses the origin completed per second (its own count)
  mean service     the origin's measured mean service time in that window
  bound            N / mean service
  % of bound       admissions/s / bound: the shortfall is the time a slot
                   spends outside the origin (the proxy noticing the end of a
                   response, handing the slot to the next request in line and
                   forwarding it), i.e. the proxy's admission overhead
  slot gap         N / admissions/s - mean service: that overhead per admission
  mean / max origin concurrency (max over the whole run: never above N)
  origin connections opened in the window (a proxy that reuses its origin
  connections opens none)
  wrk latency p50/p99/p99.9 and p99/p50 (queue wait + service, whole run)
  proxy CPU µs per admission (schedstat of the proxy's process tree)

wrk runs once per setup for warm-up + duration; the measured window is the
`duration` seconds after the warm-up, bracketed by two snapshots of the origin's
counters (GET /__origin_stats on the origin's own clock) and of the proxy's CPU
time, so the window lies entirely inside steady load.

Concert's row needs -queue-hold; a binary without it is reported, not measured.
Everything on 127.0.0.1; every process started here is stopped by pid.
"""
import argparse
import datetime
import json
import os
import re
import sys
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LISTEN_RE = re.compile(r"listening on ([0-9.]+):(\d+)")
PAGE_PATH = "/page.html"


def origin_stats(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/__origin_stats" % port, timeout=5) as r:
        return json.loads(r.read())


def start_origin(procs, tmp, pin, args):
    log_path = os.path.join(tmp, "delay-origin.log")
    log = open(log_path, "wb")
    cmd = pin.load([sys.executable, os.path.join(HERE, "delay_origin.py"), "--port", "0",
                    "--min-ms", str(args.min_ms), "--max-ms", str(args.max_ms)])
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = procs.start("delay-origin", cmd, stdout=log, stderr=log, env=env)
    log.close()
    m = benchlib.wait_log(log_path, LISTEN_RE, proc=proc)
    port = int(m.group(2))
    origin_stats(port)
    return proc, port


class Row:
    def __init__(self, setup, connections, cap, wrk, o0, o1, cpu_ns):
        self.setup = setup
        self.connections = connections
        self.cap = cap
        self.wrk = wrk
        window = o1["now"] - o0["now"]
        self.window = window
        self.admitted = o1["completed"] - o0["completed"]
        self.rate = self.admitted / window if window > 0 else 0.0
        self.mean_service = (o1["service_sum"] - o0["service_sum"]) / self.admitted if self.admitted else None
        self.bound = cap / self.mean_service if self.mean_service else None
        self.pct = self.rate / self.bound * 100 if self.bound else None
        self.gap_us = (cap / self.rate - self.mean_service) * 1e6 if self.rate and self.mean_service else None
        self.mean_conc = (o1["busy_area"] - o0["busy_area"]) / window if window > 0 else None
        self.max_conc = o1["max_in_flight"]
        # The second snapshot's own connection is not the proxy's.
        self.origin_conns = max(0, o1.get("connections", 0) - o0.get("connections", 0) - 1)
        self.cpu_us = cpu_ns / 1e3 / self.admitted if cpu_ns is not None and self.admitted else None
        self.cpu_util = cpu_ns / 1e9 / window if cpu_ns is not None and window > 0 else None
        self.non2xx = wrk["status"]
        self.errors = wrk["connect"] + wrk["read"] + wrk["write"] + wrk["timeout"]


class Churn:
    def __init__(self, args, tmp, procs, pin):
        self.args = args
        self.tmp = tmp
        self.procs = procs
        self.pin = pin
        self.origin_proc = None
        self.origin_port = None

    def measure(self, setup, url, connections, proxy_proc):
        a = self.args
        total = a.warmup + a.duration + 1
        run = benchlib.start_wrk(self.procs, self.pin, url, self.tmp, a.threads, connections, total,
                                 timeout_s=max(10, a.hold_seconds + 5))
        try:
            t_start = time.time()
            time.sleep(max(0.0, a.warmup - (time.time() - t_start)))
            o0 = origin_stats(self.origin_port)
            c0 = benchlib.tree_cpu_ns(proxy_proc.pid) if proxy_proc else None
            oc0 = benchlib.process_cpu_ns(self.origin_proc.pid)
            time.sleep(max(0.0, a.warmup + a.duration - (time.time() - t_start)))
            c1 = benchlib.tree_cpu_ns(proxy_proc.pid) if proxy_proc else None
            oc1 = benchlib.process_cpu_ns(self.origin_proc.pid)
            o1 = origin_stats(self.origin_port)
        except BaseException:
            self.procs.stop(run.proc)
            raise
        wrk = run.finish()
        row = Row(setup, connections, a.cap, wrk, o0, o1, (c1 - c0) if proxy_proc else None)
        row.origin_util = (oc1 - oc0) / 1e9 / row.window if row.window > 0 else None
        if row.max_conc > a.cap and proxy_proc is not None:
            raise RuntimeError("%s: the origin saw %d requests at once, above the cap %d" % (
                setup, row.max_conc, a.cap))
        print("  %-34s %7.0f adm/s  bound %7.0f  %5.1f%%  mean service %.2f ms  p99 %.2f ms" % (
            setup, row.rate, row.bound or 0, row.pct or 0, (row.mean_service or 0) * 1e3,
            wrk["p99"] / 1e3), file=sys.stderr)
        return row

    def fresh_origin(self):
        """A new origin per setup, so max_in_flight covers exactly that setup's run."""
        if self.origin_proc is not None:
            self.procs.stop(self.origin_proc)
        self.origin_proc, self.origin_port = start_origin(self.procs, self.tmp, self.pin, self.args)

    def run(self):
        a = self.args
        rows, notes = [], []

        def add(label, fn):
            try:
                rows.append(fn())
            except (RuntimeError, OSError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                notes.append("%s row missing: %s" % (label, first))
                print("  %s failed: %s" % (label, e), file=sys.stderr)

        def direct():
            self.fresh_origin()
            return self.measure("origin direct, %d connections" % a.cap,
                                "http://127.0.0.1:%d%s" % (self.origin_port, PAGE_PATH), a.cap, None)

        def haproxy():
            self.fresh_origin()
            proc, port = benchlib.start_haproxy(self.procs, self.tmp, self.pin, self.origin_port,
                                                server_maxconn=a.cap)
            try:
                benchlib.wait_http("http://127.0.0.1:%d%s" % (port, PAGE_PATH), proc=proc)
                return self.measure("HAProxy maxconn %d" % a.cap, "http://127.0.0.1:%d%s" % (port, PAGE_PATH),
                                    a.connections, proc)
            finally:
                self.procs.stop(proc)

        def concert():
            self.fresh_origin()
            proc, port, _ = benchlib.start_concert(
                self.procs, self.tmp, self.pin, a.concert,
                ["-upstream", "http://127.0.0.1:%d" % self.origin_port, "-workers", "1", "-cap", str(a.cap),
                 "-queue-hold", "%ds" % a.hold_seconds])
            try:
                setup = "Concert -cap %d -queue-hold %ds" % (a.cap, a.hold_seconds)
                row = self.measure(setup, "http://127.0.0.1:%d%s" % (port, PAGE_PATH), a.connections, proc)
                left = benchlib.leftover_waiting(port)
                if left and left[0] > 0 and left[1] == 0:
                    notes.append("%s: %d tickets were still waiting 1 s after wrk closed every connection, "
                                 "with no page request in flight (tickets of held requests whose clients left "
                                 "are not given up; they block later arrivals until the token TTL)."
                                 % (setup, left[0]))
                return row
            finally:
                self.procs.stop(proc)

        if "direct" in a.setups:
            print("churn: origin direct", file=sys.stderr)
            add("origin direct", direct)
        if "haproxy" in a.setups:
            print("churn: HAProxy maxconn %d" % a.cap, file=sys.stderr)
            add("HAProxy", haproxy)
        if "concert" in a.setups:
            if not benchlib.concert_usable(a.concert):
                notes.append("Concert row missing: `%s -version` did not run (binary absent or not linked yet)."
                             % a.concert)
            elif not benchlib.concert_has_flag(a.concert, "-queue-hold"):
                notes.append("Concert row missing: this binary has no -queue-hold (`concert --help`), so "
                             "cookie-less requests cannot wait in line on their connection.")
            else:
                print("churn: Concert -cap %d -queue-hold" % a.cap, file=sys.stderr)
                add("Concert", concert)
        return rows, notes


def failed(notes):
    """Rows that were attempted and failed (a Concert without -queue-hold is reported, not a failure)."""
    return [n for n in notes if "row missing" in n and "-queue-hold" not in n and "-version" not in n]


def fmt(v, pattern, scale=1.0):
    return pattern % (v * scale) if v is not None else "—"


def report(args, rows, notes, pin):
    m = benchlib.machine_description()
    out = ["# Admission under churn — %s" % datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "",
           "* Machine: %s CPUs, %s, kernel %s. Pinning: %s." % (m["nproc"], m["model"], m["kernel"],
                                                                pin.describe().replace("origin nginx",
                                                                                       "delay origin")),
           "* Origin: bench/delay_origin.py, every response delayed uniformly %g–%g ms, 1 KB body; "
           "page cap N = %d." % (args.min_ms, args.max_ms, args.cap),
           "* Load: `wrk -t%d` for %d s; measured window: the %d s after a %d s warm-up (origin counters); "
           "latency percentiles over the whole run." % (args.threads, args.warmup + args.duration + 1,
                                                       args.duration, args.warmup),
           "* System load average (1 min) before / after: %s / %s." % (args.load_before, benchlib.load_average()),
           ""]
    head = ["setup", "connections", "admissions/s", "mean service ms", "bound N/mean", "% of bound",
            "slot gap µs/admission", "origin concurrency mean / max", "p50 ms", "p99 ms", "p99.9 ms", "p99/p50",
            "non-2xx", "socket errors", "origin connections opened", "proxy CPU µs/admission", "proxy CPU %",
            "origin CPU %"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        w = r.wrk
        out.append("| " + " | ".join([
            r.setup, str(r.connections), "%.0f" % r.rate, fmt(r.mean_service, "%.2f", 1e3), fmt(r.bound, "%.0f"),
            fmt(r.pct, "%.1f"), fmt(r.gap_us, "%.0f"),
            "%s / %d" % (fmt(r.mean_conc, "%.2f"), r.max_conc),
            "%.2f" % (w["p50"] / 1e3), "%.2f" % (w["p99"] / 1e3), "%.2f" % (w["p999"] / 1e3),
            "%.2f" % (w["p99"] / w["p50"]) if w["p50"] else "—",
            str(r.non2xx), str(r.errors), str(r.origin_conns), fmt(r.cpu_us, "%.1f"), fmt(r.cpu_util, "%.0f", 100),
            fmt(r.origin_util, "%.0f", 100)]) + " |")
    out.append("")
    for n in notes:
        out.append("Note: " + n)
    return "\n".join(out).rstrip() + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concert", default=os.path.join(os.path.dirname(HERE), "build", "concert"))
    p.add_argument("--cap", type=int, default=20, help="origin concurrency N (Concert -cap, HAProxy maxconn)")
    p.add_argument("--connections", type=int, default=None, help="wrk connections through a proxy (default 2N)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--duration", type=int, default=10, help="measured seconds per setup")
    p.add_argument("--warmup", type=int, default=3, help="seconds of load before the measured window")
    p.add_argument("--min-ms", type=float, default=1.0)
    p.add_argument("--max-ms", type=float, default=20.0)
    p.add_argument("--hold-seconds", type=int, default=30, help="Concert -queue-hold (HAProxy: timeout queue 30s)")
    p.add_argument("--setups", default="direct,haproxy,concert")
    p.add_argument("--no-pin", action="store_true")
    p.add_argument("--tmp")
    p.add_argument("--pid-file")
    p.add_argument("--out", default=os.path.join(HERE, "results", "churn.md"))
    args = p.parse_args()
    args.setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    if args.connections is None:
        args.connections = 2 * args.cap
    rows, notes = benchlib.run_driver("churn", args, ("wrk", "haproxy"), "concert-churn-",
                                      lambda tmp, procs, pin: Churn(args, tmp, procs, pin).run(),
                                      lambda result, pin: report(args, result[0], result[1], pin))
    return 1 if failed(notes) or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
