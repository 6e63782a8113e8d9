"""Binary upgrade (SIGUSR2), socket activation (LISTEN_FDS) and readiness
notification (NOTIFY_SOCKET) against the real binary.

Each upgrade test starts Concert from a copy of the binary in a temporary
directory and "installs a new version" the way a package manager does: a
fresh copy renamed over that path (the running image's file is then
"(deleted)" in /proc/PID/exe; the upgraded one is the file at the path
again). Only processes started here are signalled, by pid; all traffic is
to 127.0.0.1; every wait is bounded and nothing asserts a speed.

  * twenty upgrades in a row under page load (-cap 4, -queue-hold, eight
    kept-alive browser visitors, a fake origin taking 4 ms a page: at most
    1,000 pages/s, 800-900/s on two cores): no request fails, the
    origin never sees more than cap page requests at once, the master keeps
    its pid, the generation goes up by one per upgrade, and a visitor's
    position never goes up;
  * a new binary that fails its check (-t), is not executable or is missing:
    the upgrade is refused and logged, the running binary keeps serving; the
    real one afterwards upgrades;
  * without -state-dir and CONCERT_ADMIT_SECRET, the generated secret and
    the line are handed over: tickets keep their places, passes stay valid;
  * socket activation: Concert serves the sockets it is given as fds 3, 4, ...
    (the one named "admin" with the /_room/ endpoints); a stop and a start of
    another Concert behind the same sockets refuses and fails nothing;
  * sd_notify: READY=1, RELOADING=1 + MONOTONIC_USEC then READY=1 on SIGHUP
    and on SIGUSR2 (from the same pid), STOPPING=1 on SIGTERM; to a path and
    to an abstract socket.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import concert_harness
from concert_harness import ADMIN_LISTEN_RE, Concert, header, set_cookies, wait_for
from fake_origin import FakeOrigin

BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
JSON = {"Accept": "application/json"}
POSITION_RE = re.compile(rb'aria-atomic="true">(\d+)</span>')
CRASH_MARKERS = ("signal 11", "signal 6", "signal 7", "signal 4", "core dumped", "AddressSanitizer", "runtime error:",
                 "terminate called", "worker failed")
# Exceptions of a request whose connection was closed, or reset, before the
# first byte of its answer (RemoteDisconnected is a ConnectionResetError).
CLOSED_BEFORE_ANSWER = (ConnectionResetError, BrokenPipeError)


# ---------------------------------------------------------------- helpers

def install(source, path):
    """Puts a copy of `source` at `path` as a package manager does: written
    next to it, then renamed over it (the running image keeps its inode)."""
    fresh = path + ".new"
    shutil.copyfile(source, fresh)
    os.chmod(fresh, 0o755)
    os.rename(fresh, path)


def install_text(text, path, mode=0o755):
    fresh = path + ".new"
    with open(fresh, "w") as f:
        f.write(text)
    os.chmod(fresh, mode)
    os.rename(fresh, path)


def exe_of(pid):
    """What /proc/PID/exe points at: the running image's file ("PATH (deleted)" once replaced)."""
    return os.readlink("/proc/%d/exe" % pid)


def start_time(pid):
    """The process's start time (clock ticks since boot): the same across exec, new for a new process."""
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def stats_value(concert, key):
    try:
        return concert.stats().get(key)
    except (OSError, ValueError, http.client.HTTPException):
        return None


def crashes(log):
    return [line for line in log.splitlines() if any(m in line for m in CRASH_MARKERS)]


