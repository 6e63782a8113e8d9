"""-state-dir against the real binary (two workers, -cap 4, a counting fake origin): the waiting line
outlives the process.

  test_restart_keeps_every_place        10,000 waiting tickets, 500 page requests held on their
                                        connections (-queue-hold 60s) and 2,000 open /queue/events
                                        streams; SIGTERM (-shutdown-grace 2s), start again with the
                                        same configuration and state dir: every ticket's position is
                                        the one it had, the held visitors (whose cookies came with the
                                        answer the stop gave them) and the stream clients come back
                                        with their cookies to the same place, queued_total goes on,
                                        no ticket is issued anew, fifo_inversions_total stays 0
  test_sigkill_keeps_every_place_and_no_slot_leaks
                                        the same line (2,000 tickets, the first 100 of them held on
                                        their connections, 380 streams), then SIGKILL of the master
                                        and every worker: the places are kept, the log reports the 4
                                        page slots reclaimed from the killed workers, the held
                                        visitors come back and are admitted in turn, occupancy goes
                                        back to 0, and the origin never has more than the cap of page
                                        requests at once across the whole test, the killed workers'
                                        requests it is still working on included
  test_admit_secret_generated_in_state_dir
                                        without CONCERT_ADMIT_SECRET: DIR/admit-secret is made (mode
                                        0600), passes signed with it stay valid across restarts, the
                                        next starts read the same file, a ticket keeps its position
  test_two_masters_refused              a second master on a state dir in use exits non-zero, naming
                                        the state dir; the first one goes on serving its line

How the line is built. With -queue-hold every page request that has to queue is held on its
connection, so tickets cannot be issued fast under it. The tests' room therefore starts with
queue-hold unset in its YAML file, takes the tickets (pipelined JSON requests, a 429 and a
room_ticket cookie each), then the file gets `queue-hold: 60s` and a SIGHUP applies it; the
restart under test runs with that same file and the same flags. The line is:
  4 holders   direct admissions that hold the 4 slots at the origin while the tickets are taken,
              released before the reload (a reload would cut requests in flight);
  4 openers   the first 4 tickets: ready once the holders are done, they take their turn after the
              reload with requests the origin holds (/slow), so the cap is full again;
  the line    every other ticket, at positions 1..N once the openers are in.
Settings that keep the line still while the test looks at it: -claim-window 10m (a ticket whose
turn came is not passed over while the test reads 10,000 positions), -first-poll-grace 10m (the
test polls each ticket only a few times: none is a ghost). -shutdown-grace 2s keeps the stop short.

Traffic goes to 127.0.0.1 only; only processes started here are signalled, by pid. No timing is
asserted: every wait is bounded.
"""
import json
import os
import re
import resource
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
import unittest

from concert_harness import TEST_SECRET, Concert, set_cookies, wait_for
from fake_origin import FakeOrigin
from room import fill, mint_pass, park
from test_events import EventStream

CAP = 4
NOFILE = 8192
YAML_TAKING = "# tickets are taken: no hold yet\n"
YAML_HOLD = "queue-hold: 60s\n"
POSITION_RE = re.compile(rb'id="position"[^>]*>(\d+)</span>')
KEPT_RE = re.compile(r"state-dir (\S+): the line of the previous run kept \((\d+) waiting\); reclaimed from (\d+) "
                     r"ended worker\(s\) (\d+) page slots")


# -- raw HTTP/1.1 over many connections

class Pipe:
    """A kept-alive connection that sends requests in batches (pipelined) and reads the
    Content-Length framed answers: [(status, [(name, value)], body)] in order."""

    def __init__(self, port, timeout=30):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _fill(self):
        chunk = self.sock.recv(262144)
        if not chunk:
            raise ConnectionError("closed by Concert with %d bytes unread" % len(self.buf))
        self.buf += chunk

    def response(self):
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:]]
        length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
        self.buf = rest
        while len(self.buf) < length:
            self._fill()
        body, self.buf = self.buf[:length], self.buf[length:]
        return int(lines[0].split()[1]), headers, body

    def run(self, requests, batch=200):
        out = []
        for i in range(0, len(requests), batch):
            part = requests[i:i + batch]
            self.sock.sendall(b"".join(part))
            out.extend(self.response() for _ in part)
        return out

    def close(self):
        self.sock.close()


