"""The dashboard's routes against the real binary: GET /_room/,
/_room/chart.js, /_room/history and /_room/history/events.

Checked here: all four are admin endpoints (404 while no token is set, 401
without it or with a wrong one); the page's head (HTML, no-store, a CSP that
allows its own inline script by hash and nothing from elsewhere); the
compiled-in Chart.js; HEAD; 405 for other methods; the history grows by a
sample a second with consecutive indices and every field; the event stream
sends `samples` events with ids and resumes after Last-Event-ID; a reload
keeps the hour."""
import json
import signal
import socket
import time
import unittest

from concert_harness import Concert, header, wait_for
from fake_origin import FakeOrigin

TOKEN = "dash-token-123"
AUTH = {"Authorization": "Bearer " + TOKEN}
PATHS = ["/_room/", "/_room/chart.js", "/_room/history", "/_room/history/events"]
FIELDS = {"i", "t", "queue_depth", "occupancy", "cap", "admissions", "wait_p50", "wait_p95", "origin_p95"}


def history(c):
    status, _, body = c.get("/_room/history", AUTH)
    assert status == 200, status
    return json.loads(body)


def read_stream(port, seconds, extra_headers=()):
    """GET /_room/history/events over HTTP/1.0 (the body ends with the
    close); returns (head, [(id, samples)]) after `seconds`."""
    s = socket.create_connection(("127.0.0.1", port), timeout=seconds + 5)
    lines = ["GET /_room/history/events HTTP/1.0", "Host: 127.0.0.1", "Accept: text/event-stream",
             "Authorization: Bearer " + TOKEN] + list(extra_headers)
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = b""
    deadline = time.time() + seconds
    while time.time() < deadline:
        s.settimeout(max(0.05, deadline - time.time()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    events = []
    for message in body.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in message.split("\n") if ": " in line and not line.startswith(":"))
        if fields.get("event") == "samples":
            events.append((int(fields["id"]), json.loads(fields["data"])))
    return head.decode("latin-1"), events


class DashboardRoutesTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.release()
        self.origin.stop()

    def test_everything_is_404_without_a_configured_token(self):
        with Concert(["-upstream", self.origin.url, "-cap", "2"], workers=1) as c:
            for path in PATHS:
                self.assertEqual(c.get(path, AUTH)[0], 404, path)
            self.assertEqual(self.origin.recorder.hits(), 0)

    def test_the_admin_gate(self):
        with Concert(["-upstream", self.origin.url, "-cap", "2"], workers=1, admin_token=TOKEN) as c:
            for path in PATHS:
                self.assertEqual(c.get(path)[0], 401, path)
                self.assertEqual(c.get(path, {"Authorization": "Bearer nope"})[0], 401, path)
            for path in PATHS[:3]:
                self.assertEqual(c.get(path, AUTH)[0], 200, path)
            self.assertEqual(self.origin.recorder.hits(), 0)

    def test_page_script_head_and_methods(self):
        with Concert(["-upstream", self.origin.url, "-cap", "2"], workers=1, admin_token=TOKEN) as c:
            status, headers, body = c.get("/_room/", AUTH)
            self.assertEqual(status, 200)
            self.assertTrue(header(headers, "Content-Type").startswith("text/html"))
            self.assertEqual(header(headers, "Cache-Control"), "no-store")
            csp = header(headers, "Content-Security-Policy")
            self.assertIn("script-src 'self' 'sha256-", csp)
            self.assertIn("default-src 'none'", csp)
            self.assertNotIn("http", csp)
            self.assertIn(b'<script src="chart.js"></script>', body)
            self.assertNotIn(b"cdn", body.lower())

            status, headers, script = c.get("/_room/chart.js", AUTH)
            self.assertEqual(status, 200)
            self.assertTrue(header(headers, "Content-Type").startswith("text/javascript"))
            self.assertTrue(script.startswith(b"/*!\n * Chart.js v"), script[:80])
            self.assertGreater(len(script), 100000)

            status, headers, body = c.request("HEAD", "/_room/", AUTH)
            self.assertEqual(status, 200)
            self.assertEqual(body, b"")
            self.assertGreater(int(header(headers, "Content-Length")), 1000)

            status, headers, _ = c.request("POST", "/_room/", AUTH, body=b"")
            self.assertEqual(status, 405)
            self.assertEqual(header(headers, "Allow"), "GET, HEAD")
            status, headers, _ = c.request("HEAD", "/_room/history/events", AUTH)
            self.assertEqual(status, 405)
            self.assertEqual(header(headers, "Allow"), "GET")

    def test_history_grows_a_sample_a_second(self):
        with Concert(["-upstream", self.origin.url, "-cap", "3"], workers=2, admin_token=TOKEN) as c:
            self.assertTrue(wait_for(lambda: len(history(c)["samples"]) >= 3, timeout=10, interval=0.2))
            h = history(c)
            self.assertEqual(h["interval_seconds"], 1)
            self.assertEqual(h["capacity"], 3600)
            samples = h["samples"]
            self.assertEqual(h["next"], samples[-1]["i"] + 1)
            self.assertEqual([s["i"] for s in samples], list(range(samples[0]["i"], h["next"])))
            for s in samples:
                self.assertEqual(set(s), FIELDS)
                self.assertEqual(s["cap"], 3)
                self.assertEqual(s["occupancy"], 0)
                self.assertIsNone(s["origin_p95"])  # nothing reached the origin yet
            self.assertLessEqual(abs(samples[-1]["t"] - time.time()), 5)
            self.assertEqual(sorted(s["t"] for s in samples), [s["t"] for s in samples])

    def test_stream_sends_samples_and_resumes_after_last_event_id(self):
        with Concert(["-upstream", self.origin.url, "-cap", "2"], workers=2, admin_token=TOKEN) as c:
            self.assertTrue(wait_for(lambda: history(c)["next"] >= 5, timeout=12, interval=0.2))
            head, events = read_stream(c.port, 3.5)
            self.assertIn(" 200 ", head.split("\r\n")[0])
            self.assertIn("Content-Type: text/event-stream", head)
            self.assertGreaterEqual(len(events), 2, events)
            indices = [s["i"] for _, batch in events for s in batch]
            self.assertEqual(indices, list(range(indices[0], indices[0] + len(indices))))
            for event_id, batch in events:
                self.assertEqual(event_id, batch[-1]["i"])

            newest = history(c)["next"] - 1
            _, events = read_stream(c.port, 0.5, ["Last-Event-ID: %d" % (newest - 3)])
            self.assertTrue(events)
            self.assertEqual(events[0][1][0]["i"], newest - 2)

            _, events = read_stream(c.port, 0.5, [])
            # ?from= is what the page passes; without it the stream starts at the newest sample.
            self.assertTrue(events)
            self.assertGreaterEqual(events[0][1][0]["i"], newest)

    def test_a_reload_keeps_the_hour(self):
        with Concert(["-upstream", self.origin.url, "-cap", "2"], workers=1, admin_token=TOKEN) as c:
            self.assertTrue(wait_for(lambda: history(c)["next"] >= 3, timeout=10, interval=0.2))
            before = history(c)["samples"]
            c.signal(signal.SIGHUP)
            self.assertTrue(wait_for(lambda: "reload accepted" in c.log(), timeout=10))
            self.assertTrue(wait_for(lambda: history(c)["next"] >= before[-1]["i"] + 3, timeout=10, interval=0.2))
            after = history(c)["samples"]
            self.assertEqual(after[0]["i"], before[0]["i"])
            self.assertEqual(after[0]["t"], before[0]["t"])


if __name__ == "__main__":
    unittest.main()
