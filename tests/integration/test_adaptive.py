"""-adaptive against the real binary and an origin that works like php-fpm
(tests/lib/pool_origin.py: a fixed number of workers behind one FIFO listen
queue): the cap comes down from far above the origin's workers to just
above them, follows the workers when they change, and says so in the log,
the metrics and /_room/report. A runtime cap stops it until a reload that
says adaptive; settings that contradict each other are refused.

Visitors are looping clients whose page requests wait in line on their
connections (-queue-hold), so that the cap always binds. The bounds are wide
enough for any speed of the machine: every wait is a deadline, no assertion
is about time."""
import json
import os
import signal
import threading
import time
import unittest

from concert_harness import BIN, Concert, jar_update, wait_for
from pool_origin import PoolOrigin

TOKEN = "adaptive-admin-token"
AUTH = {"Authorization": "Bearer " + TOKEN}


class Crowd:
    """`n` visitors, each asking for pages one after another on its own
    keep-alive connection until stop(), with its own cookies as a browser
    keeps its place: one answered with the waiting room (a worker that
    drained on a reload answers its held requests so) comes back with its
    room_ticket and takes its turn. Nothing else is kept, so that every page
    goes through the line."""

    def __init__(self, concert, n):
        self.concert = concert
        self.stopping = threading.Event()
        self.answers = {}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.visit, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def visit(self):
        conn = None
        jar = {}
        while not self.stopping.is_set():
            try:
                if conn is None:
                    conn = self.concert.conn(timeout=60)
                headers = {"Cookie": "; ".join("%s=%s" % kv for kv in jar.items())} if jar else {}
                conn.request("GET", "/page", headers=headers)
                response = conn.getresponse()
                response.read()
                jar_update(jar, response.getheaders())
                jar = {k: v for k, v in jar.items() if k == "room_ticket"}
                with self.lock:
                    self.answers[response.status] = self.answers.get(response.status, 0) + 1
            except OSError:
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)
        if conn is not None:
            conn.close()

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(70)


def metric(concert, name):
    return concert.metrics()[1].get((name, ()), None)