def pipelined(port, requests, conns=4):
    """`requests` (raw bytes each) over `conns` pipelined connections, round robin: their answers,
    in the order of `requests`."""
    parts = [requests[k::conns] for k in range(conns)]
    results, errors = [None] * conns, []

    def work(k):
        try:
            pipe = Pipe(port)
            try:
                results[k] = pipe.run(parts[k])
            finally:
                pipe.close()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors or any(t.is_alive() for t in threads):
        raise AssertionError("pipelined requests failed: %r" % (errors or "still running after 60 s"))
    out = [None] * len(requests)
    for k in range(conns):
        out[k::conns] = results[k]
    return out


def page_request(path="/", accept="application/json", cookie=None):
    lines = ["GET %s HTTP/1.1" % path, "Host: 127.0.0.1", "Accept: %s" % accept]
    if cookie:
        lines.append("Cookie: room_ticket=%s; room_probe=1" % cookie)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def status_request(cookie):
    return page_request("/queue/status", "application/json", cookie)


def ticket_of(headers):
    return set_cookies(headers).get("room_ticket")


def place(status, body):
    """What one /queue/status answer says of a ticket: "ready", its position, or None (no place
    shown: a 429 of the poll limit for a ticket whose turn came, or no ticket)."""
    doc = json.loads(body)
    if status == 200 and doc.get("ready"):
        return "ready"
    return doc.get("position")


def places(port, cookies, tries=4):
    """{cookie: place} of every ticket by /queue/status, pipelined. A poll within a second of the
    ticket's last one is answered 429 (the waiting page's pace); such an answer still carries the
    position of a waiting ticket, and one without a position is asked again a second later."""
    out, todo = {}, list(cookies)
    for _ in range(tries):
        answers = pipelined(port, [status_request(k) for k in todo])
        again = []
        for cookie, (status, _, body) in zip(todo, answers):
            got = place(status, body)
            if got is None and status == 429:
                again.append(cookie)
            else:
                out[cookie] = got
        todo = again
        if not todo:
            break
        time.sleep(1.1)
    for cookie in todo:
        out[cookie] = None
    return out


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class Answer:
    """One raw connection's answers, read without blocking: whole responses (Content-Length framed)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.responses = []
        self.eof = False

    def feed(self, data):
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            head, _, rest = self.buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:]]
            length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
            if len(rest) < length:
                return
            self.responses.append((int(lines[0].split()[1]), headers, rest[:length]))
            self.buf = rest[length:]


def read_answers(answers, count, deadline):
    """Reads every Answer until it has `count` responses (or its connection closed, or the deadline)."""
    sel = selectors.DefaultSelector()
    open_ = 0
    for a in answers:
        if len(a.responses) < count and not a.eof:
            a.sock.setblocking(False)
            sel.register(a.sock, selectors.EVENT_READ, a)
            open_ += 1
    try:
        while open_ and time.time() < deadline:
            for key, _ in sel.select(max(0.0, min(0.5, deadline - time.time()))):
                a = key.data
                try:
                    data = a.sock.recv(262144)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    a.feed(data)
                else:
                    a.eof = True
                if a.eof or len(a.responses) >= count:
                    sel.unregister(a.sock)
                    open_ -= 1
    finally:
        sel.close()
        for a in answers:
            try:
                a.sock.setblocking(True)
            except OSError:
                pass


def nothing_to_read(sock):
    """True when no byte (and no close) is waiting on the connection now."""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)
    return False


def pump_streams(streams, done, deadline):
    """Reads every EventStream (test_events) without blocking until done(stream) holds, or it ended or
    closed, or the deadline passes."""
    sel = selectors.DefaultSelector()
    open_ = 0
    for s in streams:
        if not (done(s) or s.eof or s.ended):
            s.sock.setblocking(False)
            sel.register(s.sock, selectors.EVENT_READ, s)
            open_ += 1
    try:
        while open_ and time.time() < deadline:
            for key, _ in sel.select(max(0.0, min(0.5, deadline - time.time()))):
                s = key.data
                try:
                    data = s.sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    s.eof = True
                elif s.status is None:
                    s.buffer += data
                    if b"\r\n\r\n" in s.buffer:
                        s.read_head()  # the head is all there: no read
                else:
                    s._feed(data)
                if s.eof or s.ended or done(s):
                    sel.unregister(s.sock)
                    open_ -= 1
    finally:
        sel.close()
        for s in streams:
            try:
                s.sock.setblocking(True)
            except OSError:
                pass


def first_event(stream):
    """(name, JSON data) of the stream's first event, or None."""
    events = stream.events()
    if not events:
        return None
    _, _, name, data = events[0]
    return name, json.loads(data)


