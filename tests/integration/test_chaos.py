"""Chaos: mixed load while workers are SIGKILLed, the master reloads, the cap
changes and the origin misbehaves. Short form (CHAOS_SECONDS, default 30) in
`make test`; tests/soak/test_soak.py reuses run_chaos() for the long form.

Concert: 2 workers, -cap 4, -assets "/assets/*", an admin token, a known
admit secret. The origin (ChaosOrigin, here) counts page requests in flight
and can be switched between normal, slow, refuse (close without answering)
and reset (RST after reading the request).

Load (threads, one connection per request so a reload never races a
kept-alive connection): cookie-jar page visitors that poll /queue/status like
the waiting page and come back when ready, asset requests with a pass minted
here, bare status polls, slow readers of a 1 MB page, clients that abort
mid-request. A driver meanwhile SIGKILLs a random worker, sends SIGHUP,
changes the cap with POST /_room/cap and flips the origin's mode.

Invariants:
  * the origin never has more page requests in flight than the cap allows:
    never more than the largest cap ever set, and, once occupancy has drained
    below a new cap, never more than that cap (requests whose client side was
    closed by a killed worker are not counted: the origin cannot know yet);
  * every request ends with an allowed outcome: 200/429 (and 403/429/503 from
    the asset tier's documented limits), a 502 or a reset while the origin
    was refusing/resetting, a reset/EOF from a worker that was killed during
    the request; anything else is a failure, reported with its cause;
  * a visitor who keeps polling never sees their position move backward while
    the cap stays the same;
  * after the load: occupancy 0 and asset_in_flight 0 (bounded wait), the full
    cap is usable (cap parallel slow requests all reach the origin), the
    master is alive and its log shows no crash other than the kills.
"""
import http.client
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from concert_harness import TEST_SECRET, Concert, wait_for  # noqa: E402
from room import mint_pass  # noqa: E402

SERIAL = "measures the workers' memory while it kills processes and stalls the origin"

ADMIN_TOKEN = "chaos-admin-token"
START_CAP = 4
CAPS = [2, 3, 4, 6]
BIG = 1 << 20
PASS_TTL = 600  # seconds: the asset load's passes, minted here
CRASH_MARKERS = ("signal 11", "signal 6", "signal 7", "signal 4", "SIGSEGV", "SIGABRT", "SIGBUS", "core dumped",
                 "AddressSanitizer", "runtime error:", "terminate called")


# ---------------------------------------------------------------- origin
class ChaosOrigin:
    """HTTP/1.1 origin with page in-flight accounting and switchable failure modes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.mode = "normal"
        self.bound = START_CAP        # current allowed page in-flight
        self.active = {}              # id -> socket of page requests in flight
        self.max_page_in_flight = 0
        self.violations = []
        self.gate = threading.Event()
        self.held = 0
        self.served = 0
        origin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                origin.handle(self)

            do_POST = do_HEAD = do_GET

        class QuietServer(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # resets from killed workers and aborting clients are the point of the test

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def _readable(sock, timeout):
        # poll, not select: the test process may hold thousands of descriptors.
        p = select.poll()
        p.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
        return bool(p.poll(int(timeout * 1000)))

    @classmethod
    def _peer_gone(cls, sock):
        try:
            if not cls._readable(sock, 0):
                return False
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def _enter(self, key, sock):
        with self.lock:
            self.active[key] = sock
            if len(self.active) > self.bound:
                # A killed worker's requests are orphaned, not in flight: drop them.
                for k in [k for k, s in self.active.items() if k != key and self._peer_gone(s)]:
                    del self.active[k]
            n = len(self.active)
            self.max_page_in_flight = max(self.max_page_in_flight, n)
            if n > self.bound:
                self.violations.append("page in flight %d > allowed %d at %.3f" % (n, self.bound, time.time()))

    def _leave(self, key):
        with self.lock:
            self.active.pop(key, None)

    def set_bound(self, bound):
        with self.lock:
            self.bound = bound

    def page_in_flight(self):
        with self.lock:
            return len(self.active)

    def _wait(self, h, seconds):
        """Sleeps, but returns False early when the client (Concert) went away."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self._readable(h.connection, min(0.05, max(0.0, deadline - time.time()))) and \
                    self._peer_gone(h.connection):
                return False
        return True

    def handle(self, h):
        body = b""
        if h.headers.get("Content-Length"):
            body = h.rfile.read(int(h.headers["Content-Length"]))
        mode = self.mode
        if mode == "refuse":
            h.close_connection = True
            return
        if mode == "reset":
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.close_connection = True
            return
        page = not h.path.startswith("/assets/")
        key = object()
        if page:
            self._enter(key, h.connection)
        try:
            if h.path.startswith("/hold"):
                with self.lock:
                    self.held += 1
                self.gate.wait(30)
            elif mode == "slow":
                if not self._wait(h, random.uniform(0.5, 1.5)):
                    return
            else:
                if not self._wait(h, random.uniform(0.005, 0.05)):
                    return
            payload = b"x" * BIG if h.path.startswith("/big") else b"ok" + body
        finally:
            # Leave before answering: Concert releases its slot only after the
            # whole answer, so the origin's count never lags behind Concert's.
            if page:
                self._leave(key)
        with self.lock:
            self.served += 1
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        try:
            h.wfile.write(payload)
        except OSError:
            pass

    def stop(self):
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------- helpers
class Timeline:
    """When each fault happened, to attribute request failures."""

    def __init__(self):
        self.lock = threading.Lock()
        self.kills = []        # times
        self.bad_origin = []   # (start, end or None)
        self.cap_epoch = 0

    def add_kill(self):
        with self.lock:
            self.kills.append(time.time())

    def origin_bad(self, start, end=None):
        with self.lock:
            if end is None:
                self.bad_origin.append([start, None])
            else:
                self.bad_origin[-1][1] = end

    def killed_during(self, t0, t1):
        with self.lock:
            return any(t0 - 0.5 <= k <= t1 + 0.5 for k in self.kills)

    def origin_bad_during(self, t0, t1):
        with self.lock:
            return any(s - 0.5 <= t1 and (e is None or e + 0.5 >= t0) for s, e in self.bad_origin)