class UpgradeCase(unittest.TestCase):
    """A fake origin, a temporary directory with a copy of the binary, and
    the Concerts a test started (stopped at the end)."""

    def setUp(self):
        self.origin = FakeOrigin(nodelay=True)
        # A draining worker closing a kept-alive origin connection is expected.
        self.origin.server.handle_error = lambda request, client_address: None
        self.tmp = tempfile.mkdtemp(prefix="concert-upgrade-")
        self.exe = os.path.join(self.tmp, "sbin", "concert")
        os.mkdir(os.path.dirname(self.exe))
        install(concert_harness.BIN, self.exe)
        self.started = []

    def tearDown(self):
        self.origin.release()
        for c in self.started:
            try:
                c.stop(timeout=15)
            except Exception:
                c.kill_all()
            if getattr(c, "stderr", None):
                c.stderr.close()
        self.origin.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def concert(self, args, **kw):
        """A Concert started from the copy at self.exe (argv[0] is that path,
        so SIGUSR2 executes whatever is there then)."""
        c = Concert(["-upstream", self.origin.url] + list(args), **kw)
        self.started.append(c)
        saved = concert_harness.BIN
        concert_harness.BIN = self.exe
        try:
            c.start()
        finally:
            concert_harness.BIN = saved
        self.assertEqual(exe_of(c.proc.pid), self.exe)
        return c

    def upgrade(self, c, timeout=20, drained=True):
        """Installs a new copy of the binary at self.exe, sends SIGUSR2 and
        waits until the next generation's workers are up and, with `drained`,
        alone (the old generation gone). Returns the new generation."""
        before = c.stats()["generation"]
        old_workers = set(c.worker_pids())
        executing = c.log().count("binary upgrade: executing ")
        refusals = c.log().count("binary upgrade refused")
        install(concert_harness.BIN, self.exe)
        self.assertEqual(exe_of(c.proc.pid), self.exe + " (deleted)")
        c.signal(signal.SIGUSR2)

        def upgraded():
            log = c.log()
            if log.count("binary upgrade refused") > refusals:
                refused = [x for x in log.splitlines() if "binary upgrade refused" in x][-1]
                raise AssertionError("upgrade to generation %d refused the same binary:\n%s" % (before + 1, refused))
            pids = set(c.worker_pids())
            if stats_value(c, "generation") != before + 1 or len(pids - old_workers) != c.workers:
                return False
            return not drained or (len(pids) == c.workers and stats_value(c, "workers") == c.workers)
        if not wait_for(upgraded, timeout=timeout, interval=0.01):
            raise AssertionError("upgrade to generation %d did not complete (generation %s, workers %s, old %s):\n%s"
                                 % (before + 1, stats_value(c, "generation"), c.worker_pids(), sorted(old_workers),
                                    c.log()[-6000:]))
        log = c.log()
        self.assertEqual(log.count("binary upgrade: executing "), executing + 1)
        self.assertIn("binary upgrade: checking %s" % self.exe, log)
        self.assertIn("binary upgrade: executing %s; generation %d serves until the next one is up"
                      % (self.exe, before), log)
        # The master now runs the file at the path: the new one.
        self.assertEqual(exe_of(c.proc.pid), self.exe)
        return before + 1


# ---------------------------------------------------------------- load

class Failure(Exception):
    pass


