#!/usr/bin/env python3
"""Several hosts: one Concert against three sharing one line and one cap
through Redis (-cluster).

Every visitor goes through the waiting room for real, as the built-in page
does when its event stream is not used: GET the page with a browser's Accept
header and no cookie; if the answer is the waiting page, keep its room_ticket
and room_probe cookies, poll GET /queue/status every --poll-seconds (plus
0-10 % jitter, the first poll one interval after the page), and when a poll
says `ready`, GET the page again with the cookies; a page that is the origin's
ends the visit, another waiting page means polling on. Each request goes to a
host drawn at random (no sticky sessions: the line is global). The visitors
are Python asyncio tasks in this process, on keep-alive connections pooled per
host (as a load balancer in front would keep them).

Three parts:

1. cap binds     closed loop: --visitors visitors, each starting a new visit
                 (no cookies) as soon as the last one ended, against a total
                 cap of --cap and an origin (bench/delay_origin.py) whose
                 pages take exactly --delay-ms. One host (no -cluster), then
                 three hosts with -cluster on one redis-server, each host
                 -cap CAP (the cap is global). Completed visits per second,
                 visit time p50/p99 (first request to the end of the admitted
                 page), request latency p50/p99 (the answers Concert gives
                 itself: first page and polls; and the admitted page, which
                 includes the origin's delay and any wait for a slot), the
                 line's length (live_queue_depth of the first host, twice a
                 second) and the origin's most requests in flight (the run
                 fails if it is above the cap).
2. engine cost   for every three-host measurement: engine round trips
                 (cluster_engine_round_trips_total summed over the hosts) per
                 second, per admission (Concert's admission counters) and per
                 poll (the polls sent here); the round-trip time from
                 concert_cluster_engine_seconds summed over the hosts (p50/p99
                 interpolated within the buckets, mean = sum/count); from
                 Redis itself (INFO commandstats): rounds per host per second
                 (SYNC runs, counted by the ZREMRANGEBYSCORE calls only SYNC
                 makes, calibrated on the idle hosts, where every round trip
                 is a SYNC; the agent aims at 10) and microseconds per script
                 run; CPU of redis-server and of the three cluster agents.
3. rate sweep    open loop: Poisson arrivals at each of --rates visits per
                 second (one visit each), cap --sweep-cap, origin
                 --sweep-delay-ms; three hosts with each -cluster-lease of
                 --sweep-leases (default 4, the default lease, and 64), then
                 one host alone at the same cap and rates. The same hosts for
                 every rate of one setup; between rates the line drains; once
                 a setup completes less than half the offered rate its higher
                 rates are skipped. Where visits/s stop following the offered
                 rate, or the visit time jumps because arrivals start to
                 queue, the other columns say what was short: CPU of Concert,
                 redis-server, this load generator and the origin, both CPUs'
                 busy time (/proc/stat: other work on the machine shows there),
                 how late this process's event loop woke up (its own delay is
                 in every latency measured here), connections it had to open,
                 and the kernel's listen overflows and SYN retransmits.

Placement (2 CPUs): the Concert hosts and redis-server on CPU 1, this load
generator and the origin on CPU 0 (--no-pin: none). Everything on 127.0.0.1;
every process started here (redis-server included, with --save "" and
--appendonly no) is stopped by pid.
"""
import argparse
import asyncio
import datetime
import json
import math
import os
import random
import re
import shutil
import socket
import sys
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LISTEN_RE = re.compile(r"listening on ([0-9.]+):(\d+)")
PAGE_PATH = "/page.html"
ORIGIN_MARK = b"<title>churn</title>"  # bench/delay_origin.py's page
BUCKET_RE = re.compile(r'^concert_cluster_engine_seconds_bucket\{le="([^"]+)"\} (\S+)$', re.M)
SUM_RE = re.compile(r"^concert_cluster_engine_seconds_sum (\S+)$", re.M)
COUNT_RE = re.compile(r"^concert_cluster_engine_seconds_count (\S+)$", re.M)
AGENT_RE = re.compile(r"cluster agent started pid (\d+)")
CMDSTAT_RE = re.compile(r"^cmdstat_(\w+):calls=(\d+),usec=(\d+)", re.M)


# ---------------------------------------------------------------- HTTP client

class Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self):
        self.transport = None
        self.buf = bytearray()
        self.waiter = None
        self.closed = False

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection closed"))

    def data_received(self, data):
        self.buf += data
        if self.waiter is not None and not self.waiter.done():
            self._parse()

    def _parse(self):
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = bytes(self.buf[:end]).split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        headers = []
        length, chunked, close = 0, False, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip()
            headers.append((name, value))
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and value.lower() == b"close":
                close = True
        pos = end + 4
        if chunked:
            body = bytearray()
            while True:
                eol = self.buf.find(b"\r\n", pos)
                if eol < 0:
                    return
                size = int(bytes(self.buf[pos:eol]).split(b";")[0], 16)
                if len(self.buf) < eol + 2 + size + 2:
                    return
                body += self.buf[eol + 2:eol + 2 + size]
                pos = eol + 2 + size + 2
                if size == 0:
                    break
            body = bytes(body)
        else:
            if len(self.buf) < pos + length:
                return
            body = bytes(self.buf[pos:pos + length])
            pos += length
        del self.buf[:pos]
        if close:
            self.closed = True
            self.transport.close()
        self.waiter.set_result((status, headers, body))

    async def request(self, raw):
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        try:
            return await self.waiter
        finally:
            self.waiter = None