class Load:
    def __init__(self, port, timeline):
        self.port = port
        self.timeline = timeline
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.outcomes = {}
        self.failures = []
        self.position_regressions = []
        self.requests = 0
        self.asset_cookie = "concert_admit=" + mint_pass(secret=TEST_SECRET, expiry=int(time.time()) + PASS_TTL)

    def note(self, kind, outcome):
        with self.lock:
            self.requests += 1
            self.outcomes[(kind, outcome)] = self.outcomes.get((kind, outcome), 0) + 1

    def fail(self, kind, detail):
        with self.lock:
            self.failures.append("%s: %s" % (kind, detail))

    def request(self, kind, method, path, headers=None, body=None, allowed=(200,)):
        """One request on its own connection; classifies the outcome. Returns (status, headers, body) or None."""
        t0 = time.time()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        hdrs = {"Connection": "close"}
        hdrs.update(headers or {})
        try:
            conn.request(method, path, body=body, headers=hdrs)
            r = conn.getresponse()
            data = r.read()
            status, rh = r.status, r.getheaders()
        except (ConnectionError, http.client.HTTPException, socket.timeout, OSError) as e:
            t1 = time.time()
            if self.timeline.killed_during(t0, t1):
                self.note(kind, "reset by worker kill")
            elif self.timeline.origin_bad_during(t0, t1):
                self.note(kind, "reset while origin failing")
            else:
                self.note(kind, "error")
                self.fail(kind, "%s %s: %r (no kill, origin normal)" % (method, path, e))
            return None
        finally:
            conn.close()
        t1 = time.time()
        if status in allowed:
            self.note(kind, status)
        elif status in (502, 504) and self.timeline.origin_bad_during(t0, t1):
            self.note(kind, "%d while origin failing" % status)
        elif status == 502 and self.timeline.killed_during(t0, t1):
            self.note(kind, "502 around a worker kill")
        else:
            self.note(kind, status)
            self.fail(kind, "%s %s -> %d %r" % (method, path, status, data[:120]))
        return status, rh, data

    # -- behaviours
    def visitor(self, n):
        rng = random.Random(n)
        while not self.stop.is_set():
            cookies = {}
            got = self.request("page", "GET", "/page/%d" % rng.randrange(1000), allowed=(200, 429))
            if not got:
                continue
            status, rh, _ = got
            for k, v in rh:
                if k.lower() == "set-cookie":
                    name, _, rest = v.partition("=")
                    cookies[name] = rest.split(";")[0]
            if status == 200:
                continue
            # Queued: poll like the waiting page until ready, then come back.
            last = None
            deadline = time.time() + 60
            while not self.stop.is_set() and time.time() < deadline:
                time.sleep(1.05)
                epoch = self.timeline.cap_epoch
                jar = "; ".join("%s=%s" % kv for kv in cookies.items())
                polled = self.request("status", "GET", "/queue/status", {"Cookie": jar}, allowed=(200, 429))
                if not polled or polled[0] != 200:
                    continue
                try:
                    doc = json.loads(polled[2])
                except ValueError:
                    self.fail("status", "not JSON: %r" % polled[2][:100])
                    break
                if doc.get("ready"):
                    self.request("page", "GET", "/page/back", {"Cookie": jar}, allowed=(200, 429))
                    break
                pos = doc.get("position")
                if pos is not None and last is not None and epoch == last[1] == self.timeline.cap_epoch \
                        and pos > last[0]:
                    with self.lock:
                        self.position_regressions.append("%d -> %d" % (last[0], pos))
                if pos is not None:
                    last = (pos, epoch)

    def hold_visitor(self, i):
        """After the load: a visitor who waits in line if needed and then holds a slot."""
        load = Load(self.port, self.timeline)  # its own stop flag: runs after the load stopped
        deadline = time.time() + 100
        cookies = {}
        while time.time() < deadline:
            jar = "; ".join("%s=%s" % kv for kv in cookies.items())
            got = load.request("hold", "GET", "/hold/%d" % i, {"Cookie": jar} if jar else {}, allowed=(200, 429))
            if got and got[0] == 200:
                return
            for k, v in (got[1] if got else []):
                if k.lower() == "set-cookie":
                    name, _, rest = v.partition("=")
                    cookies[name] = rest.split(";")[0]
            while time.time() < deadline:
                time.sleep(1.05)
                jar = "; ".join("%s=%s" % kv for kv in cookies.items())
                polled = load.request("status", "GET", "/queue/status", {"Cookie": jar}, allowed=(200, 429))
                if polled and polled[0] == 200 and json.loads(polled[2]).get("ready"):
                    break

    def assets(self, secret):
        cookie = "concert_admit=" + mint_pass(secret=secret, expiry=int(time.time()) + PASS_TTL)
        while not self.stop.is_set():
            got = self.request("asset", "GET", "/assets/app.js", {"Cookie": cookie}, allowed=(200, 429, 503))
            # Keep the pass as a browser does: past half its life Concert slides it
            # forward in a Set-Cookie, and a run longer than the pass needs that.
            for name, value in (got[1] if got else []):
                if name.lower() == "set-cookie" and value.startswith("concert_admit="):
                    cookie = value.split(";")[0]
            time.sleep(0.02)

    def status_polls(self):
        while not self.stop.is_set():
            self.request("status", "GET", "/queue/status", {"Cookie": "room_ticket=" + os.urandom(16).hex()},
                         allowed=(200,))
            time.sleep(0.1)

    def slow_reader(self):
        while not self.stop.is_set():
            t0 = time.time()
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=20)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
                s.sendall(b"GET /big HTTP/1.1\r\nHost: chaos\r\nConnection: close\r\n\r\n")
                got = 0
                first = b""
                while not self.stop.is_set():
                    chunk = s.recv(16384)
                    if not chunk:
                        break
                    if len(first) < 64:
                        first += chunk[:64]
                    got += len(chunk)
                    time.sleep(0.005)
                s.close()
                if not first.startswith(b"HTTP/1.1 200"):
                    # A page request like any other: queued (429) when the room is full.
                    self.note("slow reader", first[9:12].decode("latin-1") or "no answer")
                    if not first and not (self.timeline.killed_during(t0, time.time())
                                          or self.timeline.origin_bad_during(t0, time.time())):
                        self.fail("slow reader", "connection closed without an answer")
                    time.sleep(5)  # each refused try leaves a ticket behind until its TTL
                elif got > BIG or self.stop.is_set():
                    self.note("slow reader", "done")
                elif self.timeline.killed_during(t0, time.time()) or self.timeline.origin_bad_during(t0, time.time()):
                    self.note("slow reader", "cut by a fault")
                else:
                    self.note("slow reader", "short")
                    self.fail("slow reader", "response cut short at %d bytes" % got)
            except OSError as e:
                if not (self.timeline.killed_during(t0, time.time())
                        or self.timeline.origin_bad_during(t0, time.time())):
                    self.fail("slow reader", repr(e))

    def aborter(self):
        rng = random.Random(7)
        while not self.stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                choice = rng.random()
                if choice < 0.4:
                    s.sendall(b"GET /abort HTTP/1.1\r\nHost: chaos\r\nX-Partial: ")  # head never finished
                elif choice < 0.7:
                    s.sendall(b"POST /assets/abort HTTP/1.1\r\nHost: chaos\r\nCookie: %s\r\n"
                              b"Content-Length: 100\r\n\r\nonly-part" % self.asset_cookie.encode())
                else:
                    # A page: when the room is full this leaves a ticket behind until its TTL.
                    s.sendall(b"POST /abort HTTP/1.1\r\nHost: chaos\r\nContent-Length: 100\r\n\r\nonly-part")
                time.sleep(rng.uniform(0, 0.2))
                s.close()
                self.note("aborter", "sent")
            except OSError:
                pass
            time.sleep(0.3)


