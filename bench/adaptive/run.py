#!/usr/bin/env python3
"""-adaptive against a real php-fpm: does the cap find the origin's knee, hold it,
follow the pool when it changes, and does the capacity advisor name the same knee?

The origin (bench/adaptive/setup.sh): nginx on 127.0.0.1 in front of php-fpm 8.2,
pm = static, pm.max_children = 8; /page.php sleeps 50 ms or 400 ms, half each at
random, so its knee is 8 requests at once and its ceiling 8 / 0.225 s = 35.6
pages/s. nginx's access log gives, per page request Concert sent, $request_time:
the time at the origin, php-fpm's listen-queue wait plus the script's run.

Visitors are closed loops (request a page, read the answer, request the next) on
keep-alive connections, without cookies: each page request goes through Concert's
line, held on its connection (-queue-hold 60s) and admitted in FIFO order. 16 of
them against 8 children is a 2x overload that never lets the cap go slack.

Phases, each with a fresh Concert (-workers 2, release build) unless said:
  unloaded   1 visitor, -cap 8: the origin's unqueued time p50/p99
  sweep      16 visitors, fixed caps (6 7 8 9 10 12 16 24; one Concert, the cap
             set with POST /_room/cap), warm-up then a measured window each
  adaptive   16 visitors, -cap 64 -adaptive; /_room/stats "cap" sampled every
             250 ms; throughput and origin p99 from 30 s on
  follow     the same Concert: the pool goes 8 -> 4 (16 visitors), then 4 -> 16
             (32 visitors: 16 closed loops cannot make a cap of 16 bind), the pool
             file rewritten and php-fpm reloaded with SIGUSR2 each time
  advisor    -cap 8 in passthrough mode, visitors ramping 1 -> 24 over the ramp;
             then GET /_room/report capacity.recommended_cap

  python3 bench/adaptive/run.py --concert BIN --state DIR --port NGINX_PORT [--quick]

--quick shortens every phase (a smoke run of about two and a half minutes).
Writes STATE/results.md (the table), STATE/run/*.json and *.csv (raw series) and
STATE/log/concert-*.log. Stops the Concert it started, by pid; the stack is
setup.sh's and stop.sh's business.
"""
import argparse
import datetime
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

TOKEN = "adaptive-bench-admin-token"
SECRET = "adaptive-bench-admit-secret-0123456789abcdef"
PAGE = "/page.php"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def pct(values, p):
    if not values:
        return None
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(p / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


# ---------------------------------------------------------------- visitors

class Visitors:
    """Closed-loop visitors; `set(n)` changes how many are active."""

    def __init__(self, port):
        self.port = port
        self.target = 0
        self.threads = []
        self.records = []  # (start, end, status, served by php)
        self.stopping = False

    def set(self, n):
        self.target = n
        while len(self.threads) < n:
            i = len(self.threads)
            t = threading.Thread(target=self.loop, args=(i,), daemon=True)
            self.threads.append(t)
            t.start()

    def loop(self, i):
        conn = None
        while not self.stopping:
            if i >= self.target:
                if conn is not None:
                    conn.close()
                    conn = None
                time.sleep(0.05)
                continue
            t0 = time.time()
            served = False
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=90)
                conn.request("GET", PAGE, headers={"Accept": "text/html", "User-Agent": "adaptive-bench"})
                r = conn.getresponse()
                r.read()
                status = r.status
                served = r.getheader("X-Page-Ms") is not None
                if r.will_close:
                    conn.close()
                    conn = None
            except Exception:
                status = 0
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)
            self.records.append((t0, time.time(), status, served))
        if conn is not None:
            conn.close()

    def idle(self, timeout=10):
        """Stops every visitor after its current request."""
        self.target = 0
        end = time.time() + timeout
        while time.time() < end:
            time.sleep(0.1)
            # A visitor is done when no request of it is open: approximate by a quiet spell.
            if not self.records or time.time() - self.records[-1][1] > 1.0:
                break

    def window(self, a, b):
        return [r for r in self.records if a <= r[1] < b]


