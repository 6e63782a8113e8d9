#!/usr/bin/env python3
"""A flash crowd of browser-like visitors at one URL, and what the origin behind it went through.

    python3 bench/wordpress/crowd.py --url http://127.0.0.1:8380/ [--visitors 1500] [--within 2]
        [--nginx-status http://127.0.0.1:8380/nginx-status] [--fpm-socket /tmp/concert-wp/php-fpm.sock]
        [--protocol events|poll] [--json FILE] [--label NAME]

Every visitor arrives at its own moment, evenly spread over --within seconds, with its own cookie
jar and one keep-alive connection (as a browser), and asks for the page with a browser's Accept.
  * The real page (200 with --marker in the body) ends the visit: served.
  * Concert's waiting page (200 text/html that runs /queue/status, room_ticket cookie) is followed as
    the page itself does: --protocol events (default, what the page does with JavaScript) opens
    GET /queue/events and waits for its `ready` event, falling back to polling when the stream is
    refused or fails before its first event; --protocol poll polls GET /queue/status every
    --poll-every seconds (1.05; the room allows one a second per ticket, a 429 there is that limit)
    until it says ready. Then the page is asked for again with the cookies.
  * Anything else (another status, a wrong page, a connection error on the page request, no page
    within --timeout) is a failure; connection errors while waiting are ridden over like the page
    does (a new poll a second later).

Alongside, every --sample-every seconds (0.1), straight at the origin (never through the proxy):
  * nginx's stub_status: requests nginx holds = Reading + Writing - 1 (the sampler's own request);
    every request at php-fpm, running or in its listen queue, is one of them;
  * php-fpm's socket, read from the kernel (NETLINK_SOCK_DIAG, as `ss -x` does): connections the
    php-fpm children have accepted (= active processes) + connections in the listen queue.
    php-fpm's own /fpm-status is not used while loaded: a child has to serve it, so under a full
    pool it waits in the same queue it should measure, and on Linux php-fpm reports no listen
    queue for a unix socket (its "listen queue" is read with TCP_INFO).

With --own NAME=PIDFILE (repeatable) it also accounts CPU time over the run: each named process
with its descendants (/proc/PID/stat), this driver's own, and the machine's total (/proc/stat), so
the rest is what other work on the machine took meanwhile.

Prints a summary and one line `CROWD_JSON {...}` (also written to --json). Standard library only.
"""
import argparse
import asyncio
import json
import os
import random
import resource
import socket
import struct
import sys
import time
from urllib.parse import urlsplit

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
AGENT = "Mozilla/5.0 (X11; Linux x86_64) concert-wordpress-crowd/1"


class HTTPError(Exception):
    pass


class Conn:
    """One HTTP/1.1 keep-alive connection, reopened when the server closed it."""

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.reader = self.writer = None
        self.opened = 0

    async def open(self):
        self.close()
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        self.opened += 1

    def close(self):
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception:
                pass
        self.reader = self.writer = None

    async def send(self, path, headers):
        if self.writer is None:
            await self.open()
        lines = ["GET %s HTTP/1.1" % path, "Host: %s:%d" % (self.host, self.port)]
        lines += ["%s: %s" % kv for kv in headers.items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await self.writer.drain()

    async def head(self):
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise HTTPError("bad status line %r" % lines[0])
        hdrs = []
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                hdrs.append((k.strip().lower(), v.strip()))
        return int(parts[1]), hdrs

    async def body_pieces(self, hdrs):
        """Yields the body as it arrives (Content-Length, chunked, or up to the close)."""
        h = dict(hdrs)
        if "chunked" in h.get("transfer-encoding", "").lower():
            while True:
                size_line = await self.reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await self.reader.readuntil(b"\r\n")) != b"\r\n":
                        pass
                    return
                data = await self.reader.readexactly(size + 2)
                yield data[:-2]
        elif "content-length" in h:
            n = int(h["content-length"])
            if n:
                yield await self.reader.readexactly(n)
        else:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    self.close()
                    return
                yield data

    async def get(self, path, headers):
        """(status, headers, body) of one GET; the connection is reused unless told to close."""
        for attempt in (0, 1):
            fresh = self.writer is None
            try:
                await self.send(path, headers)
                status, hdrs = await self.head()
            except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as e:
                # A kept-alive connection the server closed meanwhile: once more on a new one.
                self.close()
                if fresh or attempt:
                    raise HTTPError("connection closed before an answer: %r" % e)
                continue
            body = b"".join([p async for p in self.body_pieces(hdrs)])
            if "close" in dict(hdrs).get("connection", "").lower():
                self.close()
            return status, hdrs, body
        raise HTTPError("unreachable")