def set_cap(concert, cap):
    """POST /_room/cap; retried when the connection landed on a worker being killed."""
    for attempt in range(3):
        conn = http.client.HTTPConnection("127.0.0.1", concert.port, timeout=10)
        try:
            conn.request("POST", "/_room/cap", body=json.dumps({"cap": cap}),
                         headers={"Authorization": "Bearer " + ADMIN_TOKEN, "Connection": "close"})
            r = conn.getresponse()
            return r.status, r.read()
        except (OSError, http.client.HTTPException):
            if attempt == 2:
                raise
            time.sleep(0.5)
        finally:
            conn.close()


def stats_or_none(concert):
    try:
        return concert.stats()
    except (OSError, ValueError, http.client.HTTPException):
        return None


# ---------------------------------------------------------------- the run
def run_chaos(testcase, duration, kills=True, sample=None, sample_every=10.0, visitors=6):
    """Runs the chaos scenario for `duration` seconds; returns a summary dict.

    `sample(concert)` (optional) is called every `sample_every` seconds during
    the load (the soak samples RSS and fds with it)."""
    origin = ChaosOrigin()
    timeline = Timeline()
    concert = Concert(["-upstream", origin.url, "-cap", str(START_CAP), "-assets", "/assets/*",
                       "-upstream-timeout", "5s", "-shutdown-grace", "5s", "-asset-user-cap-h1", "4",
                       "-token-ttl", "30s", "-reaper", "5s"],
                      workers=2, admin_token=ADMIN_TOKEN)
    summary = {"kills": 0, "reloads": 0, "cap_changes": 0, "origin_flips": 0}
    concert.start()
    load = Load(concert.port, timeline)
    threads = [threading.Thread(target=load.visitor, args=(i,), daemon=True) for i in range(visitors)]
    threads += [threading.Thread(target=load.assets, args=(TEST_SECRET,), daemon=True) for _ in range(2)]
    threads += [threading.Thread(target=load.status_polls, daemon=True),
                threading.Thread(target=load.slow_reader, daemon=True),
                threading.Thread(target=load.aborter, daemon=True)]
    try:
        for t in threads:
            t.start()
        rng = random.Random(1234)
        cap = START_CAP
        max_cap = START_CAP
        end = time.time() + duration
        next_sample = time.time()
        while time.time() < end:
            if sample and time.time() >= next_sample:
                sample(concert)
                next_sample = time.time() + sample_every
            action = rng.choice(["kill", "hup", "cap", "origin"] if kills else ["hup", "cap", "origin"])
            if action == "kill":
                pids = concert.worker_pids()
                if pids:
                    timeline.add_kill()
                    try:
                        os.kill(rng.choice(pids), signal.SIGKILL)
                        summary["kills"] += 1
                    except OSError:
                        pass
            elif action == "hup":
                concert.signal(signal.SIGHUP)
                summary["reloads"] += 1
            elif action == "cap":
                new = rng.choice([c for c in CAPS if c != cap])
                max_cap = max(max_cap, new)
                origin.set_bound(max(cap, new))
                timeline.cap_epoch += 1
                status, body = set_cap(concert, new)
                testcase.assertEqual(status, 200, body)
                timeline.cap_epoch += 1
                cap = new
                summary["cap_changes"] += 1
                # In-flight requests keep their slots; the tighter bound holds
                # once occupancy has drained below the new cap.
                drained = wait_for(lambda: (stats_or_none(concert) or {}).get("occupancy", 99) <= new, timeout=15)
                if drained:
                    origin.set_bound(new)
                else:
                    origin.set_bound(max_cap)
            else:
                mode = rng.choice(["slow", "refuse", "reset"])
                timeline.origin_bad(time.time())
                origin.mode = mode
                time.sleep(rng.uniform(0.5, 2.0))
                origin.mode = "normal"
                timeline.origin_bad(None, time.time())
                summary["origin_flips"] += 1
            time.sleep(rng.uniform(1.0, 3.0))
        load.stop.set()
        for t in threads:
            t.join(30)
        summary["stuck_threads"] = sum(t.is_alive() for t in threads)

        # -- after the load
        st = wait_for(lambda: (lambda s: s if s and s.get("occupancy") == 0 and s.get("asset_in_flight") == 0
                               else None)(stats_or_none(concert)), timeout=30)
        summary["final_stats"] = st or stats_or_none(concert)
        testcase.assertTrue(st, "slots not returned after the load: %s" % summary["final_stats"])
        cap_now = st["cap"]
        origin.gate.clear()
        with origin.lock:
            origin.held = 0
        holders = [threading.Thread(target=load.hold_visitor, args=(i,), daemon=True) for i in range(cap_now)]
        for t in holders:
            t.start()
        # Tickets abandoned by clients cut off by a kill hold their place until
        # the token TTL (30 s here) and the reaper (5 s) retire them.
        full = wait_for(lambda: origin.held >= cap_now, timeout=90)
        origin.gate.set()
        for t in holders:
            t.join(30)
        testcase.assertTrue(full, "only %d of cap %d requests reached the origin" % (origin.held, cap_now))

        testcase.assertIsNone(concert.proc.poll(), "master died")
        log = concert.log()
        crashes = [line for line in log.splitlines() if any(m in line for m in CRASH_MARKERS)]
        summary.update(requests=load.requests, outcomes=load.outcomes, failures=load.failures,
                       violations=list(origin.violations), max_page_in_flight=origin.max_page_in_flight,
                       max_cap=max_cap, position_regressions=load.position_regressions, crashes=crashes)
        testcase.assertEqual(summary["stuck_threads"], 0)
        testcase.assertEqual(origin.violations, [], "origin saw more page requests than the cap")
        testcase.assertEqual(load.failures[:20], [], "%d unattributed failures" % len(load.failures))
        testcase.assertEqual(load.position_regressions, [], "queue positions moved backward")
        testcase.assertEqual(crashes, [], "crash lines in the master log")
        testcase.assertGreater(load.requests, 0)
        return summary
    finally:
        load.stop.set()
        concert.stop()
        if concert.stderr:
            concert.stderr.close()
        origin.stop()