class PageLoad:
    """Browser visitors on kept-alive connections, one thread each, asking for
    `path` again and again; each visit is a new visitor (no pass).

    With -queue-hold a visitor that has to queue is held on its connection
    until its turn and then answered by the origin; a worker that drains
    answers its held visitors at once with the waiting page (position and
    room_ticket cookie). Such a visitor does what the waiting page leads to:
    it polls /queue/status once (its position, or ready) and asks for the
    page again with its cookie, where it is held in its place again. A visit
    ends with the origin's "ok".

    Retries: a request sent on a kept-alive connection that was closed (or
    reset) before any byte of its answer came (a draining worker closing an
    idle connection as the request went out) is sent again on a new
    connection, as browsers do for idempotent requests (RFC 9112 9.3.1). Any
    other error, a failure on a new connection, an error after the answer
    began, an unexpected status or body, is a failure."""

    TIMEOUT = 60  # over -queue-hold: a held request is answered long before

    def __init__(self, concert, threads, path):
        self.concert = concert
        self.path = path
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ok = 0
        self.waiting_pages = 0  # visits sent back to the waiting page (by a draining worker)
        self.status_polls = 0
        self.retries = 0  # requests sent again after a kept-alive connection closed first
        self.failures = []
        self.positions = {}  # ticket -> positions seen, in order
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def finish(self, timeout=90):
        self.stop.set()
        for t in self.threads:
            t.join(timeout)
        return not any(t.is_alive() for t in self.threads)

    def _fail(self, what):
        with self.lock:
            self.failures.append(what)

    def _send(self, state, path, headers):
        """(status, headers, body) on the thread's kept-alive connection (state["conn"])."""
        while True:
            fresh = state["conn"] is None
            if fresh:
                state["conn"] = self.concert.conn(self.TIMEOUT)
            conn = state["conn"]
            answered = False
            try:
                conn.request("GET", path, headers=headers)
                r = conn.getresponse()
                answered = True
                body = r.read()
            except CLOSED_BEFORE_ANSWER as e:
                conn.close()
                state["conn"] = None
                if fresh or answered:
                    raise Failure("%s on a %s connection%s: %r" % (
                        path, "new" if fresh else "kept-alive", " after the answer began" if answered else "", e))
                with self.lock:
                    self.retries += 1
                continue
            except Exception as e:
                conn.close()
                state["conn"] = None
                raise Failure("%s: %r" % (path, e))
            if r.will_close:
                conn.close()
                state["conn"] = None
            return r.status, r.getheaders(), body

    def _visit(self, state):
        ticket = None
        for _ in range(1000):
            headers = dict(BROWSER)
            if ticket:
                headers["Cookie"] = "room_ticket=" + ticket
            status, hdrs, body = self._send(state, self.path, headers)
            if status == 200 and body == b"ok":
                with self.lock:
                    self.ok += 1
                return
            cookies = set_cookies(hdrs)
            m = POSITION_RE.search(body)
            if status != 200 or not (header(hdrs, "Content-Type") or "").startswith("text/html") or not m or (
                    "room_ticket" not in cookies and not ticket):
                raise Failure("%s: unexpected answer %d %r %r" % (self.path, status, cookies, body[:120]))
            ticket = cookies.get("room_ticket", ticket)
            with self.lock:
                self.waiting_pages += 1
                self.positions.setdefault(ticket, []).append(int(m.group(1)))
            # The waiting page's first look at /queue/status.
            status, hdrs, body = self._send(state, "/queue/status", dict(JSON, Cookie="room_ticket=" + ticket))
            if status == 200:
                doc = json.loads(body)
                with self.lock:
                    self.status_polls += 1
                    if not doc.get("ready") and doc.get("position") is not None:
                        self.positions[ticket].append(doc["position"])
            elif status != 429:  # 429: the one-poll-a-second limit, no news
                raise Failure("/queue/status: unexpected answer %d %r" % (status, body[:120]))
        raise Failure("a visit was sent back 1000 times")

    def _run(self):
        state = {"conn": None}
        while not self.stop.is_set():
            try:
                self._visit(state)
            except Failure as e:
                self._fail(str(e))
        if state["conn"] is not None:
            state["conn"].close()

    def position_rises(self):
        with self.lock:
            return {t: p for t, p in self.positions.items() if any(b > a for a, b in zip(p, p[1:]))}


class InFlightSampler(threading.Thread):
    """Samples the origin's page requests in flight every 2 ms while the
    upgrades run: the largest value seen, and how often it was at `cap`
    (the recorder's own maximum is exact; the samples show the load kept
    the cap busy through the upgrades)."""

    def __init__(self, recorder, cap):
        super().__init__(daemon=True)
        self.recorder = recorder
        self.cap = cap
        self.stop = threading.Event()
        self.samples = 0
        self.max_seen = 0
        self.at_cap = 0

    def run(self):
        while not self.stop.is_set():
            n = self.recorder.page_in_flight
            self.samples += 1
            self.max_seen = max(self.max_seen, n)
            if n >= self.cap:
                self.at_cap += 1
            time.sleep(0.002)


# ---------------------------------------------------------------- tests