class Client:
    """Pools of idle keep-alive connections, one pool per host port."""

    def __init__(self, ports):
        self.ports = list(ports)
        self.idle = {p: [] for p in self.ports}
        self.connects = 0

    async def get(self, port, path, cookies, timeout):
        loop = asyncio.get_running_loop()
        pool = self.idle[port]
        conn = None
        while pool:
            c = pool.pop()
            if not c.closed:
                conn = c
                break
        if conn is None:
            _, conn = await loop.create_connection(Conn, "127.0.0.1", port)
            self.connects += 1
        head = "GET %s HTTP/1.1\r\nHost: bench.test\r\nAccept: text/html,application/xhtml+xml,*/*;q=0.8\r\n" % path
        if cookies:
            head += "Cookie: %s\r\n" % "; ".join("%s=%s" % kv for kv in cookies.items())
        try:
            result = await asyncio.wait_for(conn.request((head + "\r\n").encode()), timeout)
        except BaseException:
            if conn.transport is not None:
                conn.transport.abort()
            raise
        if not conn.closed:
            pool.append(conn)
        return result

    def close(self):
        for pool in self.idle.values():
            for c in pool:
                if c.transport is not None:
                    c.transport.abort()
            pool.clear()


def take_cookies(headers, jar):
    for name, value in headers:
        if name != b"set-cookie":
            continue
        text = value.decode("latin-1")
        pair, _, attrs = text.partition(";")
        k, _, v = pair.strip().partition("=")
        if not v or "max-age=0" in attrs.lower().replace(" ", ""):
            jar.pop(k, None)
        else:
            jar[k] = v


# ---------------------------------------------------------------- visitors

class Load:
    """Visits and their requests, stamped with the monotonic time they ended."""

    def __init__(self, args, ports):
        self.args = args
        self.client = Client(ports)
        self.ports = list(ports)
        self.visits = []    # (end, seconds, polls, queued)
        self.requests = []  # (end, seconds, kind): kind first, poll, admitted
        self.polls = []     # end times of every /queue/status request
        self.errors = {}
        self.abandoned = 0
        self.bounced = 0
        self.stopping = False
        self.in_flight = 0
        self.skipped = 0  # open loop: arrivals not started (too many visits in flight)

    def error(self, what):
        self.errors[what] = self.errors.get(what, 0) + 1

    async def fetch(self, path, jar, kind):
        t0 = time.monotonic()
        status, headers, body = await self.client.get(random.choice(self.ports), path, jar, self.args.request_timeout)
        t1 = time.monotonic()
        self.requests.append((t1, t1 - t0, kind))
        take_cookies(headers, jar)
        return status, body

    async def visit(self):
        a = self.args
        jar = {}
        t0 = time.monotonic()
        deadline = t0 + a.visit_timeout
        self.in_flight += 1
        try:
            status, body = await self.fetch(PAGE_PATH, jar, "first")
            if status == 200 and ORIGIN_MARK in body:
                self.visits.append((time.monotonic(), time.monotonic() - t0, 0, False))
                return
            if "room_ticket" not in jar:
                self.error("first answer %d without a ticket" % status)
                return
            polls = 0
            while not self.stopping:
                if time.monotonic() >= deadline:
                    self.abandoned += 1
                    return
                await asyncio.sleep(a.poll_seconds * (1 + 0.1 * random.random()))
                if self.stopping:
                    return
                status, body = await self.fetch("/queue/status", jar, "poll")
                polls += 1
                self.polls.append(time.monotonic())
                if status != 200:
                    if status != 429:
                        self.error("poll answered %d" % status)
                    continue
                if not json.loads(body).get("ready"):
                    continue
                status, body = await self.fetch(PAGE_PATH, jar, "admitted")
                if status == 200 and ORIGIN_MARK in body:
                    self.visits.append((time.monotonic(), time.monotonic() - t0, polls, True))
                    return
                if "room_ticket" not in jar:
                    self.error("ready, then answered %d without a ticket" % status)
                    return
                self.bounced += 1  # told ready by one host, shown the waiting page by another: polls on
        except (OSError, asyncio.TimeoutError, ValueError) as e:
            if not self.stopping:
                self.error(type(e).__name__)
        finally:
            self.in_flight -= 1

    async def finish(self, tasks, grace):
        """Visits under way are not followed further: each returns at its next step (a request in
        flight may still end); what is left after `grace` is cancelled."""
        self.stopping = True
        tasks = [t for t in tasks or () if not t.done()]
        if tasks:
            _, left = await asyncio.wait(tasks, timeout=grace)
            for t in left:
                t.cancel()
            if left:
                await asyncio.wait(left, timeout=5)
        self.client.close()

    async def closed_loop(self, visitors, until):
        async def one():
            while time.monotonic() < until and not self.stopping:
                await self.visit()
        tasks = {asyncio.ensure_future(one()) for _ in range(visitors)}
        await asyncio.sleep(max(0.0, until - time.monotonic()))
        return tasks

    async def open_loop(self, rate, until):
        tasks = set()
        t = time.monotonic()
        while True:
            t += random.expovariate(rate)
            if t >= until:
                break
            delay = t - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.in_flight >= self.args.max_in_flight:
                self.skipped += 1
                continue
            task = asyncio.ensure_future(self.visit())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        return tasks