# ---------------------------------------------------------------- Concert

class Concert:
    def __init__(self, binary, state, upstream_port, run_dir, log_dir):
        self.binary = binary
        self.upstream = "http://127.0.0.1:%d" % upstream_port
        self.run_dir = run_dir
        self.log_dir = log_dir
        self.proc = None
        self.port = None
        self.log_path = None

    def start(self, name, flags):
        self.log_path = os.path.join(self.log_dir, "concert-%s.log" % name)
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        env = dict(os.environ, CONCERT_ADMIT_SECRET=SECRET, CONCERT_ADMIN_TOKEN=TOKEN)
        args = [self.binary, "-listen", "127.0.0.1:%d" % self.port, "-upstream", self.upstream,
                "-workers", "2", "-state-dir", "", "-access-log=false", "-queue-hold", "60s"] + flags
        with open(self.log_path, "w") as log:
            log.write("# %s\n" % " ".join(args))
            log.flush()
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL)
        with open(os.path.join(self.run_dir, "concert.pid"), "w") as f:
            f.write("%d\n" % self.proc.pid)
        end = time.time() + 20
        while time.time() < end:
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/_room/healthz" % self.port, timeout=2).read()
                return
            except Exception:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.2)
        raise RuntimeError("concert did not come up (see %s)" % self.log_path)

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        try:
            os.unlink(os.path.join(self.run_dir, "concert.pid"))
        except OSError:
            pass

    def admin(self, path, body=None):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path),
                                     headers={"Authorization": "Bearer " + TOKEN})
        if body is not None:
            req.data = json.dumps(body).encode()
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read().decode() or "null")

    def adaptive_lines(self):
        out = []
        try:
            with open(self.log_path) as f:
                for line in f:
                    if "adaptive cap" in line:
                        out.append(line.rstrip("\n"))
        except OSError:
            pass
        return out


class Sampler:
    """GET /_room/stats every 250 ms: (time, cap, occupancy, live queue depth)."""

    def __init__(self, concert):
        self.concert = concert
        self.samples = []
        self.stopping = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        nxt = time.time()
        while not self.stopping:
            try:
                s = self.concert.admin("/_room/stats")
                self.samples.append((time.time(), s["cap"], s["occupancy"], s["live_queue_depth"]))
            except Exception:
                pass
            nxt += 0.25
            time.sleep(max(0.0, nxt - time.time()))

    def stop(self):
        self.stopping = True
        self.thread.join(2)


# ---------------------------------------------------------------- the origin

class Origin:
    def __init__(self, state):
        self.state = state
        self.access = os.path.join(state, "log", "access.log")
        self.pool = os.path.join(state, "pool.conf")
        self.conf = os.path.join(state, "php-fpm.conf")

    def lines(self, a, b):
        """(end, request_time, status, script ms) of page requests that ended in [a, b)."""
        out = []
        with open(self.access) as f:
            for line in f:
                p = line.split()
                if len(p) < 5 or not p[4].startswith(PAGE):
                    continue
                try:
                    end, rt, st = float(p[0]), float(p[1]), int(p[3])
                    ms = int(p[5]) if len(p) > 5 and p[5] != "-" else 0
                except ValueError:
                    continue
                if a <= end < b:
                    out.append((end, rt, st, ms))
        return out

    def fpm_pid(self):
        with open(os.path.join(self.state, "php-fpm.pid")) as f:
            pid = int(f.read().strip())
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if self.conf.encode() not in f.read():
                raise RuntimeError("pid %d is not this state directory's php-fpm" % pid)
        return pid

    def children(self):
        with open(self.pool) as f:
            m = re.search(r"^pm\.max_children = (\d+)$", f.read(), re.M)
        return int(m.group(1))

    def reload(self, children):
        """Rewrites pm.max_children and reloads php-fpm gracefully (SIGUSR2 to its master)."""
        with open(self.pool) as f:
            text = f.read()
        text = re.sub(r"^pm\.max_children = \d+$", "pm.max_children = %d" % children, text, flags=re.M)
        with open(self.pool + ".tmp", "w") as f:
            f.write(text)
        os.rename(self.pool + ".tmp", self.pool)
        pid = self.fpm_pid()
        t = time.time()
        os.kill(pid, signal.SIGUSR2)
        return t


