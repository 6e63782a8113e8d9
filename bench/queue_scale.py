#!/usr/bin/env python3
"""Queue scale: what N people waiting cost Concert.

For each N: Concert (-cap 1 -max-queue N -asset-users-max 1, one worker unless
--workers) in front of an origin that never answers, so one parked request holds
the only page slot. -max-queue N sizes the ticket ring for exactly this queue, as
an operator expecting N visitors would; the pass table (sized by -asset-users-max,
for admitted visitors' assets, unrelated to the queue) is shrunk to one entry so
the segment is the queue's cost; one extra start at the default size measures
what the pass table adds.

Then N visitors join through the real HTTP path: cookie-less GET / requests,
pipelined over a few keep-alive connections as fast as this script can parse the
answers; each 429 carries the visitor's room_ticket, which is kept. The tickets
are sorted by ticket number (the order Concert handed them out: with several
connections in flight, the order the answers are parsed in is not that order)
and checked to be N consecutive numbers.

Two poll phases follow, each --poll-seconds long, with wrk and pre-built requests
(the tickets in a fixed random order, so polls hit the ring at random places as
real visitors' do, never in ticket order):

  page rate   every visitor once per --interval seconds (3.25 s, the waiting
              page's mean poll period): N / 3.25 polls per second. On a small
              machine the large N cannot be served at that rate; the achieved
              rate is printed next to the target, and the row is marked
              overloaded when it falls short by more than 10 %.
  fixed rate  --fixed-rate polls per second (default 300, which every N >= 1000
              can take at most once per 3.25 s per visitor) whatever N is, over a
              random sample of the visitors (rate x (poll seconds + 5) of them,
              so nearly every poll is a different visitor at a random place in
              the ring): the same offered load for every queue size, so CPU per
              poll and latency across the rows show what the queue size alone
              changes.

Per phase: CPU µs per poll of Concert's process tree (master + workers, exact
run time from /proc/PID/task/*/schedstat over the measured window, divided by
the polls wrk completed), the master's share of it (the reaper's sweep over the
live tickets every -reaper interval runs there), exact p50/p99/p99.9 poll
latency, and polls answered other than 200 (rate-limited or refused).
Per N: the segment size (master's `shared memory: N bytes ... ring R` line,
checked against /proc/PID/maps) and bytes per waiting visitor; RSS of master +
workers (counts the segment once per process that touched it) and their own PSS
(Pss_Anon + Pss_Shmem: heap and segment, shared pages split between the
processes that map them, so it sums to the real footprint; the file pages of
the binary and libraries are left out) before joining, after joining and after
the polls, and the own-PSS growth per visitor while joining; and the
positions /queue/status reports to the first, middle and last visitor after
both phases (expected 1, N/2 and N: nobody was lost, expired or reordered).

Bounded in time: joining stops at --create-timeout, each phase runs for
--poll-seconds; every process started here is stopped by pid.
"""
import argparse
import datetime
import json
import os
import random
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
POLL_REQUEST = b"GET /queue/status HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: room_ticket=%s; room_probe=1\r\n\r\n"
SEGMENT_RE = re.compile(r"shared memory: (\d+) bytes[^\n]*?ring (\d+), pass table (\d+)")


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


def segment_info(log_text, master_pid):
    """Segment bytes, ring entries and pass-table entries from the master's `shared memory: N bytes,
    ..., ring R, pass table P` line, and the largest shared mapping of the master as a cross-check."""
    m = SEGMENT_RE.search(log_text)
    mapped = benchlib.largest_shared_mapping_kib(master_pid) * 1024
    if m:
        return {"bytes": int(m.group(1)), "ring": int(m.group(2)), "pass_table": int(m.group(3)),
                "mapped": mapped}
    return {"bytes": mapped, "ring": None, "pass_table": None, "mapped": mapped}


def ticket_number(cookie):
    """room_ticket is 16 hex digits of ticket number, then 16 of nonce."""
    return int(cookie[:16], 16)


def position_of(port, ticket):
    """The position /queue/status reports for a ticket (also present in a rate-limited 429)."""
    code, body = http_get(port, "/queue/status", "room_ticket=%s; room_probe=1" % ticket)
    try:
        doc = json.loads(body)
    except ValueError:
        return "HTTP %d" % code
    if doc.get("ready"):
        return "ready"
    return doc.get("position", "HTTP %d" % code)


def concert_args(args, n, origin_port, asset_users_max="1"):
    out = ["-upstream", "http://127.0.0.1:%d" % origin_port, "-cap", "1", "-workers", str(args.workers),
           "-upstream-timeout", "1h", "-max-queue", str(n if args.max_queue is None else args.max_queue)]
    if asset_users_max is not None:
        out += ["-asset-users-max", asset_users_max]
    return out


