#!/usr/bin/env python3
"""Event streams at scale: what 10,000 waiting pages listening on /queue/events
cost Concert, in memory and per admission. Not part of make test or make bench:

    python3 bench/events.py [--binary build/concert] [--streams 10000] [--chain 2000]

One Concert worker (-workers 1 -cap 1 -token-ttl 1h, so that no stream ends for
a cookie refresh during the run) in front of an in-process origin that holds
GET /hold until told and answers everything else at once. Worker CPU is the
worker's schedstat run time over a window; memory is its /proc status.

  1. One request on /hold takes the only page slot. Up to 500 + --chain +
     --streams visitors join through cookie-less GET / (pipelined,
     bench/queue_scale.py's Creator): the first tickets warm up, the next
     --chain are the baseline's, the rest get the streams.
  2. Baseline, nobody listening: the slot is freed; one keep-alive connection
     claims the baseline tickets in order (GET / with the cookie), each after
     the previous response (that admission has ended by then: the slot is
     returned before the response's last bytes go out). CPU per admission.
  3. --streams event streams open, one connection each. The first stream's
     ticket is now at the head of the line: it says `ready` at once and stays
     unclaimed, so nobody else moves. Worker RSS and RssAnon before and after
     (settled), per stream; the kernel's TCP buffer memory (/proc/net/sockstat,
     both ends of every loopback connection) per stream.
  4. Idle, --idle-seconds: nothing moves; the one-second walk touches every
     ticket and each stream gets a keep-alive comment every 15 s.
  5. A position round: the head stream's ticket is claimed, which moves
     everyone; each other stream gets one position event (a quarter of the
     streams per tick at most). CPU per write.
  6. Quiet, --quiet-seconds, right after the round: no position or keep-alive
     is due, so this is the walk alone (subtracted from the windows around it).
  7. One more admission and its round, then the stream chain: each `ready` is
     answered the way the waiting page does, GET / with the cookie on the same
     kept-alive connection; that admission ends and the next stream says
     `ready`. CPU per admission with the walk (and any position writes that
     fell in the window, at the round's cost per write) subtracted, and what
     it adds to the baseline: the wake-up walk and the `ready` write.

Prints a Markdown table (also written to --out, default
bench/results/events.md). Every process started here is stopped by pid;
everything binds 127.0.0.1.
"""
import argparse
import datetime
import http.server
import os
import selectors
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
import queue_scale  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
READY, POSITION, KEEP_ALIVE = b"event: ready", b"event: position", b": keep-alive"


class Origin:
    """GET /hold waits until release(); everything else is answered "ok" at once."""

    def __init__(self):
        gate = self.gate = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # head and body are two writes

            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path.startswith("/hold"):
                    gate.wait(600)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


def progress(text):
    sys.stderr.write("events: %s\n" % text)
    sys.stderr.flush()


def worker_pid(master):
    kids = [p for p in benchlib.descendants(master) if p != master]
    if len(kids) != 1:
        raise RuntimeError("expected one worker, found %r" % kids)
    return kids[0]