class ChaosTest(unittest.TestCase):
    def test_chaos(self):
        duration = float(os.environ.get("CHAOS_SECONDS", "30"))
        summary = run_chaos(self, duration, kills=True)
        print("chaos summary: " + json.dumps({k: (v if not isinstance(v, dict) or k == "final_stats" else
                                                  {"%s %s" % kk: n for kk, n in v.items()})
                                              for k, v in summary.items()}, default=str, sort_keys=True))


# ---------------------------------------------------------------- exhaustion
class LimitedConcert(Concert):
    """Concert started under a given RLIMIT_NOFILE (the harness has no preexec hook)."""

    def __init__(self, *args, nofile=64, **kwargs):
        super().__init__(*args, **kwargs)
        self.nofile = nofile

    def start(self):
        import resource
        import subprocess
        from concert_harness import BIN
        cmd = [BIN, "-listen", "127.0.0.1:0", "-workers", str(self.workers), "-access-log=false",
               "-access-log-file", self.access_path] + self.args
        self.stderr = open(self.log_path, "wb")
        limit = self.nofile
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=self.stderr,
                                     preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
        self.wait_listening()
        self.wait_workers(self.workers)
        return self


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def open_idle(port, n, deadline_s=60, keepalive=False):
    """n open connections. With keepalive, each completes one local request
    (/_room/healthz) first, so it is an idle kept-alive connection rather than
    a slow head (which Concert rightly drops after 10 s)."""
    socks = []
    deadline = time.time() + deadline_s
    for _ in range(n):
        if time.time() > deadline:
            break
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            break
        socks.append(s)
        if keepalive:
            s.sendall(b"GET /_room/healthz HTTP/1.1\r\nHost: idle\r\n\r\n")
            reply = b""
            while not reply.endswith(b"ok"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
    return socks


def idle_keepalive_check(testcase, n):
    """n idle connections held open; Concert must still serve others. Returns how many were opened."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, n * 2 + 1024)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < n + 256:
        testcase.skipTest("RLIMIT_NOFILE hard limit %d too low for %d connections" % (hard, n))
    origin = ChaosOrigin()
    concert = Concert(["-upstream", origin.url, "-cap", "8"], workers=2)
    concert.start()
    socks = []
    try:
        socks = open_idle(concert.port, n, deadline_s=300, keepalive=True)
        # The most recent ones are still open and reusable.
        for s in socks[-50:]:
            s.sendall(b"GET /ka HTTP/1.1\r\nHost: idle\r\n\r\n")
            s.settimeout(10)
            testcase.assertIn(b" 200 ", s.recv(4096)[:20])
        testcase.assertGreaterEqual(len(socks), n, "could only open %d connections" % len(socks))
        status, _, body = concert.get("/still-serving", timeout=10)
        testcase.assertEqual((status, body), (200, b"ok"))
        testcase.assertTrue(wait_for(lambda: concert.stats()["occupancy"] == 0, timeout=10))
        return len(socks)
    finally:
        for s in socks:
            s.close()
        concert.stop()
        concert.stderr.close()
        origin.stop()


class ExhaustionTest(unittest.TestCase):
    def test_low_fd_limit_flood_then_recovers(self):
        origin = ChaosOrigin()
        concert = LimitedConcert(["-upstream", origin.url, "-cap", "4"], workers=2, nofile=64)
        concert.start()
        socks = []
        try:
            socks = open_idle(concert.port, 300, deadline_s=20)
            # The flood exhausts the workers' descriptors; the log must say so.
            testcase_log = wait_for(lambda: any(w in concert.log().lower() for w in
                                                ("too many open files", "emfile", "descriptor")), timeout=10)
            self.assertTrue(testcase_log, "no clear error logged:\n" + concert.log()[-2000:])
            for s in socks:
                s.close()
            socks = []

            def serves():
                try:
                    status, _, body = concert.get("/after-flood", timeout=3)
                    return status == 200 and body == b"ok"
                except OSError:
                    return False
            self.assertTrue(wait_for(serves, timeout=20), "not serving after the flood:\n" + concert.log()[-2000:])
            self.assertIsNone(concert.proc.poll())
        finally:
            for s in socks:
                s.close()
            concert.stop()
            concert.stderr.close()
            origin.stop()

    def test_origin_never_answers_gives_504_and_releases(self):
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # accepts (in the kernel) and never answers
        try:
            # After a 504 the origin may still be working: the slot is held until it answers, for at
            # most -upstream-read-timeout more, then its connection is closed and the slot returned.
            concert = Concert(["-upstream", "http://127.0.0.1:%d" % silent.getsockname()[1], "-cap", "4",
                               "-upstream-timeout", "1s", "-upstream-read-timeout", "2s"], workers=2)
            with concert:
                results = []
                threads = [threading.Thread(target=lambda: results.append(concert.get("/never", timeout=15)[0]))
                           for _ in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(30)
                self.assertEqual(sorted(results), [504] * 4)
                self.assertTrue(wait_for(lambda: concert.stats()["occupancy"] == 0, timeout=3 * 2 + 4))
        finally:
            silent.close()

    def test_clients_that_never_read_do_not_grow_memory(self):
        origin = ChaosOrigin()
        concert = Concert(["-upstream", origin.url, "-cap", "16"], workers=2)
        concert.start()
        socks = []
        try:
            before = sum(rss_kb(p) for p in concert.worker_pids())
            for _ in range(12):
                s = socket.create_connection(("127.0.0.1", concert.port), timeout=5)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.sendall(b"GET /big HTTP/1.1\r\nHost: never-read\r\n\r\n")
                socks.append(s)
            # Every request reached the origin (1 MB each); none is being read.
            wait_for(lambda: origin.served >= 12, timeout=20)
            time.sleep(1.0)
            after = sum(rss_kb(p) for p in concert.worker_pids())
            growth_mb = (after - before) / 1024.0
            # Without backpressure each worker would buffer whole bodies (12 MB);
            # with it, a few socket buffers' worth per connection.
            self.assertLess(growth_mb, 12.0, "workers grew by %.1f MB holding unread responses" % growth_mb)
            for s in socks:
                s.close()
            socks = []
            self.assertTrue(wait_for(lambda: concert.stats()["occupancy"] == 0, timeout=20))
        finally:
            for s in socks:
                s.close()
            concert.stop()
            concert.stderr.close()
            origin.stop()

    def test_2000_idle_keepalive_connections(self):
        idle_keepalive_check(self, 2000)


if __name__ == "__main__":
    unittest.main()
