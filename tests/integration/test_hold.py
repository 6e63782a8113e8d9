"""-queue-hold against the real binary with two workers: a page request that has
to queue is held on its connection, proxied in FIFO order once its turn comes,
answered with the waiting room (and its room_ticket) when the hold runs out,
and answered at once when its worker drains. The origin never sees more than
cap page requests at once. No assertion depends on speed: every wait is bounded."""
import re
import signal
import socket
import unittest

from concert_harness import Concert, header, in_thread, set_cookies, wait_for
from fake_origin import FakeOrigin
from room import fill

# Fewer than 20 admissions from the line before it is checked: no ETA yet.
QUEUED_JSON = (b'{"eta_seconds":null,"hint":"keep the room_ticket cookie and retry to hold your position",'
               b'"queued":true,"retry_after_seconds":5,"status_url":"/queue/status"}')
BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
ACCESS_RE = re.compile(r'"GET (\S+) HTTP/1\.1" (\d{3}) \d+ "[^"]*" "([^"]*)" \d+\.\d{3} (\w+)$')


def access_lines(concert, agent):
    """(path, status, outcome) of the access-log lines whose User-Agent is `agent`."""
    try:
        with open(concert.access_path) as f:
            text = f.read()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        m = ACCESS_RE.search(line)
        if m and m.group(3) == agent:
            out.append((m.group(1), int(m.group(2)), m.group(4)))
    return out


class HoldTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def concert(self, *args, workers=2, **kw):
        return Concert(["-upstream", self.origin.url] + list(args), workers=workers, **kw)

    def test_held_requests_are_proxied_in_fifo_order(self):
        with self.concert("-cap", "1", "-queue-hold", "30s", access_log=True) as c:
            holder = fill(c)[0]
            held = []
            for i in range(6):
                # Each one takes its ticket before the next is sent, so ticket
                # order is the order below. Connections land on either worker.
                headers = dict(BROWSER if i % 2 else {}, **{"User-Agent": "hold-fifo"})
                held.append(in_thread(c.get, "/sleep?ms=20&n=%d" % i, headers, timeout=30))
                self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == i + 1, timeout=10), c.log())
            stats = c.stats()
            # Held requests are waiting visitors: in the queue depth, not at the origin.
            self.assertEqual((stats["occupancy"], stats["queue_depth"], stats["queued_total"]), (1, 6, 6))
            self.assertEqual(self.origin.recorder.hits("/sleep"), 0)

            self.origin.release()
            holder.outcome(15)
            for thread in held:
                status, headers, body = thread.outcome(15)
                self.assertEqual((status, body), (200, b"ok"))
                got = set_cookies(headers)
                self.assertIn("concert_admit", got)
                self.assertNotIn("room_ticket", got)
            order = [r["target"] for r in self.origin.recorder.requests if r["path"] == "/sleep"]
            self.assertEqual(order, ["/sleep?ms=20&n=%d" % i for i in range(6)])
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)
            stats = c.stats()
            self.assertEqual((stats["queue_depth"], stats["live_queue_depth"], stats["timeouts_total"]), (0, 0, 0))
            lines = wait_for(lambda: len(access_lines(c, "hold-fifo")) == 6 and access_lines(c, "hold-fifo"))
            self.assertTrue(lines)
            self.assertEqual({(status, outcome) for _, status, outcome in lines}, {(200, "admitted")})
            self.assertEqual(c.fifo_inversions(), 0)

    def test_hold_runs_out_with_the_waiting_room_and_the_cookie_keeps_the_place(self):
        with self.concert("-cap", "1", "-queue-hold", "1s", access_log=True) as c:
            holder = fill(c)[0]
            status, headers, body = c.get("/api", {"User-Agent": "hold-api"}, timeout=15)
            self.assertEqual(status, 429)
            self.assertEqual(body, QUEUED_JSON)
            self.assertEqual(header(headers, "Retry-After"), "5")
            first = set_cookies(headers)
            self.assertEqual(len(first["room_ticket"]), 32)
            self.assertEqual(first["room_probe"], "1")
            self.assertNotIn("concert_admit", first)

            status, headers, body = c.get("/page", dict(BROWSER, **{"User-Agent": "hold-page"}), timeout=15)
            self.assertEqual(status, 200)
            self.assertEqual(header(headers, "Content-Type"), "text/html; charset=utf-8")
            self.assertIn(b"/queue/status", body)
            self.assertIn(b'aria-atomic="true">2</span>', body)
            second = set_cookies(headers)["room_ticket"]
            self.assertNotEqual(second, first["room_ticket"])

            # Both tickets are still in line: nothing was retired.
            stats = c.stats()
            self.assertEqual((stats["queue_depth"], stats["live_queue_depth"], stats["timeouts_total"]), (2, 2, 0))

            page = dict(BROWSER, **{"User-Agent": "hold-page", "Cookie": "room_ticket=" + second})
            api = {"User-Agent": "hold-api", "Cookie": "room_ticket=" + first["room_ticket"]}
            # Back with the cookie while the slot is still taken: held again,
            # then the same ticket at the same place.
            status, headers, body = c.get("/page", page, timeout=15)
            self.assertEqual(status, 200)
            self.assertEqual(set_cookies(headers)["room_ticket"], second)
            self.assertIn(b'aria-atomic="true">2</span>', body)

            self.origin.release()
            holder.outcome(15)
            # The slot is free, but the first ticket is ahead: the second may
            # not jump it, so its hold runs out again. Its position counts the
            # live visitors ahead: the first is still in line until it comes.
            status, headers, body = c.get("/page", page, timeout=15)
            self.assertEqual(status, 200)
            self.assertEqual(set_cookies(headers)["room_ticket"], second)
            self.assertIn(b'aria-atomic="true">2</span>', body)
            self.assertEqual(self.origin.recorder.hits("/page"), 0)

            # Each cookie is admitted in its turn.
            status, headers, body = c.get("/api", api, timeout=15)
            self.assertEqual((status, body), (200, b"ok"))
            self.assertIn("concert_admit", set_cookies(headers))
            status, headers, body = c.get("/page", page, timeout=15)
            self.assertEqual((status, body), (200, b"ok"))
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)
            stats = c.stats()
            self.assertEqual((stats["queue_depth"], stats["live_queue_depth"], stats["timeouts_total"]), (0, 0, 0))

            # Each worker appends its own buffered lines: compare without order.
            want_api = sorted([("/api", 429, "queued"), ("/api", 200, "admitted")])
            want_page = sorted([("/page", 200, "queued")] * 3 + [("/page", 200, "admitted")])
            self.assertTrue(wait_for(lambda: sorted(access_lines(c, "hold-api")) == want_api
                                     and sorted(access_lines(c, "hold-page")) == want_page),
                            (access_lines(c, "hold-api"), access_lines(c, "hold-page")))

    def test_client_gone_while_held_frees_its_place(self):
        with self.concert("-cap", "1", "-queue-hold", "2s") as c:
            holder = fill(c)[0]
            s = socket.create_connection(("127.0.0.1", c.port), timeout=5)
            s.sendall(b"GET /gone HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == 1, timeout=10))
            s.close()
            # No cookie for that ticket ever left Concert: nobody can come
            # back for it, so it leaves the line instead of blocking it.
            self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == 0, timeout=10))
            self.assertEqual(c.stats()["timeouts_total"], 1)
            # A later arrival is first in line: its hold ends with position 1.
            status, _, body = c.get("/later", BROWSER, timeout=15)
            self.assertEqual(status, 200)
            self.assertIn(b'aria-atomic="true">1</span>', body)
            self.assertEqual(self.origin.recorder.hits("/gone"), 0)
            self.origin.release()
            holder.outcome(15)
            self.assertEqual(c.get("/_room/healthz")[0], 200)

    def test_a_draining_generation_answers_held_requests_at_once(self):
        with self.concert("-cap", "1", "-shutdown-grace", "60s",
                          config_text="queue-hold: 60s\n") as c:
            holder = fill(c)[0]
            held = in_thread(c.get, "/held", None, timeout=30)
            self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == 1, timeout=10))
            c.signal(signal.SIGHUP)
            # Far sooner than the 60 s hold or grace: the old worker drains.
            status, headers, body = held.outcome(20)
            self.assertEqual((status, body), (429, QUEUED_JSON))
            ticket = set_cookies(headers)["room_ticket"]
            self.assertTrue(wait_for(lambda: c.stats()["generation"] == 2, timeout=10), c.log())
            self.origin.release()
            holder.outcome(15)
            status, _, body = c.get("/held", {"Cookie": "room_ticket=" + ticket}, timeout=15)
            self.assertEqual((status, body), (200, b"ok"))


if __name__ == "__main__":
    unittest.main()
