"""eta_seconds, the wait Concert predicts for a waiting ticket, against the
real binary: the key is always there for a waiting ticket (/queue/status, the
JSON 429, the position events), null until Concert has seen 20 admissions
from the line, a number from then on, and a number that predicts the wait.

The line is a backlog of browser-like visitors at cap 2 in front of an origin
that answers in 200 ms: each loads the page, gets the waiting page, polls
/queue/status once a second as the page does without its event stream, and
loads the page again when told it is ready. The bounds are generous (±50 %
of the wait actually had); the wait itself is 10-20 s."""
import json
import statistics
import time
import unittest

from concert_harness import Concert, set_cookies, wait_for
from fake_origin import FakeOrigin
from visitor import BROWSER, Visitor

PAGE = "/sleep?ms=200"
VISITORS = 90


def browse(c, name):
    """A browser with JavaScript on the waiting page, without its event stream: it loads the page,
    polls once a second (the first poll one interval after the load) and loads the page again when
    ready. Started on its own thread: (visitor, Background)."""
    v = Visitor(c, name, accept=BROWSER)
    return v, v.admit_in_thread(PAGE, time.time() + 80, use_events=False, page_timeout=30, first_poll_after=1.0)


def waiting_polls(v):
    """The accepted /queue/status answers that were not ready: Poll records."""
    return [p for p in v.polls if p.doc is not None and not p.doc.get("ready")]


class EtaTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def test_null_until_twenty_admissions_then_a_fair_prediction(self):
        with Concert(["-upstream", self.origin.url, "-cap", "2"], workers=2) as c:
            visitors, runs = [], []
            for i in range(VISITORS):
                v, run = browse(c, "v%d" % i)
                visitors.append(v)
                runs.append(run)
                time.sleep(0.01)
            # Early on every waiting answer says null, in each place that carries it.
            self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] > 40, timeout=10))
            api = Visitor(c, "api", accept={})  # an API client (no Accept at all), queued
            status, headers, body = api.get(PAGE)
            self.assertEqual(status, 429)
            self.assertEqual(body, b'{"eta_seconds":null,"hint":"keep the room_ticket cookie and retry to hold '
                             b'your position","queued":true,"retry_after_seconds":5,"status_url":"/queue/status"}')
            self.assertIn("room_ticket", set_cookies(headers))
            name, data = api.first_event()
            self.assertEqual(name, "position")
            self.assertIn("eta_seconds", data)
            self.assertIsNone(data["eta_seconds"])

            # Once 20 visitors got in from the line, every answer has a number.
            def line_admissions():
                return sorted(v.admitted_at for v in visitors if v.queued and v.admitted_at)
            self.assertTrue(wait_for(lambda: len(line_admissions()) >= 21, timeout=30), "the line did not move")
            api = Visitor(c, "api2", accept={})
            status, headers, body = api.get(PAGE)
            self.assertEqual(status, 429)
            doc = json.loads(body)
            self.assertIsInstance(doc["eta_seconds"], int)
            self.assertEqual(list(doc), sorted(doc))
            self.assertGreater(doc["eta_seconds"], 0)
            self.assertIn("room_ticket", set_cookies(headers))
            name, data = api.first_event()
            self.assertEqual(name, "position")
            self.assertIsInstance(data["eta_seconds"], int)

            for run in runs:
                run.join(90)
            errors = [(v.name, run.error or "never admitted") for v, run in zip(visitors, runs)
                      if run.error or v.admitted_at is None]
            errors += [(v.name, "waiting body without eta_seconds: %r" % (p.doc,))
                       for v in visitors for p in waiting_polls(v) if "eta_seconds" not in p.doc]
            self.assertEqual(errors, [])

            twentieth = line_admissions()[19]
            # (sent, answered, position, eta_seconds) of every accepted waiting poll.
            polls = [(p.sent, p.answered, p.doc["position"], p.doc["eta_seconds"])
                     for v in visitors for p in waiting_polls(v)]
            self.assertTrue(any(eta is None for _, _, _, eta in polls), "no null before the 20th admission")
            said_null_late = [p for p in polls if p[0] > twentieth and p[3] is None]
            self.assertEqual(said_null_late, [], "null after 20 admissions from the line")
            for _, _, position, eta in polls:
                self.assertTrue(eta is None or (isinstance(eta, int) and eta >= 1), eta)

            # The prediction: the first number a visitor is shown at a
            # position of 20-50, against the wait it then had.
            samples = []
            for v in visitors:
                for p in waiting_polls(v):
                    position, eta = p.doc["position"], p.doc["eta_seconds"]
                    if eta is not None and 20 <= position <= 50:
                        samples.append((v.name, position, eta, v.admitted_sent - p.answered))
                        break
            report = "\n".join("%s at %d: eta %d s, waited %.1f s" % s for s in samples)
            self.assertGreaterEqual(len(samples), 15, report)
            errors = [(eta - waited) / waited for _, _, eta, waited in samples]
            within = [e for e in errors if abs(e) <= 0.5]
            self.assertGreaterEqual(len(within), 0.9 * len(samples), report)
            self.assertLessEqual(abs(statistics.median(errors)), 0.3, report)


if __name__ == "__main__":
    unittest.main()