def memory_kib(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                out[key] = int(value.split()[0])
    return out


def kernel_tcp_kib():
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                fields = line.split()
                return int(fields[fields.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    return 0


def read_response(sock, buf=b""):
    """One Content-Length response from a blocking socket; returns (status, rest)."""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            raise RuntimeError("connection closed mid-response")
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(head[9:12]), rest[length:]


class Streams:
    """N /queue/events connections read through one selector; counts what they receive."""

    def __init__(self, port, tickets):
        self.port = port
        self.sel = selectors.DefaultSelector()
        self.state = {}
        self.counts = {READY: 0, POSITION: 0, KEEP_ALIVE: 0}
        self.admitted = 0
        self.answered = 0
        self.claim_limit = 0
        for t in tickets:
            s = socket.create_connection(("127.0.0.1", port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(b"GET /queue/events HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: room_ticket=%s\r\n\r\n"
                      % t.encode())
            s.setblocking(False)
            st = {"ticket": t, "carry": b"", "heads": 0, "ready": False, "claimed": False, "answered": False}
            self.state[s] = st
            self.sel.register(s, selectors.EVENT_READ, st)

    def pump(self, seconds, until=None):
        deadline = time.time() + seconds
        while time.time() < deadline and not (until and until()):
            for key, _ in self.sel.select(min(0.2, max(0.0, deadline - time.time()))):
                s, st = key.fileobj, key.data
                try:
                    data = s.recv(262144)
                except BlockingIOError:
                    continue
                if not data:
                    self.sel.unregister(s)
                    s.close()
                    continue
                self._count(s, st, data)

    def _count(self, s, st, data):
        window = st["carry"] + data
        for marker in self.counts:
            self.counts[marker] += window.count(marker) - st["carry"].count(marker)
        st["heads"] += window.count(b"HTTP/1.1 ") - st["carry"].count(b"HTTP/1.1 ")
        st["carry"] = window[-24:]
        if READY in window:
            st["ready"] = True
            self.claim(s, st)
        if st["claimed"] and not st["answered"] and st["heads"] >= 2 and window.endswith(b"ok"):
            st["answered"] = True
            self.answered += 1

    def claim(self, s, st):
        """The waiting page reloads on `ready`: GET / with the cookie, on the same connection."""
        if st["claimed"] or not st["ready"] or self.admitted >= self.claim_limit:
            return
        st["claimed"] = True
        self.admitted += 1
        s.setblocking(True)
        s.sendall(b"GET /page HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: room_ticket=%s\r\n\r\n"
                  % st["ticket"].encode())
        s.setblocking(False)

    def start_claiming(self, limit):
        self.claim_limit = limit
        for s, st in list(self.state.items()):
            self.claim(s, st)

    def heads_seen(self):
        return sum(1 for st in self.state.values() if st["heads"] >= 1)

    def close(self):
        for s in list(self.state):
            try:
                self.sel.unregister(s)
            except (KeyError, ValueError):
                pass
            s.close()
        self.sel.close()


def run(args, tmp, procs, pin):
    if pin.enabled:
        os.sched_setaffinity(0, {int(pin.load_cpu)})  # the client and the origin thread
    origin = Origin()
    try:
        result = measure(args, tmp, procs, pin, origin)
    finally:
        origin.close()
    result["load_before"] = args.load_before
    return result


def measure(args, tmp, procs, pin, origin):
    n, m = args.streams, args.chain
    w = min(m, 500)  # warm-up admissions before the baseline's: the origin connection, caches
    proc, port, log_path = benchlib.start_concert(
        procs, tmp, pin, args.binary,
        ["-upstream", "http://127.0.0.1:%d" % origin.port, "-workers", "1", "-cap", "1",
         "-max-queue", str(n + m + w + 100), "-token-ttl", "1h", "-max-connections", str(n + 200)],
        tag="concert-events")
    worker = worker_pid(proc.pid)
    holder = socket.create_connection(("127.0.0.1", port))
    holder.sendall(b"GET /hold HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    if not benchlib.wait_until(lambda: benchlib.concert_stats(port)["occupancy"] == 1, 10):
        raise RuntimeError("the holder did not take the slot")

    creator = queue_scale.Creator(port, w + m + n, 8, 64)
    creator.run(time.time() + 600)
    if len(creator.tickets) != w + m + n:
        raise RuntimeError("joined %d of %d visitors" % (len(creator.tickets), w + m + n))
    tickets = sorted(creator.tickets)  # hex of the ticket number first: issue order
    warm_tickets, baseline_tickets, stream_tickets = tickets[:w], tickets[w:w + m], tickets[w + m:]
    progress("%d visitors in line" % len(tickets))

    # Baseline chain, nobody listening.
    origin.gate.set()
    read_response(holder)
    claim = socket.create_connection(("127.0.0.1", port))
    claim.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rest = b""

    def claim_in_order(batch):
        nonlocal rest
        for t in batch:
            claim.sendall(b"GET /page HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: room_ticket=%s\r\n\r\n" % t.encode())
            status, rest = read_response(claim, rest)
            if status != 200:
                raise RuntimeError("baseline claim answered %d" % status)

    claim_in_order(warm_tickets)
    cpu0, t0 = benchlib.process_cpu_ns(worker), time.time()
    claim_in_order(baseline_tickets)
    base_cpu, base_secs = benchlib.process_cpu_ns(worker) - cpu0, time.time() - t0
    claim.close()
    progress("baseline chain: %d admissions in %.1f s" % (m, base_secs))

    # Open the streams.
    time.sleep(2)
    mem0, tcp0 = memory_kib(worker), kernel_tcp_kib()
    t0 = time.time()
    streams = Streams(port, stream_tickets)
    streams.pump(120, until=lambda: streams.heads_seen() == n)
    open_secs = time.time() - t0
    if streams.heads_seen() != n:
        raise RuntimeError("%d of %d streams opened" % (streams.heads_seen(), n))
    streams.pump(2.5)
    mem1, tcp1 = memory_kib(worker), kernel_tcp_kib()
    progress("%d streams open in %.1f s" % (n, open_secs))

    def window(pump):
        """Worker CPU (ns), seconds and what the streams received while `pump()` ran."""
        before, cpu0, t0 = dict(streams.counts), benchlib.process_cpu_ns(worker), time.time()
        pump()
        got = {k: streams.counts[k] - before[k] for k in before}
        return benchlib.process_cpu_ns(worker) - cpu0, time.time() - t0, got

    def round_arrived(before):
        return lambda: streams.counts[POSITION] - before >= n - 1 - streams.admitted

    # Steady idle: nothing moves; the 1 s walk and one keep-alive per stream every 15 s.
    idle = window(lambda: streams.pump(args.idle_seconds))
    progress("idle for %.1f s" % idle[1])

    # One admission moves everyone: each other stream gets its new position,
    # one write per stream, a quarter of the streams per tick at most. Window:
    # the claim of the head stream's ticket (it said `ready` at open) until
    # that round has arrived.
    pos = streams.counts[POSITION]
    streams.start_claiming(1)
    rnd = window(lambda: streams.pump(15, until=round_arrived(pos)))
    progress("position round: %d writes in %.1f s" % (rnd[2][POSITION], rnd[1]))

    # Quiet: a round went out to everyone just now, so no keep-alive is due
    # for 15 s and nothing moved since: the walk alone.
    quiet = window(lambda: streams.pump(args.quiet_seconds))
    walk_rate = quiet[0] / quiet[1]

    # One more admission and its round; then the chain runs right after, when
    # few streams (if any) may get another position for a while: each `ready`
    # answered with GET / on its connection starts the next admission.
    # Positions that still go out are counted and their cost subtracted.
    pos = streams.counts[POSITION]
    streams.start_claiming(2)
    streams.pump(15, until=round_arrived(pos))
    chain = window(lambda: (streams.start_claiming(2 + m), streams.pump(600, until=lambda: streams.answered >= 2 + m)))
    answered = streams.answered - 2
    progress("stream chain: %d admissions in %.1f s" % (answered, chain[1]))
    streams.close()
    holder.close()
    base_us = base_cpu / 1000 / m
    per_write = (rnd[0] - walk_rate * rnd[1]) / max(rnd[2][POSITION], 1)
    chain_us = (chain[0] - walk_rate * chain[1] - per_write * chain[2][POSITION]) / 1000 / max(answered, 1)
    return {
        "n": n, "m": m, "open_secs": open_secs,
        "rss": (mem1["VmRSS"] - mem0["VmRSS"]) * 1024 / n, "anon": (mem1["RssAnon"] - mem0["RssAnon"]) * 1024 / n,
        "rss_total_mib": mem1["VmRSS"] / 1024, "tcp": (tcp1 - tcp0) * 1024 / n,
        "base_us": base_us, "base_rate": m / base_secs,
        "idle": idle, "quiet": quiet, "walk_us_per_s": walk_rate / 1000,
        "round": rnd, "round_us_per_write": per_write / 1000,
        "chain": chain, "chain_us": chain_us, "answered": answered, "chain_extra_us": chain_us - base_us,
    }


def report(r, pin):
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    n, m = r["n"], r["m"]
    idle_cpu, idle_secs, idle_got = r["idle"]
    _, quiet_secs, quiet_got = r["quiet"]
    chain_cpu, chain_secs, chain_got = r["chain"]
    round_cpu, round_secs, round_got = r["round"]
    rows = [
        ("streams open (one worker)", "{:,}".format(n), "opened in %.1f s" % r["open_secs"]),
        ("worker RSS per stream", "%.0f B" % r["rss"], "RssAnon %.0f B; worker RSS %.1f MiB in all"
         % (r["anon"], r["rss_total_mib"])),
        ("kernel TCP buffer memory per stream", "%.0f B" % r["tcp"],
         "/proc/net/sockstat `mem`, both loopback ends, between events"),
        ("worker CPU, every stream waiting", "%.1f ms/s" % (idle_cpu / 1e6 / idle_secs),
         "%.0f s: the 1 s walk and %d keep-alive comments (one per stream per 15 s)"
         % (idle_secs, idle_got[KEEP_ALIVE])),
        ("  of which the 1 s walk", "%.1f ms/s" % (r["walk_us_per_s"] / 1000),
         "%.2f µs per stream per second (touch, position check); %.0f s with no write (%d positions, %d keep-alives)"
         % (r["walk_us_per_s"] / n, quiet_secs, quiet_got[POSITION], quiet_got[KEEP_ALIVE])),
        ("CPU per admission, nobody listening", "%.1f µs" % r["base_us"],
         "%d admissions at %.0f/s: proxied GET / claiming the ticket" % (m, r["base_rate"])),
        ("CPU per admission, %s streams" % "{:,}".format(n), "%.1f µs" % r["chain_us"],
         "%d admissions at %.0f/s, the walk (and positions) subtracted; %d `ready` events, %d positions, %d keep-alives"
         % (r["answered"], r["answered"] / chain_secs, chain_got[READY], chain_got[POSITION],
            chain_got[KEEP_ALIVE])),
        ("  of which the streams", "%.1f µs" % r["chain_extra_us"],
         "the wake-up walk (one stream past the ready one) and the `ready` write"),
        ("a position round after an admission", "%.1f µs per write" % r["round_us_per_write"],
         "%d writes (one per stream) over %.1f s, at most %d per tick; %.1f ms of CPU; one per stream per 5 s at most"
         % (round_got[POSITION], round_secs, n // 4 + 1,
            (round_cpu - r["walk_us_per_s"] * 1000 * round_secs) / 1e6)),
    ]
    machine = benchlib.machine_description()
    out = ["## Event streams (%s; %d CPUs, %s, kernel %s; pinning: %s; load before %s)"
           % (when, machine["nproc"], machine["model"], machine["kernel"],
              "Concert on CPU %s, this script and its origin on CPU %s" % (pin.proxy_cpu, pin.load_cpu)
              if pin.enabled else "none", r["load_before"]), "",
           "| measure | value | notes |", "|---|---|---|"]
    out += ["| %s | %s | %s |" % row for row in rows]
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(os.path.dirname(HERE), "build", "concert"))
    p.add_argument("--streams", type=int, default=10000)
    p.add_argument("--chain", type=int, default=2000, help="admissions per chain")
    p.add_argument("--idle-seconds", type=float, default=15.0, help="steady idle phase (keep-alives every 15 s)")
    p.add_argument("--quiet-seconds", type=float, default=3.0, help="walk-only phase, after a position round")
    p.add_argument("--out", default=os.path.join(HERE, "results", "events.md"))
    p.add_argument("--tmp", default=None)
    p.add_argument("--pid-file", default=None)
    p.add_argument("--no-pin", action="store_true")
    args = p.parse_args()
    if not 0 < args.chain < args.streams:
        sys.exit("events: --chain must be below --streams (each admission of the chain is one stream's)")
    if not benchlib.concert_usable(args.binary):
        sys.exit("events: %s is not a usable concert binary" % args.binary)
    benchlib.run_driver("events", args, [], "concert-events-", lambda tmp, procs, pin: run(args, tmp, procs, pin),
                        report)


if __name__ == "__main__":
    main()