# ---------------------------------------------------------------- analysis

def stay_entry(samples, lo, hi, start, end):
    """First time from which every sample up to `end` is in [lo, hi], relative to start; None if never."""
    inside = [(t, c) for t, c, _, _ in samples if start <= t <= end]
    entry = None
    for t, c in inside:
        if lo <= c <= hi:
            if entry is None:
                entry = t
        else:
            entry = None
    return None if entry is None else entry - start


def first_entry(samples, lo, hi, start, end):
    for t, c, _, _ in samples:
        if start <= t <= end and lo <= c <= hi:
            return t - start
    return None


def moves(samples, a, b):
    """Cap changes and direction changes among the samples in [a, b]."""
    caps = [c for t, c, _, _ in samples if a <= t <= b]
    changes, flips, last_dir = 0, 0, 0
    for x, y in zip(caps, caps[1:]):
        if y == x:
            continue
        changes += 1
        d = 1 if y > x else -1
        if last_dir and d != last_dir:
            flips += 1
        last_dir = d
    return (min(caps) if caps else None, max(caps) if caps else None, changes, flips)


def origin_stats(origin, a, b):
    rows = origin.lines(a, b)
    times = [r[1] for r in rows]
    return {
        "pages": len(rows),
        "pages_per_s": len([1 for r in rows if r[2] == 200]) / (b - a) if b > a else 0,
        # php-fpm children kept busy on average: the scripts' own sleep, summed, over the window
        # (free of the 50/400 ms draw's luck, which moves pages/s by a few per cent in 30 s).
        "busy": sum(r[3] for r in rows) / 1000.0 / (b - a) if b > a else 0,
        "p50_s": pct(times, 50), "p99_s": pct(times, 99), "max_s": max(times) if times else None,
        "5xx": len([1 for r in rows if r[2] >= 500]),
        "non_200": len([1 for r in rows if r[2] != 200]),
    }