class UpgradeTest(UpgradeCase):
    def test_twenty_upgrades_under_load(self):
        cap, upgrades = 4, 20
        c = self.concert(["-cap", str(cap), "-queue-hold", "30s", "-shutdown-grace", "20s"], workers=2)
        pid, started = c.proc.pid, start_time(c.proc.pid)
        initial = c.stats()["generation"]
        sampler = InFlightSampler(self.origin.recorder, cap)
        sampler.start()
        # 8 visitors against 4 slots of 4 ms each: about 1,000 pages/s when
        # the machine keeps up, and always a line of held visitors.
        load = PageLoad(c, 8, "/sleep?ms=4").start()
        t0 = time.monotonic()
        try:
            self.assertTrue(wait_for(lambda: load.ok > 200, timeout=20), "no load: %d ok, %s" % (
                load.ok, load.failures[:5]))
            for _ in range(upgrades):
                generation = self.upgrade(c)
                # The new generation serves the load.
                base = load.ok
                self.assertTrue(wait_for(lambda: load.ok > base + 200, timeout=20),
                                "no pages served in generation %d:\n%s" % (generation, c.log()[-4000:]))
        finally:
            stopped = load.finish()
            sampler.stop.set()
            sampler.join(5)
        elapsed = time.monotonic() - t0
        self.assertTrue(stopped, "a load thread is stuck")
        print("\n  %d upgrades in %.1f s: %d pages (%.0f/s), %d waiting pages, %d status polls, %d kept-alive "
              "retries, origin max %d in flight (%d of %d samples at cap)"
              % (upgrades, elapsed, load.ok, load.ok / elapsed, load.waiting_pages, load.status_polls,
                 load.retries, self.origin.recorder.max_page_in_flight, sampler.at_cap, sampler.samples),
              file=sys.stderr)

        self.assertEqual(load.failures, [], c.log()[-6000:])
        self.assertLessEqual(self.origin.recorder.max_page_in_flight, cap)
        self.assertLessEqual(sampler.max_seen, cap)
        self.assertEqual(load.position_rises(), {})
        # One process all along, re-executed once per upgrade.
        self.assertIsNone(c.proc.poll())
        self.assertEqual((c.proc.pid, start_time(c.proc.pid)), (pid, started))
        self.assertEqual(exe_of(pid), self.exe)
        stats = c.stats()
        self.assertEqual(stats["generation"], initial + upgrades)
        log = c.log()
        for generation in range(initial, initial + upgrades):
            self.assertIn("binary upgrade: executing %s; generation %d serves until the next one is up"
                          % (self.exe, generation), log)
            self.assertIn("generation %d drained" % generation, log)
        self.assertNotIn("binary upgrade refused", log)
        self.assertEqual(crashes(log), [])
        # Everything given back, FIFO kept.
        self.assertTrue(wait_for(lambda: stats_value(c, "occupancy") == 0, timeout=10), c.stats())
        self.assertTrue(wait_for(lambda: stats_value(c, "live_queue_depth") == 0, timeout=10), c.stats())
        self.assertEqual(c.fifo_inversions(), 0)
        self.assertEqual(c.stop(), 0, c.log()[-4000:])

    def test_refused_binary_keeps_serving(self):
        c = self.concert(["-cap", "4"], workers=2)
        pid, started = c.proc.pid, start_time(c.proc.pid)
        workers = c.worker_pids()
        refusals = 0

        def refused(expect_in_reason):
            nonlocal refusals
            c.signal(signal.SIGUSR2)
            refusals += 1
            self.assertTrue(wait_for(lambda: c.log().count("binary upgrade refused") == refusals, timeout=15),
                            c.log()[-4000:])
            line = [x for x in c.log().splitlines() if "binary upgrade refused" in x][-1]
            self.assertIn("the running binary keeps serving", line)
            self.assertIn(expect_in_reason, line)
            # Nothing changed: same process and image, same generation and workers, still serving.
            self.assertIsNone(c.proc.poll())
            self.assertEqual((c.proc.pid, start_time(c.proc.pid)), (pid, started))
            self.assertTrue(exe_of(pid).endswith(" (deleted)"), exe_of(pid))
            self.assertEqual(c.stats()["generation"], 1)
            self.assertEqual(c.worker_pids(), workers)
            self.assertEqual(c.get("/page")[::2], (200, b"ok"))

        # A build that fails its own check.
        install_text('#!/bin/sh\necho "simulated broken build, args: $*" >&2\nexit 1\n', self.exe)
        refused("simulated broken build, args: ")
        line = [x for x in c.log().splitlines() if "binary upgrade refused" in x][-1]
        self.assertRegex(line, r"-upstream %s .*-t$" % re.escape(self.origin.url))  # run with the same args, -t
        # One that prints "ok" but exits non-zero counts as refused too.
        install_text('#!/bin/sh\necho "configuration ok"\nexit 3\n', self.exe)
        refused("configuration ok")
        # A file that cannot be executed.
        install(concert_harness.BIN, self.exe)
        os.chmod(self.exe, 0o644)
        refused("Permission denied")
        # No file at all.
        os.unlink(self.exe)
        refused("No such file or directory")
        self.assertNotIn("binary upgrade: executing", c.log())
        self.assertEqual(c.worker_pids(), workers)

        # The real binary back at the path: the upgrade goes through.
        self.assertEqual(self.upgrade(c), 2)
        self.assertEqual((c.proc.pid, start_time(c.proc.pid)), (pid, started))
        self.assertEqual(c.get("/page")[::2], (200, b"ok"))
        self.assertEqual(crashes(c.log()), [])
        self.assertEqual(c.stop(), 0, c.log()[-4000:])

    def test_upgrade_keeps_the_line_without_state_dir(self):
        c = self.concert(["-cap", "1", "-assets", "/assets/*", "-shutdown-grace", "30s"], workers=2, secret=None)
        self.assertIsNotNone(c.proc)
        # An admitted visitor: its pass is signed with the generated secret.
        status, headers, body = c.get("/page", JSON)
        self.assertEqual((status, body), (200, b"ok"))
        admitted = set_cookies(headers)["concert_admit"]
        self.assertEqual(c.get("/assets/a.css", {"Cookie": "concert_admit=" + admitted})[::2], (200, b"ok"))
        self.assertEqual(c.get("/assets/a.css")[0], 403)  # no pass, no asset
        # The slot taken until the origin lets go, and three visitors in line.
        holder = threading.Thread(target=lambda: c.get("/slow", timeout=60), daemon=True)
        holder.start()
        self.assertTrue(wait_for(lambda: self.origin.recorder.hits("/slow") == 1, timeout=10))
        tickets = []
        for i in range(3):
            status, headers, body = c.get("/page?v=%d" % i, JSON)
            self.assertEqual(status, 429, body)
            tickets.append(set_cookies(headers)["room_ticket"])
        last_poll = [0.0] * 3

        def positions():
            out = []
            for i, ticket in enumerate(tickets):
                time.sleep(max(0.0, last_poll[i] + 1.05 - time.time()))  # one poll a second per ticket
                last_poll[i] = time.time()
                status, headers, body = c.get("/queue/status", {"Cookie": "room_ticket=" + ticket})
                self.assertEqual(status, 200, body)
                self.assertNotIn("room_ticket", set_cookies(headers))  # the same ticket: no new one
                doc = json.loads(body)
                self.assertFalse(doc["ready"], doc)
                out.append(doc["position"])
            return out
        self.assertEqual(positions(), [1, 2, 3])
        for generation in (2, 3):
            # The old generation's worker proxying /slow drains only once it is answered.
            self.assertEqual(self.upgrade(c, drained=False), generation)
            self.assertEqual(positions(), [1, 2, 3], c.log()[-4000:])
            # The pass of before the upgrades is still good.
            self.assertEqual(c.get("/assets/a.css", {"Cookie": "concert_admit=" + admitted})[::2], (200, b"ok"))
        stats = c.stats()
        self.assertEqual((stats["occupancy"], stats["live_queue_depth"]), (1, 3))
        # The slot comes back: each ticket in its turn, with its cookie.
        self.origin.release()
        holder.join(15)
        for i, ticket in enumerate(tickets):
            self.assertTrue(wait_for(lambda: stats_value(c, "occupancy") == 0, timeout=10))
            status, _, body = c.get("/page?v=%d" % i, {"Cookie": "room_ticket=" + ticket})
            self.assertEqual((status, body), (200, b"ok"), c.log()[-3000:])
        self.assertEqual(c.stats()["live_queue_depth"], 0)
        self.assertEqual(c.fifo_inversions(), 0)
        self.assertEqual(crashes(c.log()), [])