def poll_phase(args, procs, pin, tmp, proc, port, prefix, rate, label):
    """wrk polls the tickets pre-rendered in the request files `prefix`.* at `rate` polls/s."""
    # Each connection sends a poll, waits for the answer, then sleeps delay_ms; a ~100 ms
    # pause spreads the visitors over many connections as browsers are, and keeps the
    # achieved rate at the target when a poll takes a few ms.
    conns = max(args.threads, min(args.max_poll_conns, round(rate * 0.1)))
    delay_ms = max(1, round(conns * 1000.0 / rate))
    target = conns * 1000.0 / delay_ms
    cpu = pin.proxy_cpu if pin.enabled else None
    # Start from a quiet Concert: after an overloaded phase it may still be
    # answering (or closing) the last connections of the previous wrk, and
    # that work belongs to the previous phase, not to this one's polls.
    settle_until = time.time() + 10
    prev = benchlib.tree_cpu_ns(proc.pid)
    while time.time() < settle_until:
        time.sleep(0.5)
        now_ns = benchlib.tree_cpu_ns(proc.pid)
        if now_ns - prev < 5e6:  # under 1 % of a CPU over the last half second
            break
        prev = now_ns
    t0, b0 = time.time(), benchlib.cpu_busy_seconds(cpu)
    c0, m0 = benchlib.tree_cpu_ns(proc.pid), benchlib.process_cpu_ns(proc.pid)
    wrk = benchlib.run_wrk(procs, pin, "http://127.0.0.1:%d/queue/status" % port, tmp, args.threads,
                           conns, args.poll_seconds, script=benchlib.requests_script(tmp, paced=True),
                           script_args=[prefix, delay_ms], timeout_s=10)
    c1, m1 = benchlib.tree_cpu_ns(proc.pid), benchlib.process_cpu_ns(proc.pid)
    b1, wall = benchlib.cpu_busy_seconds(cpu), time.time() - t0
    secs = wrk["duration_us"] / 1e6
    polls = wrk["requests"]
    out = {"label": label, "wrk": wrk, "rate": polls / secs if secs else 0.0, "target": target,
           "conns": conns, "delay_ms": delay_ms,
           "cpu_us": (c1 - c0) / 1e3 / polls if polls else None,
           "master_us": (m1 - m0) / 1e3 / polls if polls else None,
           "util": (c1 - c0) / 1e9 / secs if secs else 0.0,
           "others": max(0.0, (b1 - b0) - (c1 - c0) / 1e9) / wall if cpu is not None else None}
    print("  %-10s %8.0f polls/s (target %.0f)  %.1f µs/poll  p99 %.2f ms  non-2xx %d" % (
        label, out["rate"], target, out["cpu_us"] or 0, wrk["p99"] / 1e3, wrk["status"]), file=sys.stderr)
    # A ticket polled again within a second is rate-limited: let every ticket's last poll age.
    time.sleep(1.1)
    return out


