"""GET /queue/events against the real binary: the waiting page learns its
turn by push.

Checked here: the stream's head and framing (chunked for HTTP/1.1, delimited by
the close for HTTP/1.0); a `position` event first, with /queue/status's body;
the answers that are not a stream; `ready` soon after the slot frees, then the
terminating chunk and a connection that carries the next request; a stream
whose position does not change gets keep-alive comments only; with 200 streams
on one line, an admission writes to the stream that became ready and to no
other (their position updates come later, coalesced, one each); the stream
ends for a cookie refresh and the page can reconnect; a client that goes away
leaves no connection behind and keeps its place; SIGTERM ends every stream at
once. Timing bounds are generous; the one that matters (the quiet second after
an admission) is derived from the 5 s position limit and checked to hold."""
import os
import selectors
import signal
import socket
import time
import unittest

from concert_harness import Concert, header, set_cookies as cookies, wait_for
from fake_origin import FakeOrigin
from room import fill

KEEP_ALIVE = ("comment", "keep-alive")
HOLDER = "/slow?gate=holder"  # holds the only page slot until origin.release("holder")


class EventStream:
    """A raw client of /queue/events: reads the head, then decodes the body
    (chunked or to the close) into SSE items (time, kind, value):
    ("event", name, data), ("comment", text), ("retry", ms)."""

    def __init__(self, port, ticket=None, http10=False, timeout=10, sock=None, pending=b""):
        """`sock`: reuse a kept-alive connection (with `pending`, bytes already read from it)."""
        self.sock = sock or socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sent_at = time.time()
        lines = ["GET /queue/events HTTP/1.%d" % (0 if http10 else 1), "Host: 127.0.0.1",
                 "Accept: text/event-stream"]
        if ticket:
            lines.append("Cookie: room_ticket=%s; room_probe=1" % ticket)
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buffer = pending
        self.status = None
        self.headers = []
        self.chunked = False
        self.body = b""       # decoded body bytes not yet split into messages
        self.received = b""   # every decoded body byte
        self.items = []
        self.ended = False    # terminating chunk seen
        self.eof = False
        self.after = b""      # bytes after the terminating chunk (a next response)

    # -- reading
    def read_head(self, timeout=10):
        deadline = time.time() + timeout
        while b"\r\n\r\n" not in self.buffer:
            self.sock.settimeout(max(0.01, deadline - time.time()))
            data = self.sock.recv(65536)
            if not data:
                raise AssertionError("closed before the head: %r" % self.buffer)
            self.buffer += data
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status_line = lines[0]
        self.status = int(lines[0].split()[1])
        self.headers = [tuple(part.strip() for part in l.split(":", 1)) for l in lines[1:]]
        self.chunked = (header(self.headers, "Transfer-Encoding") or "").lower() == "chunked"
        self.buffer = b""
        self._feed(rest)
        return self

    def _feed(self, data):
        now = time.time()
        if self.ended:
            self.after += data
            return
        if not self.chunked:
            self._body(data, now)
            return
        self.buffer += data
        while not self.ended:
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                return
            size = int(self.buffer[:line_end], 16)
            if size == 0:
                if len(self.buffer) < line_end + 4:
                    return
                assert self.buffer[line_end:line_end + 4] == b"\r\n\r\n", self.buffer
                self.ended = True
                self.after += self.buffer[line_end + 4:]
                self.buffer = b""
                return
            start = line_end + 2
            if len(self.buffer) < start + size + 2:
                return
            assert self.buffer[start + size:start + size + 2] == b"\r\n", self.buffer
            self._body(self.buffer[start:start + size], now)
            self.buffer = self.buffer[start + size + 2:]

    def _body(self, data, now):
        self.received += data
        self.body += data
        while b"\n\n" in self.body:
            message, _, self.body = self.body.partition(b"\n\n")
            fields = {}
            for line in message.decode().split("\n"):
                if line.startswith(":"):
                    self.items.append((now, "comment", line[1:].strip()))
                    continue
                name, _, value = line.partition(":")
                fields[name] = value[1:] if value.startswith(" ") else value
            if "retry" in fields:
                self.items.append((now, "retry", int(fields["retry"])))
            if "data" in fields:
                self.items.append((now, "event", fields.get("event", "message"), fields["data"]))

    def pump(self, timeout):
        """Reads what arrives within `timeout` (or until the stream ends or closes)."""
        deadline = time.time() + timeout
        while not self.eof and not self.ended and time.time() < deadline:
            self.read_once(max(0.01, deadline - time.time()))
        return self

    def read_once(self, timeout):
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.eof = True
            return
        self._feed(data)

    def wait_for_item(self, predicate, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline and not self.eof:
            for item in self.items:
                if predicate(item):
                    return item
            if self.ended:
                break
            self.read_once(max(0.01, deadline - time.time()))
        for item in self.items:
            if predicate(item):
                return item
        return None

    def events(self, name=None):
        return [i for i in self.items if i[1] == "event" and (name is None or i[2] == name)]

    def kinds(self):
        return [(i[1], i[2]) for i in self.items]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def pump_all(streams, seconds):
    """Reads every stream for `seconds` without blocking on any one of them."""
    sel = selectors.DefaultSelector()
    for s in streams:
        s.sock.setblocking(False)
        sel.register(s.sock, selectors.EVENT_READ, s)
    deadline = time.time() + seconds
    try:
        while time.time() < deadline:
            for key, _ in sel.select(max(0.0, deadline - time.time())):
                s = key.data
                try:
                    data = s.sock.recv(65536)
                except BlockingIOError:
                    continue
                except (ConnectionResetError, BrokenPipeError):
                    data = b""
                if not data:
                    s.eof = True
                    sel.unregister(s.sock)
                    continue
                s._feed(data)
    finally:
        sel.close()
        for s in streams:
            s.sock.setblocking(True)


class EventsTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()
        self.streams = []

    def tearDown(self):
        for s in self.streams:
            s.close()
        self.origin.stop()

    def concert(self, *args, workers=2, **kw):
        return Concert(["-upstream", self.origin.url] + list(args), workers=workers, **kw)

    def queue_visitor(self, c):
        """A cookie-less API request that has to queue: its room_ticket."""
        status, headers, _ = c.get("/")
        self.assertEqual(status, 429)
        return cookies(headers)["room_ticket"]

    def open(self, c, ticket, **kw):
        s = EventStream(c.port, ticket, **kw)
        self.streams.append(s)
        return s.read_head()

    def worker_sockets(self, c):
        n = 0
        for pid in c.worker_pids():
            try:
                for fd in os.listdir("/proc/%d/fd" % pid):
                    try:
                        if os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:"):
                            n += 1
                    except OSError:
                        pass
            except OSError:
                pass
        return n

    def test_head_framing_and_first_event(self):
        with self.concert("-cap", "1") as c:
            holder = fill(c, path=HOLDER)[0]
            self.queue_visitor(c)
            ticket = self.queue_visitor(c)

            s = self.open(c, ticket)
            self.assertEqual(s.status_line, "HTTP/1.1 200 OK")
            self.assertEqual(header(s.headers, "Content-Type"), "text/event-stream")
            self.assertEqual(header(s.headers, "Cache-Control"), "no-store")
            self.assertEqual(header(s.headers, "X-Accel-Buffering"), "no")
            self.assertEqual(header(s.headers, "Transfer-Encoding"), "chunked")
            self.assertIsNone(header(s.headers, "Content-Length"))
            self.assertIsNone(header(s.headers, "Connection"))
            self.assertEqual(cookies(s.headers)["room_ticket"], ticket)
            self.assertEqual(cookies(s.headers)["room_probe"], "1")
            first = s.wait_for_item(lambda i: True, timeout=5)
            self.assertEqual(first[1:3], ("event", "position"))
            status, _, body = c.get("/queue/status", {"Cookie": "room_ticket=" + ticket})
            self.assertEqual(status, 200)
            self.assertEqual(first[3].encode(), body)  # nothing moved in between: the same bytes
            self.assertIn(b'"position":2', body)
            # One chunk, one message.
            self.assertEqual(s.received, b"event: position\ndata: " + body + b"\n\n")

            old = self.open(c, ticket, http10=True)
            self.assertEqual(old.status, 200)
            self.assertIsNone(header(old.headers, "Transfer-Encoding"))
            self.assertEqual(header(old.headers, "Connection"), "close")
            self.assertIsNone(header(old.headers, "Content-Length"))
            self.assertTrue(old.wait_for_item(lambda i: i[1] == "event", timeout=5))
            self.assertTrue(old.received.startswith(b"event: position\ndata: {\"ready\":false,\"position\":2"))

            self.origin.release("holder")
            holder.join(10)

    def test_answers_that_are_not_a_stream(self):
        with self.concert("-cap", "1") as c:
            status, headers, body = c.get("/queue/events")
            self.assertEqual((status, body), (200, b'{"ready":false,"cookies_required":true}'))
            self.assertEqual(header(headers, "Content-Type"), "application/json; charset=utf-8")
            self.assertEqual(c.get("/queue/events", {"Cookie": "room_ticket=nothex"})[2], b'{"ready":true}')
            unknown = "00000000000000050000000000000007"
            self.assertEqual(c.get("/queue/events", {"Cookie": "room_ticket=" + unknown})[2], b'{"ready":true}')
            for method in ("POST", "HEAD", "OPTIONS"):
                status, headers, _ = c.request(method, "/queue/events")
                self.assertEqual(status, 405, method)
                self.assertEqual(header(headers, "Allow"), "GET")
            self.assertEqual(self.origin.recorder.hits(), 0)

    def test_ready_soon_after_the_slot_frees_then_the_connection_carries_on(self):
        with self.concert("-cap", "1") as c:
            holder = fill(c, path=HOLDER)[0]
            ticket = self.queue_visitor(c)
            s = self.open(c, ticket)
            self.assertTrue(s.wait_for_item(lambda i: i[2] == "position", timeout=5))
            released = time.time()
            self.origin.release("holder")
            ready = s.wait_for_item(lambda i: i[1] == "event" and i[2] == "ready", timeout=10)
            self.assertTrue(ready, s.items)
            self.assertEqual(ready[3], '{"ready":true}')
            self.assertLess(ready[0] - released, 5.0)  # about one wake-up; generous bound
            s.pump(5)
            self.assertTrue(s.ended, s.received)
            self.assertEqual(s.events(), [s.items[0], ready])
            self.assertEqual(c.stats()["live_queue_depth"], 1)  # still in line until the page reloads
            # The page reloads on the same kept-alive connection and is admitted.
            s.sock.sendall(("GET /after HTTP/1.1\r\nHost: x\r\nCookie: room_ticket=%s\r\n\r\n" % ticket).encode())
            s.sock.settimeout(10)
            reply = s.after
            while b"\r\n\r\nok" not in reply:
                data = s.sock.recv(65536)
                self.assertTrue(data, reply)
                reply += data
            self.assertTrue(reply.startswith(b"HTTP/1.1 200 OK\r\n"), reply)
            self.assertIn(b"concert_admit=", reply)
            self.assertEqual(self.origin.recorder.hits("/after"), 1)
            holder.join(10)
            self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == 0, timeout=5))

    def test_unchanged_position_gets_keep_alives_only(self):
        with self.concert("-cap", "1") as c:
            holder = fill(c, path=HOLDER)[0]
            ticket = self.queue_visitor(c)
            s = self.open(c, ticket)
            s.pump(17)  # past one 15 s keep-alive period
            self.assertFalse(s.ended or s.eof)
            self.assertEqual(s.kinds()[0], ("event", "position"))
            rest = [(i[1], i[2]) for i in s.items[1:]]
            self.assertGreaterEqual(len(rest), 1)
            self.assertEqual(set(rest), {KEEP_ALIVE})
            # The stream kept the ticket seen; the page never polled.
            self.assertEqual(c.stats()["live_queue_depth"], 1)
            self.origin.release("holder")
            holder.join(10)

    def test_an_admission_writes_only_to_the_stream_that_became_ready(self):
        n = 200
        with self.concert("-cap", "1", "-max-queue", "1000") as c:
            holder = fill(c, path=HOLDER)[0]
            tickets = [self.queue_visitor(c) for _ in range(n)]
            streams = []
            for t in tickets:
                s = EventStream(c.port, t)
                self.streams.append(s)
                streams.append(s)
            for s in streams:
                s.read_head()
            pump_all(streams, 0.5)
            for k, s in enumerate(streams):
                self.assertEqual(s.status, 200)
                first = s.events()
                self.assertEqual(len(first), 1, (k, s.items))
                self.assertIn('"position":%d,' % (k + 1), first[0][3])
            # Each stream's next position event is due 5 s after its first at
            # the earliest, and that went out after its request was sent.
            quiet_until = min(s.sent_at for s in streams) + 5.0
            before = [len(s.received) for s in streams]
            released = time.time()
            self.origin.release("holder")
            window_end = min(released + 1.0, quiet_until - 0.1)
            self.assertGreater(window_end - released, 0.5, "too slow to open 200 streams within the 5 s limit")
            pump_all(streams, window_end - time.time())

            ready = streams[0]
            self.assertEqual([i[2] for i in ready.events()], ["position", "ready"])
            for k, s in enumerate(streams[1:], 1):
                extra = s.received[before[k]:]
                self.assertEqual(extra.replace(b": keep-alive\n\n", b""), b"", (k, extra))
            holder.join(10)

            # The first visitor takes its turn: it leaves the line. Its
            # request is short, so the slot frees again and the next one's
            # turn comes (ready, no new position); each of the others learns
            # its new place once, coalesced (5 s after its first event at the
            # earliest; a tick sends to a quarter of a worker's streams at
            # most, so the round takes a few).
            status, _, _ = c.get("/", {"Cookie": "room_ticket=" + tickets[0]})
            self.assertEqual(status, 200)
            others = streams[2:]
            deadline = time.time() + 20
            while time.time() < deadline and any(len(s.events("position")) < 2 for s in others):
                pump_all(streams[1:], 1.0)
            pump_all(streams[1:], 1.0)
            self.assertEqual([i[2] for i in streams[1].events()], ["position", "ready"])
            for k, s in enumerate(streams[2:], 2):
                positions = s.events("position")
                self.assertEqual(len(positions), 2, (k, s.items))
                self.assertIn('"position":%d,' % k, positions[1][3])
                self.assertFalse(s.ended or s.eof)
            self.assertEqual(c.fifo_inversions(), 0)

    def test_the_stream_ends_for_a_cookie_refresh_and_reconnects(self):
        with self.concert("-cap", "1", "-token-ttl", "30s") as c:
            holder = fill(c, path=HOLDER)[0]
            ticket = self.queue_visitor(c)
            s = self.open(c, ticket)
            s.pump(20)  # a third of the TTL: 10 s
            self.assertTrue(s.ended, s.items)
            self.assertFalse(s.eof)
            self.assertEqual([i[1] for i in s.items], ["event", "retry"])
            self.assertEqual(s.items[1][2], 1000)
            # The browser reconnects, on the same connection, and gets a fresh cookie.
            again = EventStream(c.port, ticket, sock=s.sock, pending=s.after).read_head()
            self.assertEqual(again.status, 200)
            self.assertEqual(cookies(again.headers)["room_ticket"], ticket)
            self.assertTrue(again.wait_for_item(lambda i: i[2] == "position", timeout=5))
            self.assertEqual(c.stats()["live_queue_depth"], 1)
            self.origin.release("holder")
            holder.join(10)

    def test_a_client_that_goes_away_is_cleaned_up_and_keeps_its_place(self):
        with self.concert("-cap", "1") as c:
            holder = fill(c, path=HOLDER)[0]
            tickets = [self.queue_visitor(c) for _ in range(20)]
            baseline = self.worker_sockets(c)
            streams = [self.open(c, t) for t in tickets]
            self.assertTrue(wait_for(lambda: self.worker_sockets(c) >= baseline + 20, timeout=5))
            for s in streams:
                s.close()
            self.assertTrue(wait_for(lambda: self.worker_sockets(c) <= baseline, timeout=10),
                            (baseline, self.worker_sockets(c)))
            # Nobody's place was given up; the first visitor is admitted when the slot frees.
            self.assertEqual(c.stats()["live_queue_depth"], 20)
            self.origin.release("holder")
            holder.join(10)
            status, _, body = c.get("/first", {"Cookie": "room_ticket=" + tickets[0]})
            self.assertEqual((status, body), (200, b"ok"))
            # Wake-ups after the streams went away reach nothing stale.
            s = self.open(c, tickets[1])
            self.assertTrue(s.wait_for_item(lambda i: i[2] == "ready", timeout=10), s.items)
            self.assertEqual(c.get("/_room/healthz")[0], 200)

    def test_sigterm_ends_every_stream_at_once(self):
        with self.concert("-cap", "1", "-shutdown-grace", "30s") as c:
            holder = fill(c, path=HOLDER)[0]
            streams = [self.open(c, self.queue_visitor(c)) for _ in range(6)]
            pump_all(streams, 0.3)
            signalled = time.time()
            c.signal(signal.SIGTERM)
            for s in streams:
                s.pump(10)
                self.assertTrue(s.ended, s.items)
                self.assertEqual([i[1] for i in s.items], ["event", "retry"])
            for s in streams:
                while not s.eof:
                    s.read_once(5)
            self.assertLess(time.time() - signalled, 10)  # far inside the 30 s grace
            # The in-flight request still finishes; then Concert exits cleanly.
            self.origin.release("holder")
            holder.join(10)
            self.assertEqual(c.proc.wait(20), 0)


if __name__ == "__main__":
    unittest.main()