# ---------------------------------------------------------------- socket activation

# Runs as the exec'd program's pid: moves the sockets to fds 3, 4, ... and sets
# LISTEN_PID to its own pid (which exec keeps), as systemd does.
ACTIVATE = r'''
import fcntl, os, sys
names, rest = sys.argv[1], sys.argv[2:]  # "-": no LISTEN_FDNAMES
split = rest.index("--")
fds, cmd = [int(x) for x in rest[:split]], rest[split + 1:]
high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]
for fd in fds:
    os.close(fd)
for i, fd in enumerate(high):
    os.dup2(fd, 3 + i)  # inheritable
    os.close(fd)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS=str(len(fds)))
if names != "-":
    os.environ["LISTEN_FDNAMES"] = names
os.execv(cmd[0], cmd)
'''


class ActivatedConcert(Concert):
    """A Concert started as a socket-activated service: `sockets` ((name,
    listening socket) pairs) become fds 3, 4, ... with LISTEN_PID,
    LISTEN_FDS and LISTEN_FDNAMES (none when every name is None). The
    harness's -listen 127.0.0.1:0 stays on the command line: passed sockets
    win over it."""

    def __init__(self, args, sockets, binary, **kw):
        super().__init__(args, **kw)
        self.sockets = sockets
        self.binary = binary

    def start(self):
        fds = [s.fileno() for _, s in self.sockets]
        names = "-" if all(n is None for n, _ in self.sockets) else ":".join(n for n, _ in self.sockets)
        cmd = [sys.executable, "-c", ACTIVATE, names] + [str(fd) for fd in fds]
        cmd += ["--", self.binary, "-listen", "127.0.0.1:0", "-workers", str(self.workers), "-access-log=false"]
        cmd += self.args
        self.stderr = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=self.stderr, pass_fds=fds)
        self.wait_listening()
        admin = wait_for(lambda: ADMIN_LISTEN_RE.search(self.log()), timeout=10) if any(
            n == "admin" for n, _ in self.sockets) else None
        self.admin_port = int(admin.group(2)) if admin else None
        self.wait_workers(self.workers)
        return self