# ---------------------------------------------------------------- measurements

def percentile(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(math.ceil(q / 100.0 * len(v))) - 1))]


def histogram_quantile(buckets, q):
    """Prometheus-style: linear interpolation inside the bucket that holds the q-quantile.
    buckets: [(upper bound, cumulative count)] ascending, +Inf last."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, cum in buckets:
        if cum >= rank:
            if math.isinf(upper):
                return lower
            inside = cum - below
            return lower + (upper - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = upper, cum
    return lower


def http_text(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
        return r.read().decode()


def redis_info(port):
    """INFO commandstats over a plain socket (inline command)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"INFO commandstats\r\n")
        data = b""
        while b"\r\n" not in data:
            data += s.recv(65536)
        head, _, rest = data.partition(b"\r\n")
        need = int(head[1:])
        while len(rest) < need:
            chunk = s.recv(65536)
            if not chunk:
                break
            rest += chunk
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in CMDSTAT_RE.finditer(rest.decode())}


def tcp_counters():
    """TcpExt ListenOverflows and TCPSynRetrans (whole machine): a SYN dropped costs a client 1 s."""
    out = {}
    try:
        with open("/proc/net/netstat") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for names, values in zip(lines[0::2], lines[1::2]):
        for k, v in zip(names.split()[1:], values.split()[1:]):
            if names.startswith("TcpExt:") and k in ("ListenOverflows", "TCPSynRetrans"):
                out[k] = int(v)
    return out


def cpu_times():
    """Busy seconds of CPU 0 and CPU 1 (None for a CPU that does not exist)."""
    n = os.cpu_count() or 1
    return [benchlib.cpu_busy_seconds(c) if c < n else None for c in (0, 1)]


