"""The waiting room against the real binary with two workers: the queue,
the gate, the breaker."""
import json
import os
import tempfile
import threading
import time
import unittest

from concert_harness import Concert, header, headers_all, wait_for
from fake_origin import FakeOrigin
from room import decode_pass, fill, mint_pass, park

# Fewer than 20 admissions from the line before it is checked: no ETA yet.
QUEUED_JSON = (b'{"eta_seconds":null,"hint":"keep the room_ticket cookie and retry to hold your position",'
               b'"queued":true,"retry_after_seconds":5,"status_url":"/queue/status"}')
BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


def cookie_values(headers):
    """{name: (value, full Set-Cookie line)} from a response."""
    out = {}
    for line in headers_all(headers, "Set-Cookie"):
        name, _, rest = line.partition("=")
        out[name] = (rest.split(";")[0], line)
    return out


class Jar:
    """A minimal cookie-jar client."""

    def __init__(self, concert):
        self.concert = concert
        self.cookies = {}

    def request(self, path, headers=None, timeout=10):
        h = dict(headers or {})
        if self.cookies:
            h["Cookie"] = "; ".join("%s=%s" % kv for kv in self.cookies.items())
        status, resp_headers, body = self.concert.get(path, h, timeout=timeout)
        for name, (value, _) in cookie_values(resp_headers).items():
            self.cookies[name] = value
        return status, resp_headers, body


class RoomTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def concert(self, *args, workers=2, **kw):
        return Concert(["-upstream", self.origin.url] + list(args), workers=workers, **kw)

    # -- the queue
    def test_browser_gets_waiting_room_html(self):
        with self.concert("-cap", "1") as c:
            threads = fill(c)
            status, headers, body = c.get("/page", BROWSER)
            self.assertEqual(status, 200)
            self.assertEqual(header(headers, "Content-Type"), "text/html; charset=utf-8")
            cookies = cookie_values(headers)
            self.assertEqual(len(cookies["room_ticket"][0]), 32)
            self.assertIn("HttpOnly", cookies["room_ticket"][1])
            self.assertIn("SameSite=Lax", cookies["room_ticket"][1])
            self.assertIn("Max-Age=300", cookies["room_ticket"][1])
            self.assertEqual(cookies["room_probe"][0], "1")
            self.assertNotIn("HttpOnly", cookies["room_probe"][1])
            self.assertNotIn("concert_admit", cookies)
            self.assertIn(b"/queue/status", body)
            self.assertNotIn(b"{{.", body)
            self.assertEqual(self.origin.recorder.hits("/page"), 0)
            self.origin.release()
            for t in threads:
                t.join(10)

    def test_api_client_gets_json_429(self):
        with self.concert("-cap", "1") as c:
            threads = fill(c)
            status, headers, body = c.get("/api/thing")
            self.assertEqual(status, 429)
            self.assertEqual(body, QUEUED_JSON)
            self.assertEqual(header(headers, "Retry-After"), "5")
            self.assertEqual(header(headers, "Content-Type"), "application/json; charset=utf-8")
            self.assertEqual(header(headers, "Cache-Control"), "no-store")
            self.assertIn("room_ticket", cookie_values(headers))
            self.assertNotIn("concert_admit", cookie_values(headers))
            self.assertEqual(self.origin.recorder.hits("/api/thing"), 0)
            self.assertTrue(wait_for(lambda: c.stats()["queued_total"] == 1, timeout=2))
            self.origin.release()
            for t in threads:
                t.join(10)

    def test_api_json_disabled_serves_html(self):
        with self.concert("-cap", "1", "-api-json=false") as c:
            threads = fill(c)
            status, headers, body = c.get("/api/thing")
            self.assertEqual(status, 200)
            self.assertEqual(header(headers, "Content-Type"), "text/html; charset=utf-8")
            self.origin.release()
            for t in threads:
                t.join(10)

    def test_breaker_json_and_html(self):
        with self.concert("-cap", "1", "-max-queue", "1") as c:
            threads = fill(c)
            status, _, _ = c.get("/a")
            self.assertEqual(status, 429)
            status, headers, body = c.get("/b")
            self.assertEqual(status, 503)
            self.assertEqual(header(headers, "Retry-After"), "5")
            self.assertEqual(json.loads(body), {"error": "waiting room is full", "queued": False,
                                                "retry_after_seconds": 5})
            status, headers, body = c.get("/b", BROWSER)
            self.assertEqual(status, 503)
            self.assertEqual(header(headers, "Retry-After"), "5")
            self.assertEqual(header(headers, "Content-Type"), "text/html; charset=utf-8")
            self.assertIn(b"waiting room is full", body)
            self.origin.release()
            for t in threads:
                t.join(10)

    def test_cookie_jar_client_resumes_after_slot_frees(self):
        with self.concert("-cap", "1") as c:
            threads = fill(c)
            jar = Jar(c)
            status, _, _ = jar.request("/resume")
            self.assertEqual(status, 429)
            self.origin.release()
            for t in threads:
                t.join(10)
            deadline = time.time() + 10
            while time.time() < deadline:
                status, _, body = jar.request("/resume")
                if status == 200:
                    break
                time.sleep(0.1)
            self.assertEqual((status, body), (200, b"ok"))
            self.assertEqual(self.origin.recorder.hits("/resume"), 1)
            self.assertIn("concert_admit", jar.cookies)

    def test_bypass_skips_full_room(self):
        with self.concert("-cap", "1", "-bypass", "/webhooks/*,/robots.txt") as c:
            threads = fill(c)
            for path in ("/webhooks/stripe", "/webhooks/paypal/ipn", "/robots.txt"):
                status, _, body = c.get(path)
                self.assertEqual((status, body), (200, b"ok"), path)
            status, _, _ = c.get("/gated")
            self.assertEqual(status, 429)
            self.origin.release()
            for t in threads:
                t.join(10)

    def test_status_endpoint(self):
        with self.concert("-cap", "1") as c:
            threads = fill(c)
            status, _, body = c.get("/queue/status")
            self.assertEqual((status, json.loads(body)), (200, {"ready": False, "cookies_required": True}))
            status, _, body = c.get("/queue/status", {"Cookie": "room_ticket=" + "ab" * 16})
            self.assertEqual(json.loads(body), {"ready": True})
            jar = Jar(c)
            jar.request("/p1")
            status, headers, body = jar.request("/queue/status")
            self.assertEqual(status, 200)
            doc = json.loads(body)
            self.assertEqual((doc["ready"], doc["position"]), (False, 1))
            self.assertEqual(header(headers, "Cache-Control"), "no-store")
            # a second poll within a second is rate limited
            status, headers, body = jar.request("/queue/status")
            self.assertEqual(status, 429)
            self.assertEqual(header(headers, "Retry-After"), "1")
            status, _, _ = c.request("OPTIONS", "/queue/status")
            self.assertEqual(status, 204)
            self.origin.release()
            for t in threads:
                t.join(10)
            time.sleep(1.1)
            self.assertTrue(wait_for(lambda: json.loads(jar.request("/queue/status")[2]) == {"ready": True},
                                     timeout=5, interval=1.1))
            self.assertEqual(self.origin.recorder.hits("/queue/status"), 0)

    def test_custom_html(self):
        tmp = tempfile.mkdtemp(prefix="concert-html-")
        path = os.path.join(tmp, "room.html")
        with open(path, "w") as f:
            f.write("<html><body>custom pos={{.Position}} skip=[{{.SkipURL}}] room_probe</body></html>")
        with self.concert("-cap", "1", "-html", path, "-rate", "2", "-skip-url", "https://pay.example/x") as c:
            threads = fill(c)
            c.get("/x", BROWSER)
            status, _, body = c.get("/y", BROWSER)
            self.assertEqual(status, 200)
            self.assertEqual(body, b"<html><body>custom pos=2 skip=[https://pay.example/x] room_probe</body></html>")
            self.origin.release()
            for t in threads:
                t.join(10)

    def test_fifo_order(self):
        with self.concert("-cap", "1") as c:
            threads = fill(c)
            jars = []
            for i in range(10):
                jar = Jar(c)
                status, _, _ = jar.request("/sleep?ms=150&client=%d" % i)
                self.assertEqual(status, 429)
                jars.append(jar)
            results = {}

            def client(i, jar):
                deadline = time.time() + 40
                while time.time() < deadline:
                    status, _, _ = jar.request("/sleep?ms=150&client=%d" % i, timeout=20)
                    if status == 200:
                        results[i] = True
                        return
                    time.sleep(0.05)

            workers = [threading.Thread(target=client, args=(i, j), daemon=True) for i, j in enumerate(jars)]
            for w in workers:
                w.start()
            self.origin.release()
            for w in workers:
                w.join(45)
            self.assertEqual(len(results), 10)
            with self.origin.recorder.lock:
                order = [r["target"] for r in self.origin.recorder.requests if r["path"] == "/sleep"]
            self.assertEqual(order, ["/sleep?ms=150&client=%d" % i for i in range(10)])
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)
            for t in threads:
                t.join(10)
            self.assertEqual(c.fifo_inversions(), 0)

    def test_cap_never_exceeded_under_concurrency(self):
        with self.concert("-cap", "3", "-max-queue", "1000") as c:
            n = 120
            done = []
            lock = threading.Lock()

            def client(i):
                jar = Jar(c)
                deadline = time.time() + 60
                while time.time() < deadline:
                    try:
                        status, _, body = jar.request("/sleep?ms=30&c=%d" % i, timeout=20)
                    except OSError:
                        time.sleep(0.1)
                        continue
                    if status == 200:
                        with lock:
                            done.append(i)
                        return
                    time.sleep(0.15)

            threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(70)
            self.assertEqual(len(done), n)
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 3)
            self.assertGreaterEqual(self.origin.recorder.max_page_in_flight, 1)
            self.assertEqual(self.origin.recorder.hits("/sleep"), n)
            stats = c.stats()
            self.assertEqual(stats["occupancy"], 0)
            self.assertGreater(stats["queued_total"], 0)

    def test_saturation_log_lines(self):
        with self.concert("-cap", "1") as c:
            threads = fill(c)
            self.origin.release()
            for t in threads:
                t.join(10)
            self.assertTrue(wait_for(lambda: "upstream saturated: 1/1 slots" in c.log(), timeout=2))
            self.assertTrue(wait_for(lambda: "draining: 0/1 slots" in c.log(), timeout=2))

    # -- the gate
    def test_gate_issues_pass_on_admitted_page(self):
        with self.concert("-cap", "10", "-admit-ttl", "10m") as c:
            status, headers, _ = c.get("/hello")
            self.assertEqual(status, 200)
            cookies = cookie_values(headers)
            self.assertIn("concert_admit", cookies)
            line = cookies["concert_admit"][1]
            for attr in ("HttpOnly", "SameSite=Lax", "Max-Age=600", "Path=/"):
                self.assertIn(attr, line)
            self.assertEqual(len(cookies["concert_admit"][0]), 54)
            self.assertNotIn("room_ticket", cookies)

    def test_gate_pass_refreshed_only_past_half_life(self):
        with self.concert("-cap", "10") as c:
            pid = bytes(range(16))
            fresh = mint_pass(pid, int(time.time()) + 590)
            status, headers, _ = c.get("/a", {"Cookie": "concert_admit=" + fresh})
            self.assertEqual(status, 200)
            self.assertNotIn("concert_admit", cookie_values(headers))
            old = mint_pass(pid, int(time.time()) + 150)
            status, headers, _ = c.get("/b", {"Cookie": "concert_admit=" + old})
            new_id, expiry = decode_pass(cookie_values(headers)["concert_admit"][0])
            self.assertEqual(new_id, pid)
            self.assertGreaterEqual(expiry, int(time.time()) + 590)
            # the origin never sees the pass
            for r in self.origin.recorder.requests:
                self.assertNotIn("concert_admit", r["cookie"] or "")

    def test_gate_queued_client_gets_no_pass(self):
        with self.concert("-cap", "1") as c:
            threads = fill(c)
            for h in ({}, BROWSER):
                _, headers, _ = c.get("/q", h)
                self.assertNotIn("concert_admit", cookie_values(headers))
            self.origin.release()
            for t in threads:
                t.join(10)