def set_cookies(jar, hdrs):
    for k, v in hdrs:
        if k != "set-cookie":
            continue
        name, _, rest = v.partition("=")
        value = rest.split(";")[0]
        if value == "" or "max-age=0" in v.lower():
            jar.pop(name.strip(), None)
        else:
            jar[name.strip()] = value


def is_waiting_page(status, hdrs, body):
    ctype = dict(hdrs).get("content-type", "")
    return status == 200 and ctype.startswith("text/html") and b"/queue/status" in body


class Visitor:
    __slots__ = ("i", "arrive", "served", "failure", "status", "queued", "polls", "streams", "errors",
                 "page_requests")

    def __init__(self, i, arrive):
        self.i, self.arrive = i, arrive
        self.served = self.failure = self.status = None
        self.queued = False
        self.polls = self.streams = self.errors = self.page_requests = 0


class Crowd:
    def __init__(self, args):
        self.args = args
        u = urlsplit(args.url)
        self.host, self.port = u.hostname, u.port or 80
        self.path = (u.path or "/") + ("?" + u.query if u.query else "")
        self.deadline = None
        self.stop = False

    def headers(self, jar, accept=BROWSER_ACCEPT):
        h = {"User-Agent": AGENT, "Accept": accept, "Accept-Language": "en-US,en;q=0.9",
             "Accept-Encoding": "identity"}
        if jar:
            h["Cookie"] = "; ".join("%s=%s" % kv for kv in jar.items())
        return h

    def left(self):
        return max(0.5, self.deadline - time.monotonic())

    async def visit(self, v):
        await asyncio.sleep(max(0.0, v.arrive - time.monotonic()))
        jar = {}
        conn = Conn(self.host, self.port)
        try:
            async with asyncio.timeout(self.left()):
                while True:
                    v.page_requests += 1
                    try:
                        status, hdrs, body = await conn.get(self.path, self.headers(jar))
                    except (OSError, HTTPError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
                        v.failure, v.status = "connection: %s" % type(e).__name__, None
                        return
                    set_cookies(jar, hdrs)
                    v.status = status
                    if is_waiting_page(status, hdrs, body) and "room_ticket" in jar:
                        v.queued = True
                        await self.wait_turn(v, conn, jar)
                        continue
                    if status == 200 and self.args.marker.encode() in body:
                        v.served = time.monotonic()
                        return
                    v.failure = "status %d" % status if status != 200 else "200 without %r" % self.args.marker
                    return
        except TimeoutError:
            v.failure = "no page within --timeout"
        finally:
            conn.close()

    async def wait_turn(self, v, conn, jar):
        """Returns once the room says ready (or the ticket is gone: ask for the page again)."""
        use_events = self.args.protocol == "events"
        last_poll = time.monotonic()
        while True:
            if use_events:
                got = await self.events(v, jar)
                if got is not None:
                    return
                use_events = False  # the stream failed before its first event: poll, as the page does
                continue
            pause = last_poll + self.args.poll_every + random.uniform(0, self.args.poll_jitter) - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            last_poll = time.monotonic()
            v.polls += 1
            try:
                status, hdrs, body = await conn.get("/queue/status", self.headers(jar, "application/json"))
            except (OSError, HTTPError, asyncio.IncompleteReadError):
                v.errors += 1
                conn.close()
                continue
            set_cookies(jar, hdrs)
            if status != 200:
                continue  # 429: the one-poll-a-second limit
            try:
                doc = json.loads(body)
            except ValueError:
                v.errors += 1
                continue
            if doc.get("ready") or (doc.get("position") is None and "starts_in" not in doc):
                return

    async def events(self, v, jar):
        """Follows GET /queue/events on its own connection. True: ready (or no place any more: the
        page reloads either way); None: no usable stream, poll instead."""
        heard = False
        while True:
            c = Conn(self.host, self.port)
            v.streams += 1
            try:
                await c.send("/queue/events", self.headers(jar, "text/event-stream"))
                status, hdrs = await c.head()
                set_cookies(jar, hdrs)
                ctype = dict(hdrs).get("content-type", "")
                if status != 200 or not ctype.startswith("text/event-stream"):
                    body = b"".join([p async for p in c.body_pieces(hdrs)])
                    if status == 200 and ctype.startswith("application/json"):
                        doc = json.loads(body)
                        if doc.get("ready") or doc.get("position") is None:
                            return True
                    return None
                buf = b""
                async for piece in c.body_pieces(hdrs):
                    buf += piece.replace(b"\r\n", b"\n")
                    while b"\n\n" in buf:
                        block, buf = buf.split(b"\n\n", 1)
                        name = b"message"
                        for line in block.split(b"\n"):
                            if line.startswith(b"event:"):
                                name = line[6:].strip()
                        heard = True
                        if name == b"ready":
                            return True
                # The stream ended: EventSource reconnects if it had heard something.
                if not heard:
                    return None
                heard = False
            except (OSError, HTTPError, asyncio.IncompleteReadError, ValueError):
                v.errors += 1
                if not heard:
                    return None
                heard = False
                await asyncio.sleep(1)
            finally:
                c.close()

    async def sampler(self, samples):
        a = self.args
        ngx = None
        if a.nginx_status:
            u = urlsplit(a.nginx_status)
            ngx = (Conn(u.hostname, u.port or 80), u.path)
        while not self.stop:
            t = time.monotonic()
            row = {"t": t}
            if ngx:
                try:
                    async with asyncio.timeout(2):
                        status, _, body = await ngx[0].get(ngx[1], {"Accept": "text/plain"})
                    if status == 200:
                        text = body.decode()
                        row["nginx_active"] = int(text.split("Active connections:")[1].split()[0])
                        r = int(text.split("Reading:")[1].split()[0])
                        w = int(text.split("Writing:")[1].split()[0])
                        row["nginx_in_flight"] = max(0, r + w - 1)
                except (OSError, HTTPError, ValueError, IndexError, TimeoutError, asyncio.IncompleteReadError):
                    ngx[0].close()
            if a.fpm_socket:
                try:
                    q = unix_listener_load(a.fpm_socket)
                    if q is not None:
                        row["fpm_accepted"], row["fpm_listen_queue"] = q
                        row["fpm_in_flight"] = q[0] + q[1]
                except OSError:
                    pass
            samples.append(row)
            await asyncio.sleep(max(0.0, t + a.sample_every - time.monotonic()))
        if ngx:
            ngx[0].close()

    async def run(self):
        a = self.args
        start = time.monotonic() + 0.3
        self.deadline = start + a.within + a.timeout
        visitors = [Visitor(i, start + (i * a.within / a.visitors if a.visitors > 1 else 0)) for i in range(a.visitors)]
        samples = []
        sampling = asyncio.create_task(self.sampler(samples))
        meter = CpuMeter(a.own)
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        meter.start()
        await asyncio.gather(*(self.visit(v) for v in visitors))
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = meter.stop((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime))
        await asyncio.sleep(a.sample_every * 2)
        self.stop = True
        await sampling
        return start, visitors, samples, cpu


# ---------------------------------------------------------------- php-fpm's socket, from the kernel

NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY = 4, 20
NLM_F_REQUEST, NLM_F_DUMP, NLMSG_ERROR, NLMSG_DONE = 1, 0x300, 2, 3
UDIAG_SHOW_NAME, UDIAG_SHOW_RQLEN = 0x01, 0x10
UNIX_DIAG_NAME, UNIX_DIAG_RQLEN = 0, 4
TCP_ESTABLISHED, TCP_LISTEN = 1, 10


def unix_listener_load(path):
    """(accepted connections, listen queue) of the unix listening socket bound to `path`: the
    sockets accepted from it carry its name, and its receive-queue length while listening is the
    number of connections waiting to be accepted. None if no such listener."""
    want = path.encode()
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    try:
        req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, (1 << TCP_ESTABLISHED) | (1 << TCP_LISTEN), 0,
                          UDIAG_SHOW_NAME | UDIAG_SHOW_RQLEN, 0xFFFFFFFF, 0xFFFFFFFF)
        s.sendto(struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + req,
                 (0, 0))
        queue, accepted = None, 0
        while True:
            data = s.recv(1 << 20)
            off = 0
            while off + 16 <= len(data):
                length, typ = struct.unpack_from("=IH", data, off)
                if typ == NLMSG_DONE:
                    return None if queue is None else (accepted, queue)
                if typ == NLMSG_ERROR or length < 16:
                    raise OSError("sock_diag answered an error")
                state = data[off + 18]
                a, name, rq = off + 32, None, None
                while a + 4 <= off + length:
                    alen, atype = struct.unpack_from("=HH", data, a)
                    if alen < 4:
                        break
                    if atype == UNIX_DIAG_NAME:
                        name = data[a + 4:a + alen].rstrip(b"\0")
                    elif atype == UNIX_DIAG_RQLEN:
                        rq = struct.unpack_from("=I", data, a + 4)[0]
                    a += (alen + 3) & ~3
                if name == want:
                    if state == TCP_LISTEN:
                        queue = rq or 0
                    else:
                        accepted += 1
                off += (length + 3) & ~3
    finally:
        s.close()