class Setup:
    """One origin, one or three Concert hosts, and (three hosts) the shared redis-server."""

    def __init__(self, bench, name, hosts, cap, delay_ms, lease=None):
        self.bench = bench
        self.lease = lease if lease is not None else bench.args.lease
        self.name = name
        self.cap = cap
        self.delay_ms = delay_ms
        self.cluster = hosts > 1
        a, procs, pin, tmp = bench.args, bench.procs, bench.pin, bench.tmp
        log_path = os.path.join(tmp, "origin-%s.log" % name)
        with open(log_path, "wb") as log:
            self.origin = procs.start("delay-origin", pin.load(
                [sys.executable, os.path.join(HERE, "delay_origin.py"), "--port", "0", "--min-ms", str(delay_ms),
                 "--max-ms", str(delay_ms)]), stdout=log, stderr=log, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        self.origin_port = int(benchlib.wait_log(log_path, LISTEN_RE, proc=self.origin).group(2))
        flags = ["-upstream", "http://127.0.0.1:%d" % self.origin_port, "-workers", str(a.workers), "-cap", str(cap)]
        if self.cluster:
            bench.rooms += 1
            flags += ["-cluster", "redis://127.0.0.1:%d" % bench.redis_port,
                      "-cluster-room", "bench%d-%s" % (bench.rooms, name), "-cluster-lease", str(self.lease)]
        self.hosts = []
        logs = []
        for i in range(hosts):
            proc, port, log = benchlib.start_concert(procs, tmp, pin, a.concert, flags, tag="concert-%s-%d" % (name, i))
            self.hosts.append((proc, port))
            logs.append(log)
        self.ports = [p for _, p in self.hosts]
        self.agents = []
        if self.cluster:
            ok = benchlib.wait_until(lambda: all(
                s.get("cluster_engine_up") == 1 and s.get("cluster_hosts") == hosts for s in self.stats()), 15)
            if not ok:
                raise RuntimeError("%s: the hosts did not all see %d hosts in the engine" % (name, hosts))
            for log in logs:
                m = AGENT_RE.search(benchlib.read_text(log))
                if m:
                    self.agents.append(int(m.group(1)))
            self.calibrate()

    def calibrate(self):
        """SYNC calls ZREMRANGEBYSCORE a fixed number of times per run, and no other script calls it
        (src/cluster/engine.cpp), so Redis's count of that command counts rounds. While nobody
        waits and nothing changes, every round trip is a SYNC: the idle ratio gives the calls per SYNC."""
        def counts():
            rt = sum(s["cluster_engine_round_trips_total"] for s in self.stats())
            return rt, redis_info(self.bench.redis_port).get("zremrangebyscore", (0, 0))[0]
        time.sleep(0.5)
        rt0, z0 = counts()
        time.sleep(1.5)
        rt1, z1 = counts()
        self.zrem_per_sync = max(1, int(round((z1 - z0) / (rt1 - rt0)))) if rt1 > rt0 else 1

    def stats(self):
        return [benchlib.concert_stats(p) for p in self.ports]

    def snapshot(self):
        b = self.bench
        snap = {"t": time.monotonic(), "stats": self.stats(), "cpu": cpu_times(), "tcp": tcp_counters(),
                "concert_ns": sum(benchlib.tree_cpu_ns(proc.pid) for proc, _ in self.hosts),
                "origin_ns": benchlib.process_cpu_ns(self.origin.pid),
                "load_ns": benchlib.process_cpu_ns(os.getpid()),
                "origin": json.loads(http_text(self.origin_port, "/__origin_stats"))}
        if self.cluster:
            snap["redis_ns"] = benchlib.process_cpu_ns(b.redis.pid)
            snap["agent_ns"] = sum(benchlib.process_cpu_ns(pid) for pid in self.agents)
            snap["redis"] = redis_info(b.redis_port)
            buckets, total_sum, total_count = {}, 0.0, 0.0
            for p in self.ports:
                text = http_text(p, "/_room/metrics")
                for m in BUCKET_RE.finditer(text):
                    le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
                    buckets[le] = buckets.get(le, 0.0) + float(m.group(2))
                total_sum += float(SUM_RE.search(text).group(1))
                total_count += float(COUNT_RE.search(text).group(1))
            snap["engine"] = (buckets, total_sum, total_count)
        return snap

    def drain(self, timeout):
        """Wait until no host has anyone waiting or in flight (the load has stopped)."""
        return benchlib.wait_until(lambda: all(s.get("live_queue_depth", 0) == 0 and s.get("occupancy", 0) == 0
                                               for s in self.stats()), timeout)

    def stop(self):
        for proc, _ in self.hosts:
            self.bench.procs.stop(proc)
        self.bench.procs.stop(self.origin)


class Row:
    """What one measured window gives (two snapshots and the load's records)."""

    def __init__(self, setup, label, load, s0, s1, offered=None):
        self.setup = setup
        self.label = label
        self.hosts = len(setup.ports)
        self.cap = setup.cap
        self.delay_ms = setup.delay_ms
        self.offered = offered
        t0, t1 = s0["t"], s1["t"]
        w = self.window = t1 - t0
        visits = [v for v in load.visits if t0 <= v[0] < t1]
        self.visits = len(visits)
        self.rate = len(visits) / w
        self.queued_share = sum(1 for v in visits if v[3]) / len(visits) if visits else None
        times = [v[1] for v in visits]
        self.visit_p50, self.visit_p99 = percentile(times, 50), percentile(times, 99)
        self.polls_per_visit = sum(v[2] for v in visits) / len(visits) if visits else None
        own = [r[1] for r in load.requests if t0 <= r[0] < t1 and r[2] != "admitted"]
        adm = [r[1] for r in load.requests if t0 <= r[0] < t1 and r[2] == "admitted"]
        self.own_p50, self.own_p99 = percentile(own, 50), percentile(own, 99)
        self.adm_p50, self.adm_p99 = percentile(adm, 50), percentile(adm, 99)
        self.polls = sum(1 for t in load.polls if t0 <= t < t1)
        self.requests = sum(1 for r in load.requests if t0 <= r[0] < t1)

        def delta(key):
            return sum(b.get(key, 0) for b in s1["stats"]) - sum(a.get(key, 0) for a in s0["stats"])
        self.admissions = delta("admissions_line_total") + delta("admissions_direct_total") + \
            delta("admissions_held_total")
        self.line_admissions = delta("admissions_line_total") + delta("admissions_held_total")
        self.inversions = delta("fifo_inversions_total")
        o0, o1 = s0["origin"], s1["origin"]
        self.origin_rate = (o1["completed"] - o0["completed"]) / (o1["now"] - o0["now"])
        self.origin_mean_conc = (o1["busy_area"] - o0["busy_area"]) / (o1["now"] - o0["now"])
        self.origin_max = o1["max_in_flight"]
        self.concert_cpu = (s1["concert_ns"] - s0["concert_ns"]) / 1e9 / w
        self.origin_cpu = (s1["origin_ns"] - s0["origin_ns"]) / 1e9 / w
        self.load_cpu = (s1["load_ns"] - s0["load_ns"]) / 1e9 / w
        self.tcp = {k: s1["tcp"].get(k, 0) - v for k, v in s0["tcp"].items()}
        self.cpu_busy = [(b - a) / w if a is not None and b is not None else None
                         for a, b in zip(s0["cpu"], s1["cpu"])]
        self.cluster = setup.cluster
        self.errors = dict(load.errors)
        self.abandoned = load.abandoned
        self.bounced = load.bounced
        self.skipped = load.skipped
        if not self.cluster:
            return
        self.round_trips = delta("cluster_engine_round_trips_total")
        self.rt_per_s = self.round_trips / w
        self.rt_per_admission = self.round_trips / self.admissions if self.admissions else None
        self.rt_per_poll = self.round_trips / self.polls if self.polls else None
        (b0, sum0, n0), (b1, sum1, n1) = s0["engine"], s1["engine"]
        buckets = sorted((le, b1[le] - b0.get(le, 0.0)) for le in b1)
        self.rtt_p50 = histogram_quantile(buckets, 0.5)
        self.rtt_p99 = histogram_quantile(buckets, 0.99)
        self.rtt_mean = (sum1 - sum0) / (n1 - n0) if n1 > n0 else None
        r0, r1 = s0["redis"], s1["redis"]

        def calls(name):
            return r1.get(name, (0, 0))[0] - r0.get(name, (0, 0))[0]
        evals = calls("eval")
        self.syncs = calls("zremrangebyscore") / setup.zrem_per_sync  # in SYNC only (Setup.calibrate)
        self.rounds_per_host = self.syncs / w / self.hosts
        self.eval_us = (r1["eval"][1] - r0["eval"][1]) / evals if evals else None
        self.redis_cpu = (s1["redis_ns"] - s0["redis_ns"]) / 1e9 / w
        self.agent_cpu = (s1["agent_ns"] - s0["agent_ns"]) / 1e9 / w if setup.agents else None


class Bench:
    def __init__(self, args, tmp, procs, pin):
        self.args = args
        self.tmp = tmp
        self.procs = procs
        self.pin = pin
        self.redis = None
        self.redis_port = None
        self.rooms = 0

    def start_redis(self):
        self.redis_port = benchlib.free_port()
        log = open(os.path.join(self.tmp, "redis.log"), "wb")
        self.redis = self.procs.start("redis-server", self.pin.proxy(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "no"]), stdout=log, stderr=log)
        log.close()
        if not benchlib.wait_until(lambda: redis_info(self.redis_port) is not None, 10):
            raise RuntimeError("redis-server did not answer on port %d" % self.redis_port)

    async def measure(self, setup, label, drive, warmup, duration, offered=None):
        """Runs drive(load, until) for warmup + duration; the window is the last `duration` seconds."""
        load = Load(self.args, setup.ports)
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        until = start + warmup + duration
        runner = asyncio.ensure_future(drive(load, until))
        await asyncio.sleep(max(0.0, start + warmup - time.monotonic()))
        s0 = await loop.run_in_executor(None, setup.snapshot)
        depths = []

        async def sample():
            # The line's length as the first host sees it (-cluster: the engine's line + tickets
            # issued there that it does not list yet), twice a second.
            while time.monotonic() < until - 0.5:
                try:
                    st = await loop.run_in_executor(None, benchlib.concert_stats, setup.ports[0])
                    depths.append(st.get("live_queue_depth", 0))
                except (OSError, ValueError):
                    pass
                await asyncio.sleep(0.5)
        lags = []

        async def lag():
            # How late this process's event loop wakes up: the load generator's own delay, which
            # every latency measured here includes.
            while time.monotonic() < until - 0.1:
                t = time.monotonic()
                await asyncio.sleep(0.02)
                lags.append(time.monotonic() - t - 0.02)
        connects0 = load.client.connects
        monitors = [asyncio.ensure_future(sample()), asyncio.ensure_future(lag())]
        await asyncio.sleep(max(0.0, until - time.monotonic()))
        s1 = await loop.run_in_executor(None, setup.snapshot)
        connects = load.client.connects - connects0
        await asyncio.gather(*monitors)
        await load.finish(await runner, grace=3.0)
        row = Row(setup, label, load, s0, s1, offered)
        row.depth_mean = sum(depths) / len(depths) if depths else None
        row.depth_max = max(depths) if depths else None
        row.restarted = False
        row.lag_p99 = percentile(lags, 99)
        row.connects = connects
        if row.origin_max > setup.cap:
            raise RuntimeError("%s: the origin saw %d requests at once, above the cap %d" % (
                label, row.origin_max, setup.cap))
        print("  %-28s %7.1f visits/s  visit p50 %6.3f s p99 %6.3f s  origin max %d%s" % (
            label, row.rate, row.visit_p50 or 0, row.visit_p99 or 0, row.origin_max,
            "  engine %.1f round trips/s, rtt p99 %.2f ms, %.1f rounds/s per host" % (
                row.rt_per_s, (row.rtt_p99 or 0) * 1e3, row.rounds_per_host) if row.cluster else ""),
            file=sys.stderr)
        return row

    async def part1(self):
        a = self.args
        rows = []
        for hosts in (1, 3):
            name = "bind%d" % hosts
            setup = Setup(self, name, hosts, a.cap, a.delay_ms)
            try:
                label = "1 host" if hosts == 1 else "3 hosts, -cluster-lease %d" % a.lease
                rows.append(await self.measure(setup, label, lambda load, until: load.closed_loop(a.visitors, until),
                                               a.warmup, a.duration))
            finally:
                setup.stop()
        return rows

    async def part3(self):
        a = self.args
        loop = asyncio.get_running_loop()
        rows = []
        for hosts, lease in [(3, lease) for lease in a.sweep_leases] + [(1, None)]:
            name = "3 hosts, -cluster-lease %d" % lease if hosts == 3 else "1 host"
            setup = None
            try:
                for i, rate in enumerate(a.rates):
                    if setup is None:
                        setup = Setup(self, "sweep%d-%s-%d" % (hosts, lease, i), hosts, a.sweep_cap,
                                      a.sweep_delay_ms, lease)
                    label = "%s | %d/s offered" % (name, rate)
                    row = await self.measure(setup, label, lambda load, until, r=rate: load.open_loop(r, until),
                                             a.step_warmup, a.step_seconds, offered=rate)
                    rows.append(row)
                    if row.rate < 0.5 * rate and rate != a.rates[-1]:
                        print("  (%s: below half the offered rate; higher rates skipped)" % label, file=sys.stderr)
                        break
                    # The visitors still in line when a step ends leave their tickets behind (until the
                    # token TTL): a line that has not emptied gets fresh hosts and a fresh room.
                    if not await loop.run_in_executor(None, setup.drain, a.drain_seconds):
                        row.restarted = True
                        setup.stop()
                        setup = None
            finally:
                if setup is not None:
                    setup.stop()
        return rows

    def run(self):
        a = self.args
        if a.pin_self and self.pin.enabled:
            os.sched_setaffinity(0, {int(self.pin.load_cpu)})
        self.start_redis()
        result = {"part1": [], "part3": [], "notes": []}
        loop = asyncio.new_event_loop()
        try:
            if "bind" in a.parts:
                print("cluster: cap %d binding, 1 host then 3 hosts" % a.cap, file=sys.stderr)
                result["part1"] = loop.run_until_complete(self.part1())
            if "sweep" in a.parts:
                print("cluster: offered rates %s at cap %d, 3 hosts (lease %s) then 1 host" % (
                    ",".join(map(str, a.rates)), a.sweep_cap, " and ".join(map(str, a.sweep_leases))), file=sys.stderr)
                result["part3"] = loop.run_until_complete(self.part3())
        finally:
            loop.close()
        return result