def stream_place(stream):
    """What a stream's first event says: "ready", the position, or None (no stream, no event)."""
    if stream.status != 200:
        return None
    ev = first_event(stream)
    if ev is None:
        return None
    name, doc = ev
    if name == "ready":
        return "ready"
    return doc.get("position") if name == "position" else None


def open_streams(port, cookies, timeout=30):
    """An EventStream per cookie, each read up to its first event."""
    streams = [EventStream(port, k) for k in cookies]
    pump_streams(streams, lambda s: bool(s.events()), time.time() + timeout)
    return streams


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class RestartTest(unittest.TestCase):
    def setUp(self):
        # About 2,600 client connections at once here, as many in Concert (which inherits the limit).
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < NOFILE:
            if hard != resource.RLIM_INFINITY and hard < NOFILE:
                self.skipTest("open-file hard limit %d is below %d" % (hard, NOFILE))
            resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, hard))
        self.origin = FakeOrigin(nodelay=True)
        self.addCleanup(self.origin.stop)
        self.state_dir = tempfile.mkdtemp(prefix="concert-state-")
        self.addCleanup(shutil.rmtree, self.state_dir, True)
        self.socks = []
        self.addCleanup(self.close_all)

    def close_all(self):
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass

    def track(self, s):
        self.socks.append(s)
        return s

    # -- the room

    def args(self, *extra):
        return ["-upstream", self.origin.url, "-cap", str(CAP), "-max-queue", "20000", "-shutdown-grace", "2s",
                "-claim-window", "10m", "-first-poll-grace", "10m", "-state-dir", self.state_dir] + list(extra)

    def concert(self, config_text=YAML_HOLD, start=True, **kw):
        c = Concert(self.args(), workers=2, config_text=config_text, **kw)
        self.addCleanup(shutil.rmtree, c.tmp, True)
        self.addCleanup(lambda: getattr(c, "stderr", None) and c.stderr.close())
        self.addCleanup(c.stop)
        return c.start() if start else c

    def reload(self, c, config_text):
        generation = c.stats()["generation"]
        with open(c.config_path, "w") as f:
            f.write(config_text)
        c.signal(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: c.stats()["generation"] == generation + 1, timeout=15), c.log())
        self.assertTrue(wait_for(lambda: "generation %d drained" % generation in c.log(), timeout=15), c.log())
        c.wait_workers(2)

    def sigterm(self, c, answers=(), streams=(), count=1):
        """SIGTERM to the master; reads the answers the stop gives every held request (up to `count`
        answers on its connection) and the end of every stream meanwhile, then closes those
        connections as a browser would (a closing worker lingers until the client closes); returns
        once the master has exited."""
        c.signal(signal.SIGTERM)
        deadline = time.time() + 20
        read_answers(answers, count, deadline)
        pump_streams(streams, lambda s: False, deadline)
        for a in answers:
            a.sock.close()
        for s in streams:
            s.close()
        c.proc.wait(max(1, deadline - time.time()))

    def sigkill(self, c):
        """SIGKILL of the master and then of each of its workers (found before the master dies: they
        are its children), by pid; the master first, so that it forks no replacement meanwhile."""
        workers = c.worker_pids()
        self.assertEqual(len(workers), 2, workers)
        c.proc.kill()
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        c.proc.wait(5)
        self.assertTrue(wait_for(lambda: not any(pid_alive(p) for p in workers), timeout=10),
                        "workers outlived SIGKILL")

    def at_origin(self, marker):
        """The targets of the requests the origin received that contain `marker`, in arrival order."""
        with self.origin.recorder.lock:
            return [r["target"] for r in self.origin.recorder.requests if marker in r["target"]]

    def kept_line(self, c):
        """(waiting, ended workers, page slots) of the start's log line about the previous run's line."""
        m = wait_for(lambda: KEPT_RE.search(c.log()), timeout=5)
        self.assertIsNotNone(m, "no 'the line of the previous run kept' line:\n" + c.log())
        self.assertEqual(m.group(1), self.state_dir)
        return int(m.group(2)), int(m.group(3)), int(m.group(4))

    def line_up(self, c, n):
        """The line of the module docstring in a room started with YAML_TAKING: `n` tickets at
        positions 1..n behind 4 openers whose requests the origin holds; then queue-hold is on.
        Returns (the n cookies, in no particular order; the openers' parked requests)."""
        fill(c, CAP, path="/slow?gate=holders&timeout=120", origin=self.origin)
        # The openers first, in order on one connection: the first 4 tickets.
        pipe = Pipe(c.port)
        openers = [ticket_of(h) for _, h, _ in pipe.run([page_request()] * CAP)]
        pipe.close()
        answers = pipelined(c.port, [page_request()] * n)
        self.assertEqual({status for status, _, _ in answers}, {429}, answers[:3])
        cookies = [ticket_of(h) for _, h, _ in answers]
        self.assertEqual(len(set(cookies + openers)), n + CAP)
        # The holders go: the openers' turn has come, nobody else's (4 waiting ahead of each).
        self.origin.release("holders")
        self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=10), c.stats())
        self.assertEqual(set(places(c.port, openers).values()), {"ready"})
        self.reload(c, YAML_HOLD)
        # The openers take their turn; the origin holds them (/slow, the default gate).
        parked = [park(c, "/slow?opener=%d&timeout=120" % i, {"Cookie": "room_ticket=" + k}, timeout=120)
                  for i, k in enumerate(openers)]
        self.assertTrue(wait_for(lambda: self.origin.recorder.page_in_flight == CAP, timeout=10),
                        (self.origin.recorder.page_in_flight, c.stats()))
        stats = c.stats()
        self.assertEqual((stats["occupancy"], stats["live_queue_depth"], stats["admissions_line_total"]),
                         (CAP, n, CAP))
        return cookies, parked

    def assert_places_kept(self, c, before):
        """Every ticket's place after the restart against `before`, exactly; returns the number of
        free slots the check counted with. A position is the number of waiting tickets ahead plus
        one; nobody left the line since `before` was read (the openers took their turn before, and
        nobody has claimed one since), so no position may change. Only readiness may: the restart
        freed the slots of the openers' cut requests, and with `free` slots free the tickets at
        positions 1..free are ready (no position shown), every other one keeps its number."""
        occupancy = c.stats()["occupancy"]
        after = places(c.port, list(before))
        self.assertEqual(c.stats()["occupancy"], occupancy, "the room moved while the places were read")
        free = CAP - occupancy
        wrong = {}
        for cookie, was in before.items():
            want = "ready" if was <= free else was
            if after.get(cookie) != want:
                wrong[cookie] = (was, after.get(cookie))
        self.assertFalse(wrong, "%d of %d tickets changed place (before, after), e.g. %s" % (
            len(wrong), len(before), sorted(wrong.values(), key=lambda v: v[0])[:10]))
        return free

    # -- the tests

    def test_restart_keeps_every_place(self):
        n, held_count, stream_count = 10000, 500, 2000
        c = self.concert(YAML_TAKING)
        cookies, _ = self.line_up(c, n)

        # 500 new arrivals, each held on its connection (a browser: the stop answers with the page).
        held = [Answer(self.track(connect(c.port))) for _ in range(held_count)]
        for i, a in enumerate(held):
            a.sock.sendall(page_request("/page?held=%d" % i, "text/html"))
        self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == n + held_count, timeout=20), c.stats())

        before = places(c.port, cookies)
        self.assertEqual(sorted(before.values()), list(range(1, n + 1)))
        by_position = {p: k for k, p in before.items()}

        # 2,000 event streams, positions 1, 6, 11, ...: each opens with its position.
        watched = [by_position[p] for p in range(1, n + 1, 5)]
        self.assertEqual(len(watched), stream_count)
        streams = open_streams(c.port, watched)
        self.socks.extend(s.sock for s in streams)
        self.assertEqual([stream_place(s) for s in streams], [before[k] for k in watched])
        self.assertEqual(c.fifo_inversions(), 0)
        stats_before = c.stats()
        self.assertEqual(stats_before["queued_total"], n + CAP + held_count)

        # The stop: held requests are answered at once with the waiting page and their cookie,
        # streams end, the openers' requests are cut after the 2 s grace.
        self.sigterm(c, held, streams)
        self.assertTrue(all(s.eof or s.ended for s in streams), "a stream outlived the stop")
        held_before = {}
        for a in held:
            self.assertEqual(len(a.responses), 1, "a held request got no answer at the stop")
            status, headers, body = a.responses[0]
            m = POSITION_RE.search(body)
            self.assertTrue(status == 200 and ticket_of(headers) and m, (status, headers, body[:300]))
            held_before[ticket_of(headers)] = int(m.group(1))
        self.assertEqual(sorted(held_before.values()), list(range(n + 1, n + held_count + 1)))

        c2 = self.concert(YAML_HOLD)
        waiting, _, _ = self.kept_line(c2)
        self.assertEqual(waiting, n + held_count)
        stats = c2.stats()
        # Counters go on: nothing was issued or admitted since; the generation goes on too.
        for key in ("queued_total", "admissions_line_total", "admissions_direct_total", "admissions_held_total"):
            self.assertEqual(stats[key], stats_before[key], key)
        self.assertGreater(stats["generation"], stats_before["generation"])
        self.assertEqual(stats["live_queue_depth"], n + held_count)
        free = self.assert_places_kept(c2, before)

        # The held visitors come back with their cookies: a poll then the page, pipelined on one
        # connection. The poll shows the place they had; the page request is held again, on the
        # same ticket (no new one is issued).
        back = {}
        for cookie in held_before:
            a = Answer(self.track(connect(c2.port)))
            a.sock.sendall(status_request(cookie) + page_request("/page?back=1", "text/html", cookie))
            back[cookie] = a
        read_answers(list(back.values()), 1, time.time() + 20)
        again = {k: (place(*a.responses[0][::2]) if a.responses else None) for k, a in back.items()}
        self.assertEqual(again, held_before)

        # The streams come back: each opens with its place (the first one's turn came: ready).
        streams = open_streams(c2.port, watched)
        self.socks.extend(s.sock for s in streams)
        got = [stream_place(s) for s in streams]
        self.assertEqual(got, ["ready" if before[k] <= free else before[k] for k in watched])

        stats = c2.stats()
        self.assertEqual((stats["queued_total"], stats["live_queue_depth"]), (stats_before["queued_total"],
                                                                             n + held_count))
        self.assertEqual(stats["fifo_inversions_total"], 0)
        # Still held: no answer to the page requests (their turn is 10,000 places away).
        self.assertTrue(all(len(a.responses) == 1 and nothing_to_read(a.sock) for a in back.values()))
        # The next stop answers each with the waiting page: its own ticket, its own place.
        self.sigterm(c2, list(back.values()), streams, count=2)
        for cookie, a in back.items():
            self.assertEqual(len(a.responses), 2, "held request %s got no answer at the stop" % cookie)
            status, headers, body = a.responses[1]
            m = POSITION_RE.search(body)
            self.assertEqual((status, ticket_of(headers), int(m.group(1)) if m else None),
                             (200, cookie, held_before[cookie]))

    def test_sigkill_keeps_every_place_and_no_slot_leaks(self):
        n, held_count = 2000, 100
        c = self.concert(YAML_TAKING)
        cookies, _ = self.line_up(c, n)
        before = places(c.port, cookies)
        self.assertEqual(sorted(before.values()), list(range(1, n + 1)))
        by_position = {p: k for k, p in before.items()}

        # The first 100 come back for the page with their cookies and are held (a poll first on the
        # same connection: Concert has the page request once the poll is answered).
        front = [by_position[p] for p in range(1, held_count + 1)]
        held = []
        for k in front:
            a = Answer(self.track(connect(c.port)))
            a.sock.sendall(status_request(k) + page_request("/page?first=1", "text/html", k))
            held.append(a)
        read_answers(held, 1, time.time() + 20)
        self.assertEqual([place(*a.responses[0][::2]) if a.responses else None for a in held],
                         list(range(1, held_count + 1)))
        watched = [by_position[p] for p in range(held_count + 1, n + 1, 5)]
        streams = open_streams(c.port, watched)
        self.socks.extend(s.sock for s in streams)
        self.assertEqual([stream_place(s) for s in streams], [before[k] for k in watched])
        stats_before = c.stats()
        self.assertEqual(stats_before["occupancy"], CAP)

        # SIGKILL: the 4 openers' requests die with their workers, but the origin is still working on
        # them (its gate is closed): it counts them in flight until they end.
        self.sigkill(c)
        for a in held:
            a.sock.close()
        for s in streams:
            s.close()
        self.assertEqual(self.origin.recorder.page_in_flight, CAP)

        # Their slots stay in quarantine for -upstream-timeout: the origin may still be serving them.
        c2 = self.concert(YAML_HOLD + "upstream-timeout: 5s\n")
        waiting, ended, slots = self.kept_line(c2)
        self.assertEqual(waiting, n)
        self.assertEqual((ended, slots), (2, CAP), "page slots reclaimed from the 2 killed workers")
        stats = c2.stats()
        self.assertEqual(stats["queued_total"], stats_before["queued_total"])
        self.assertEqual(stats["live_queue_depth"], n)
        self.assert_places_kept(c2, before)
        streams = open_streams(c2.port, watched)
        self.socks.extend(s.sock for s in streams)
        self.assertEqual([stream_place(s) for s in streams], [before[k] for k in watched])

        # The held visitors come back: each held until its turn, admitted in line order. The origin
        # holds their requests too (gate "after") until the old ones are done.
        back = []
        for i, k in enumerate(front):
            a = Answer(self.track(connect(c2.port)))
            a.sock.sendall(page_request("/slow?gate=after&timeout=60&p=%d" % (i + 1), "text/html", k))
            back.append(a)
        # The killed workers' slots are in quarantine: occupancy counts them, and nobody is admitted
        # while the origin may still be serving their requests.
        self.assertEqual(c2.stats()["occupancy"], CAP)
        time.sleep(1)
        self.assertEqual(self.at_origin("gate=after"), [])
        in_flight_then = self.origin.recorder.page_in_flight
        self.origin.release()  # the killed workers' requests end at the origin
        self.assertTrue(wait_for(lambda: self.origin.recorder.page_in_flight == 0, timeout=10))
        # The quarantine ends (-upstream-timeout after the start): the held visitors go in, in order.
        self.assertTrue(wait_for(lambda: "page slots of ended requests back in use" in c2.log(), timeout=15),
                        c2.log())
        self.origin.release("after")
        read_answers(back, 1, time.time() + 30)
        outcomes = [(a.responses[0][0], a.responses[0][2]) if a.responses else None for a in back]
        self.assertEqual(outcomes, [(200, b"ok")] * held_count)
        came = [int(target.rsplit("=", 1)[1]) for target in self.at_origin("gate=after")]
        self.assertEqual(sorted(came), list(range(1, held_count + 1)))
        self.assertTrue(wait_for(lambda: c2.stats()["occupancy"] == 0, timeout=10), c2.stats())
        self.assertTrue(wait_for(lambda: self.origin.recorder.page_in_flight == 0, timeout=10))
        stats = c2.stats()
        self.assertEqual(stats["live_queue_depth"], n - held_count)
        self.assertEqual(stats["queued_total"], stats_before["queued_total"])
        self.assertEqual(stats["fifo_inversions_total"], 0)
        self.assertLessEqual(self.origin.recorder.max_page_in_flight, CAP,
                             "the origin had %d page requests at once (right after the restart's first "
                             "admissions: %d) with -cap %d" % (self.origin.recorder.max_page_in_flight,
                                                               in_flight_then, CAP))

    def test_admit_secret_generated_in_state_dir(self):
        path = os.path.join(self.state_dir, "admit-secret")
        c = self.concert("", secret=None)
        self.assertTrue(os.path.exists(path), os.listdir(self.state_dir))
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        with open(path) as f:
            secret = f.read().strip()
        self.assertGreaterEqual(len(secret), 32)
        self.assertNotIn("CONCERT_ADMIT_SECRET is not set", c.log())
        # Admitted while the room is empty: a pass signed with the state dir's secret.
        status, headers, body = c.get("/in")
        self.assertEqual((status, body), (200, b"ok"))
        admitted_pass = set_cookies(headers)["concert_admit"]
        # Six visitors wait behind the 4 slots the origin holds: positions 1..6.
        fill(c, CAP, path="/slow?gate=full&timeout=120", origin=self.origin)
        waiting = [ticket_of(c.get("/wait", {"Accept": "application/json"})[1]) for _ in range(CAP + 2)]
        self.assertEqual(places(c.port, waiting), {k: i + 1 for i, k in enumerate(waiting)})
        identity = os.stat(path)

        def session_admitted(concert, value):
            """True when a request with the pass `value` is admitted as a session (not direct)."""
            before = concert.stats()["admissions_session_total"]
            status, _, body = concert.get("/session", {"Cookie": "concert_admit=" + value})
            return (status, body) == (200, b"ok") and concert.stats()["admissions_session_total"] == before + 1

        for restart in range(2):
            # The origin finishes the 4 requests before the stop: their slots are free (a request cut
            # at the stop would keep its slot in quarantine, as the SIGKILL test shows).
            self.origin.release("full")
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=10), c.stats())
            c.stop()
            c = self.concert("", secret=None)
            self.kept_line(c)
            now = os.stat(path)
            self.assertEqual((now.st_ino, now.st_mtime_ns, stat.S_IMODE(now.st_mode)),
                             (identity.st_ino, identity.st_mtime_ns, 0o600), "admit-secret was made again")
            # The slots are free: the first 4 in line are ready, the others keep their positions.
            self.assertEqual(places(c.port, waiting),
                             {k: "ready" if i < CAP else i + 1 for i, k in enumerate(waiting)})
            # The first one takes its turn: everyone behind moves up one.
            status, _, body = c.get("/turn", {"Cookie": "room_ticket=" + waiting[0]})
            self.assertEqual((status, body), (200, b"ok"))
            waiting.pop(0)
            # The pass from before the restarts is valid: the secret is the file's.
            self.assertTrue(session_admitted(c, admitted_pass), c.stats())
            self.assertTrue(session_admitted(c, mint_pass(secret=secret)))
            self.assertFalse(session_admitted(c, mint_pass(secret=TEST_SECRET)))
        self.assertEqual(c.fifo_inversions(), 0)

    def test_two_masters_refused(self):
        first = self.concert("")
        fill(first, CAP, path="/slow?gate=full&timeout=120", origin=self.origin)
        ticket = ticket_of(first.get("/wait", {"Accept": "application/json"})[1])
        self.assertEqual(places(first.port, [ticket]), {ticket: 1})
        segment = os.stat(os.path.join(self.state_dir, "segment"))
        second = self.concert("", start=False, wait=False)
        second.start()
        try:
            second.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.fail("a second master on the same state dir kept running:\n" + second.log())
        self.assertNotEqual(second.proc.returncode, 0, second.log())
        self.assertIn("state-dir %s is in use by another Concert master (pid %d)" % (self.state_dir, first.proc.pid),
                      second.log())
        self.assertNotRegex(second.log(), r"worker \d+ started pid", "a refused master started workers")
        # The first master and its line are untouched.
        now = os.stat(os.path.join(self.state_dir, "segment"))
        self.assertEqual((now.st_ino, now.st_size), (segment.st_ino, segment.st_size))
        self.assertEqual(first.get("/_room/healthz")[0], 200)
        self.assertEqual(first.stats()["workers"], 2)
        self.assertEqual(places(first.port, [ticket]), {ticket: 1})


if __name__ == "__main__":
    unittest.main()
