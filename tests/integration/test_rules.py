"""The room's rules where features meet, against the real binary and a fake origin.

  watching is not coming   a ticket whose holder polls /queue/status or keeps /queue/events open but
                           never asks for the page misses its turn once and holds nobody up after that;
                           only a page request brings a missed turn back, and only once
  a hold is no return      the request a ticket was issued to, held with -queue-hold, does not count as
                           its holder coming back: once it is answered, -first-poll-grace reaps a
                           visitor who never returns
  rate and sessions        -admit-rate keeps the line from slots, so the line is owed none it cannot use:
                           sessions go on while the line waits for tokens
  path syntax              a dot-segment hidden behind ";parameters" or a backslash (raw or %5C) is
                           refused (400), never routed past the line

Every wait is bounded (a liveness bound, not a speed requirement); traffic goes to 127.0.0.1 only.
"""
import json
import threading
import time
import unittest

from concert_harness import Concert, raw_exchange, set_cookies, wait_for
from fake_origin import FakeOrigin
from room import fill, mint_pass, with_pass
from visitor import JSON, Visitor, in_thread


class RulesTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.release()
        self.origin.stop()

    def concert(self, *args, workers=2, **kw):
        return Concert(["-upstream", self.origin.url] + list(args), workers=workers, **kw)

    def queue(self, c, v):
        """`v` asks for the page in a full room and takes a ticket."""
        status, _, _ = v.get("/page")
        self.assertEqual(status, 429)
        self.assertIsNotNone(v.ticket)

    # -- watching is not coming

    def test_visitors_who_only_watch_do_not_freeze_the_line(self):
        with self.concert("-cap", "1", "-claim-window", "2s") as c:
            fill(c, 1)
            poller, streamer, late = Visitor(c, "poller"), Visitor(c, "streamer"), Visitor(c, "late")
            for v in (poller, streamer, late):
                self.queue(c, v)
            stop = threading.Event()

            def keep_polling():
                while not stop.is_set():
                    poller.poll()

            def keep_streaming():
                while not stop.is_set():
                    try:
                        for _ in streamer.event_stream(time.time() + 2):
                            if stop.is_set():
                                return
                    except Exception:  # a ready ticket gets JSON instead of a stream: look again
                        time.sleep(0.3)

            watchers = [in_thread(keep_polling), in_thread(keep_streaming)]
            try:
                self.origin.release()  # the slot frees: the watchers' turns come first
                admitted = late.admit("/page", time.time() + 40)
                self.assertIsNotNone(admitted, "the line froze behind two watchers: %s\n%s" % (
                    c.stats(), c.log()[-3000:]))
            finally:
                stop.set()
                for w in watchers:
                    w.join(10)
            stats = c.stats()
            # Each watcher missed its turn once and never had it back.
            self.assertEqual(stats["missed_turns_total"], 2, stats)
            self.assertEqual(c.fifo_inversions(), 0)

    def test_a_missed_turn_comes_back_once_and_only_for_the_page(self):
        with self.concert("-cap", "1", "-claim-window", "1s") as c:
            fill(c, 1, "/slow?gate=a")
            v = Visitor(c, "late")
            self.queue(c, v)
            self.origin.release("a")
            # Its turn comes and goes: missed, and it stops holding the line.
            self.assertTrue(wait_for(lambda: c.stats()["missed_turns_total"] == 1, timeout=10), c.stats())
            self.assertEqual(c.stats()["live_queue_depth"], 0)
            # A poll shows where it stands but takes nothing back.
            v.status()
            self.assertEqual(c.stats()["live_queue_depth"], 0)
            self.assertEqual(c.stats()["queue_depth"], 1)
            # The page request does: ahead of the line again, waiting for the slot held now.
            fill(c, 1, "/slow?gate=b")
            self.assertEqual(v.get("/page")[0], 429)
            self.assertEqual(c.stats()["live_queue_depth"], 1)
            # Offered the slot once more and not taken: the ticket leaves the line for good.
            self.origin.release("b")
            self.assertTrue(wait_for(lambda: c.stats()["queue_depth"] == 0, timeout=10), c.stats())
            self.assertEqual(c.stats()["missed_turns_total"], 2)
            # Back for the page after that, it arrives anew (straight in: the room is free).
            status, _, body = v.get("/page")
            self.assertEqual((status, body), (200, b"ok"))
            self.assertEqual(c.fifo_inversions(), 0)

    # -- a hold is no return

    def test_a_held_request_that_never_returns_is_reaped_after_the_grace(self):
        with self.concert("-cap", "1", "-queue-hold", "3s", "-first-poll-grace", "1s") as c:
            fill(c, 1)
            v = Visitor(c, "leaves")
            status, _, _ = v.get("/page")  # held 3 s, longer than the grace: still in line at the end
            self.assertEqual(status, 429)
            self.assertEqual(c.stats()["ghost_evicted_total"], 0)
            self.assertEqual(c.stats()["queue_depth"], 1)
            # Never seen again: gone within the grace and a janitor pass or two.
            self.assertTrue(wait_for(lambda: c.stats()["ghost_evicted_total"] == 1, timeout=10), c.stats())
            self.assertEqual(c.stats()["queue_depth"], 0)

    def test_a_held_visitor_who_comes_back_keeps_the_place(self):
        with self.concert("-cap", "1", "-queue-hold", "2s", "-first-poll-grace", "1s") as c:
            fill(c, 1)
            v = Visitor(c, "stays")
            self.assertEqual(v.get("/page")[0], 429)
            self.assertEqual(v.status().get("position"), 1)  # a poll: seen
            time.sleep(3)
            self.assertEqual(c.stats()["ghost_evicted_total"], 0)
            self.assertEqual(v.status().get("position"), 1)

    # -- rate and sessions

    def test_sessions_go_on_while_the_rate_keeps_the_line_waiting(self):
        with self.concert("-cap", "2", "-admit-rate", "1/m", "-newcomer-share", "0.5",
                          "-session-hold", "2s") as c:
            self.assertEqual(Visitor(c, "first").get("/page")[0], 200)  # straight in: the only token
            for name in ("l1", "l2"):
                self.queue(c, Visitor(c, name))  # no token left: the line waits
            self.assertEqual(c.stats()["live_queue_depth"], 2)
            session = with_pass(mint_pass(), JSON)
            for i in range(6):
                status, _, body = c.get("/page", session, timeout=10)
                self.assertEqual((status, body), (200, b"ok"), "session request %d: %s" % (i, c.stats()))
            stats = c.stats()
            self.assertEqual(stats["occupancy"], 0)
            self.assertEqual(stats["live_queue_depth"], 2)  # the rate still holds the line
            self.assertGreaterEqual(stats["admissions_session_total"], 6)

    # -- the line's size

    def test_visitors_who_leave_never_fill_the_room(self):
        # -max-queue 10 makes the smallest ring (4,096 entries). One visitor waits at the head of a
        # full room while 4,300 others take a ticket and are removed: the room holds one waiting
        # visitor, so newcomers still queue and the head keeps its place.
        token = "rules-admin"
        auth = {"Authorization": "Bearer " + token}
        with self.concert("-cap", "1", "-max-queue", "10", admin_token=token) as c:
            fill(c, 1, "/slow?gate=head&timeout=120")
            first = Visitor(c, "first")
            self.queue(c, first)
            conn = c.conn(10)
            try:
                for i in range(4300):
                    conn.request("GET", "/page", headers=JSON)
                    r = conn.getresponse()
                    r.read()
                    self.assertEqual(r.status, 429, "arrival %d behind one waiting visitor: %s" % (i, c.stats()))
                    ticket = int(set_cookies(r.getheaders())["room_ticket"][:16], 16)  # number, then nonce
                    conn.request("DELETE", "/_room/queue/%d" % ticket, headers=auth)
                    r = conn.getresponse()
                    r.read()
                    self.assertEqual(r.status, 200)
            finally:
                conn.close()
            stats = c.stats()
            self.assertEqual((stats["live_queue_depth"], stats["ring_full_total"], stats["rejected_full_total"]),
                             (1, 0, 0), stats)
            self.assertEqual(first.status().get("position"), 1)
            self.origin.release("head")
            self.assertIsNotNone(first.admit("/page", time.time() + 20), c.stats())

    # -- path syntax

    def test_dot_segments_behind_parameters_or_backslashes_are_refused(self):
        with self.concert("-cap", "1", "-bypass", "/static/*") as c:
            fill(c, 1, origin=self.origin)  # the holder has reached the origin: nothing else may
            before = len(self.origin.recorder.requests)
            for target in ("/static/..;/checkout", "/static/..;jsessionid=1/checkout", "/static\\..\\checkout",
                           "/static/..\\checkout", "/static%5C..%5Ccheckout", "/static/%2e%2e;/checkout"):
                answer = raw_exchange(c.port, ("GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" %
                                               target).encode())
                self.assertTrue(answer.startswith(b"HTTP/1.1 400 "), "%s: %r" % (target, answer[:80]))
            self.assertEqual(len(self.origin.recorder.requests), before)
            # Parameters and backslashes that hide no dot-segment are the origin's business.
            answer = raw_exchange(c.port, b"GET /static/a;v=1/x\\y.css HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer[:80])


if __name__ == "__main__":
    unittest.main()
