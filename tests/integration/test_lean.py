"""What a connection costs Concert in memory, bounded by the code's constants, against the real binary and
a fake origin (one worker, so its RSS is the connections'):

  waiting read-ahead    a held request (-queue-hold) or an open event stream whose client sends 256 KiB
                        more is closed and counted (connections_flooded_total); a held request with one
                        small pipelined request after it gets both answers, in order; a held POST keeps
                        its whole body, which reaches the origin once admitted
  waiting memory        200 held requests each followed by 256 KiB: the worker's RSS grows by less than
                        8 KiB per connection
  slow readers          200 clients that ask for 64 MiB and never read: the worker's RSS grows by less than
                        two 16 KiB blocks per connection plus the connection itself (64 KiB allowed), where
                        buffers that grow by doubling toward the old 256 KiB mark took over 350 KiB
  both data paths       the two memory bounds hold on the default data path (io_uring where the kernel
                        allows it) and on epoll (-io-uring off)

Memory is read from /proc/PID/status (VmRSS) once the connections have settled; no timing is asserted.
Traffic goes to 127.0.0.1 only; only processes started here are signalled, by pid.
"""
import json
import resource
import socket
import time
import unittest

from concert_harness import Concert, wait_for
from fake_origin import FakeOrigin
from test_bounds import connect, read_until_closed

SERIAL = "measures the worker's memory per connection"

FLOOD = b"X" * (256 * 1024)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


def settled_rss(pid, seconds=1.0, tries=20):
    """VmRSS once two readings `seconds` apart agree within 64 KiB."""
    last = rss_kib(pid)
    for _ in range(tries):
        time.sleep(seconds)
        now = rss_kib(pid)
        if abs(now - last) <= 64:
            return now
        last = now
    return last


def send_all(s, data):
    """Sends what the peer takes within a second; returns the bytes sent."""
    s.settimeout(1)
    sent = 0
    try:
        while sent < len(data):
            sent += s.send(data[sent:sent + 65536])
    except (socket.timeout, BlockingIOError, ConnectionError, OSError):
        pass
    return sent


def closed_by_peer(s, limit=5):
    """True once the peer closes within `limit` seconds (what it sends meanwhile is dropped)."""
    try:
        return read_until_closed(s, limit) is not None
    except (ConnectionResetError, BrokenPipeError):
        return True


def read_responses(s, count, limit=20):
    """`count` whole responses (Content-Length framed): [(status, body)]."""
    s.settimeout(limit)
    buf, out = b"", []
    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                return out
            buf += chunk
        head, _, buf = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        while len(buf) < length:
            chunk = s.recv(65536)
            if not chunk:
                return out
            buf += chunk
        out.append((int(lines[0].split()[1]), buf[:length]))
        buf = buf[length:]
    return out


class LeanTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()
        self.addCleanup(self.origin.stop)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 4096 <= hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))

    def concert(self, *args, io_path=None):
        # io_path: "off" or "on" for one data path (flag and variable agree, so a
        # run with CONCERT_IO_URING set still gets the path asked for); None for
        # the default.
        env = {"CONCERT_IO_URING": io_path} if io_path else None
        path_args = ["-io-uring", io_path] if io_path else []
        c = Concert(["-upstream", self.origin.url, "-cap", "1", "-queue-hold", "60s",
                     "-client-header-timeout", "60s"] + path_args + list(args), workers=1, env=env)
        c.start()
        self.addCleanup(c.stop)
        return c

    def hold_the_slot(self, c):
        s = connect(c.port)
        s.sendall(b"GET /slow?gate=g&timeout=60 HTTP/1.1\r\nHost: x\r\n\r\n")
        self.addCleanup(s.close)
        self.addCleanup(self.origin.release, "g")
        self.assertTrue(wait_for(lambda: self.origin.recorder.hits("/slow") == 1, timeout=10), "the slot is not held")

    def held(self, c, extra=b""):
        """A connection whose request is held for the page slot, then `extra` sent after it."""
        s = connect(c.port)
        s.sendall(b"GET /page HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\n\r\n")
        if extra:
            send_all(s, extra)
        return s

    def flooded(self, c):
        return c.stats().get("connections_flooded_total", 0)

    def test_a_held_request_that_pipelines_256_kib_is_closed_and_counted(self):
        c = self.concert()
        self.hold_the_slot(c)
        s = self.held(c)
        self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == 1, timeout=5))
        sent = send_all(s, FLOOD)
        self.assertGreater(sent, 4096)
        self.assertTrue(closed_by_peer(s), "the flooding connection is still open")
        s.close()
        self.assertEqual(self.flooded(c), 1)
        # Its ticket left with it: the line is empty again.
        self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == 0, timeout=5), c.stats())

    def test_an_event_stream_that_floods_is_closed_and_counted(self):
        c = self.concert("-queue-hold", "0s")
        self.hold_the_slot(c)
        s = connect(c.port)
        s.sendall(b"GET /page HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n")
        status, body = read_responses(s, 1)[0]
        self.assertEqual(status, 429, body)
        s.close()
        # The ticket's cookie from a fresh request through the harness (the raw answer's cookie is in its head).
        status, headers, _ = c.request("GET", "/page", headers={"Accept": "application/json"})
        cookie = [v.split(";")[0] for k, v in headers if k.lower() == "set-cookie" and v.startswith("room_ticket=")]
        self.assertTrue(cookie, headers)
        e = connect(c.port)
        e.sendall(b"GET /queue/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nCookie: %s\r\n\r\n"
                  % cookie[0].encode())
        e.settimeout(5)
        first = e.recv(65536)
        self.assertIn(b"text/event-stream", first)
        send_all(e, FLOOD)
        self.assertTrue(closed_by_peer(e), "the flooding stream is still open")
        e.close()
        self.assertEqual(self.flooded(c), 1)

    def test_a_held_request_and_one_pipelined_request_are_both_answered(self):
        c = self.concert()
        self.hold_the_slot(c)
        s = self.held(c, b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == 1, timeout=5))
        self.origin.release("g")
        answers = read_responses(s, 2)
        s.close()
        self.assertEqual([status for status, _ in answers], [200, 200], answers)
        self.assertEqual(self.flooded(c), 0)
        paths = [r["path"] for r in self.origin.recorder.requests]
        self.assertEqual(paths[-2:], ["/page", "/next"])

    def test_a_held_post_keeps_its_whole_body(self):
        c = self.concert()
        self.hold_the_slot(c)
        body = bytes(range(256)) * 80  # 20 KiB: more than the waiting read-ahead
        s = connect(c.port)
        s.sendall(b"POST /form HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\nContent-Length: %d\r\n\r\n" % len(body))
        send_all(s, body)
        self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == 1, timeout=5))
        time.sleep(0.5)
        self.assertEqual(self.flooded(c), 0)
        self.origin.release("g")
        answers = read_responses(s, 1)
        s.close()
        self.assertEqual(answers[0][0], 200, answers)
        posted = [r for r in self.origin.recorder.requests if r["path"] == "/form"]
        self.assertEqual(len(posted), 1)
        self.assertEqual(posted[0]["body"], body)

    def test_waiting_connections_that_pipeline_cost_little(self):
        self.waiting_connections_that_pipeline_cost_little(None)

    def test_waiting_connections_that_pipeline_cost_little_on_epoll(self):
        self.waiting_connections_that_pipeline_cost_little("off")

    def waiting_connections_that_pipeline_cost_little(self, io_path):
        c = self.concert("-max-queue", "1000", io_path=io_path)
        self.hold_the_slot(c)
        worker = c.worker_pids()[0]
        before = settled_rss(worker)
        conns = [self.held(c) for _ in range(200)]
        self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == 200, timeout=20), c.stats())
        for s in conns:
            send_all(s, FLOOD[:65536])
        self.assertTrue(wait_for(lambda: self.flooded(c) == 200, timeout=20), c.stats())
        after = settled_rss(worker)
        for s in conns:
            s.close()
        per = (after - before) * 1024 / 200
        print("waiting connections that pipelined: %.0f bytes per connection" % per)
        self.assertLess(per, 8 * 1024, "%.0f bytes of worker RSS per waiting connection that pipelined" % per)

    def test_slow_readers_cost_two_blocks_each(self):
        self.slow_readers_cost_two_blocks_each(None)

    def test_slow_readers_cost_two_blocks_each_on_epoll(self):
        self.slow_readers_cost_two_blocks_each("off")

    def slow_readers_cost_two_blocks_each(self, io_path):
        # When the clients are gone their exchanges still read the rest of the 64 MiB from the origin
        # (a request counts until the origin is done with it): a short grace ends the stop.
        c = self.concert("-bypass", "/big", "-send-timeout", "10m", "-max-connections", "1000",
                         "-shutdown-grace", "1s", io_path=io_path)
        worker = c.worker_pids()[0]
        before = settled_rss(worker)
        conns = []
        for _ in range(200):
            s = connect(c.port, rcvbuf=4096)
            s.sendall(b"GET /big?n=67108864 HTTP/1.1\r\nHost: x\r\n\r\n")
            conns.append(s)
        after = settled_rss(worker, seconds=2.0)
        for s in conns:
            s.close()
        per = (after - before) / 200
        print("slow readers: %.1f KiB per connection" % per)
        self.assertLess(per, 64, "%.0f KiB of worker RSS per stalled slow reader" % per)


if __name__ == "__main__":
    unittest.main()
