#!/usr/bin/env python3
"""ETA accuracy: the eta_seconds a visitor at position 50 is shown, against the
wait it then actually had. Not part of make test or make bench:

    python3 bench/eta.py [--binary build/concert] [--cap 4] [--backlog 90] [--samples 60]

One Concert (-workers 2, -cap N) in front of an in-process origin that answers
every page after a service time drawn uniformly from --service-ms (default
100-300 ms). Visitors behave like the waiting page without its event stream:
load the page, get the waiting page, poll /queue/status once a second (the
first poll one second after the load), and load the page again when told
`ready`. An arrival thread keeps --backlog visitors waiting at all times, so
the line is steady.

After --warmup seconds of that steady line (by then far more than the 20
admissions Concert needs before it gives an ETA), each visitor that joins is
followed: the first accepted poll at which its position is at most
--position (50) gives the ETA shown, its wait is from that answer to the
request that got it in. --samples such visitors; the error of each is
(ETA - wait) / wait. Prints a Markdown summary (also written to --out,
default bench/results/eta.md). Concert is stopped by pid; everything binds
127.0.0.1.
"""
import argparse
import datetime
import http.client
import http.server
import json
import os
import random
import statistics
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


class Origin:
    """Every request is answered "ok" after a service time drawn from [low, high] ms."""

    def __init__(self, low_ms, high_ms):
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_GET(self):
                time.sleep(random.uniform(low_ms, high_ms) / 1000.0)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class Visitor(threading.Thread):
    """One browser on the waiting page, polling once a second."""

    def __init__(self, bench, followed):
        super().__init__(daemon=True)
        self.bench = bench
        self.followed = followed
        self.cookies = {}
        self.shown = None  # (answered at, position, eta) at the first poll at position <= --position
        self.waiting = False
        self.done = False

    def get(self, path):
        headers = dict(BROWSER)
        if self.cookies:
            headers["Cookie"] = "; ".join("%s=%s" % kv for kv in self.cookies.items())
        c = http.client.HTTPConnection("127.0.0.1", self.bench.port, timeout=60)
        try:
            c.request("GET", path, headers=headers)
            r = c.getresponse()
            body = r.read()
            for name, value in r.getheaders():
                if name.lower() == "set-cookie":
                    k, _, rest = value.partition("=")
                    self.cookies[k] = rest.split(";")[0]
            return r.status, body
        finally:
            c.close()

    def run(self):
        try:
            self.visit()
        except OSError:
            if time.time() < self.bench.stop_at:  # not the end of the run cutting it short
                self.bench.count("errors")
        finally:
            self.done = True
            self.bench.left(self)

    def visit(self):
        stop = self.bench.stop_at
        while time.time() < stop:
            sent = time.time()
            status, body = self.get("/page")
            if status == 200 and body == b"ok":
                self.bench.admitted(sent, self.waiting)
                if self.followed and self.shown:
                    at, position, eta = self.shown
                    self.bench.sample(position, eta, at, sent)
                return
            self.waiting = True
            while time.time() < stop:
                time.sleep(1.0)
                status, body = self.get("/queue/status")
                if status != 200:
                    continue
                doc = json.loads(body)
                if doc.get("ready"):
                    break
                eta = doc.get("eta_seconds")
                if self.shown is None and eta is not None and doc["position"] <= self.bench.args.position:
                    self.shown = (time.time(), doc["position"], eta)


class Bench:
    def __init__(self, args, port):
        self.args = args
        self.port = port
        self.lock = threading.Lock()
        self.visitors = set()
        self.samples = []
        self.admissions = []  # when each visitor that had waited was let in
        self.counts = {"errors": 0, "visitors": 0}
        self.stop_at = time.time() + args.max_seconds

    def count(self, key):
        with self.lock:
            self.counts[key] += 1

    def left(self, v):
        with self.lock:
            self.visitors.discard(v)

    def admitted(self, at, waited):
        if waited:
            with self.lock:
                self.admissions.append(at)

    def sample(self, position, eta, shown_at, admitted_at):
        with self.lock:
            self.samples.append((position, eta, admitted_at - shown_at, shown_at, admitted_at))

    def waiting(self):
        with self.lock:
            return sum(1 for v in self.visitors if not v.done)

    def run(self):
        start = time.time()
        followed = 0
        while time.time() < self.stop_at:
            with self.lock:
                if len(self.samples) >= self.args.samples:
                    break
            follow = time.time() - start >= self.args.warmup and followed < 2 * self.args.samples
            while self.waiting() < self.args.backlog:
                v = Visitor(self, follow)
                followed += follow
                with self.lock:
                    self.visitors.add(v)
                    self.counts["visitors"] += 1
                v.start()
                time.sleep(0.005)
            time.sleep(0.05)
        self.stop_at = time.time()
        return time.time() - start