class AdaptiveTest(unittest.TestCase):
    def setUp(self):
        self.origin = PoolOrigin(workers=4, seed=7)

    def tearDown(self):
        self.origin.stop()

    def concert(self, *args, **kw):
        return Concert(["-upstream", self.origin.url, "-queue-hold", "60s", "-upstream-timeout", "30s"] + list(args),
                       admin_token=TOKEN, **kw)

    def cap_stays(self, concert, lo, hi, seconds):
        """The cap stays within [lo, hi] for `seconds` (sampled every 200 ms)."""
        end = time.time() + seconds
        while time.time() < end:
            cap = concert.stats()["cap"]
            if not lo <= cap <= hi:
                return False
            time.sleep(0.2)
        return True

    def test_cap_finds_the_workers_and_follows_them(self):
        with self.concert("-cap", "32", "-adaptive", "-cap-max", "64") as c:
            crowd = Crowd(c, 40)
            try:
                # From 32 down past the knee, then to just above the origin's
                # 4 workers, where it stays.
                self.assertTrue(wait_for(lambda: "the knee: " in c.log(), timeout=90, interval=0.2), c.log())
                self.assertRegex(c.log(), r"adaptive cap 32 -> 16: the origin is queued")
                self.assertTrue(wait_for(lambda: 4 <= c.stats()["cap"] <= 6, timeout=30, interval=0.2), c.log())
                self.assertTrue(self.cap_stays(c, 4, 7, 5), c.log())
                self.assertEqual(metric(c, "concert_adaptive_active"), 1)
                self.assertGreaterEqual(metric(c, "concert_adaptive_changes_total"), 3)
                base = metric(c, "concert_adaptive_base_latency_seconds")
                self.assertTrue(0.05 <= base <= 0.2, base)  # pages of 50 and 150 ms
                self.assertEqual(metric(c, "concert_page_slots_limit"), c.stats()["cap"])
                self.assertGreater(metric(c, "concert_page_first_byte_seconds_count"), 100)
                self.assertEqual(metric(c, "concert_page_errors_total"), 0)
                # The descent went through several levels: the advisor has the knee.
                status, _, body = c.admin("GET", "/_room/report", AUTH)
                self.assertEqual(status, 200)
                capacity = json.loads(body)["capacity"]
                self.assertTrue(capacity["adaptive"]["active"])
                self.assertEqual(capacity["adaptive"]["cap_max"], 64)
                self.assertTrue(capacity["recommended_cap"] is None or 3 <= capacity["recommended_cap"] <= 8,
                                capacity)
                # The origin gets twice the workers: the cap follows them up.
                self.origin.pool.set_workers(8)
                self.assertTrue(wait_for(lambda: c.stats()["cap"] >= 8, timeout=90, interval=0.2), c.log())
                self.assertTrue(wait_for(lambda: metric(c, "concert_adaptive_origin_queue") is not None, timeout=5))
            finally:
                crowd.stop()
            # Every page was served; a few visitors may have been answered with
            # the waiting room once (429, with their ticket) and came back.
            self.assertGreater(crowd.answers.get(200, 0), 1000, crowd.answers)
            self.assertLessEqual(set(crowd.answers), {200, 429}, crowd.answers)
            # Never more page requests at the origin than the cap let in: the
            # most it held at once is the starting cap.
            self.assertLessEqual(self.origin.pool.max_inside, 32)
            self.assertLessEqual(self.origin.pool.max_busy, 8)

    def test_runtime_cap_stops_it_and_a_reload_that_says_adaptive_resumes_it(self):
        config = "cap: 24\nadaptive: true\ncap-max: 48\n"
        with self.concert(config_text=config) as c:
            crowd = Crowd(c, 30)
            try:
                self.assertTrue(wait_for(lambda: metric(c, "concert_adaptive_changes_total") >= 1, timeout=60,
                                         interval=0.2), c.log())
                status, _, body = c.admin("POST", "/_room/cap", AUTH, b'{"cap":10}')
                self.assertEqual(status, 200, body)
                self.assertRegex(c.log(), r"page cap set to 10 via /_room/cap; -adaptive stops")
                self.assertTrue(wait_for(lambda: metric(c, "concert_adaptive_active") == 0, timeout=5), c.log())
                changes = metric(c, "concert_adaptive_changes_total")
                # It holds the operator's cap under load for several windows.
                self.assertTrue(self.cap_stays(c, 10, 10, 4), c.log())
                self.assertEqual(metric(c, "concert_adaptive_changes_total"), changes)
                self.assertRegex(c.log(), r"adaptive cap stopped: the cap was set at run time \(10\)")
                # A reload whose configuration says adaptive takes over again.
                c.signal(signal.SIGHUP)
                self.assertTrue(wait_for(lambda: "adaptive cap resumes from cap 10" in c.log(), timeout=10), c.log())
                self.assertTrue(wait_for(lambda: metric(c, "concert_adaptive_active") == 1, timeout=5), c.log())
                self.assertTrue(wait_for(lambda: metric(c, "concert_adaptive_changes_total") > changes, timeout=60,
                                         interval=0.2), c.log())
                # A reload without adaptive stops it and leaves the cap where it is.
                with open(c.config_path, "w") as f:
                    f.write("cap: 24\ncap-max: 48\n")
                c.signal(signal.SIGHUP)
                self.assertTrue(wait_for(lambda: "no longer says adaptive" in c.log(), timeout=10), c.log())
                self.assertTrue(wait_for(lambda: metric(c, "concert_adaptive_active") == 0, timeout=5), c.log())
            finally:
                crowd.stop()

    def test_off_by_default(self):
        with self.concert("-cap", "3") as c:
            crowd = Crowd(c, 8)
            try:
                self.assertTrue(wait_for(lambda: metric(c, "concert_page_first_byte_seconds_count") > 50,
                                         timeout=30), c.log())
                time.sleep(3)
                self.assertEqual(c.stats()["cap"], 3)
                self.assertEqual(metric(c, "concert_adaptive_active"), 0)
                self.assertEqual(metric(c, "concert_adaptive_changes_total"), 0)
                self.assertNotIn("adaptive cap", c.log())
            finally:
                crowd.stop()

    def test_origin_status_page(self):
        # PHP-FPM's status page, as its JSON (?json): 6 processes, 4 busy.
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        asked = []

        class Status(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                asked.append(self.path)
                body = json.dumps({"pool": "www", "listen queue": 2, "active processes": 4, "total processes": 6,
                                   "max children reached": 11}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Status)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = "http://127.0.0.1:%d/fpm-status" % server.server_address[1]
            with self.concert("-cap", "5", "-origin-status", url) as c:
                def capacity():
                    return json.loads(c.admin("GET", "/_room/report", AUTH)[2])["capacity"]
                self.assertTrue(wait_for(lambda: capacity()["origin_status"] is not None, timeout=10), c.log())
                report = capacity()
                self.assertEqual(report["origin_status"], {"active_processes": 4, "total_processes": 6,
                                                           "listen_queue": 2, "max_children_reached": 11})
                self.assertEqual((report["recommended_cap"], report["recommended_by"]), (7, "origin status page"))
                self.assertEqual(metric(c, "concert_adaptive_recommended_cap"), 7)
                self.assertIn("/fpm-status?json", asked)
                # The page goes away: logged once, and the report says nothing of it.
                server.shutdown()
                server.server_close()
                self.assertTrue(wait_for(lambda: capacity()["origin_status"] is None, timeout=10), c.log())
                time.sleep(2.5)
                self.assertEqual(c.log().count("-origin-status %s: " % url), 1, c.log())
                self.assertIsNone(capacity()["recommended_cap"])
        finally:
            server.server_close()

    def test_contradicting_settings_are_refused(self):
        import subprocess
        cases = [
            (["-adaptive", "-cap", "10", "-cap-min", "20", "-cap-max", "15"], "-cap-min (flag): 20 is above -cap-max 15"),
            (["-adaptive", "-cap", "100", "-cap-max", "50"], "-cap (flag): 100 is outside -cap-min 1 .. -cap-max 50"),
            (["-adaptive", "-cap", "4", "-cap-min", "5"], "-cap (flag): 4 is outside -cap-min 5 .. -cap-max 16"),
            (["-adaptive", "-cluster", "redis://127.0.0.1:1"], "-adaptive (flag): cannot be used with -cluster"),
            (["-origin-status", "https://127.0.0.1/fpm-status"], "-origin-status (flag): must be http"),
            (["-origin-status", "http://fpm.example/status"], "-origin-status (flag): must name its host by address"),
            (["-origin-status", "status"], "-origin-status (flag): must look like http://"),
        ]
        env = dict(os.environ, CONCERT_ADMIT_SECRET="x" * 32)
        for args, message in cases:
            with self.subTest(args=args):
                done = subprocess.run([BIN, "-t", "-upstream", self.origin.url] + args, capture_output=True, env=env,
                                      timeout=10)
                self.assertNotEqual(done.returncode, 0)
                self.assertIn(message, done.stderr.decode() + done.stdout.decode())
        # Without -adaptive the bounds say nothing.
        done = subprocess.run([BIN, "-t", "-upstream", self.origin.url, "-cap", "100", "-cap-max", "50"],
                              capture_output=True, env=env, timeout=10)
        self.assertEqual(done.returncode, 0, done.stderr)


if __name__ == "__main__":
    unittest.main()
