"""-state-dir across restarts: the line is kept in DIR/segment, a larger -max-queue grows it in order,
and a segment this binary cannot use is refused and left exactly as it was.

    cd tests/integration && CONCERT_BIN=/tmp/b2/concert PYTHONPATH=../lib python3 -m unittest -v test_state_grow

What a restart does to the line (master/state_dir.h): an existing segment of this binary's layout is
attached; what the previous run's processes held (page slots of requests in flight) is reclaimed;
if the configuration wants a larger geometry, the state is copied in order into a new segment and
renamed over the old one ("segment grown from ring A, ... to ring B, ..., N waiting kept in order").
A segment of another layout version, or one that is not a segment at all, fails the start and is
left as it is.

Tests: the line grown by a longer -max-queue (50,000 tickets, sampled places unchanged); tickets
carried past a ring lap keep their places through the copy; a segment of another layout version,
and one that is empty, short, garbage or cut short, fails the start and is left byte for byte.

Tickets are issued fast: raw keep-alive sockets, many pipelined GETs each (an API client's
Accept: application/json gets 429 JSON and the room_ticket cookie, 32 hex digits: the ticket
number, then the nonce). Positions come from GET /queue/status with the cookie (one accepted poll
a second per ticket: each sampled ticket is polled once per run, more than a second apart)."""
import hashlib
import json
import os
import random
import re
import shutil
import socket
import struct
import tempfile
import time
import unittest

from concert_harness import Concert, in_thread, wait_for
from fake_origin import FakeOrigin
from visitor import Visitor

LAYOUT_VERSION_OFFSET = 8  # shm/layout.h Header: uint64 magic, uint32 layout_version, uint32 ring_size, ...
RING_SIZE_OFFSET = 12
RING_RE = re.compile(r"shared memory: \d+ bytes, \d+ worker slots, ring (\d+),")
COOKIE_RE = re.compile(rb"\r\nset-cookie: room_ticket=([0-9a-f]{32})", re.I)
LENGTH_RE = re.compile(rb"\r\ncontent-length: *(\d+)", re.I)
# Nothing leaves the line on its own while a test runs: no first-poll grace, TTL or claim window
# runs out (their longest values).
PATIENT = ["-first-poll-grace", "1h", "-token-ttl", "1h", "-claim-window", "1h"]