def listening_socket(backlog=512):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(backlog)
    return s


class SocketActivationTest(UpgradeCase):
    def activated(self, sockets, args=(), **kw):
        c = ActivatedConcert(["-upstream", self.origin.url] + list(args), sockets, self.exe, **kw)
        self.started.append(c)
        return c.start()

    def check_activated(self, c, public, admin):
        self.assertEqual(c.port, public.getsockname()[1])
        self.assertEqual(c.admin_port, admin.getsockname()[1])
        log = c.log()
        self.assertIn("socket activation: 1 listener(s) passed by the service manager", log)
        self.assertIn("listening on 127.0.0.1:%d" % c.port, log)
        # -listen 127.0.0.1:0 is not bound: every listening line (one per image) names the passed socket.
        self.assertEqual(set(re.findall(r"listening on (\S+)", log)), {"127.0.0.1:%d" % c.port})
        self.assertIn("admin endpoints on 127.0.0.1:%d" % c.admin_port, log)
        self.assertEqual(c.get("/page")[::2], (200, b"ok"))
        status, _, body = c.admin("GET", "/_room/stats")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["cap"], 50)
        self.assertEqual(c.admin("GET", "/_room/queue")[0], 200)  # no token needed there
        self.assertEqual(c.admin("GET", "/page")[0], 404)  # nothing but /_room/ on it
        # As with -admin-listen, the public listener serves no /_room/ endpoint but healthz.
        self.assertEqual(c.get("/_room/healthz")[0], 200)
        self.assertEqual(c.get("/_room/stats")[0], 404)

    def test_socket_activation_restart_refuses_nothing(self):
        public, admin = listening_socket(), listening_socket()
        sockets = [("public", public), ("admin", admin)]
        try:
            first = self.activated(sockets, ["-cap", "50"], workers=2)
            self.check_activated(first, public, admin)
            port = first.port

            lock = threading.Lock()
            stop = threading.Event()
            done = []  # (sent, answered, status, body) of each request
            failures = []

            def client(i):
                n = 0
                while not stop.is_set():
                    n += 1
                    sent = time.monotonic()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    try:
                        conn.request("GET", "/sleep?ms=2&c=%d&n=%d" % (i, n))
                        r = conn.getresponse()
                        body = r.read()
                        with lock:
                            done.append((sent, time.monotonic(), r.status, body))
                    except Exception as e:  # a refused connect included
                        with lock:
                            failures.append(repr(e))
                    finally:
                        conn.close()

            threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(4)]
            for t in threads:
                t.start()
            try:
                self.assertTrue(wait_for(lambda: len(done) > 50, timeout=20))
                self.assertEqual(first.stop(timeout=20), 0, first.log()[-3000:])
                stopped_at = time.monotonic()
                # Nobody serves the sockets now: connections wait in the backlog.
                time.sleep(0.5)
                second = self.activated(sockets, ["-cap", "50"], workers=2)
                started_at = time.monotonic()
                self.check_activated(second, public, admin)
                base = len(done)
                self.assertTrue(wait_for(lambda: len(done) > base + 50, timeout=20))
                # And an upgrade of the activated Concert keeps the sockets.
                self.assertEqual(self.upgrade(second), 2)
                base = len(done)
                self.assertTrue(wait_for(lambda: len(done) > base + 50, timeout=20))
                self.check_activated(second, public, admin)
            finally:
                stop.set()
                for t in threads:
                    t.join(35)
            self.assertEqual(failures, [], second.log()[-3000:])
            bad = [(status, body[:80]) for _, _, status, body in done if (status, body) != (200, b"ok")]
            self.assertEqual(bad, [])
            # Requests that waited in the backlog through the gap were answered by the second Concert.
            waited = [d for d in done if d[0] < started_at and d[1] > stopped_at + 0.4]
            self.assertGreaterEqual(len(waited), 1)
            print("\n  %d requests, %d of them waited through the gap" % (len(done), len(waited)), file=sys.stderr)
            self.assertEqual(crashes(first.log() + second.log()), [])
        finally:
            public.close()
            admin.close()

    def test_sockets_without_admin_name_are_public(self):
        for names in ((None, None), ("web", "alt")):  # no LISTEN_FDNAMES; names other than "admin"
            a, b = listening_socket(), listening_socket()
            try:
                c = self.activated(list(zip(names, (a, b))), workers=1)
                log = c.log()
                self.assertIn("socket activation: 2 listener(s) passed by the service manager", log)
                self.assertNotIn("admin endpoints on", log)
                self.assertEqual(set(re.findall(r"listening on (\S+)", log)),
                                 {"127.0.0.1:%d" % s.getsockname()[1] for s in (a, b)})
                for s in (a, b):
                    conn = http.client.HTTPConnection("127.0.0.1", s.getsockname()[1], timeout=10)
                    self.assertEqual(concert_harness.exchange(conn, "GET", "/page")[::2], (200, b"ok"))
                self.assertEqual(c.stop(), 0)
            finally:
                a.close()
                b.close()


