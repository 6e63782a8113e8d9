"""Room modes and the admission rate, against the real binary and a fake origin.

  * pause: nobody new is admitted, the waiting keep their places (positions, event stream) and miss no
    turn; back to open they are admitted in ticket order; sessions go on meanwhile;
  * reject: the maintenance page (503 + Retry-After), built in or -maintenance-html, in the visitor's
    language; a session holder and bypass paths go on;
  * passthrough: the origin sees more than cap, and would_queue_total matches what a capped run of
    the same scripted load queued; switching back to open with more than cap in flight leaks no slot;
  * a mode set by POST /_room/mode survives a SIGHUP unless the file changes `mode`;
  * POST /_room/mode: 404 without a token, 401 without or with a wrong one, 400 naming a bad body;
  * -admit-rate 10/s: admissions counted at the origin over 20 s with many eager clients stay within
    10 % of the rate; no turn is missed for it; sessions are not held to it.

The origin counts a request in flight until its work is done, whatever Concert does. Every wait is
bounded; the only assertions on time are the counts over the rate test's measured window.
"""
import json
import os
import signal
import tempfile
import threading
import time
import unittest

from concert_harness import Concert, header, wait_for
from fake_origin import FakeOrigin
from visitor import BROWSER, JSON, Visitor

TOKEN = "mode-token"
AUTH = {"Authorization": "Bearer " + TOKEN}


def set_mode(c, mode, auth=AUTH):
    return c.request("POST", "/_room/mode", dict(auth), json.dumps({"mode": mode}).encode())


def current_mode(c):
    status, _, body = c.request("GET", "/_room/mode", dict(AUTH))
    assert status == 200, status
    return json.loads(body)["mode"]


class ScriptedLoad:
    """`clients` concurrent one-shot JSON clients against a gated slow path, started one at a time: each
    is started once the one before it reached the origin or was answered, so a run's outcome depends on
    the room's rules only, not on how the threads raced."""

    def __init__(self, concert, origin, clients, gate):
        self.c = concert
        self.origin = origin
        self.clients = clients
        self.gate = gate
        self.answers = []
        self.lock = threading.Lock()
        self.threads = []

    def _one(self):
        status, _, _ = self.c.get("/slow?gate=%s&timeout=60" % self.gate, headers=JSON, timeout=90)
        with self.lock:
            self.answers.append(status)

    def _settled(self):
        with self.lock:
            answered = len(self.answers)
        return answered + self.origin.recorder.hits("/slow")

    def start(self):
        base = self._settled()
        for i in range(self.clients):
            t = threading.Thread(target=self._one, daemon=True)
            t.start()
            self.threads.append(t)
            if not wait_for(lambda: self._settled() >= base + i + 1, timeout=10):
                raise AssertionError("client %d neither reached the origin nor was answered" % i)

    def finish(self):
        self.origin.release(self.gate)
        for t in self.threads:
            t.join(30)
        return list(self.answers)


class ModeTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def test_pause_keeps_places_misses_nothing_and_open_admits_in_ticket_order(self):
        with Concert(["-upstream", self.origin.url, "-cap", "2", "-claim-window", "1s",
                      "-first-poll-grace", "30s"], workers=2, admin_token=TOKEN) as c:
            status, _, body = set_mode(c, "pause")
            self.assertEqual((status, json.loads(body)), (200, {"mode": "pause"}))
            self.assertTrue(wait_for(lambda: "room mode set to pause via /_room/mode" in c.log(), timeout=5))
            line = [Visitor(c) for _ in range(5)]
            for v in line:
                status, _, body = v.get("/p")
                self.assertEqual(status, 429)  # two slots are free, and still nobody goes in
                self.assertTrue(json.loads(body)["queued"])
            for i, v in enumerate(line):
                self.assertEqual(v.status().get("position"), i + 1)
            # The waiting page's event stream still tells the position.
            name, data = line[2].first_event()
            self.assertEqual((name, data["ready"], data["position"]), ("position", False, 3))
            # Several claim windows later: nobody's turn came, so nobody missed it; places are kept.
            time.sleep(3.5)
            stats = c.stats()
            self.assertEqual(stats["missed_turns_total"], 0)
            self.assertEqual(stats["live_queue_depth"], 5)
            positions = [v.status().get("position") for v in line]
            self.assertEqual(positions, [1, 2, 3, 4, 5])
            self.assertEqual(line[0].get("/p")[0], 429)  # a reload in pause: still waiting
            self.assertEqual(self.origin.recorder.hits(), 0)
            # Open: the line goes in in ticket order; the last one is not let in ahead of the others.
            self.assertEqual(set_mode(c, "open")[0], 200)
            self.assertEqual(line[4].get("/p")[0], 429)
            order = []
            for i, v in enumerate(line):
                status, _, body = v.get("/p")
                self.assertEqual((status, body), (200, b"ok"), "visitor %d" % (i + 1))
                order.append(i + 1)
            self.assertEqual(order, [1, 2, 3, 4, 5])
            self.assertEqual(c.stats()["missed_turns_total"], 0)
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 2)

    def test_sessions_go_on_in_pause(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2, admin_token=TOKEN) as c:
            shopper = Visitor(c)
            self.assertEqual(shopper.get("/home")[0], 200)
            self.assertIn("concert_admit", shopper.jar)
            self.assertEqual(set_mode(c, "pause")[0], 200)
            newcomer = Visitor(c)
            self.assertEqual(newcomer.get("/home")[0], 429)
            for i in range(5):
                status, headers, body = shopper.get("/cart%d" % i)
                self.assertEqual((status, body), (200, b"ok"))
            self.assertEqual(newcomer.status().get("position"), 1)
            self.assertEqual(self.origin.recorder.hits(), 6)
            self.assertEqual(set_mode(c, "open")[0], 200)
            self.assertEqual(newcomer.get("/home")[0], 200)

    def test_reject_serves_the_maintenance_page_while_sessions_go_on(self):
        with Concert(["-upstream", self.origin.url, "-cap", "2", "-retry-after", "7"], workers=2,
                     admin_token=TOKEN) as c:
            shopper = Visitor(c)
            self.assertEqual(shopper.get("/home")[0], 200)
            waiting_before = c.stats()["live_queue_depth"]
            self.assertEqual(set_mode(c, "reject")[0], 200)
            self.assertEqual(current_mode(c), "reject")
            status, headers, body = c.get("/home", headers=BROWSER)
            self.assertEqual(status, 503)
            self.assertEqual(header(headers, "Retry-After"), "7")
            self.assertIn(b'<html lang="en">', body)
            self.assertIn(b"Down for maintenance", body)
            self.assertIsNone(header(headers, "Set-Cookie"))  # no ticket is taken
            status, _, body = c.get("/home", headers=dict(BROWSER, **{"Accept-Language": "de-DE,de;q=0.9"}))
            self.assertEqual(status, 503)
            self.assertIn(b"Wartungsarbeiten", body)
            status, headers, body = c.get("/api", headers=JSON)
            self.assertEqual(status, 503)
            self.assertEqual(json.loads(body)["error"], "down for maintenance")
            self.assertEqual(header(headers, "Retry-After"), "7")
            for i in range(3):
                self.assertEqual(shopper.get("/step%d" % i)[:3:2], (200, b"ok"))
            # Bypass paths are not pages: unaffected.
            self.assertEqual(c.get("/favicon.ico")[0], 200)
            self.assertEqual(self.origin.recorder.hits(), 5)
            self.assertEqual(c.stats()["live_queue_depth"], waiting_before)
        # A custom page, and the mode set by the configuration at start.
        page = os.path.join(tempfile.mkdtemp(prefix="concert-modes-"), "maintenance.html")
        with open(page, "w") as f:
            f.write('<html lang="{{.Lang}}"><p>Back at noon. {{.Text.MaintenanceTitle}}</p></html>\n')
        with Concert(["-upstream", self.origin.url, "-mode", "reject", "-maintenance-html", page],
                     workers=1) as c:
            status, headers, body = c.get("/home", headers=BROWSER)
            self.assertEqual(status, 503)
            self.assertIsNotNone(header(headers, "Retry-After"))
            self.assertEqual(body, b'<html lang="en"><p>Back at noon. Down for maintenance</p></html>\n')
            self.assertIn("room mode set to reject by the configuration", c.log())

    def test_passthrough_counts_what_a_capped_run_queued_and_leaks_no_slot(self):
        cap, clients = 10, 60
        # Control: the same scripted load against the cap.
        with Concert(["-upstream", self.origin.url, "-cap", str(cap)], workers=2) as c:
            load = ScriptedLoad(c, self.origin, clients, "control")
            load.start()
            self.assertTrue(wait_for(lambda: self.origin.recorder.page_in_flight == cap, timeout=10))
            queued = c.stats()["queued_total"]
            answers = load.finish()
            self.assertEqual(answers.count(200), cap)
            self.assertEqual(answers.count(429), clients - cap)
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, cap)
        self.assertGreater(queued, 0)
        self.origin.recorder.max_page_in_flight = 0
        with self.origin.recorder.lock:
            self.origin.recorder.requests = []
        # Passthrough: everyone reaches the origin; what the cap would have queued is counted.
        with Concert(["-upstream", self.origin.url, "-cap", str(cap), "-mode", "passthrough"], workers=2,
                     admin_token=TOKEN) as c:
            load = ScriptedLoad(c, self.origin, clients, "passthrough")
            load.start()
            self.assertTrue(wait_for(lambda: self.origin.recorder.page_in_flight == clients, timeout=10))
            self.assertGreater(self.origin.recorder.max_page_in_flight, cap)
            stats = c.stats()
            would_queue = stats["would_queue_total"]
            self.assertEqual(stats["occupancy"], cap)  # the free slots were taken, no more
            self.assertEqual(stats["queued_total"], 0)
            self.assertLessEqual(abs(would_queue - queued), 0.05 * queued, (would_queue, queued))
            # Back to open with 60 in flight: the cap binds at once for newcomers, and nothing leaks.
            self.assertEqual(set_mode(c, "open")[0], 200)
            self.assertEqual(c.get("/late", headers=JSON)[0], 429)
            answers = load.finish()
            self.assertEqual(answers, [200] * clients)
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=10))
            self.assertTrue(wait_for(lambda: self.origin.recorder.page_in_flight == 0, timeout=10))
            status, _, body = c.get("/after", headers=JSON)
            self.assertEqual((status, body), (200, b"ok"))

    def test_mode_survives_sighup_unless_the_file_changes_it(self):
        base = "upstream: %s\ncap: 2\n" % self.origin.url
        with Concert([], workers=1, admin_token=TOKEN, config_text=base + "mode: open\n") as c:
            self.assertEqual(current_mode(c), "open")
            self.assertEqual(set_mode(c, "pause")[0], 200)
            c.signal(signal.SIGHUP)
            self.assertTrue(wait_for(lambda: "reload accepted: generation 2" in c.log(), timeout=10), c.log())
            c.wait_workers(1)
            self.assertEqual(current_mode(c), "pause")
            # Another setting changed, `mode` did not: the runtime mode stays.
            with open(c.config_path, "w") as f:
                f.write("upstream: %s\ncap: 3\nmode: open\n" % self.origin.url)
            c.signal(signal.SIGHUP)
            self.assertTrue(wait_for(lambda: "reload accepted: generation 3" in c.log(), timeout=10), c.log())
            self.assertEqual(current_mode(c), "pause")
            self.assertEqual(c.stats()["cap"], 3)
            # The file changes `mode`: it applies.
            with open(c.config_path, "w") as f:
                f.write("upstream: %s\ncap: 3\nmode: reject\n" % self.origin.url)
            c.signal(signal.SIGHUP)
            self.assertTrue(wait_for(lambda: "reload accepted: generation 4" in c.log(), timeout=10), c.log())
            self.assertEqual(current_mode(c), "reject")
            self.assertIn("room mode set to reject by the configuration", c.log())
            # A bad mode in the file: the reload is refused, nothing changes.
            with open(c.config_path, "w") as f:
                f.write("upstream: %s\ncap: 3\nmode: closed\n" % self.origin.url)
            c.signal(signal.SIGHUP)
            self.assertTrue(wait_for(lambda: "reload refused" in c.log(), timeout=10), c.log())
            self.assertIn("must be open, pause, reject or passthrough", c.log())
            self.assertEqual(current_mode(c), "reject")

    def test_post_mode_404_401_400(self):
        with Concert(["-upstream", self.origin.url], workers=1) as c:
            status, _, body = set_mode(c, "pause")
            self.assertEqual((status, body), (404, b""))
            self.assertEqual(c.request("GET", "/_room/mode", dict(AUTH))[0], 404)
        with Concert(["-upstream", self.origin.url], workers=2, admin_token=TOKEN) as c:
            self.assertEqual(set_mode(c, "pause", auth={})[0], 401)
            self.assertEqual(set_mode(c, "pause", auth={"Authorization": "Bearer wrong"})[0], 401)
            self.assertEqual(c.request("GET", "/_room/mode", {})[0], 401)
            for body, needle in [(b"not json", "invalid JSON"), (b"{}", '"mode"'), (b'{"mode": 3}', "string"),
                                 (b'{"mode": "closed"}', 'unknown mode "closed"'), (b'["pause"]', '"mode"')]:
                status, headers, answer = c.request("POST", "/_room/mode", dict(AUTH), body)
                self.assertEqual(status, 400, body)
                self.assertEqual(header(headers, "Content-Type"), "application/json; charset=utf-8")
                self.assertIn(needle, json.loads(answer)["error"])
            self.assertEqual(current_mode(c), "open")
            self.assertEqual(c.request("PUT", "/_room/mode", dict(AUTH), b"{}")[0], 405)
            for _ in range(2):
                status, _, body = set_mode(c, "passthrough")
                self.assertEqual((status, json.loads(body)), (200, {"mode": "passthrough"}))
            for _ in range(4):  # every worker sees it
                self.assertEqual(current_mode(c), "passthrough")
            self.assertEqual(c.log().count("room mode set to passthrough via /_room/mode"), 1)
            self.assertEqual(self.origin.recorder.hits(), 0)


class AdmitRateTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def test_admission_rate_held_within_10_percent_over_20s_sessions_not_limited(self):
        rate, window = 10, 20.0
        with Concert(["-upstream", self.origin.url, "-cap", "50", "-admit-rate", "%d/s" % rate,
                      "-queue-hold", "60s", "-claim-window", "2s"], workers=2) as c:
            shopper = Visitor(c)
            self.assertEqual(shopper.get("/s")[0], 200)  # a token from the full bucket: now a session
            stop = threading.Event()
            errors = []

            def eager():
                # No cookie jar: every request is a new visitor, held until admitted.
                while not stop.is_set():
                    try:
                        status, _, _ = c.get("/e", headers=JSON, timeout=90)
                        if status != 200:
                            errors.append(status)
                    except OSError as e:
                        errors.append(repr(e))

            threads = [threading.Thread(target=eager, daemon=True) for _ in range(40)]
            for t in threads:
                t.start()
            time.sleep(3)  # the burst is spent; the line is long
            self.assertGreater(c.stats()["live_queue_depth"], 10)
            t0 = time.time()
            time.sleep(window / 2)
            # A session goes on while the line waits for tokens.
            for i in range(5):
                self.assertEqual(shopper.get("/s%d" % i, timeout=10)[:3:2], (200, b"ok"))
            time.sleep(t0 + window - time.time())
            t1 = time.time()
            with self.origin.recorder.lock:
                admitted = len([r for r in self.origin.recorder.requests
                                if r["path"] == "/e" and t0 <= r["time"] < t1])
            stop.set()
            for t in threads:
                t.join(90)
            expected = rate * (t1 - t0)
            self.assertLessEqual(abs(admitted - expected), 0.10 * expected, (admitted, expected))
            self.assertEqual(errors, [])
            self.assertEqual(c.stats()["missed_turns_total"], 0)


if __name__ == "__main__":
    unittest.main()
