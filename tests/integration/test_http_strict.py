"""Hostile and malformed HTTP against the real binary: every
case gets its status with `Connection: close`, the connection is closed, the
origin is never contacted and no slot is taken. Slow heads are cut off."""
import socket
import time
import unittest

from concert_harness import Concert, raw_exchange, wait_for
from fake_origin import FakeOrigin


def status_of(response):
    line = response.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def head_of(response):
    return response.partition(b"\r\n\r\n")[0].lower()


class StrictTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.origin = FakeOrigin()
        cls.concert = Concert(["-upstream", cls.origin.url, "-cap", "10", "-max-body", "1KB"], workers=2).start()

    @classmethod
    def tearDownClass(cls):
        cls.concert.stop()
        cls.concert.__exit__(None, None, None)
        cls.origin.stop()

    def refused(self, data, expected):
        before = self.origin.recorder.hits()
        out = raw_exchange(self.concert.port, data, timeout=5)
        self.assertEqual(status_of(out), expected, "%r -> %r" % (data[:120], out[:200]))
        self.assertIn(b"connection: close", head_of(out))
        self.assertEqual(self.origin.recorder.hits(), before, "the origin was contacted for %r" % data[:120])
        return out

    def test_framing_conflicts(self):
        self.refused(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"0\r\n\r\n", 400)
        self.refused(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400)
        self.refused(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", 400)
        self.refused(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 6\r\n\r\nhello", 400)
        self.refused(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: abc\r\n\r\n", 400)
        self.refused(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -5\r\n\r\n", 400)

    def test_transfer_encoding_other_than_chunked(self):
        self.refused(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 400)
        self.refused(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 400)
        self.refused(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400)
        self.refused(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400)

    def test_malformed_headers(self):
        self.refused(b"GET / HTTP/1.1\r\nHost: h\r\nX-Folded: a\r\n b\r\n\r\n", 400)
        self.refused(b"GET / HTTP/1.1\r\nHost: h\r\nBad Name: v\r\n\r\n", 400)
        self.refused(b"GET / HTTP/1.1\r\nHost: h\r\nName : v\r\n\r\n", 400)
        self.refused(b"GET / HTTP/1.1\r\nHost: h\r\nBad\x01Name: v\r\n\r\n", 400)
        self.refused(b"GET / HTTP/1.1\r\nHost: h\r\n: novalue\r\n\r\n", 400)
        self.refused(b"GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n", 400)
        self.refused(b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n", 400)
        self.refused(b"GET / HTTP/1.1\nHost: h\n\n", 400)

    def test_host_rules(self):
        self.refused(b"GET / HTTP/1.1\r\n\r\n", 400)
        self.refused(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400)
        self.refused(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400)

    def test_malformed_request_line(self):
        self.refused(b"GARBAGE\r\n\r\n", 400)
        self.refused(b"GET / HTTP/1.1 extra\r\nHost: h\r\n\r\n", 400)
        self.refused(b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400)
        self.refused(b"GET nopath HTTP/1.1\r\nHost: h\r\n\r\n", 400)
        self.refused(b"GET /a%zz HTTP/1.1\r\nHost: h\r\n\r\n", 400)
        self.refused(b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 40, 400)

    def test_versions_and_connect(self):
        self.refused(b"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505)
        self.refused(b"GET / HTTP/1.2\r\nHost: h\r\n\r\n", 505)
        out = self.refused(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 405)
        self.assertIn(b"allow:", head_of(out))

    def test_size_limits(self):
        self.refused(b"GET /" + b"a" * (8 * 1024 + 10) + b" HTTP/1.1\r\nHost: h\r\n\r\n", 414)
        self.refused(b"GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * (33 * 1024) + b"\r\n\r\n", 431)
        many = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 40) for i in range(1000))
        self.refused(b"GET / HTTP/1.1\r\nHost: h\r\n" + many + b"\r\n", 431)

    def test_body_over_max_body(self):
        self.refused(b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 2048\r\n\r\n" + b"x" * 2048, 413)
        chunk = b"400\r\n" + b"y" * 1024 + b"\r\n"
        out = raw_exchange(self.concert.port, b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                           + chunk * 3 + b"0\r\n\r\n", timeout=5)
        self.assertEqual(status_of(out), 413)
        # a body within the limit still passes
        out = raw_exchange(self.concert.port, b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
                           b"Connection: close\r\n\r\nhello", timeout=5)
        self.assertEqual(status_of(out), 200)
        self.assertTrue(out.endswith(b"hello"))

    def test_bad_chunk_size_is_refused(self):
        out = raw_exchange(self.concert.port, b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                           b"zz\r\nhello\r\n0\r\n\r\n", timeout=5)
        self.assertEqual(status_of(out), 400)

    def test_pipelined_request_after_a_rejected_one_is_not_processed(self):
        before = self.origin.recorder.hits()
        out = raw_exchange(self.concert.port, b"GET / HTTP/1.1\r\nHost: h\r\nBad Name: v\r\n\r\n"
                           b"GET /next HTTP/1.1\r\nHost: h\r\n\r\n", timeout=5)
        self.assertEqual(status_of(out), 400)
        self.assertEqual(out.count(b"HTTP/1.1 "), 1)
        self.assertEqual(self.origin.recorder.hits(), before)

    def test_no_slot_taken_by_bad_requests(self):
        for _ in range(5):
            raw_exchange(self.concert.port, b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", timeout=5)
        stats = self.concert.stats()
        self.assertEqual(stats["occupancy"], 0)
        self.assertEqual(stats["queue_depth"], 0)

    def test_slowloris_is_cut_off(self):
        before = self.origin.recorder.hits()
        s = socket.create_connection(("127.0.0.1", self.concert.port), timeout=20)
        try:
            s.sendall(b"GET /slow-head HTTP/1.1\r\nHost: h\r\n")
            start = time.time()
            closed = False
            s.settimeout(1)
            while time.time() - start < 15:
                try:
                    s.sendall(b"X-A: b\r\n")  # trickle, never finishing the head
                except OSError:
                    closed = True
                    break
                try:
                    if s.recv(1) == b"":
                        closed = True
                        break
                except socket.timeout:
                    pass
                except OSError:
                    closed = True
                    break
            self.assertTrue(closed, "a head trickled for 15 s was not cut off")
        finally:
            s.close()
        self.assertEqual(self.origin.recorder.hits(), before)
        self.assertEqual(self.concert.stats()["occupancy"], 0)

    def test_good_request_still_served(self):
        out = raw_exchange(self.concert.port, b"GET /fine HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", timeout=5)
        self.assertEqual(status_of(out), 200)


if __name__ == "__main__":
    unittest.main()