# ---------------------------------------------------------------- report

def fmt(v, pattern, scale=1.0):
    return pattern % (v * scale) if v is not None else "—"


def table(head, lines):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return out


def depth_text(r):
    return "%s / %s" % (fmt(r.depth_mean, "%.0f"), fmt(r.depth_max, "%d"))


def errors_text(r):
    parts = ["%s ×%d" % kv for kv in sorted(r.errors.items())]
    if r.tcp.get("ListenOverflows"):
        parts.append("listen overflows ×%d" % r.tcp["ListenOverflows"])
    if r.tcp.get("TCPSynRetrans"):
        parts.append("SYN retransmits ×%d" % r.tcp["TCPSynRetrans"])
    if r.abandoned:
        parts.append("abandoned ×%d" % r.abandoned)
    if r.skipped:
        parts.append("not started ×%d" % r.skipped)
    return ", ".join(parts) or "0"


def cpu_text(r):
    return " / ".join(fmt(c, "%.0f", 100) for c in r.cpu_busy)


def engine_cells(r):
    if not r.cluster:
        return ["—"] * 8
    return [fmt(r.rt_per_s, "%.1f"), fmt(r.rt_per_admission, "%.2f"), fmt(r.rt_per_poll, "%.2f"),
            "%s / %s / %s" % (fmt(r.rtt_p50, "%.2f", 1e3), fmt(r.rtt_p99, "%.2f", 1e3), fmt(r.rtt_mean, "%.2f", 1e3)),
            fmt(r.rounds_per_host, "%.1f"), fmt(r.eval_us, "%.0f"), fmt(r.redis_cpu, "%.1f", 100),
            fmt(r.agent_cpu, "%.1f", 100), str(r.inversions)]


