#!/usr/bin/env python3
"""Queue scale: what N people waiting cost Concert.

For each N: Concert (-cap 1 -max-queue 0, one worker unless --workers) in front
of an origin that never answers, so one parked request holds the only page slot.
Then N visitors join through the real HTTP path: cookie-less GET / requests,
pipelined over a few keep-alive connections as fast as this script can parse the
answers; each 429 carries the visitor's room_ticket, which is kept. Then wrk
polls /queue/status with those cookies at the waiting page's real rate (every
ticket once per --interval seconds, 3.25 s being the page's mean poll period)
for --poll-seconds, and we report:

  * CPU µs per poll of Concert's process tree (master + workers), from /proc
  * p50 / p99 poll latency (wrk, exact percentiles)
  * RSS and PSS of master + workers before and after the visitors joined
    (RSS counts the shared segment once per process; PSS splits it fairly)
  * the segment size (largest shared mapping of the master) and the PSS
    growth per waiting visitor

Bounded in time: creation stops at --create-timeout, polling runs for
--poll-seconds; every process started here is stopped by pid.
"""
import argparse
import datetime
import json
import os
import re
import selectors
import shutil
import socket
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TICKET_RE = re.compile(rb"(?im)^set-cookie:\s*room_ticket=([0-9a-f]+)")
SEGMENT_RE = re.compile(r"shared memory: (\d+) bytes[^\n]*?ring (\d+)")