# ---------------------------------------------------------------- sd_notify

class Notifications:
    """A unix datagram socket standing in for systemd's notify socket: each
    message with the pid of its sender (SO_PASSCRED)."""

    def __init__(self, address):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(address)
        self.name = address if not address.startswith("\0") else "@" + address[1:]

    def next(self, timeout=15):
        """(fields dict, raw text, sender pid) of the next message."""
        self.sock.settimeout(timeout)
        data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(struct.calcsize("iII")))
        pid = None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", payload[:struct.calcsize("iII")])[0]
        text = data.decode()
        fields = dict(line.split("=", 1) for line in text.split("\n") if line)
        return fields, text, pid

    def next_state(self, timeout=15):
        """The next message that is not only STATUS=."""
        while True:
            fields, text, pid = self.next(timeout)
            if set(fields) - {"STATUS"}:
                return fields, text, pid

    def close(self):
        self.sock.close()


class NotifyTest(UpgradeCase):
    def test_notify_socket(self):
        note = Notifications(os.path.join(self.tmp, "notify.sock"))
        try:
            c = self.concert(["-cap", "4"], workers=2, env={"NOTIFY_SOCKET": note.name})
            pid = c.proc.pid
            fields, text, sender = note.next_state()
            self.assertEqual(fields.get("READY"), "1", text)
            self.assertEqual(fields.get("MAINPID", str(pid)), str(pid), text)
            self.assertEqual(sender, pid)

            for sig, generation in ((signal.SIGHUP, 2), (signal.SIGUSR2, 3)):
                if sig == signal.SIGUSR2:
                    install(concert_harness.BIN, self.exe)
                before = time.monotonic()
                c.signal(sig)
                try:
                    fields, text, sender = note.next_state()
                except socket.timeout:
                    raise AssertionError("no RELOADING=1 after %s:\n%s" % (sig, c.log()[-3000:]))
                after = time.monotonic()
                self.assertEqual(fields.get("RELOADING"), "1", text)
                self.assertEqual(sender, pid)
                # MONOTONIC_USEC is CLOCK_MONOTONIC, the clock of time.monotonic(), when the reload began.
                usec = int(fields["MONOTONIC_USEC"])
                self.assertTrue(int(before * 1e6) <= usec <= int(after * 1e6) + 1, (before, usec, after))
                fields, text, sender = note.next_state()
                self.assertEqual(fields.get("READY"), "1", text)
                self.assertEqual(fields.get("MAINPID", str(pid)), str(pid), text)
                self.assertEqual(sender, pid)  # after an upgrade too: the same process
                self.assertTrue(wait_for(lambda: stats_value(c, "generation") == generation, timeout=15), c.log())
                self.assertEqual(c.get("/page")[::2], (200, b"ok"))
            self.assertEqual(exe_of(pid), self.exe)
            self.assertIn("binary upgrade: executing", c.log())

            # A refused upgrade tells the manager nothing: no reload happened.
            install_text("#!/bin/sh\nexit 1\n", self.exe)
            c.signal(signal.SIGUSR2)
            self.assertTrue(wait_for(lambda: "binary upgrade refused" in c.log(), timeout=15), c.log())
            c.signal(signal.SIGTERM)
            fields, text, sender = note.next_state()
            self.assertEqual(fields, {"STOPPING": "1"}, text)
            self.assertEqual(sender, pid)
            self.assertEqual(c.proc.wait(20), 0)
        finally:
            note.close()

    def test_notify_abstract_socket(self):
        name = "\0concert-test-notify-%d-%d" % (os.getpid(), time.monotonic_ns())
        note = Notifications(name)
        try:
            c = self.concert([], workers=1, env={"NOTIFY_SOCKET": note.name})
            fields, text, sender = note.next_state()
            self.assertEqual((fields.get("READY"), sender), ("1", c.proc.pid), text)
            c.signal(signal.SIGTERM)
            fields, text, sender = note.next_state()
            self.assertEqual((fields, sender), ({"STOPPING": "1"}, c.proc.pid), text)
            self.assertEqual(c.proc.wait(20), 0)
        finally:
            note.close()


if __name__ == "__main__":
    unittest.main()