ENGINE_HEAD = ["engine round trips/s (all hosts)", "round trips per admission", "round trips per poll",
               "round trip ms p50 / p99 / mean", "rounds/s per host (target 10)", "Redis µs per script",
               "redis-server CPU %", "cluster agents CPU %", "FIFO inversions"]


def report(args, result, pin):
    m = benchlib.machine_description()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = ["# Several hosts — %s" % now, "",
           "* Machine: %s CPUs, %s, kernel %s. Placement: %s." % (
               m["nproc"], m["model"], m["kernel"],
               "Concert hosts and redis-server on CPU 1; this load generator (Python asyncio) and the delay "
               "origin on CPU 0" if pin.enabled else "none"),
           "* Binary: `%s` (%s, modified %s UTC); %s. Every host `-workers %d`; three hosts share one "
           "redis-server (`--save \"\" --appendonly no`) with `-cluster` (`-cluster-lease %d` unless a row "
           "says otherwise; lease TTL 10 s, fail open: the defaults)." % (
               args.concert, benchlib.tool_version([args.concert, "-version"]),
               datetime.datetime.fromtimestamp(os.path.getmtime(args.concert), datetime.timezone.utc).strftime(
                   "%Y-%m-%d %H:%M"),
               " ".join(benchlib.tool_version(["redis-server", "--version"]).split()[:3]), args.workers, args.lease),
           "* Visitors: browser Accept header, waiting page, `/queue/status` every %.2g s (+0–10 %%), the page again "
           "when ready; every request to a host drawn at random." % args.poll_seconds,
           "* System load average (1 min) before / after: %s / %s." % (args.load_before, benchlib.load_average()),
           ""]
    p1 = result["part1"]
    if p1:
        out += ["## Cap %d binding: one host against three (closed loop, %d visitors)" % (args.cap, args.visitors), "",
                "Origin pages take %g ms; %d visitors, each starting a new visit (no cookies) when the last ended; "
                "%d s measured after %d s of warm-up." % (args.delay_ms, args.visitors, args.duration, args.warmup), ""]
        out += table(
            ["setup", "visits/s", "admissions/s (Concert's count)", "queued share", "visit s p50 / p99",
             "polls per visit", "first page + polls ms p50 / p99", "admitted page ms p50 / p99", "line mean / max",
             "origin concurrency mean / max (cap)", "Concert CPU %", "load generator lag ms p99",
             "CPU 0 / CPU 1 busy %", "told ready, then the waiting page", "errors"],
            [[r.label, "%.1f" % r.rate, "%.1f" % (r.admissions / r.window), fmt(r.queued_share, "%.0f %%", 100),
              "%s / %s" % (fmt(r.visit_p50, "%.2f"), fmt(r.visit_p99, "%.2f")), fmt(r.polls_per_visit, "%.2f"),
              "%s / %s" % (fmt(r.own_p50, "%.2f", 1e3), fmt(r.own_p99, "%.2f", 1e3)),
              "%s / %s" % (fmt(r.adm_p50, "%.0f", 1e3), fmt(r.adm_p99, "%.0f", 1e3)), depth_text(r),
              "%.2f / %d (%d)" % (r.origin_mean_conc, r.origin_max, r.cap), fmt(r.concert_cpu, "%.1f", 100),
              fmt(r.lag_p99, "%.1f", 1e3), cpu_text(r), str(r.bounced), errors_text(r)] for r in p1])
        out.append("")
        clustered = [r for r in p1 if r.cluster]
        if clustered:
            out += ["Engine, same three-host window:", ""]
            out += table(["setup", "admissions", "polls"] + ENGINE_HEAD,
                         [[r.label, str(r.admissions), str(r.polls)] + engine_cells(r) for r in clustered])
            out.append("")
    p3 = result["part3"]
    if p3:
        out += ["## Offered admission rate (open loop), cap %d" % args.sweep_cap, "",
                "Poisson arrivals at each rate, one visit each; origin pages take %g ms (bound cap / delay = %.0f/s); "
                "%d s measured after %d s per rate; one setup's rates on the same hosts, one after the other, "
                "unless marked †." % (args.sweep_delay_ms, args.sweep_cap / (args.sweep_delay_ms / 1e3),
                                    args.step_seconds, args.step_warmup), ""]
        out += table(
            ["setup", "offered/s", "visits/s", "queued share", "visit s p50 / p99", "first page + polls ms p50 / p99",
             "line mean / max", "origin concurrency mean / max", "Concert CPU %", "load generator CPU %",
             "origin CPU %", "load generator lag ms p99", "connections opened", "CPU 0 / CPU 1 busy %",
             "told ready, then the waiting page", "errors"],
            [[r.label.split(" | ")[0], str(r.offered) + (" †" if r.restarted else ""), "%.1f" % r.rate,
              fmt(r.queued_share, "%.0f %%", 100),
              "%s / %s" % (fmt(r.visit_p50, "%.3f"), fmt(r.visit_p99, "%.3f")),
              "%s / %s" % (fmt(r.own_p50, "%.2f", 1e3), fmt(r.own_p99, "%.2f", 1e3)), depth_text(r),
              "%.2f / %d" % (r.origin_mean_conc, r.origin_max), fmt(r.concert_cpu, "%.0f", 100),
              fmt(r.load_cpu, "%.0f", 100), fmt(r.origin_cpu, "%.0f", 100), fmt(r.lag_p99, "%.1f", 1e3),
              str(r.connects), cpu_text(r), str(r.bounced), errors_text(r)] for r in p3])
        out.append("")
        if any(r.restarted for r in p3):
            out += ["† The line had not emptied %g s after this rate ended (tickets of the visitors this "
                    "script stopped stay until the token TTL): the next rate ran on fresh hosts in a new "
                    "room." % args.drain_seconds, ""]
        clustered = [r for r in p3 if r.cluster]
        if clustered:
            out += ["Engine, same three-host windows:", ""]
            out += table(["setup", "offered/s", "admissions", "polls"] + ENGINE_HEAD,
                         [[r.label.split(" | ")[0], str(r.offered), str(r.admissions), str(r.polls)] + engine_cells(r)
                          for r in clustered])
            out.append("")
    for n in result["notes"]:
        out.append("Note: " + n)
    return "\n".join(out).rstrip() + "\n"