# ---------------------------------------------------------------- CPU accounting

TICK = os.sysconf("SC_CLK_TCK")


def proc_table():
    """{pid: (ppid, utime + stime in ticks)} of every process."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        out[int(name)] = (int(rest[1]), int(rest[11]) + int(rest[12]))
    return out


def machine_busy():
    """CPU seconds the machine spent busy (user, nice, system, irq, softirq) since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / TICK


class CpuMeter:
    """CPU seconds of named process trees between start() and stop()."""

    def __init__(self, own):
        self.roots = {}
        for spec in own or []:
            name, _, path = spec.partition("=")
            try:
                with open(path) as f:
                    self.roots[name] = int(f.read().strip())
            except (OSError, ValueError):
                pass

    def _trees(self):
        table = proc_table()
        kids = {}
        for pid, (ppid, _) in table.items():
            kids.setdefault(ppid, []).append(pid)
        out = {}
        for name, root in self.roots.items():
            members, todo = {}, [root]
            while todo:
                pid = todo.pop()
                if pid in table and pid not in members:
                    members[pid] = table[pid][1]
                    todo.extend(kids.get(pid, []))
            out[name] = members
        return out

    def start(self):
        self.t0, self.busy0, self.before = time.monotonic(), machine_busy(), self._trees()

    def stop(self, crowd_cpu):
        after, busy = self._trees(), machine_busy() - self.busy0
        res = {"wall_s": round(time.monotonic() - self.t0, 1), "machine_busy_cpu_s": round(busy, 1),
               "crowd_cpu_s": round(crowd_cpu, 1), "processes": {}}
        ours = crowd_cpu
        for name, members in after.items():
            # Processes that exited meanwhile are not counted; the stacks' processes live throughout.
            ticks = sum(t - self.before.get(name, {}).get(pid, 0) for pid, t in members.items())
            res["processes"][name] = round(ticks / TICK, 1)
            ours += ticks / TICK
        res["others_cpu_s"] = round(max(0.0, busy - ours), 1)
        return res