class ReaperTest(unittest.TestCase):
    """Abandoned tickets are evicted after the token TTL (30 s, the minimum) plus a reaper period."""

    def test_abandoned_ticket_evicted_live_one_moves_up(self):
        origin = FakeOrigin()
        try:
            # the parked request must outlive the TTL: raise the origin header timeout past it
            with Concert(["-upstream", origin.url, "-cap", "1", "-token-ttl", "30s", "-reaper", "5s",
                          "-upstream-timeout", "2m"], workers=2) as c:
                holder = park(c, "/slow?timeout=60", timeout=70)
                self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 1, timeout=5))
                abandoned, live = Jar(c), Jar(c)
                self.assertEqual(abandoned.request("/x")[0], 429)
                self.assertEqual(live.request("/x")[0], 429)
                self.assertEqual(json.loads(live.request("/queue/status")[2])["position"], 2)
                stats = c.stats()
                self.assertEqual((stats["queue_depth"], stats["live_queue_depth"]), (2, 2))
                deadline = time.time() + 50
                evicted = False
                while time.time() < deadline:
                    time.sleep(2)
                    status, _, body = live.request("/queue/status")  # keeps the live ticket alive
                    if c.stats()["evicted_total"] >= 1:
                        evicted = True
                        break
                self.assertTrue(evicted, "reaper did not evict the abandoned ticket")
                time.sleep(1.1)
                doc = json.loads(live.request("/queue/status")[2])
                self.assertEqual((doc["ready"], doc["position"]), (False, 1))
                stats = c.stats()
                self.assertEqual((stats["queue_depth"], stats["live_queue_depth"]), (1, 1))
                origin.release()
                holder.join(10)
        finally:
            origin.stop()


if __name__ == "__main__":
    unittest.main()