def env_default(name, default, cast=str):
    value = os.environ.get(name)
    return cast(value) if value not in (None, "") else default


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concert", default=env_default("CLUSTER_CONCERT",
                                                    os.path.join(os.path.dirname(HERE), "build", "concert")))
    p.add_argument("--parts", default="bind,sweep", help="bind (1 and 2), sweep (3)")
    p.add_argument("--workers", type=int, default=1, help="Concert -workers per host")
    p.add_argument("--lease", type=int, default=4, help="-cluster-lease")
    p.add_argument("--cap", type=int, default=env_default("CLUSTER_CAP", 10, int), help="total cap, part 1")
    p.add_argument("--delay-ms", type=float, default=env_default("CLUSTER_DELAY_MS", 250.0, float),
                   help="origin page time, part 1")
    p.add_argument("--visitors", type=int, default=env_default("CLUSTER_VISITORS", 60, int),
                   help="closed-loop visitors, part 1")
    p.add_argument("--duration", type=int, default=env_default("CLUSTER_DURATION", 15, int),
                   help="measured seconds per setup, part 1")
    p.add_argument("--warmup", type=int, default=env_default("CLUSTER_WARMUP", 6, int))
    p.add_argument("--poll-seconds", type=float, default=env_default("CLUSTER_POLL_SECONDS", 1.0, float))
    p.add_argument("--rates", default=env_default("CLUSTER_RATES", "100,200,400,800,1600,3200"),
                   help="offered visits per second, part 3")
    p.add_argument("--sweep-cap", type=int, default=env_default("CLUSTER_SWEEP_CAP", 200, int))
    p.add_argument("--sweep-delay-ms", type=float, default=env_default("CLUSTER_SWEEP_DELAY_MS", 20.0, float))
    p.add_argument("--sweep-leases", default=env_default("CLUSTER_SWEEP_LEASES", "4,64"),
                   help="-cluster-lease of the three-host setups, part 3")
    p.add_argument("--step-seconds", type=int, default=env_default("CLUSTER_STEP_SECONDS", 8, int))
    p.add_argument("--step-warmup", type=int, default=env_default("CLUSTER_STEP_WARMUP", 2, int))
    p.add_argument("--max-in-flight", type=int, default=4000, help="open loop: visits under way at most")
    p.add_argument("--drain-seconds", type=float, default=3.0,
                   help="part 3: how long the line may take to empty after a rate before the hosts are replaced")
    p.add_argument("--request-timeout", type=float, default=35.0)
    p.add_argument("--visit-timeout", type=float, default=120.0)
    p.add_argument("--no-pin", action="store_true")
    p.add_argument("--tmp")
    p.add_argument("--pid-file")
    p.add_argument("--out", default=os.path.join(HERE, "results", "cluster.md"))
    args = p.parse_args()
    args.pin_self = not args.no_pin
    args.parts = [s.strip() for s in args.parts.split(",") if s.strip()]
    args.rates = [int(r) for r in str(args.rates).split(",") if r.strip()]
    args.sweep_leases = [int(x) for x in str(args.sweep_leases).split(",") if x.strip()]
    if not benchlib.concert_usable(args.concert):
        sys.exit("cluster: %s is not a usable concert binary" % args.concert)
    if not benchlib.concert_has_flag(args.concert, "-cluster"):
        sys.exit("cluster: %s has no -cluster (concert --help)" % args.concert)
    if not shutil.which("redis-server"):
        sys.exit("cluster: redis-server not found (apt-get install redis-server; make deps-test installs it)")
    t0 = time.time()
    result = benchlib.run_driver("cluster", args, (), "concert-cluster-",
                                 lambda tmp, procs, pin: Bench(args, tmp, procs, pin).run(),
                                 lambda result, pin: report(args, result, pin))
    print("(cluster.py: %.0f s)" % (time.time() - t0), file=sys.stderr)
    return 0 if result["part1"] or result["part3"] else 1


if __name__ == "__main__":
    sys.exit(main())