def client_stats(visitors, a, b):
    rows = visitors.window(a, b)
    return {"answers": len(rows), "served": len([1 for r in rows if r[3]]),
            "failed": len([1 for r in rows if not r[3]]),
            "visit_p50_s": pct([r[1] - r[0] for r in rows], 50),
            "visit_p99_s": pct([r[1] - r[0] for r in rows], 99)}


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--concert", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--report", help="only print the table of an earlier run's results.json")
    if "--report" in sys.argv:
        with open(sys.argv[sys.argv.index("--report") + 1]) as f:
            print(report(json.load(f)))
        return
    a = ap.parse_args()

    q = a.quick
    D = {
        "unloaded": 6 if q else 25,
        "sweep_caps": [8, 16] if q else [6, 7, 8, 9, 10, 12, 16, 24],
        "sweep_warm": 2 if q else 4,
        "sweep_measure": 6 if q else 30,
        "adaptive": 40 if q else 90,
        "settle": 30,
        "follow": 20 if q else 45,
        "ramp": 30 if q else 120,
        "visitors": 16,
        "ramp_to": 24,
    }
    state = os.path.abspath(a.state)
    run_dir = os.path.join(state, "run")
    log_dir = os.path.join(state, "log")
    os.makedirs(run_dir, exist_ok=True)
    origin = Origin(state)
    concert = Concert(a.concert, state, a.port, run_dir, log_dir)
    res = {"durations": D, "quick": q, "started": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
           "nproc": os.cpu_count(), "load": {}}
    visitors = None

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)

    def say(msg):
        print("run.py: %s (load %s)" % (msg, loadavg()), flush=True)

    try:
        if origin.children() != 8:
            origin.reload(8)
            time.sleep(2)
        try:
            res["concert_version"] = subprocess.run([a.concert, "-version"], capture_output=True, text=True,
                                                    timeout=10).stdout.strip().splitlines()[0]
        except Exception:
            res["concert_version"] = "?"

        # ---- unloaded
        say("unloaded: 1 visitor, -cap 8, %d s" % D["unloaded"])
        res["load"]["start"] = loadavg()
        concert.start("unloaded", ["-cap", "8"])
        visitors = Visitors(concert.port)
        visitors.set(1)
        t0 = time.time()
        time.sleep(D["unloaded"])
        t1 = time.time()
        visitors.idle()
        res["unloaded"] = origin_stats(origin, t0, t1)
        res["unloaded"]["client"] = client_stats(visitors, t0, t1)
        concert.stop()
        visitors.stopping = True
        say("unloaded: origin p50 %.3f s, p99 %.3f s over %d pages" % (
            res["unloaded"]["p50_s"], res["unloaded"]["p99_s"], res["unloaded"]["pages"]))

        # ---- sweep
        concert.start("sweep", ["-cap", str(D["sweep_caps"][0])])
        visitors = Visitors(concert.port)
        visitors.set(D["visitors"])
        res["sweep"] = []
        for cap in D["sweep_caps"]:
            concert.admin("/_room/cap", {"cap": cap})
            time.sleep(D["sweep_warm"])
            t0 = time.time()
            time.sleep(D["sweep_measure"])
            t1 = time.time()
            row = origin_stats(origin, t0, t1)
            row["cap"] = cap
            row["client"] = client_stats(visitors, t0, t1)
            row["load"] = loadavg()
            res["sweep"].append(row)
            say("sweep cap %d: %.1f pages/s, origin p99 %.3f s, 5xx %d" % (cap, row["pages_per_s"], row["p99_s"] or 0,
                                                                         row["5xx"]))
        visitors.idle()
        visitors.stopping = True
        concert.stop()
        best = max(res["sweep"], key=lambda r: r["pages_per_s"])
        res["best_fixed"] = {"cap": best["cap"], "pages_per_s": best["pages_per_s"]}

        # ---- adaptive, then follow
        say("adaptive: -cap 64 -adaptive, %d visitors, %d s" % (D["visitors"], D["adaptive"]))
        res["load"]["adaptive"] = loadavg()
        concert.start("adaptive", ["-cap", "64", "-adaptive"])
        sampler = Sampler(concert)
        visitors = Visitors(concert.port)
        T0 = time.time()
        visitors.set(D["visitors"])
        time.sleep(D["adaptive"])
        T1 = time.time()
        settle = min(D["settle"], D["adaptive"] / 2)
        ad = {"stay_s": stay_entry(sampler.samples, 8, 10, T0, T1),
              "first_s": first_entry(sampler.samples, 8, 10, T0, T1)}
        if ad["stay_s"] is not None:
            e = T0 + ad["stay_s"]
            mn, mx, ch, fl = moves(sampler.samples, e, T1)
            ad.update({"min_after": mn, "max_after": mx, "changes_after": ch, "flips_after": fl,
                       "minutes_after": (T1 - e) / 60.0})
        mn, mx, ch, fl = moves(sampler.samples, T0 + settle, T1)
        ad.update({"window_s": [settle, D["adaptive"]], "min_window": mn, "max_window": mx, "changes_window": ch,
                   "flips_window": fl})
        ad["origin"] = origin_stats(origin, T0 + settle, T1)
        ad["origin_whole"] = origin_stats(origin, T0, T1)
        ad["client"] = client_stats(visitors, T0 + settle, T1)
        ad["cap_end"] = sampler.samples[-1][1] if sampler.samples else None
        try:
            st = concert.admin("/_room/stats")
            ad["base_latency"] = st.get("adaptive_base_latency")
            ad["origin_queue"] = st.get("adaptive_origin_queue")
            ad["changes_total"] = st.get("adaptive_changes_total")
        except Exception:
            pass
        res["adaptive"] = ad
        say("adaptive: stays in [8,10] from %s s, cap at end %s, %.1f pages/s, origin p99 %.3f s" % (
            ad["stay_s"], ad["cap_end"], ad["origin"]["pages_per_s"], ad["origin"]["p99_s"] or 0))

        res["follow"] = []
        for children, lo, hi, n in ((4, 4, 6, D["visitors"]), (16, 16, 19, 2 * 16)):
            before = origin.children()
            visitors.set(n)
            tr = origin.reload(children)
            say("follow: php-fpm max_children %d -> %d (SIGUSR2), %d visitors, %d s" % (before, children, n,
                                                                                     D["follow"]))
            time.sleep(D["follow"])
            te = time.time()
            f = {"from": before, "to": children, "band": [lo, hi], "visitors": n, "reload_at_s": round(tr - T0, 2),
                 "stay_s": stay_entry(sampler.samples, lo, hi, tr, te),
                 "first_s": first_entry(sampler.samples, lo, hi, tr, te),
                 "cap_at_reload": min(sampler.samples, key=lambda s: abs(s[0] - tr))[1] if sampler.samples else None,
                 "cap_end": sampler.samples[-1][1] if sampler.samples else None}
            mn, mx, ch, fl = moves(sampler.samples, tr, te)
            f.update({"min": mn, "max": mx, "changes": ch, "flips": fl})
            # Did the reload itself cut requests? The origin's and the visitors' failures around it.
            f["around_reload"] = {"origin": origin_stats(origin, tr - 1, tr + 5),
                                  "client": client_stats(visitors, tr - 1, tr + 5)}
            f["origin"] = origin_stats(origin, tr, te)
            f["origin_last_15s"] = origin_stats(origin, te - 15, te)
            res["follow"].append(f)
            say("follow %d -> %d: in [%d,%d] from %s s, cap at end %s" % (before, children, lo, hi, f["stay_s"],
                                                                          f["cap_end"]))
        visitors.idle()
        visitors.stopping = True
        sampler.stop()
        res["adaptive_log"] = concert.adaptive_lines()
        with open(os.path.join(run_dir, "adaptive-cap.csv"), "w") as f:
            f.write("t_s,cap,occupancy,live_queue_depth\n")
            for t, c, o, lq in sampler.samples:
                f.write("%.2f,%d,%d,%d\n" % (t - T0, c, o, lq))
        concert.stop()

        # ---- advisor
        origin.reload(8)
        time.sleep(3)
        say("advisor: -cap 8, passthrough, visitors 1 -> %d over %d s" % (D["ramp_to"], D["ramp"]))
        res["load"]["advisor"] = loadavg()
        concert.start("advisor", ["-cap", "8"])
        concert.admin("/_room/mode", {"mode": "passthrough"})
        visitors = Visitors(concert.port)
        R0 = time.time()
        trail = []
        while True:
            el = time.time() - R0
            if el >= D["ramp"]:
                break
            visitors.set(1 + int((D["ramp_to"] - 1) * el / D["ramp"] + 0.5) if el > 0 else 1)
            if int(el) % 10 == 0 and (not trail or int(el) != trail[-1][0]):
                try:
                    c = concert.admin("/_room/report")["capacity"]
                    trail.append((int(el), visitors.target, c.get("recommended_cap")))
                except Exception:
                    pass
            time.sleep(0.25)
        visitors.set(D["ramp_to"])
        time.sleep(2)  # one more janitor window at the top of the ramp
        rep = concert.admin("/_room/report")
        res["advisor"] = {"capacity": rep.get("capacity"), "trail": trail,
                          "origin": origin_stats(origin, R0, time.time())}
        visitors.idle()
        visitors.stopping = True
        concert.stop()
        say("advisor: recommended_cap %s" % rep.get("capacity", {}).get("recommended_cap"))
        res["load"]["end"] = loadavg()
    finally:
        if visitors is not None:
            visitors.stopping = True
        concert.stop()
        with open(os.path.join(run_dir, "results.json"), "w") as f:
            json.dump(res, f, indent=1)

    md = report(res)
    with open(os.path.join(state, "results.md"), "w") as f:
        f.write(md)
    print(md)


