"""Every phase of a connection is bounded, in time or in size, so that no client and no origin can
hold a connection, a page slot or memory forever; checked against the real binary and a fake origin.

One case per phase and per bound:
  header / keep-alive   a head that never ends, an idle kept-alive connection
  client body           2 bytes of 1,000, then silence: 408, the slot is free
  send                  a client with a tiny receive buffer that never reads 50 MB
  upstream read         an origin that stalls after half its body
  tunnel                an idle WebSocket tunnel
  healthz               a declared body Concert does not use never holds the connection
  long-lived            an event stream / WebSocket on a -long-lived path gives its page slot back;
                        -long-lived-cap
  origin keeps working  a visitor who leaves (or gets 504) does not free the origin's slot

Timeouts are set to 1-2 s; every wait for one to act is bounded by 3x the configured value (plus the
time the test itself needs to connect), never a speed requirement. Traffic goes to 127.0.0.1 only, and
the only processes signalled are the ones these tests started.
"""
import socket
import time
import unittest

from concert_harness import Concert, header, wait_for
from fake_origin import FakeOrigin

JSON = {"Accept": "application/json"}


def connect(port, timeout=10, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s


def read_until_closed(s, limit):
    """Everything the peer sends until it closes, or None if it is still open after `limit` seconds."""
    s.settimeout(0.2)
    out = b""
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk
    return None


def ticket(headers):
    """The room_ticket cookie of a queued answer, as a Cookie header value."""
    for k, v in headers:
        if k.lower() == "set-cookie" and v.startswith("room_ticket="):
            return v.split(";")[0]
    raise AssertionError("no room_ticket cookie")


def read_head(s, limit=10):
    s.settimeout(limit)
    out = b""
    while b"\r\n\r\n" not in out:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    head, _, rest = out.partition(b"\r\n\r\n")
    return head.decode("latin-1"), rest


class PhaseTimeoutTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def concert(self, *args, workers=1):
        return Concert(["-upstream", self.origin.url, "-cap", "1"] + list(args), workers=workers)

    def test_header_timeout_closes_a_head_that_never_ends(self):
        with self.concert("-client-header-timeout", "1s") as c:
            s = connect(c.port)
            s.sendall(b"GET /page HTTP/1.1\r\nHost: h\r\n")
            self.assertIsNotNone(read_until_closed(s, 3 * 1 + 2), "the head timeout never closed the connection")
            s.close()
            st = c.stats()
            self.assertEqual(st["timeouts_client_header_total"], 1)
            self.assertGreaterEqual(st["timeouts_total"], 1)
            self.assertEqual(self.origin.recorder.hits(), 0)
            self.assertTrue(wait_for(lambda: "client header timeout" in c.log(), timeout=5))

    def test_keepalive_timeout_closes_an_idle_connection(self):
        with self.concert("-keepalive-timeout", "1s") as c:
            s = connect(c.port)
            s.sendall(b"GET /page HTTP/1.1\r\nHost: h\r\n\r\n")
            head, _ = read_head(s)
            self.assertIn("200", head.split("\r\n")[0])
            self.assertIsNotNone(read_until_closed(s, 3 * 1 + 2), "the idle connection stayed open")
            s.close()
            self.assertEqual(c.stats()["timeouts_keepalive_total"], 1)

    def test_slow_body_gets_408_and_frees_the_slot(self):
        with self.concert("-client-body-timeout", "2s") as c:
            s = connect(c.port)
            s.sendall(b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\nab")
            out = read_until_closed(s, 3 * 2 + 2)
            s.close()
            self.assertIsNotNone(out, "the body timeout never ended the request")
            self.assertTrue(out.startswith(b"HTTP/1.1 408 "), out[:100])
            self.assertIn(b"Connection: close", out)
            st = wait_for(lambda: (lambda s: s if s["occupancy"] == 0 else None)(c.stats()), timeout=5)
            self.assertIsNotNone(st, "the page slot stayed taken")
            self.assertEqual(st["timeouts_client_body_total"], 1)
            # cap 1: the freed slot admits the next visitor.
            self.assertEqual(c.get("/next")[0], 200)
            self.assertTrue(wait_for(lambda: "client body timeout" in c.log(), timeout=5))

    def test_client_that_never_reads_is_cut_after_the_send_timeout(self):
        size = 50 * 1024 * 1024
        with self.concert("-send-timeout", "1s") as c:
            s = connect(c.port, rcvbuf=4096)
            s.sendall(b"GET /big?n=%d HTTP/1.1\r\nHost: h\r\n\r\n" % size)
            # Never read: the response fills every buffer on the way and stops.
            st = wait_for(lambda: (lambda s: s if s["timeouts_send_total"] == 1 else None)(c.stats()),
                          timeout=3 * 1 + 5)
            self.assertIsNotNone(st, "the send timeout never cut the client")
            # The origin's response is read to its end and dropped, then the slot is free.
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=10))
            got = 0
            s.settimeout(5)
            try:
                while True:
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        break
                    got += len(chunk)
            except (ConnectionResetError, socket.timeout):
                pass
            s.close()
            self.assertLess(got, size)  # cut off, never the whole body
            self.assertEqual(c.get("/next")[0], 200)

    def test_origin_stalling_after_half_its_body_is_cut_after_the_read_timeout(self):
        n = 200000
        with self.concert("-upstream-read-timeout", "1s") as c:
            s = connect(c.port)
            s.sendall(b"GET /stall?n=%d&gate=stall HTTP/1.1\r\nHost: h\r\n\r\n" % n)
            out = read_until_closed(s, 3 * 1 + 3)
            s.close()
            self.assertIsNotNone(out, "the read timeout never cut the response")
            head, _, body = out.partition(b"\r\n\r\n")
            self.assertIn(b"Content-Length: %d" % n, head)
            self.assertGreaterEqual(len(body), n // 2)
            self.assertLess(len(body), n)  # truncated: the framing shows it
            st = wait_for(lambda: (lambda s: s if s["occupancy"] == 0 else None)(c.stats()), timeout=5)
            self.assertIsNotNone(st)
            self.assertEqual(st["timeouts_upstream_read_total"], 1)
            self.origin.release("stall")
            self.assertEqual(c.get("/next")[0], 200)

    def test_idle_tunnel_is_closed_after_the_tunnel_timeout(self):
        with self.concert("-tunnel-timeout", "1s") as c:
            s = connect(c.port)
            s.sendall(b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
            head, rest = read_head(s)
            self.assertIn("101", head.split("\r\n")[0])
            s.sendall(b"ping")  # traffic keeps it open for a while
            echoed = rest
            s.settimeout(5)
            while len(echoed) < 4:
                echoed += s.recv(100)
            self.assertEqual(echoed, b"ping")
            self.assertIsNotNone(read_until_closed(s, 3 * 1 + 2), "the idle tunnel stayed open")
            s.close()
            st = wait_for(lambda: (lambda s: s if s["occupancy"] == 0 else None)(c.stats()), timeout=5)
            self.assertIsNotNone(st)
            self.assertEqual(st["timeouts_tunnel_total"], 1)


class LocalBodyTest(unittest.TestCase):
    def test_declared_body_on_healthz_does_not_hold_the_connection(self):
        origin = FakeOrigin()
        try:
            with Concert(["-upstream", origin.url], workers=1) as c:
                s = connect(c.port)
                s.sendall(b"GET /_room/healthz HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n")
                # The answer comes at once and the connection ends with it: the default body timeout
                # (30 s) is never waited for.
                out = read_until_closed(s, 10)
                s.close()
                self.assertIsNotNone(out, "a body nobody uses held the connection open")
                self.assertTrue(out.startswith(b"HTTP/1.1 200 "), out[:80])
                self.assertIn(b"Connection: close", out)
                # A body that is all there is dropped and the connection carries on.
                s = connect(c.port)
                s.sendall(b"GET /_room/healthz HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
                          b"GET /_room/healthz HTTP/1.1\r\nHost: h\r\n\r\n")
                s.settimeout(5)
                data = b""
                while data.count(b"HTTP/1.1 200") < 2:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                s.close()
                self.assertEqual(data.count(b"HTTP/1.1 200"), 2)
                self.assertNotIn(b"Connection: close", data)
                self.assertEqual(origin.recorder.hits(), 0)
        finally:
            origin.stop()


class LongLivedTest(unittest.TestCase):
    def test_event_stream_gives_its_page_slot_back(self):
        origin = FakeOrigin()
        try:
            with Concert(["-upstream", origin.url, "-cap", "1", "-long-lived", "/sse,/ws"], workers=2) as c:
                s = connect(c.port)
                s.sendall(b"GET /sse?timeout=30 HTTP/1.1\r\nHost: h\r\nAccept: text/event-stream\r\n\r\n")
                head, rest = read_head(s)
                self.assertIn("200", head.split("\r\n")[0])
                self.assertIn("text/event-stream", head)
                st = wait_for(lambda: (lambda s: s if s["long_lived_in_use"] == 1 else None)(c.stats()), timeout=5)
                self.assertIsNotNone(st)
                self.assertEqual(st["occupancy"], 0)  # the page slot went back to the room
                # cap 1, and the stream is open: another visitor is admitted to the origin.
                status, _, body = c.get("/page", headers=JSON)
                self.assertEqual((status, body), (200, b"ok"))
                self.assertEqual(origin.recorder.hits("/page"), 1)
                # A WebSocket on a long-lived path, too.
                w = connect(c.port)
                w.sendall(b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
                whead, _ = read_head(w)
                self.assertIn("101", whead.split("\r\n")[0])
                st = wait_for(lambda: (lambda s: s if s["long_lived_in_use"] == 2 else None)(c.stats()), timeout=5)
                self.assertIsNotNone(st)
                self.assertEqual(st["occupancy"], 0)
                w.close()
                s.close()
                self.assertTrue(wait_for(lambda: c.stats()["long_lived_in_use"] == 0, timeout=10))
        finally:
            origin.stop()

    def test_over_the_long_lived_cap_is_503(self):
        origin = FakeOrigin()
        try:
            with Concert(["-upstream", origin.url, "-cap", "5", "-long-lived", "/sse", "-long-lived-cap", "1"],
                         workers=2) as c:
                s = connect(c.port)
                s.sendall(b"GET /sse?timeout=30 HTTP/1.1\r\nHost: h\r\n\r\n")
                read_head(s)
                self.assertTrue(wait_for(lambda: c.stats()["long_lived_in_use"] == 1, timeout=5))
                status, headers, _ = c.get("/sse?timeout=30", headers=JSON)
                self.assertEqual(status, 503)
                self.assertIsNotNone(header(headers, "Retry-After"))
                st = c.stats()
                self.assertEqual(st["long_lived_refused_total"], 1)
                self.assertEqual(st["occupancy"], 0)  # the refused request gave its page slot back
                self.assertEqual(origin.recorder.hits("/sse"), 1)
                s.close()
                self.assertTrue(wait_for(lambda: c.stats()["long_lived_in_use"] == 0, timeout=10))
        finally:
            origin.stop()

    def test_without_long_lived_a_stream_keeps_its_page_slot(self):
        origin = FakeOrigin()
        try:
            with Concert(["-upstream", origin.url, "-cap", "1"], workers=1) as c:
                s = connect(c.port)
                s.sendall(b"GET /sse?timeout=30 HTTP/1.1\r\nHost: h\r\n\r\n")
                read_head(s)
                st = c.stats()
                self.assertEqual((st["occupancy"], st["long_lived_in_use"]), (1, 0))
                self.assertEqual(c.get("/page", headers=JSON)[0], 429)
                s.close()
        finally:
            origin.stop()


class OriginKeepsWorkingTest(unittest.TestCase):
    """A visitor who gives up does not free the origin: the slot is held until the origin is done."""

    def test_client_that_leaves_keeps_the_slot_until_the_origin_is_done(self):
        origin = FakeOrigin()
        try:
            with Concert(["-upstream", origin.url, "-cap", "1"], workers=2) as c:
                s = connect(c.port)
                s.sendall(b"GET /slow?gate=a&timeout=30 HTTP/1.1\r\nHost: h\r\n\r\n")
                self.assertTrue(wait_for(lambda: origin.recorder.hits() == 1, timeout=5))
                s.close()  # the visitor gives up; the origin keeps working (PHP does)
                time.sleep(1.0)
                self.assertEqual(c.stats()["occupancy"], 1)
                status, headers, _ = c.get("/second", headers=JSON)
                self.assertEqual(status, 429)  # queued, not sent to a busy origin
                self.assertEqual(origin.recorder.hits("/second"), 0)
                origin.release("a")
                self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=10))
                self.assertEqual(c.get("/second", headers=dict(JSON, Cookie=ticket(headers)))[0], 200)
                self.assertEqual(origin.recorder.max_page_in_flight, 1)
        finally:
            origin.stop()

    def test_504_keeps_the_slot_until_the_origin_is_done(self):
        origin = FakeOrigin()
        try:
            with Concert(["-upstream", origin.url, "-cap", "1", "-upstream-timeout", "1s"], workers=2) as c:
                status, _, _ = c.get("/slow?gate=b&timeout=30", timeout=15)
                self.assertEqual(status, 504)
                self.assertEqual(c.stats()["occupancy"], 1)
                status, headers, _ = c.get("/second", headers=JSON)
                self.assertEqual(status, 429)
                origin.release("b")
                self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=10))
                self.assertEqual(c.get("/second", headers=dict(JSON, Cookie=ticket(headers)))[0], 200)
                self.assertEqual(origin.recorder.max_page_in_flight, 1)
        finally:
            origin.stop()

    def test_the_wait_for_a_silent_origin_is_bounded(self):
        origin = FakeOrigin()
        try:
            with Concert(["-upstream", origin.url, "-cap", "1", "-upstream-timeout", "2s"], workers=1) as c:
                s = connect(c.port)
                s.sendall(b"GET /slow?gate=c&timeout=30 HTTP/1.1\r\nHost: h\r\n\r\n")
                self.assertTrue(wait_for(lambda: origin.recorder.hits() == 1, timeout=5))
                s.close()
                # The origin never answers: after the head timeout its connection is closed and only
                # then is the slot returned.
                self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=3 * 2 + 2))
                self.assertTrue(wait_for(lambda: "closing it" in c.log(), timeout=5))
                origin.release("c")
        finally:
            origin.stop()

    def test_request_not_received_whole_is_cut_at_once(self):
        origin = FakeOrigin()
        try:
            with Concert(["-upstream", origin.url, "-cap", "1"], workers=1) as c:
                s = connect(c.port)
                s.sendall(b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000)
                time.sleep(0.5)
                s.close()
                self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=5))
        finally:
            origin.stop()


if __name__ == "__main__":
    unittest.main()