def pipelined(port, requests, window=256, timeout=60):
    """Sends `requests` (bytes each) on one keep-alive connection, at most `window` unanswered at
    once, and returns every answer in order: (status, head bytes, body bytes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    answers, buf, sent = [], b"", 0
    try:
        while len(answers) < len(requests):
            if sent - len(answers) <= window // 2 and sent < len(requests):
                k = min(window - (sent - len(answers)), len(requests) - sent)
                s.sendall(b"".join(requests[sent:sent + k]))
                sent += k
            data = s.recv(1 << 20)
            if not data:
                raise OSError("connection closed after %d of %d answers" % (len(answers), len(requests)))
            buf += data
            at = 0
            while True:
                end = buf.find(b"\r\n\r\n", at)
                if end < 0:
                    break
                head = buf[at:end + 2]
                m = LENGTH_RE.search(head)
                body_end = end + 4 + (int(m.group(1)) if m else 0)
                if len(buf) < body_end:
                    break
                answers.append((int(head[9:12]), head, buf[end + 4:body_end]))
                at = body_end
            buf = buf[at:]
    finally:
        s.close()
    return answers


def page_request(path="/page"):
    return ("GET %s HTTP/1.1\r\nHost: room.test\r\nAccept: application/json\r\n\r\n" % path).encode()


def status_request(cookie):
    return ("GET /queue/status HTTP/1.1\r\nHost: room.test\r\nAccept: application/json\r\n"
            "Cookie: room_ticket=%s\r\n\r\n" % cookie).encode()


def queue_many(port, n, sockets=8):
    """n arrivals that all have to wait, over `sockets` connections in parallel: their room_ticket
    cookies, in ticket order. Every answer must be the waiting one (429 with a cookie)."""
    per = [n // sockets + (1 if i < n % sockets else 0) for i in range(sockets)]
    runs = [in_thread(pipelined, port, [page_request()] * k) for k in per]
    cookies = []
    for run in runs:
        for status, head, _ in run.outcome(120):
            m = COOKIE_RE.search(head)
            if status != 429 or not m:
                raise AssertionError("not the waiting answer: %d %r" % (status, head[:300]))
            cookies.append(m.group(1).decode())
    return sorted(cookies, key=ticket_of)


def ticket_of(cookie):
    return int(cookie[:16], 16)


def positions(port, cookies):
    """{cookie: position, or "ready"} from one GET /queue/status each (pipelined, one connection).
    Fails on a poll the rate limit refused or an answer that is neither."""
    out = {}
    for cookie, (status, _, body) in zip(cookies, pipelined(port, [status_request(c) for c in cookies])):
        doc = json.loads(body)
        if status != 200:
            raise AssertionError("/queue/status for %s answered %d %r" % (cookie, status, body))
        if doc.get("ready"):
            out[cookie] = "ready"
        elif "position" in doc:
            out[cookie] = doc["position"]
        else:
            raise AssertionError("/queue/status for %s: %r" % (cookie, doc))
    return out


def file_sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_u32(path, offset):
    with open(path, "rb") as f:
        f.seek(offset)
        return struct.unpack("<I", f.read(4))[0]


def write_u32(path, offset, value):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack("<I", value))


def quiet_origin():
    """A fake origin that does not print a traceback for each answer whose client (Concert, cut at
    its stop) went away."""
    origin = FakeOrigin()
    origin.server.handle_error = lambda request, address: None
    return origin


def hold_slots(c, n):
    """n slow page requests at the origin: the room is full, everyone after them waits."""
    held = [in_thread(c.get, "/slow?timeout=120", timeout=120) for _ in range(n)]
    if not wait_for(lambda: c.stats()["occupancy"] == n, timeout=10):
        raise AssertionError("the origin does not hold %d requests: %s" % (n, c.stats()))
    return held


class StateGrowTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="concert-state-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.state = os.path.join(self.dir, "state")
        self.segment = os.path.join(self.state, "segment")
        self.origin = quiet_origin()
        self.addCleanup(self.origin.stop)

    def concert(self, *extra, cap=2, wait=True):
        return Concert(["-upstream", self.origin.url, "-cap", str(cap), "-state-dir", self.state,
                        "-shutdown-grace", "1s"] + PATIENT + list(extra), workers=2, wait=wait)

    def refused(self, *extra):
        """Starts Concert on the state dir expecting the start to fail: (exit status, its log)."""
        c = self.concert(*extra, wait=False)
        c.start()
        try:
            c.proc.wait(20)
        except Exception:
            c.kill_all()
            raise AssertionError("Concert started on a segment it should refuse:\n" + c.log())
        c.stderr.close()
        return c.proc.returncode, c.log()

    # ------------------------------------------------------------------ (a)
    def test_max_queue_grown_across_restart(self):
        n = 50000
        rng = random.Random()
        seed = rng.randrange(1 << 30)
        rng.seed(seed)
        c = self.concert("-max-queue", "60000").start()
        try:
            ring = [int(r) for r in RING_RE.findall(c.log())]
            self.assertEqual(ring, [131072], c.log())  # 2 x (60000 + 2), to a power of two
            hold_slots(c, 2)
            t = time.monotonic()
            cookies = queue_many(c.port, n)
            queued_in = time.monotonic() - t
            self.assertEqual(len(set(cookies)), n)
            first = ticket_of(cookies[0])
            self.assertEqual([ticket_of(k) for k in cookies], list(range(first, first + n)))
            stats = c.stats()
            self.assertEqual(stats["live_queue_depth"], n)
            # Sampled: the first 50, the last 50, 200 from the middle.
            sample = cookies[:50] + cookies[-50:] + rng.sample(cookies[50:-50], 200)
            before = positions(c.port, sample)
            polled_at = time.monotonic()
            # Nobody has left: everyone's place is their rank in the line.
            rank = {k: i + 1 for i, k in enumerate(cookies)}
            self.assertEqual(before, {k: rank[k] for k in sample})
            admitted_line = stats["admissions_line_total"]
            queued_total = stats["queued_total"]
        finally:
            # SIGTERM: the two requests at the origin are cut after -shutdown-grace 1s.
            c.stop()
            c.stderr.close()
        # Exit status 1 when requests had to be cut at the end of the grace ("not every worker
        # finished cleanly"); either way the master stopped and left the segment in place.
        self.assertIn(c.proc.returncode, (0, 1), c.log())
        self.assertIn("stopped", c.log())
        self.assertEqual(read_u32(self.segment, RING_SIZE_OFFSET), 131072)

        t = time.monotonic()
        c2 = self.concert("-max-queue", "200000").start()
        restarted_in = time.monotonic() - t
        try:
            log = c2.log()
            grown = re.search(r"state-dir %s: segment grown from ring (\d+), .* to ring (\d+), .*, (\d+) waiting "
                              r"kept in order" % re.escape(self.state), log)
            self.assertIsNotNone(grown, log)
            self.assertEqual(grown.groups(), ("131072", "524288", str(n)), grown.group(0))
            self.assertEqual([int(r) for r in RING_RE.findall(log)], [524288], log)
            self.assertEqual(read_u32(self.segment, RING_SIZE_OFFSET), 524288)
            self.assertFalse(os.path.exists(self.segment + ".new"))
            stats = c2.stats()
            self.assertEqual(stats["live_queue_depth"], n)
            self.assertEqual(stats["queue_depth"], n)
            self.assertEqual(stats["queued_total"], queued_total)
            # The two requests held at the origin were cut at the stop, and the origin is still
            # serving them: their slots stay in quarantine (counted in the occupancy) for
            # -upstream-timeout. Nobody was admitted from the line (nobody came for the page:
            # admissions_line_total is unchanged), so every place is what it was. Exactly: expected =
            # before for every place past the free slots, "ready" within them (none are free).
            self.assertEqual(stats["occupancy"], 2)
            self.assertEqual(stats["admissions_line_total"], admitted_line)
            free = stats["cap"] - stats["occupancy"]
            self.assertEqual(free, 0)
            time.sleep(max(0.0, polled_at + 1.1 - time.monotonic()))  # one accepted poll a second per ticket
            after = positions(c2.port, sample)
            expected = {k: ("ready" if p <= free else p) for k, p in before.items()}
            wrong = {rank[k]: (before[k], after[k]) for k in sample if after[k] != expected[k]}
            self.assertEqual(wrong, {}, "seed %d: place in line: (before, after) of the sampled tickets that "
                                        "moved" % seed)
            self.assertEqual(c2.stats()["admissions_line_total"], admitted_line)
            # New arrivals continue the numbers and go behind everyone.
            fresh = queue_many(c2.port, 3, sockets=1)
            self.assertEqual([ticket_of(k) for k in fresh], [first + n, first + n + 1, first + n + 2])
            self.assertEqual(sorted(positions(c2.port, fresh).values()), [n + 1, n + 2, n + 3])
            self.assertEqual(c2.stats()["live_queue_depth"], n + 3)
        finally:
            c2.stop()
            c2.stderr.close()
        print("\nstate grow: %d tickets queued in %.2f s; restart with the copy in %.2f s" %
              (n, queued_in, restarted_in))

    # ------------------------------------------------------------------ (b)
    def test_other_layout_refused_untouched(self):
        c = self.concert(cap=1).start()
        try:
            hold_slots(c, 1)
            visitors = [Visitor(c, "v%d" % i) for i in range(4)]
            for v in visitors:
                status, _, _ = v.get("/page")
                self.assertEqual(status, 429)
                self.assertIn("room_ticket", v.jar)
            before = [v.position() for v in visitors]
            self.assertEqual(before, [1, 2, 3, 4])
        finally:
            c.stop()
            c.stderr.close()
        version = read_u32(self.segment, LAYOUT_VERSION_OFFSET)
        original = file_sha(self.segment)
        other = version + 1
        write_u32(self.segment, LAYOUT_VERSION_OFFSET, other)
        patched = file_sha(self.segment)
        stat = os.stat(self.segment)
        listing = sorted(os.listdir(self.state))

        status, log = self.refused()
        self.assertNotEqual(status, 0, log)
        self.assertIn("layout version %d, this binary expects %d" % (other, version), log)
        self.assertIn("left as it is", log)
        self.assertIn(self.segment, log)
        self.assertEqual(file_sha(self.segment), patched, "the refused segment was modified")
        self.assertEqual((os.stat(self.segment).st_size, os.stat(self.segment).st_mtime_ns),
                         (stat.st_size, stat.st_mtime_ns))
        self.assertEqual(sorted(os.listdir(self.state)), listing)  # no segment.new, nothing set aside

        # The version put back: the same bytes as before, and the line as it was.
        write_u32(self.segment, LAYOUT_VERSION_OFFSET, version)
        self.assertEqual(file_sha(self.segment), original)
        c3 = self.concert(cap=1).start()
        for v in visitors:
            v.target = c3
        try:
            self.assertIn("the line of the previous run kept (4 waiting)", c3.log())
            # The request held at the origin was cut at the stop, and the origin is still serving
            # it: its slot stays in quarantine for -upstream-timeout. Everyone keeps their place.
            self.assertEqual(c3.stats()["occupancy"], 1)
            self.assertEqual([v.position() for v in visitors], before)
        finally:
            c3.stop()
            c3.stderr.close()

    # ------------------------------------------------------------------ carried tickets
    def test_carried_ticket_keeps_places_across_grow(self):
        """A ring's worth of numbers passes behind a waiting head (arrivals an operator removes
        again): the head is carried (it keeps its number and entry, as a returned ticket ahead of
        the line) and the number that comes round to its entry is skipped. That number holds
        nobody: the tickets behind it must keep their places when the segment grows."""
        c = self.concert("-max-queue", "2000", "-admin-listen", "127.0.0.1:0", cap=1).start()
        try:
            self.assertEqual([int(r) for r in RING_RE.findall(c.log())], [4096], c.log())
            hold_slots(c, 1)

            def passers_by(n):
                """n arrivals removed again at once (DELETE /_room/queue/<ticket>), at most 1000 live."""
                while n > 0:
                    batch = queue_many(c.port, min(n, 1000), sockets=4)
                    removed = pipelined(c.admin_port, [("DELETE /_room/queue/%d HTTP/1.1\r\nHost: room.test\r\n\r\n"
                                                        % ticket_of(k)).encode() for k in batch])
                    self.assertEqual({status for status, _, _ in removed}, {200})
                    n -= len(batch)

            head = queue_many(c.port, 1, sockets=1)[0]            # ticket 1
            passers_by(99)                                        # 2..100
            second = queue_many(c.port, 1, sockets=1)[0]          # 101
            passers_by(4096 - 101)                                # 102..4096
            behind = queue_many(c.port, 20, sockets=1)            # 4098.. (4097 is skipped)
            self.assertEqual((ticket_of(head), ticket_of(second)), (1, 101))
            self.assertEqual(ticket_of(behind[0]), 4098, "the number at the carried head's entry is skipped")
            self.assertEqual(c.stats()["live_queue_depth"], 22)
            before = positions(c.port, [head, second] + behind)
            polled_at = time.monotonic()
            # 1 is carried (returned: ahead of everyone, shown first), 101 is first in line, then the rest.
            self.assertEqual([before[k] for k in behind], list(range(2, 22)), before)
        finally:
            c.stop()
            c.stderr.close()

        c2 = self.concert("-max-queue", "10000", "-admin-listen", "127.0.0.1:0", cap=1).start()
        try:
            self.assertRegex(c2.log(), r"segment grown from ring 4096, .* to ring 32768, .*, 22 waiting kept in order")
            stats = c2.stats()
            # The held request cut at the stop keeps its slot in quarantine (the origin still serves it).
            self.assertEqual((stats["live_queue_depth"], stats["occupancy"]), (22, 1))
            time.sleep(max(0.0, polled_at + 1.1 - time.monotonic()))
            after = positions(c2.port, [head, second] + behind)
            # No slot is free yet: the carried head (returned) keeps its place first, everyone else
            # theirs.
            self.assertEqual(after[head], before[head])
            self.assertEqual(after[second], before[second])
            self.assertEqual([after[k] for k in behind], [before[k] for k in behind],
                             "places behind the skipped number after the copy")
        finally:
            c2.stop()
            c2.stderr.close()

    # ------------------------------------------------------------------ (c)
    def test_garbage_or_short_segment_refused_untouched(self):
        # A real segment to cut short.
        c = self.concert().start()
        c.stop()
        c.stderr.close()
        with open(self.segment, "rb") as f:
            real = f.read()
        self.assertGreater(len(real), 1 << 20)
        rng = random.Random(7)
        cases = [
            ("empty", b"", "the segment is 0 bytes, too small for its header"),
            ("short", b"!CONCERT" + bytes(92), "the segment is 100 bytes, too small for its header"),
            ("garbage", bytes(rng.randrange(256) for _ in range(1 << 16)), "not a Concert segment"),
            ("cut short", real[:1 << 20], "is %d bytes mapped, its header says %d" % (1 << 20, len(real))),
        ]
        for name, content, reason in cases:
            with self.subTest(name):
                with open(self.segment, "wb") as f:
                    f.write(content)
                sha = file_sha(self.segment)
                listing = sorted(os.listdir(self.state))
                status, log = self.refused()
                self.assertNotEqual(status, 0, log)
                self.assertIn(reason, log)
                self.assertIn("left as it is", log)
                self.assertEqual(file_sha(self.segment), sha, "the refused segment was modified")
                self.assertEqual(os.path.getsize(self.segment), len(content))
                self.assertEqual(sorted(os.listdir(self.state)), listing)
        # The real one back in place: it starts again.
        with open(self.segment, "wb") as f:
            f.write(real)
        c = self.concert().start()
        try:
            self.assertIn("the line of the previous run kept (0 waiting)", c.log())
        finally:
            c.stop()
            c.stderr.close()


if __name__ == "__main__":
    unittest.main()