class HoldingOrigin:
    """Accepts connections, reads requests, never answers: the parked page request stays parked."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.sock.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.held.append(conn)

    def close(self):
        self.stopped.set()
        self.thread.join(2)
        for c in self.held:
            c.close()
        self.sock.close()


class Creator:
    """Pipelined cookie-less GET / over `conns` keep-alive connections; collects room_tickets."""

    REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: concert-queue-scale\r\n\r\n"

    def __init__(self, port, total, conns, depth):
        self.port = port
        self.remaining = total
        self.conns = conns
        self.depth = depth
        self.tickets = []
        self.statuses = {}
        self.reconnects = 0

    def _open(self, sel):
        s = socket.create_connection(("127.0.0.1", self.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        state = {"buf": b"", "outstanding": 0}
        sel.register(s, selectors.EVENT_READ, state)
        return s, state

    def _send_batch(self, s, state):
        n = min(self.depth, self.remaining)
        if n <= 0:
            return
        self.remaining -= n
        state["outstanding"] = n
        s.setblocking(True)
        s.sendall(self.REQUEST * n)
        s.setblocking(False)

    def _parse(self, state):
        """Consume complete responses from the buffer; returns how many were consumed."""
        done = 0
        buf = state["buf"]
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buf[:end]
            try:
                status = int(head[9:12])
            except ValueError:
                raise RuntimeError("bad response head: %r" % head[:200])
            length = 0
            chunked = False
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                lname = name.strip().lower()
                if lname == b"content-length":
                    length = int(value.strip())
                elif lname == b"transfer-encoding" and b"chunked" in value.lower():
                    chunked = True
            body_start = end + 4
            if chunked:
                term = buf.find(b"\r\n0\r\n\r\n", body_start - 2)
                if term < 0:
                    break
                consumed = term + 7
            else:
                if len(buf) < body_start + length:
                    break
                consumed = body_start + length
            m = TICKET_RE.search(head)
            if m:
                self.tickets.append(m.group(1).decode())
            self.statuses[status] = self.statuses.get(status, 0) + 1
            buf = buf[consumed:]
            done += 1
        state["buf"] = buf
        return done

    def run(self, deadline):
        sel = selectors.DefaultSelector()
        socks = [self._open(sel) for _ in range(self.conns)]
        for s, state in socks:
            self._send_batch(s, state)
        try:
            while time.time() < deadline:
                if self.remaining <= 0 and all(st["outstanding"] == 0 for _, st in socks):
                    break
                for key, _ in sel.select(timeout=1.0):
                    s, state = key.fileobj, key.data
                    try:
                        data = s.recv(262144)
                    except BlockingIOError:
                        continue
                    if not data:
                        # Server closed: anything unanswered is asked again on a new connection.
                        self.remaining += state["outstanding"]
                        sel.unregister(s)
                        s.close()
                        self.reconnects += 1
                        idx = next(i for i, (x, _) in enumerate(socks) if x is s)
                        socks[idx] = self._open(sel)
                        self._send_batch(*socks[idx])
                        continue
                    state["buf"] += data
                    state["outstanding"] -= self._parse(state)
                    if state["outstanding"] == 0:
                        self._send_batch(s, state)
        finally:
            for s, _ in socks:
                try:
                    sel.unregister(s)
                except (KeyError, ValueError):
                    pass
                s.close()
            sel.close()


def raw_get(port, path, cookie=None, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    req = "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % path
    if cookie:
        req += "Cookie: %s\r\n" % cookie
    s.sendall((req + "Connection: close\r\n\r\n").encode())
    return s


def http_get(port, path, cookie=None):
    s = raw_get(port, path, cookie)
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    s.close()
    head, _, body = out.partition(b"\r\n\r\n")
    return int(head[9:12]), body


def stats(port):
    status, body = http_get(port, "/_room/stats")
    return json.loads(body) if status == 200 else {}


def segment_kib(log_text, master_pid):
    """Segment size and ring entries from the master's `shared memory: N bytes, ..., ring R` line,
    else the largest shared mapping of the master."""
    m = SEGMENT_RE.search(log_text)
    if m:
        return int(m.group(1)) / 1024.0, "ring %s" % m.group(2)
    return benchlib.largest_shared_mapping_kib(master_pid), "from /proc maps"


def run_one(args, n, tmp, procs, pin):
    origin = HoldingOrigin()
    parked = None
    try:
        proc, port, log_path = benchlib.start_concert(
            procs, tmp, pin, args.concert,
            ["-upstream", "http://127.0.0.1:%d" % origin.port, "-cap", "1", "-max-queue", "0",
             "-workers", str(args.workers), "-upstream-timeout", "1h"], tag="concert-qs")
        parked = raw_get(port, "/parked")
        if not benchlib.wait_until(lambda: stats(port).get("occupancy") == 1, 10):
            raise RuntimeError("the parked request did not take the page slot")
        rss0, pss0 = benchlib.tree_memory_kib(proc.pid)

        creator = Creator(port, n, args.create_conns, args.depth)
        t0 = time.time()
        creator.run(t0 + args.create_timeout)
        create_s = time.time() - t0
        tickets = creator.tickets
        rss1, pss1 = benchlib.tree_memory_kib(proc.pid)
        st = stats(port)

        last_position = None
        if tickets:
            code, body = http_get(port, "/queue/status", "room_ticket=%s; room_probe=1" % tickets[-1])
            try:
                last_position = json.loads(body).get("position")
            except ValueError:
                last_position = "HTTP %d" % code

        poll = None
        if tickets:
            values = os.path.join(tmp, "tickets-%d.txt" % n)
            with open(values, "w") as f:
                f.write("\n".join(tickets) + "\n")
            template = os.path.join(tmp, "poll-request.txt")
            with open(template, "wb") as f:
                f.write(b"GET /queue/status HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b"Cookie: room_ticket=@VALUE@; room_probe=1\r\n\r\n")
            target_rate = len(tickets) / args.interval
            # Each connection sends a poll, waits for the answer, then sleeps delay_ms; a
            # ~100 ms pause keeps the achieved rate close to the target even when a poll
            # takes a few ms, and spreads the visitors over many connections as browsers are.
            conns = max(args.threads, min(args.max_poll_conns, round(target_rate * 0.1)))
            delay_ms = max(1, round(conns * 1000.0 / target_rate))
            cpu = pin.proxy_cpu if pin.enabled else None
            t0, b0 = time.time(), benchlib.cpu_busy_seconds(cpu)
            c0 = benchlib.tree_cpu_seconds(proc.pid)
            wrk = benchlib.run_wrk(procs, pin, "http://127.0.0.1:%d/queue/status" % port, tmp, args.threads,
                                   conns, args.poll_seconds, script=benchlib.lines_script(tmp, paced=True),
                                   script_args=[values, template, args.threads, delay_ms], timeout_s=10)
            c1 = benchlib.tree_cpu_seconds(proc.pid)
            b1, wall = benchlib.cpu_busy_seconds(cpu), time.time() - t0
            rss2, pss2 = benchlib.tree_memory_kib(proc.pid)
            secs = wrk["duration_us"] / 1e6
            poll = {"wrk": wrk, "rate": wrk["requests"] / secs if secs else 0, "target": target_rate,
                    "conns": conns, "delay_ms": delay_ms,
                    "cpu_us": (c1 - c0) * 1e6 / wrk["requests"] if wrk["requests"] else None,
                    "rss": rss2, "pss": pss2, "util": (c1 - c0) / secs if secs else 0.0,
                    "others": max(0.0, (b1 - b0) - (c1 - c0)) / wall if cpu is not None else None}
        seg_kib, seg_src = segment_kib(benchlib.read_text(log_path), proc.pid)
        procs.stop(proc)
        return {"n": n, "created": len(tickets), "create_s": create_s, "statuses": creator.statuses,
                "reconnects": creator.reconnects, "rss0": rss0, "pss0": pss0, "rss1": rss1, "pss1": pss1,
                "stats": st, "last_position": last_position, "poll": poll, "segment_kib": seg_kib,
                "segment_src": seg_src}
    finally:
        if parked is not None:
            parked.close()
        origin.close()


def mib(kib):
    return "%.1f" % (kib / 1024.0)


def report(args, results, pin):
    m = benchlib.machine_description()
    out = ["# Queue scale — %s" % datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "",
           "* Machine: %s CPUs, %s, kernel %s. Pinning: %s." % (m["nproc"], m["model"], m["kernel"], pin.describe()),
           "* Concert -cap 1 -max-queue 0 -workers %d, one parked request; each visitor polls /queue/status every "
           "%.2f s for %d s (wrk -t%d, paced)." % (args.workers, args.interval, args.poll_seconds, args.threads),
           "* System load average (1 min) before / after: %s / %s." % (args.load_before, benchlib.load_average()), ""]
    head = ["waiting visitors", "joined/s", "polls/s (target)", "CPU µs/poll", "Concert CPU %",
            "others on its CPU %", "p50 ms", "p99 ms",
            "poll errors", "RSS master+workers MiB", "PSS MiB (before → after)", "segment MiB",
            "PSS bytes/visitor", "last position"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join("---" for _ in head) + "|")
    for r in results:
        p = r["poll"]
        per_visitor = (r["pss1"] - r["pss0"]) * 1024.0 / r["created"] if r["created"] else 0
        if p:
            w = p["wrk"]
            errs = w["status"] + w["connect"] + w["read"] + w["write"] + w["timeout"]
            poll_cells = ["%.0f (%.0f)" % (p["rate"], p["target"]), "%.1f" % p["cpu_us"] if p["cpu_us"] else "—",
                          "%.0f" % (p["util"] * 100), "%.0f" % (p["others"] * 100) if p["others"] is not None else "—",
                          "%.2f" % (w["p50"] / 1000), "%.2f" % (w["p99"] / 1000), str(errs), mib(p["rss"])]
        else:
            poll_cells = ["—"] * 7 + [mib(r["rss1"])]
        out.append("| " + " | ".join([
            "%d" % r["created"], "%.0f" % (r["created"] / r["create_s"] if r["create_s"] else 0)] + poll_cells + [
            "%s → %s" % (mib(r["pss0"]), mib(r["pss1"])), "%s (%s)" % (mib(r["segment_kib"]), r["segment_src"]),
            "%.0f" % per_visitor, str(r["last_position"])]) + " |")
    out.append("")
    for r in results:
        other = {k: v for k, v in r["statuses"].items() if k != 429}
        if other or r["created"] < r["n"] or r["reconnects"]:
            out.append("Note: N=%d asked, %d tickets kept; statuses %s; reconnects %d." % (
                r["n"], r["created"], dict(sorted(r["statuses"].items())), r["reconnects"]))
    return "\n".join(out).rstrip() + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concert", default=os.path.join(os.path.dirname(HERE), "build", "concert"))
    p.add_argument("--n", default="1000,10000",
                   help="comma-separated visitor counts (e.g. 100000 or 1000000 for the large runs)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--interval", type=float, default=3.25, help="seconds between two polls of one visitor")
    p.add_argument("--poll-seconds", type=int, default=15)
    p.add_argument("--threads", type=int, default=2, help="wrk threads for the polls")
    p.add_argument("--max-poll-conns", type=int, default=4000)
    p.add_argument("--create-conns", type=int, default=8)
    p.add_argument("--depth", type=int, default=32, help="pipelined requests per connection while joining")
    p.add_argument("--create-timeout", type=float, default=300)
    p.add_argument("--no-pin", action="store_true")
    p.add_argument("--tmp")
    p.add_argument("--pid-file")
    p.add_argument("--out", default=os.path.join(HERE, "results", "queue_scale.md"))
    args = p.parse_args()
    sizes = [int(x) for x in args.n.split(",") if x.strip()]
    if not benchlib.concert_usable(args.concert):
        print("queue_scale: skipped: `%s -version` does not run (binary absent or not linked yet)" % args.concert)
        return 0

    benchlib.install_signal_exit()
    own_tmp = args.tmp is None
    tmp = tempfile.mkdtemp(prefix="concert-qs-") if own_tmp else args.tmp
    procs = benchlib.Procs(args.pid_file)
    pin = benchlib.Pinning(not args.no_pin)
    results = []
    failures = []
    args.load_before = benchlib.load_average()
    try:
        for n in sizes:
            print("queue scale: N=%d" % n, file=sys.stderr)
            try:
                results.append(run_one(args, n, tmp, procs, pin))
            except (RuntimeError, OSError) as e:
                # One size failing costs that row; the reason is printed under the table.
                failures.append("N=%d failed: %s" % (n, str(e).strip().splitlines()[0] if str(e).strip() else e))
                print("  " + failures[-1], file=sys.stderr)
                procs.stop_all()
    finally:
        procs.stop_all()
        if own_tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    text = report(args, results, pin) + "".join("Note: %s\n" % f for f in failures)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
