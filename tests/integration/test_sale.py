"""Scheduled sales, against the real binary and a fake origin.

  * with -event-start a few seconds ahead and -prequeue covering now, 100 visitors (each its own cookie
    jar) arrive during the pre-queue: none reaches the origin before the start; from the start, with a
    small cap, each is admitted exactly once, in an order that is neither arrival order nor its reverse,
    the origin never sees more than cap at once, and visitors who arrive after the start go in after
    every pre-queue visitor;
  * -shuffle-prequeue=false keeps arrival order;
  * a SIGHUP reload during the pre-queue keeps everyone's ticket and the order of the line;
  * during the pre-queue the waiting page shows the start and a countdown (server-rendered too) and
    /queue/status carries starts_in instead of a position.

Times are real: the start is set a few seconds ahead with a margin, and every wait is bounded; nothing
asserts how long anything took.
"""
import datetime
import json
import re
import signal
import threading
import time
import unittest

from concert_harness import Concert, wait_for
from fake_origin import FakeOrigin
from visitor import BROWSER, Visitor

TOKEN = "sale-token"
AUTH = {"Authorization": "Bearer " + TOKEN}
CAP = 3


def rfc3339(ts):
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_page(v):
    """The page a visitor asks for, naming it: the origin holds it a little, so admissions overlap."""
    return v.get("/sleep?ms=30&who=%s" % v.name)


class SaleTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin(nodelay=True)

    def tearDown(self):
        self.origin.stop()

    def concert(self, start, extra=(), **kw):
        # -first-poll-grace and -claim-window at their longest: visitors come back only when the test drives
        # them, and a slow machine must not turn that into abandoned tickets or missed turns.
        args = ["-upstream", self.origin.url, "-cap", str(CAP), "-event-start", rfc3339(start), "-prequeue", "1h",
                "-first-poll-grace", "1h", "-claim-window", "1h"] + list(extra)
        return Concert(args, workers=2, admin_token=TOKEN, **kw)

    def admission_order(self):
        """Who reached the origin, in the order they did (one entry per page request)."""
        with self.origin.recorder.lock:
            reqs = sorted(self.origin.recorder.requests, key=lambda r: r["time"])
        return [re.search(r"who=([^&]+)", r["target"]).group(1) for r in reqs if r["path"] == "/sleep"]

    def arrive(self, c, names, start):
        """Each visitor's first request, during the pre-queue: a ticket and the time to the start."""
        visitors = []
        for name in names:
            v = Visitor(c, name)
            status, _, body = load_page(v)
            self.assertEqual(status, 429, body)
            self.assertLess(time.time(), start, "the machine was too slow to arrive before the start")
            data = json.loads(body)
            self.assertTrue(data["queued"])
            self.assertGreater(data["starts_in"], 0)
            self.assertIn("room_ticket", v.jar)
            visitors.append(v)
        return visitors

    def drive(self, visitors, threads=1, timeout=120):
        """Every visitor comes back with its cookie until it is admitted; returns the names admitted."""
        admitted = []
        lock = threading.Lock()
        deadline = time.time() + timeout
        errors = []

        def run(mine):
            pending = list(mine)
            while pending and time.time() < deadline:
                for v in list(pending):
                    status, _, body = load_page(v)
                    if status == 200:
                        with lock:
                            admitted.append(v.name)
                        pending.remove(v)
                    elif status != 429:
                        errors.append((v.name, status, body))
                        return
                time.sleep(0.01)

        if threads == 1:
            run(visitors)
        else:
            workers = [threading.Thread(target=run, args=(visitors[i::threads],), daemon=True)
                       for i in range(threads)]
            for t in workers:
                t.start()
            for t in workers:
                t.join(timeout + 10)
        self.assertEqual(errors, [])
        self.assertEqual(sorted(admitted), sorted(v.name for v in visitors), "not everyone was admitted")
        return admitted

    def wait_start(self, start):
        while time.time() < start + 0.3:
            time.sleep(0.05)

    def test_prequeue_is_shuffled_once_and_later_arrivals_queue_behind(self):
        start = time.time() + 12
        with self.concert(start) as c:
            arrival = ["p%03d" % i for i in range(100)]
            visitors = self.arrive(c, arrival, start)
            self.assertEqual(self.origin.recorder.hits("/sleep"), 0)
            self.assertEqual(c.stats()["live_queue_depth"], 100)
            self.wait_start(start)
            self.assertEqual(self.origin.recorder.hits("/sleep"), 0)  # nobody went in by themselves
            late = []
            for i in range(5):
                v = Visitor(c, "late%d" % i)
                status, _, _ = load_page(v)
                self.assertEqual(status, 429)  # the pre-queue waits ahead
                late.append(v)
            self.drive(visitors + late, threads=8)
            order = self.admission_order()
            self.assertEqual(sorted(order), sorted(arrival + [v.name for v in late]), "someone went in twice")
            pre_order = [n for n in order if n.startswith("p")]
            self.assertNotEqual(pre_order, arrival)
            self.assertNotEqual(pre_order, list(reversed(arrival)))
            # Behind them: a late ticket's turn comes only once fewer pre-queue tickets wait than slots
            # are free, so at most CAP - 1 of the pre-queue (whose turns came together with it, and who
            # then take their slots in the order they come back) can reach the origin after it.
            first_late = min(i for i, n in enumerate(order) if n.startswith("late"))
            pre_before = sum(1 for n in order[:first_late] if n.startswith("p"))
            self.assertGreaterEqual(pre_before, len(arrival) - (CAP - 1), order)
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, CAP)
            self.assertIn("pre-queue closed: 100 visitors hold their shuffled places",
                          wait_for(lambda: "pre-queue closed" in c.log() and c.log(), timeout=5))

    def test_without_shuffle_the_prequeue_keeps_arrival_order(self):
        start = time.time() + 6
        with self.concert(start, ["-shuffle-prequeue=false"]) as c:
            arrival = ["p%03d" % i for i in range(20)]
            visitors = self.arrive(c, arrival, start)
            self.wait_start(start)
            self.assertEqual(self.origin.recorder.hits("/sleep"), 0)
            admitted = self.drive(visitors)
            self.assertEqual(admitted, arrival)
            self.assertEqual(self.admission_order(), arrival)

    def queue_listing(self, c):
        status, _, body = c.admin("GET", "/_room/queue?limit=1000", dict(AUTH))
        self.assertEqual(status, 200, body)
        return [e["ticket"] for e in json.loads(body)]

    def test_reload_during_the_prequeue_keeps_tickets_and_order(self):
        start = time.time() + 12
        with self.concert(start) as c:
            arrival = ["p%03d" % i for i in range(30)]
            visitors = self.arrive(c, arrival, start)
            before = self.queue_listing(c)
            self.assertEqual(len(before), 30)
            cookies = {v.name: v.jar["room_ticket"] for v in visitors}
            c.signal(signal.SIGHUP)
            self.assertTrue(wait_for(lambda: "reload accepted: generation 2" in c.log(), timeout=10), c.log())
            c.wait_workers(2)
            self.assertLess(time.time(), start, "the reload took until the start")
            self.assertEqual(self.queue_listing(c), before)
            # Each visitor still holds its place: it comes back and is told to wait, with the same ticket.
            for v in visitors:
                status, _, body = load_page(v)
                self.assertEqual(status, 429, body)
                self.assertGreater(json.loads(body)["starts_in"], 0)
                self.assertEqual(v.jar["room_ticket"], cookies[v.name])
            self.assertEqual(self.queue_listing(c), before)
            self.wait_start(start)
            admitted = self.drive(visitors)
            self.assertEqual(sorted(self.admission_order()), sorted(arrival))
            self.assertNotEqual(admitted, arrival)
            self.assertEqual(self.queue_listing(c), [])

    def test_waiting_page_counts_down_to_the_start(self):
        start = time.time() + 30
        with self.concert(start) as c:
            v = Visitor(c, "browser", accept=BROWSER)
            status, hdrs, body = load_page(v)
            self.assertEqual(status, 200)
            page = body.decode()
            m = re.search(r'data-starts-in="(\d+)"', page)
            self.assertIsNotNone(m, page[:2000])
            self.assertGreater(int(m.group(1)), 0)
            self.assertLessEqual(int(m.group(1)), 31)
            clock = datetime.datetime.fromtimestamp(int(start), datetime.timezone.utc).strftime("%H:%M:%S")
            self.assertIn("The sale starts at %s UTC, in" % clock, page)
            self.assertEqual(self.origin.recorder.hits("/sleep"), 0)
            # The poll the page's script makes: no position, the seconds to the start, not ready.
            status, _, body = v.get("/queue/status")
            self.assertEqual(status, 200, body)
            data = json.loads(body)
            self.assertFalse(data["ready"])
            self.assertGreater(data["starts_in"], 0)
            self.assertNotIn("position", data)
            # Before the pre-queue, and without a sale, the page has no countdown.
        with self.concert(time.time() + 7200 + 60) as c:
            status, _, body = load_page(Visitor(c, "early", accept=BROWSER))
            self.assertEqual(status, 200)  # straight in: the room works as usual before the pre-queue
            self.assertEqual(self.origin.recorder.hits("/sleep"), 1)

    def test_invalid_event_start_is_refused_naming_the_setting(self):
        c = Concert(["-upstream", self.origin.url, "-event-start", "next friday"], wait=False)
        c.start()
        try:
            c.proc.wait(10)
            self.assertNotEqual(c.proc.returncode, 0)
            self.assertIn("-event-start", c.log())
            self.assertIn("RFC 3339", c.log())
        finally:
            c.kill_all()


if __name__ == "__main__":
    unittest.main()