def run(args, tmp, procs, pin):
    origin = Origin(*args.service_ms)
    try:
        proc, port, _ = benchlib.start_concert(
            procs, tmp, pin, args.binary,
            ["-upstream", "http://127.0.0.1:%d" % origin.port, "-cap", str(args.cap), "-workers", "2"])
        bench = Bench(args, port)
        seconds = bench.run()
        stats = benchlib.concert_stats(port)
        procs.stop(proc)
        time.sleep(0.5)
    finally:
        origin.stop()
    # The pace each followed visitor's line actually had: admissions from the
    # line (visitors who had waited) while it waited, per second.
    samples = []
    for position, eta, waited, shown_at, admitted_at in bench.samples:
        passed = sum(1 for t in bench.admissions if shown_at < t < admitted_at)
        samples.append((position, eta, waited, passed / waited))
    return {"samples": samples, "seconds": seconds, "counts": dict(bench.counts),
            "queued_total": stats.get("queued_total", 0), "load_before": args.load_before}


def report_for(args):
    def report(r, pin):
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        machine = benchlib.machine_description()
        samples = r["samples"]
        errors = [100.0 * (eta - waited) / waited for _, eta, waited, _ in samples]
        out = ["## ETA accuracy (%s; %d CPUs, %s, kernel %s; load before %s, after %s)"
               % (when, machine["nproc"], machine["model"], machine["kernel"], r["load_before"],
                  benchlib.load_average()), "",
               "Cap %d, origin %d-%d ms per page, %d visitors kept waiting, polling /queue/status once a "
               "second; %d visitors in %.0f s; followed after %.0f s of warm-up."
               % (args.cap, args.service_ms[0], args.service_ms[1], args.backlog, r["counts"]["visitors"],
                  r["seconds"], args.warmup), ""]
        if not errors:
            out.append("No samples (errors: %d)." % r["counts"]["errors"])
            return "\n".join(out) + "\n"
        within = sum(1 for e in errors if abs(e) <= 30)
        out += ["| measure | value |", "|---|---|",
                "| visitors sampled (ETA shown at position ≤ %d) | %d |" % (args.position, len(samples)),
                "| position when shown, mean | %.1f |" % statistics.mean(s[0] for s in samples),
                "| wait actually had, mean (min-max) | %.1f s (%.1f-%.1f) |"
                % (statistics.mean(s[2] for s in samples), min(s[2] for s in samples),
                   max(s[2] for s in samples)),
                "| ETA shown, mean | %.1f s |" % statistics.mean(s[1] for s in samples),
                "| pace: the ETA's (position / ETA) against the line's during the wait, mean | %.2f/s against %.2f/s |"
                % (statistics.mean(s[0] / s[1] for s in samples), statistics.mean(s[3] for s in samples)),
                "| error, mean (signed: + = ETA too long) | %+.1f %% |" % statistics.mean(errors),
                "| error, mean absolute | %.1f %% |" % statistics.mean(abs(e) for e in errors),
                "| error, max absolute | %.1f %% |" % max(abs(e) for e in errors),
                "| within ±30 %% | %d of %d |" % (within, len(errors)),
                "| client errors | %d |" % r["counts"]["errors"]]
        return "\n".join(out) + "\n"
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(os.path.dirname(HERE), "build", "concert"))
    p.add_argument("--cap", type=int, default=4)
    p.add_argument("--service-ms", type=int, nargs=2, default=[100, 300], metavar=("LOW", "HIGH"))
    p.add_argument("--backlog", type=int, default=90, help="visitors kept waiting")
    p.add_argument("--position", type=int, default=50, help="the ETA shown at this position (or the first below)")
    p.add_argument("--samples", type=int, default=60)
    p.add_argument("--warmup", type=float, default=30.0, help="seconds of steady line before visitors are followed")
    p.add_argument("--max-seconds", type=float, default=240.0)
    p.add_argument("--out", default=os.path.join(HERE, "results", "eta.md"))
    p.add_argument("--tmp", default=None)
    p.add_argument("--pid-file", default=None)
    p.add_argument("--no-pin", action="store_true")
    args = p.parse_args()
    if not benchlib.concert_usable(args.binary):
        sys.exit("eta: %s is not a usable concert binary" % args.binary)
    result = benchlib.run_driver("eta", args, [], "concert-eta-", lambda tmp, procs, pin: run(args, tmp, procs, pin),
                                 report_for(args))
    return 0 if result["samples"] else 1


if __name__ == "__main__":
    sys.exit(main())