# ---------------------------------------------------------------- report

def pct(values, p):
    """Nearest-rank percentile of a sorted list."""
    if not values:
        return None
    k = max(0, min(len(values) - 1, int(-(-p * len(values) // 100)) - 1))
    return values[k]


def summarize(args, start, visitors, samples, cpu):
    served = sorted(v.served - v.arrive for v in visitors if v.served is not None)
    failures = {}
    for v in visitors:
        if v.served is None:
            failures[v.failure or "unknown"] = failures.get(v.failure or "unknown", 0) + 1
    last = max((v.served for v in visitors if v.served is not None), default=None)

    def peak(key):
        vals = [s[key] for s in samples if key in s]
        return max(vals) if vals else None

    return {
        "label": args.label, "url": args.url, "visitors": args.visitors, "within_s": args.within,
        "protocol": args.protocol,
        "served": len(served), "failed": args.visitors - len(served), "failures": failures,
        "all_served_in_s": round(last - start, 2) if last is not None and not failures else None,
        "last_served_at_s": round(last - start, 2) if last is not None else None,
        "visit_p50_s": round(pct(served, 50), 2) if served else None,
        "visit_p99_s": round(pct(served, 99), 2) if served else None,
        "visit_max_s": round(served[-1], 2) if served else None,
        "queued": sum(1 for v in visitors if v.queued),
        "polls": sum(v.polls for v in visitors), "streams": sum(v.streams for v in visitors),
        "wait_errors": sum(v.errors for v in visitors),
        "page_requests": sum(v.page_requests for v in visitors),
        "peak_nginx_in_flight": peak("nginx_in_flight"), "peak_nginx_active_connections": peak("nginx_active"),
        "peak_fpm_in_flight": peak("fpm_in_flight"), "peak_fpm_accepted": peak("fpm_accepted"),
        "peak_fpm_listen_queue": peak("fpm_listen_queue"),
        "samples": len(samples), "cpu": cpu, "crowd_cpu_s": cpu["crowd_cpu_s"],
        "load_average": "%.2f %.2f %.2f" % os.getloadavg(),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="where the crowd goes (nginx, or the proxy in front of it)")
    p.add_argument("--visitors", type=int, default=1500)
    p.add_argument("--within", type=float, default=2.0, help="seconds over which the visitors arrive")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds after the last arrival before giving up")
    p.add_argument("--protocol", choices=("events", "poll"), default="events",
                   help="how a visitor on the waiting page learns its turn: /queue/events (the page with "
                        "JavaScript) or /queue/status polls")
    p.add_argument("--poll-every", type=float, default=1.05)
    p.add_argument("--poll-jitter", type=float, default=0.1)
    p.add_argument("--marker", default="wp-block", help="text the real page contains")
    p.add_argument("--nginx-status", help="nginx stub_status URL (straight at nginx)")
    p.add_argument("--fpm-socket", help="php-fpm's listening unix socket")
    p.add_argument("--sample-every", type=float, default=0.1)
    p.add_argument("--own", action="append", metavar="NAME=PIDFILE",
                   help="account the CPU time of this process and its descendants (repeatable)")
    p.add_argument("--label", default="")
    p.add_argument("--json", help="also write the result here")
    args = p.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 3 * args.visitors + 100
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))

    crowd = Crowd(args)
    start, visitors, samples, cpu = asyncio.run(crowd.run())
    res = summarize(args, start, visitors, samples, cpu)
    fails = ", ".join("%s: %d" % kv for kv in sorted(res["failures"].items())) or "none"
    print("%s%d visitors within %.1f s at %s: %d served, last at %s s; visit p50 %s s, p99 %s s, max %s s; "
          "failures: %s" % (args.label + ": " if args.label else "", args.visitors, args.within, args.url,
                            res["served"], res["last_served_at_s"], res["visit_p50_s"], res["visit_p99_s"],
                            res["visit_max_s"], fails))
    print("  queued %d, page requests %d, polls %d, event streams %d, errors while waiting %d"
          % (res["queued"], res["page_requests"], res["polls"], res["streams"], res["wait_errors"]))
    print("  CPU over %.1f s: machine %.1f s busy; %s; this driver %.1f s; everything else %.1f s"
          % (cpu["wall_s"], cpu["machine_busy_cpu_s"],
             ", ".join("%s %.1f s" % kv for kv in cpu["processes"].items()) or "no --own processes",
             cpu["crowd_cpu_s"], cpu["others_cpu_s"]))
    print("  most requests at once: in nginx %s (stub_status Reading+Writing), at php-fpm %s "
          "(accepted %s + listen queue %s, peaks of each); nginx connections %s; %d samples"
          % (res["peak_nginx_in_flight"], res["peak_fpm_in_flight"], res["peak_fpm_accepted"],
             res["peak_fpm_listen_queue"], res["peak_nginx_active_connections"], res["samples"]))
    line = json.dumps(res, sort_keys=True)
    print("CROWD_JSON " + line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    sys.exit(0)


if __name__ == "__main__":
    main()
