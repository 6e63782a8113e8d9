"""eta_seconds (traffic.md §5.1) against the real binary: the key is always
there for a waiting ticket (/queue/status, the JSON 429, the position
events), null until Concert has seen 20 admissions from the line, a number
from then on, and a number that predicts the wait.

The line is a backlog of browser-like visitors at cap 2 in front of an origin
that answers in 200 ms: each loads the page, gets the waiting page, polls
/queue/status once a second as the page does without its event stream, and
loads the page again when told it is ready. The bounds are generous (±50 %
of the wait actually had); the wait itself is 10-20 s."""
import json
import statistics
import threading
import time
import unittest

from concert_harness import Concert, set_cookies, wait_for
from fake_origin import FakeOrigin
from test_events import EventStream

BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
PAGE = "/sleep?ms=200"
VISITORS = 90


class Visitor(threading.Thread):
    """A browser with JavaScript on the waiting page, polling once a second."""

    def __init__(self, concert, name):
        super().__init__(daemon=True, name=name)
        self.concert = concert
        self.cookies = {}
        self.polls = []  # (sent at, answered at, position, eta_seconds) of every accepted waiting poll
        self.queued = False  # got a ticket (the waiting page), not straight in
        self.admitted_at = None  # when the request that got in was sent
        self.admitted_done = None  # when its answer came back
        self.error = None

    def request(self, path):
        headers = dict(BROWSER)
        if self.cookies:
            headers["Cookie"] = "; ".join("%s=%s" % kv for kv in self.cookies.items())
        status, resp_headers, body = self.concert.get(path, headers, timeout=30)
        self.cookies.update(set_cookies(resp_headers))
        return status, body

    def run(self):
        try:
            self.visit()
        except Exception as e:  # reported by the test
            self.error = e

    def visit(self):
        deadline = time.time() + 80
        while time.time() < deadline:
            sent = time.time()
            status, body = self.request(PAGE)
            if status == 200 and body == b"ok":
                self.admitted_at, self.admitted_done = sent, time.time()
                return
            self.queued = True
            # The waiting page: its first poll one interval after load, then
            # once a second until ready.
            while time.time() < deadline:
                time.sleep(1.0)
                sent = time.time()
                status, body = self.request("/queue/status")
                if status != 200:
                    continue
                doc = json.loads(body)
                if doc.get("ready"):
                    break
                if "eta_seconds" not in doc:
                    raise AssertionError("waiting body without eta_seconds: %r" % body)
                self.polls.append((sent, time.time(), doc["position"], doc["eta_seconds"]))
        raise AssertionError("never admitted")


class EtaTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def test_null_until_twenty_admissions_then_a_fair_prediction(self):
        with Concert(["-upstream", self.origin.url, "-cap", "2"], workers=2) as c:
            visitors = [Visitor(c, "v%d" % i) for i in range(VISITORS)]
            for v in visitors:
                v.start()
                time.sleep(0.01)
            # Early on every waiting answer says null, in each place that carries it.
            self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] > 40, timeout=10))
            status, headers, body = c.get(PAGE)  # an API client, queued
            self.assertEqual(status, 429)
            self.assertEqual(body, b'{"eta_seconds":null,"hint":"keep the room_ticket cookie and retry to hold '
                             b'your position","queued":true,"retry_after_seconds":5,"status_url":"/queue/status"}')
            ticket = set_cookies(headers)["room_ticket"]
            stream = EventStream(c.port, ticket).read_head()
            first = stream.wait_for_item(lambda i: True, timeout=5)
            stream.close()
            self.assertEqual(first[1:3], ("event", "position"))
            self.assertIn('"eta_seconds":null', first[3])

            # Once 20 visitors got in from the line, every answer has a number.
            def line_admissions():
                return sorted(v.admitted_done for v in visitors if v.queued and v.admitted_done)
            self.assertTrue(wait_for(lambda: len(line_admissions()) >= 21, timeout=30), "the line did not move")
            status, headers, body = c.get(PAGE)
            self.assertEqual(status, 429)
            doc = json.loads(body)
            self.assertIsInstance(doc["eta_seconds"], int)
            self.assertEqual(list(doc), sorted(doc))
            self.assertGreater(doc["eta_seconds"], 0)
            stream = EventStream(c.port, set_cookies(headers)["room_ticket"]).read_head()
            first = stream.wait_for_item(lambda i: True, timeout=5)
            stream.close()
            self.assertEqual(first[1:3], ("event", "position"))
            self.assertIsInstance(json.loads(first[3])["eta_seconds"], int)

            for v in visitors:
                v.join(90)
            errors = [(v.name, v.error) for v in visitors if v.error]
            self.assertEqual(errors, [])

            twentieth = line_admissions()[19]
            polls = [p for v in visitors for p in v.polls]
            self.assertTrue(any(eta is None for _, _, _, eta in polls), "no null before the 20th admission")
            said_null_late = [p for p in polls if p[0] > twentieth and p[3] is None]
            self.assertEqual(said_null_late, [], "null after 20 admissions from the line")
            for _, _, position, eta in polls:
                self.assertTrue(eta is None or (isinstance(eta, int) and eta >= 1), eta)

            # The prediction: the first number a visitor is shown at a
            # position of 20-50, against the wait it then had.
            samples = []
            for v in visitors:
                for sent, answered, position, eta in v.polls:
                    if eta is not None and 20 <= position <= 50:
                        samples.append((v.name, position, eta, v.admitted_at - answered))
                        break
            report = "\n".join("%s at %d: eta %d s, waited %.1f s" % s for s in samples)
            self.assertGreaterEqual(len(samples), 15, report)
            errors = [(eta - waited) / waited for _, _, eta, waited in samples]
            within = [e for e in errors if abs(e) <= 0.5]
            self.assertGreaterEqual(len(within), 0.9 * len(samples), report)
            self.assertLessEqual(abs(statistics.median(errors)), 0.3, report)


if __name__ == "__main__":
    unittest.main()