# ---------------------------------------------------------------- the table

def report(r):
    def s(v, d=3):
        return "—" if v is None else ("%.*f s" % (d, v))

    def ok(b):
        return "met" if b else "**missed**"

    out = []
    D = r["durations"]
    un = r["unloaded"]
    best = r["best_fixed"]
    ad = r["adaptive"]
    out.append("")
    out.append("php-fpm 8.2 pm = static, max_children 8, /page.php sleeping 50 or 400 ms (half each); "
               "%d closed-loop visitors on keep-alive connections through Concert (-workers 2, -queue-hold 60s); "
               "%d CPUs, %s%s. Load average (1/5/15 min) at the start %s, before the adaptive run %s, "
               "before the advisor %s, at the end %s." % (
                   D["visitors"], r["nproc"], r["started"], ", **quick run (shortened phases)**" if r["quick"] else "",
                   r["load"].get("start"), r["load"].get("adaptive"), r["load"].get("advisor"),
                   r["load"].get("end")))
    out.append("")
    out.append("Fixed caps (no -adaptive), %d s measured after %d s each; time at the origin is nginx's "
               "$request_time (php-fpm's queue wait + the script):" % (D["sweep_measure"], D["sweep_warm"]))
    out.append("")
    out.append("| | pages/s | children busy (of 8) | origin p50 | origin p99 | origin 5xx | visit p99 (line + origin) |")
    out.append("|---|---|---|---|---|---|---|")
    out.append("| unloaded (1 visitor, %d s) | %.1f | %.2f | %s | %s | %d | %s |" % (
        D["unloaded"], un["pages_per_s"], un["busy"], s(un["p50_s"]), s(un["p99_s"]), un["5xx"],
        s(un["client"]["visit_p99_s"])))
    for row in r["sweep"]:
        out.append("| `-cap %d`%s | %.1f | %.2f | %s | %s | %d | %s |" % (
            row["cap"], " (best)" if row["cap"] == best["cap"] else "", row["pages_per_s"], row["busy"],
            s(row["p50_s"]), s(row["p99_s"]), row["5xx"], s(row["client"]["visit_p99_s"])))
    o = ad["origin"]
    out.append("| `-cap 64 -adaptive`, from %d s to %d s | %.1f | %.2f | %s | %s | %d | %s |" % (
        ad["window_s"][0], ad["window_s"][1], o["pages_per_s"], o["busy"], s(o["p50_s"]), s(o["p99_s"]), o["5xx"],
        s(ad["client"]["visit_p99_s"])))
    out.append("")

    goals = []
    stay = ad["stay_s"]
    conv_ok = stay is not None and stay <= 30
    goals.append(("cap enters [8, 10] within 30 s and stays (sampled every 250 ms)",
                  "first in [8, 10] at %s, in it for good from %s (until %d s)" % (
                      s(ad["first_s"], 1), s(stay, 1), D["adaptive"]), ok(conv_ok)))
    if stay is not None:
        swing_ok = ad["max_after"] - ad["min_after"] <= 2
        per_min = ad["flips_after"] / ad["minutes_after"] if ad["minutes_after"] > 0 else 0
        goals.append(("after that: swing ≤ ±1", "min %d, max %d" % (ad["min_after"], ad["max_after"]), ok(swing_ok)))
        goals.append(("after that: ≤ 2 direction changes a minute",
                      "%d changes of the cap, %d direction changes in %.1f min (%.1f a minute)" % (
                          ad["changes_after"], ad["flips_after"], ad["minutes_after"], per_min), ok(per_min <= 2)))
    else:
        goals.append(("after that: swing ≤ ±1, ≤ 2 direction changes a minute",
                      "from %d s: min %s, max %s, %d direction changes" % (
                          ad["window_s"][0], ad["min_window"], ad["max_window"], ad["flips_window"]), ok(False)))
    share = o["pages_per_s"] / best["pages_per_s"] if best["pages_per_s"] else 0
    bb = [x for x in r["sweep"] if x["cap"] == best["cap"]][0]["busy"]
    goals.append(("throughput ≥ 95 % of the best fixed cap",
                  "%.1f pages/s vs %.1f at `-cap %d`: %.1f %% (children busy %.2f vs %.2f: %.1f %%)" % (
                      o["pages_per_s"], best["pages_per_s"], best["cap"], 100 * share, o["busy"], bb,
                      100 * o["busy"] / bb if bb else 0), ok(share >= 0.95)))
    ratio = (o["p99_s"] or 0) / un["p99_s"] if un["p99_s"] else 0
    goals.append(("origin p99 ≤ 1.5 × unloaded p99",
                  "%s vs %s unloaded: %.2f ×" % (s(o["p99_s"]), s(un["p99_s"]), ratio), ok(ratio <= 1.5)))
    fives = ad["origin_whole"]["5xx"] + sum(f["origin"]["5xx"] for f in r["follow"])
    goals.append(("0 origin 5xx (adaptive run and both reloads)", "%d" % fives, ok(fives == 0)))
    for f in r["follow"]:
        st = f["stay_s"]
        goals.append(("max_children %d → %d: cap in [%d, %d] within 30 s (%d visitors)" % (
            f["from"], f["to"], f["band"][0], f["band"][1], f["visitors"]),
            "cap %s at the reload; first in band at %s, in it for good from %s (of %d s); range %s–%s, at the end %s" % (
                f["cap_at_reload"], s(f["first_s"], 1), s(st, 1), D["follow"], f["min"], f["max"], f["cap_end"]),
            ok(st is not None and st <= 30)))
    adv = r["advisor"]["capacity"] or {}
    rc = adv.get("recommended_cap")
    goals.append(("advisor recommends [8, 10] after a %d s ramp 1 → %d visitors, passthrough" % (D["ramp"], D["ramp_to"]),
                  "recommended_cap %s (knee first byte %s, peak %s pages/s)" % (
                      rc, adv.get("unqueued_first_byte_seconds"), adv.get("peak_pages_per_second")),
                  ok(rc is not None and 8 <= rc <= 10)))
    out.append("| goal | measured | |")
    out.append("|---|---|---|")
    for g in goals:
        out.append("| %s | %s | %s |" % g)
    out.append("")
    out.append("The reloads (SIGUSR2 to php-fpm's master), page requests ending from 1 s before to 5 s after:")
    out.append("")
    out.append("| reload | origin pages | origin non-200 | visitors' answers | visitors' failures | origin p99 in the last 15 s |")
    out.append("|---|---|---|---|---|---|")
    for f in r["follow"]:
        ar = f["around_reload"]
        out.append("| %d → %d | %d | %d | %d | %d | %s |" % (
            f["from"], f["to"], ar["origin"]["pages"], ar["origin"]["non_200"], ar["client"]["answers"],
            ar["client"]["failed"], s(f["origin_last_15s"]["p99_s"])))
    out.append("")
    out.append("The advisor's recommendation during the ramp (seconds, visitors, recommended_cap): %s." % (
        ", ".join("%d s %d → %s" % (t[0], t[1], "none" if t[2] is None else t[2])
                  for t in r["advisor"]["trail"]) or "—"))
    out.append("")
    lines = r.get("adaptive_log") or []
    if lines:
        out.append("Concert's log, the adaptive run (%d changes):" % len(lines))
        out.append("")
        out.append("```")
        show = lines if len(lines) <= 24 else lines[:16] + ["[... %d more ...]" % (len(lines) - 22)] + lines[-6:]
        for line in show:
            out.append(re.sub(r"^\d{4}/\d\d/\d\d ", "", line))
        out.append("```")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    main()