def run_one(args, n, tmp, procs, pin):
    origin = HoldingOrigin()
    parked = None
    try:
        proc, port, log_path = benchlib.start_concert(procs, tmp, pin, args.concert,
                                                      concert_args(args, n, origin.port), tag="concert-qs")
        parked = raw_get(port, "/parked")
        if not benchlib.wait_until(lambda: stats(port).get("occupancy") == 1, 10):
            raise RuntimeError("the parked request did not take the page slot")
        mem0 = benchlib.tree_memory_detail(proc.pid)

        creator = Creator(port, n, args.create_conns, args.depth)
        t0 = time.time()
        creator.run(t0 + args.create_timeout)
        create_s = time.time() - t0
        # Ticket order, not the order the answers were parsed in.
        tickets = sorted(creator.tickets, key=ticket_number)
        numbers = [ticket_number(t) for t in tickets]
        consecutive = bool(numbers) and len(set(numbers)) == len(numbers) and \
            numbers[-1] - numbers[0] + 1 == len(numbers)
        mem1 = benchlib.tree_memory_detail(proc.pid)
        print("  joined %d in %.1f s (%s)" % (len(tickets), create_s, dict(sorted(creator.statuses.items()))),
              file=sys.stderr)

        phases = []
        if tickets:
            # The visitors in a fixed random order, dealt to the wrk threads.
            order = list(tickets)
            random.Random(n).shuffle(order)
            if "page" in args.phases:
                prefix = benchlib.write_request_files(
                    os.path.join(tmp, "polls-%d" % n), (POLL_REQUEST % t.encode() for t in order), args.threads)
                phases.append(poll_phase(args, procs, pin, tmp, proc, port, prefix,
                                         len(tickets) / args.interval, "page rate"))
            if "fixed" in args.phases:
                # A random sample of the visitors, large enough that none is polled twice within
                # --interval and that few are polled twice in the phase: every poll lands at a random
                # place in the ring, and wrk loads the same number of requests whatever N is.
                rate = min(args.fixed_rate, len(tickets) / args.interval)
                sample = order[:max(int(rate * (args.poll_seconds + 5)), int(rate * args.interval * 2) + 1)]
                prefix = benchlib.write_request_files(
                    os.path.join(tmp, "fixed-%d" % n), (POLL_REQUEST % t.encode() for t in sample), args.threads)
                phases.append(poll_phase(args, procs, pin, tmp, proc, port, prefix, rate, "fixed rate"))
            del order
        mem2 = benchlib.tree_memory_detail(proc.pid)

        positions = expected = None
        if tickets:
            picks = [0, len(tickets) // 2 - 1 if len(tickets) > 1 else 0, len(tickets) - 1]
            positions = [position_of(port, tickets[i]) for i in picks]
            expected = [i + 1 for i in picks]
        st = stats(port)
        seg = segment_info(benchlib.read_text(log_path), proc.pid)
        procs.stop(proc)
        return {"n": n, "created": len(tickets), "create_s": create_s, "statuses": creator.statuses,
                "reconnects": creator.reconnects, "consecutive": consecutive,
                "first_ticket": numbers[0] if numbers else None,
                "mem": [mem0, mem1, mem2],
                "stats": st, "positions": positions, "expected": expected, "phases": phases, "segment": seg}
    finally:
        if parked is not None:
            parked.close()
        origin.close()


def pass_table_bytes(args, n, tmp, procs, pin, small_segment):
    """What the pass table at the default -asset-users-max adds to the segment: one more start."""
    origin = HoldingOrigin()
    try:
        proc, _, log_path = benchlib.start_concert(procs, tmp, pin, args.concert,
                                                   concert_args(args, n, origin.port, asset_users_max=None),
                                                   tag="concert-qs-passes")
        seg = segment_info(benchlib.read_text(log_path), proc.pid)
        procs.stop(proc)
        return seg["bytes"] - small_segment["bytes"], seg["pass_table"]
    finally:
        origin.close()


def mib(kib):
    return "%.1f" % (kib / 1024.0)


def report(args, results, pin, extra_notes):
    m = benchlib.machine_description()
    mq = "N" if args.max_queue is None else str(args.max_queue)
    out = ["# Queue scale — %s" % datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), "",
           "* Machine: %s CPUs, %s, kernel %s. Pinning: %s." % (m["nproc"], m["model"], m["kernel"],
                                                                pin.describe().replace("origin nginx",
                                                                                       "joining client")),
           "* Concert -cap 1 -max-queue %s -asset-users-max 1 -workers %d, one parked request; visitors join "
           "through GET / (cookie-less, pipelined), then poll /queue/status with their room_ticket "
           "(wrk -t%d, paced, tickets in random order), %d s per phase." % (mq, args.workers, args.threads,
                                                                          args.poll_seconds),
           "* Phases: page rate = every visitor once per %.2f s (N / %.2f polls/s); fixed rate = %d polls/s "
           "for every N." % (args.interval, args.interval, args.fixed_rate),
           "* System load average (1 min) before / after: %s / %s." % (args.load_before, benchlib.load_average()),
           "", "### Memory", ""]
    head = ["waiting visitors", "joined/s", "segment MiB (ring entries)", "segment bytes/visitor",
            "RSS master+workers MiB (before → joined → after polls)",
            "own PSS MiB (before → joined → after polls)", "own PSS growth bytes/visitor (joining)",
            "positions first / middle / last"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join("---" for _ in head) + "|")
    for r in results:
        n = r["created"]
        seg = r["segment"]
        mem = r["mem"]
        growth = (mem[1]["pss_own"] - mem[0]["pss_own"]) * 1024.0 / n if n else 0
        if r["positions"] is None:
            pos = "—"
        elif r["positions"] == r["expected"]:
            pos = "%s ✓" % " / ".join(str(p) for p in r["positions"])
        else:
            pos = "%s (expected %s)" % (" / ".join(str(p) for p in r["positions"]),
                                        " / ".join(str(p) for p in r["expected"]))
        out.append("| " + " | ".join([
            "%d" % n, "%.0f" % (n / r["create_s"] if r["create_s"] else 0),
            "%.1f (%s)" % (seg["bytes"] / 1048576.0, seg["ring"] if seg["ring"] is not None else "from maps"),
            "%.1f" % (seg["bytes"] / n if n else 0),
            " → ".join(mib(m["rss"]) for m in mem), " → ".join(mib(m["pss_own"]) for m in mem),
            "%.1f" % growth, pos]) + " |")
    out += ["", "### Polls", ""]
    head = ["waiting visitors", "phase", "polls/s (target)", "CPU µs/poll", "of which master µs/poll",
            "Concert CPU %", "others on its CPU %", "p50 ms", "p99 ms", "p99.9 ms", "non-2xx", "socket errors"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join("---" for _ in head) + "|")
    for r in results:
        for p in r["phases"]:
            w = p["wrk"]
            over = " overloaded" if p["rate"] < 0.9 * p["target"] else ""
            out.append("| " + " | ".join([
                "%d" % r["created"], p["label"] + over, "%.0f (%.0f)" % (p["rate"], p["target"]),
                "%.1f" % p["cpu_us"] if p["cpu_us"] is not None else "—",
                "%.1f" % p["master_us"] if p["master_us"] is not None else "—",
                "%.0f" % (p["util"] * 100), "%.0f" % (p["others"] * 100) if p["others"] is not None else "—",
                "%.2f" % (w["p50"] / 1000), "%.2f" % (w["p99"] / 1000), "%.2f" % (w["p999"] / 1000),
                str(w["status"]), str(w["connect"] + w["read"] + w["write"] + w["timeout"])]) + " |")
    out.append("")
    # Growth from the smallest to the largest queue, on the same offered load.
    fixed = [(r["created"], p) for r in results for p in r["phases"] if p["label"] == "fixed rate" and p["cpu_us"]]
    if len(fixed) >= 2:
        (n0, p0), (n1, p1) = fixed[0], fixed[-1]
        out.append("Growth from %d to %d waiting (fixed rate): CPU per poll %.2f×, p99 %.2f×." % (
            n0, n1, p1["cpu_us"] / p0["cpu_us"], (p1["wrk"]["p99"] / p0["wrk"]["p99"]) if p0["wrk"]["p99"] else 0))
    for r in results:
        other = {k: v for k, v in r["statuses"].items() if k != 429}
        if other or r["created"] < r["n"] or r["reconnects"] or not r["consecutive"]:
            out.append("Note: N=%d asked, %d tickets kept%s; statuses %s; reconnects %d." % (
                r["n"], r["created"], "" if r["consecutive"] else " (ticket numbers not consecutive)",
                dict(sorted(r["statuses"].items())), r["reconnects"]))
        seg = r["segment"]
        if seg["mapped"] and abs(seg["mapped"] - seg["bytes"]) > 8192:
            out.append("Note: N=%d: the log says %d segment bytes, /proc maps %d." % (r["n"], seg["bytes"],
                                                                                   seg["mapped"]))
    out.extend("Note: %s" % n for n in extra_notes)
    return "\n".join(out).rstrip() + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concert", default=os.path.join(os.path.dirname(HERE), "build", "concert"))
    p.add_argument("--n", default="1000,10000,100000,1000000", help="comma-separated visitor counts")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--max-queue", type=int, default=None,
                   help="Concert -max-queue for every N (default: N itself; 0 = unlimited, ring 2^20)")
    p.add_argument("--interval", type=float, default=3.25, help="seconds between two polls of one visitor")
    p.add_argument("--fixed-rate", type=int, default=300, help="polls/s of the fixed-rate phase")
    p.add_argument("--phases", default="page,fixed", help="poll phases to run: page, fixed")
    p.add_argument("--poll-seconds", type=int, default=15, help="seconds per poll phase")
    p.add_argument("--threads", type=int, default=2, help="wrk threads for the polls")
    p.add_argument("--max-poll-conns", type=int, default=4000)
    p.add_argument("--create-conns", type=int, default=8)
    p.add_argument("--depth", type=int, default=32, help="pipelined requests per connection while joining")
    p.add_argument("--create-timeout", type=float, default=240)
    p.add_argument("--no-pin", action="store_true")
    p.add_argument("--tmp")
    p.add_argument("--pid-file")
    p.add_argument("--out", default=os.path.join(HERE, "results", "queue_scale.md"))
    args = p.parse_args()
    sizes = [int(x) for x in args.n.split(",") if x.strip()]
    args.phases = [x.strip() for x in args.phases.split(",") if x.strip()]
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
    notes = []
    args.load_before = benchlib.load_average()
    started = time.time()
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
        if results:
            try:
                extra, entries = pass_table_bytes(args, results[0]["n"], tmp, procs, pin, results[0]["segment"])
                notes.append("at the default -asset-users-max the pass table (%s entries) adds %.1f MiB to the "
                             "segment whatever the queue size; it is left out above." % (entries, extra / 1048576.0))
            except (RuntimeError, OSError) as e:
                notes.append("pass-table size not measured: %s" % str(e).strip().splitlines()[0])
    finally:
        procs.stop_all()
        if own_tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print("queue scale: %.0f s" % (time.time() - started), file=sys.stderr)
    text = report(args, results, pin, notes) + "".join("Note: %s\n" % f for f in failures)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
