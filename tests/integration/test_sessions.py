"""Visitor sessions, against the real binary and a fake origin.

  * an admitted visitor (valid concert_admit pass) keeps going: its next page requests are proxied,
    never answered with the waiting page, while 20 visitors wait in line;
  * a session that waits longer than -session-hold gets 503 + Retry-After;
  * -newcomer-share: looping sessions at the cap cannot keep a line visitor out;
  * forms: a POST without a pass that would queue gets 503 (or, with -queue-hold, reaches the origin
    byte-exact exactly once); a POST whose origin connection fails after it was written is not replayed;
  * crawlers get 503 with no ticket; -queue-status changes the waiting page's status.

The origin counts a request as in flight until its work is done, whatever Concert does, and every case
checks that it never saw more than cap at once. Waits are bounded; the only timing figures are the
contract's own (-session-hold) with generous margins. Traffic goes to 127.0.0.1 only.
"""
import json
import socket
import threading
import time
import unittest

from concert_harness import Concert, header, headers_all, in_thread, wait_for
from fake_origin import FakeOrigin
from room import fill
from visitor import BROWSER, JSON, POLL_EVERY, Visitor


def line_visitor(concert, path, deadline):
    """A visitor who waits in line like the waiting page without its event stream: a ticket, then
    /queue/status at the page's pace (the first poll one interval after the page), then the page.
    Started on its own thread: (visitor, Background)."""
    v = Visitor(concert)
    return v, v.admit_in_thread(path, deadline, use_events=False, page_timeout=30, first_poll_after=POLL_EVERY)


class SessionTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def test_admitted_visitor_keeps_going_while_20_wait(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2) as c:
            shopper = Visitor(c)
            self.assertEqual(shopper.get("/home")[0], 200)
            self.assertIn("concert_admit", shopper.jar)
            # Someone else holds the only slot; 20 visitors queue behind it.
            holder = fill(c, 1, "/slow?gate=first", headers=JSON, timeout=5)[0]
            deadline = time.time() + 60
            line = [line_visitor(c, "/line", deadline) for _ in range(20)]
            self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == 20, timeout=10))
            # The shopper's next page is held (not the waiting page) until the slot frees, and goes first.
            cart = in_thread(shopper.get, "/cart")
            time.sleep(0.5)
            self.assertIsNone(cart.result)  # held on its connection
            self.origin.release("first")
            status, _, body = cart.outcome(20)
            self.assertEqual(status, 200)
            self.assertEqual(body, b"ok")
            # Five more pages, each proxied; never the waiting page, never a 429.
            for i in range(5):
                status, headers, body = shopper.get("/step%d" % i)
                self.assertEqual((status, body), (200, b"ok"))
                self.assertIsNone(header(headers, "Retry-After"))
            for _, run in line:
                run.join(max(1, deadline - time.time()))
            self.assertTrue(all(v.admitted_at for v, _ in line), [run.error for _, run in line])
            holder.join(10)
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)
            self.assertEqual(c.stats()["occupancy"], 0)
            self.assertEqual(c.fifo_inversions(), 0)

    def test_a_session_held_past_session_hold_gets_503(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1", "-session-hold", "1s"], workers=2) as c:
            shopper = Visitor(c)
            self.assertEqual(shopper.get("/home")[0], 200)
            holder = fill(c, 1, "/slow?gate=hold", headers=JSON, timeout=5)[0]
            status, headers, body = shopper.get("/cart", timeout=15)
            self.assertEqual(status, 503)
            self.assertIsNotNone(header(headers, "Retry-After"))
            self.assertEqual(json.loads(body)["queued"], False)
            self.assertNotIn("room_ticket", shopper.jar)  # a session takes no ticket
            browser = Visitor(c, accept=BROWSER)
            browser.jar = dict(shopper.jar)
            status, headers, body = browser.get("/cart", timeout=15)
            self.assertEqual(status, 503)
            self.assertIn(b"<html", body)
            self.origin.release("hold")
            holder.join(10)
            self.assertEqual(shopper.get("/cart")[0], 200)
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)

    def line_wait_with_looping_sessions(self, share):
        """Seconds a line visitor waits while 5 sessions loop on 100 ms pages at -cap 1 (None: never)."""
        with Concert(["-upstream", self.origin.url, "-cap", "1", "-newcomer-share", share, "-session-hold", "30s"],
                     workers=2) as c:
            sessions = [Visitor(c) for _ in range(5)]
            for s in sessions:
                self.assertEqual(s.get("/home")[0], 200)
            stop = threading.Event()
            statuses = []

            def loop(s):
                while not stop.is_set():
                    statuses.append(s.get("/sleep?ms=100")[0])

            loops = [threading.Thread(target=loop, args=(s,), daemon=True) for s in sessions]
            for t in loops:
                t.start()
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 1, timeout=5))
            time.sleep(0.5)
            newcomer, run = line_visitor(c, "/line", time.time() + 20)
            run.join(25)
            stop.set()
            for t in loops:
                t.join(35)
            self.assertTrue(statuses and all(s == 200 for s in statuses), set(statuses))
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)
            return None if newcomer.admitted_at is None else newcomer.admitted_at - newcomer.arrived_at

    def test_newcomer_share_lets_the_line_in(self):
        waited = self.line_wait_with_looping_sessions("0.2")
        self.assertIsNotNone(waited, "five looping sessions kept the line out")
        print("line visitor admitted after %.1f s with -newcomer-share 0.2" % waited)


class FormTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def test_post_without_pass_that_would_queue_gets_503(self):
        body = bytes(range(256)) * 400  # 100 KB
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2) as c:
            holder = fill(c, 1, "/slow?gate=f", headers=JSON, timeout=5)[0]
            depth = c.stats()["queue_depth"]
            for accept in (JSON, BROWSER):
                status, headers, data = c.request("POST", "/echo", body=body,
                                                  headers=dict(accept, **{"Content-Type": "application/x-www-form-urlencoded"}))
                self.assertEqual(status, 503)
                self.assertIsNotNone(header(headers, "Retry-After"))
                self.assertEqual(headers_all(headers, "Set-Cookie"), [])  # no ticket
            self.assertEqual(c.stats()["queue_depth"], depth)
            self.origin.release("f")
            holder.join(10)
            self.assertEqual(self.origin.recorder.hits("/echo"), 0)
            # Nobody waiting: the form goes straight through.
            status, _, data = c.request("POST", "/echo", body=body, headers={"Content-Type": "application/octet-stream"})
            self.assertEqual((status, data), (200, body))

    def test_held_post_reaches_the_origin_byte_exact_once(self):
        body = bytes(range(256)) * 400
        with Concert(["-upstream", self.origin.url, "-cap", "1", "-queue-hold", "20s"], workers=2) as c:
            holder = fill(c, 1, "/slow?gate=h", headers=JSON, timeout=5)[0]
            post = in_thread(c.request, "POST", "/echo", body=body,
                             headers={"Content-Type": "application/octet-stream"}, timeout=30)
            time.sleep(0.5)
            self.assertIsNone(post.result)
            self.origin.release("h")
            status, _, data = post.outcome(20)
            self.assertEqual(status, 200)
            self.assertEqual(data, body)
            posts = [r for r in self.origin.recorder.requests if r["path"] == "/echo"]
            self.assertEqual(len(posts), 1)
            self.assertEqual(posts[0]["body"], body)
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)

    def test_held_post_whose_hold_runs_out_gets_503_not_the_waiting_page(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1", "-queue-hold", "1s"], workers=1) as c:
            holder = fill(c, 1, "/slow?gate=x", headers=JSON, timeout=5)[0]
            status, headers, data = c.request("POST", "/echo", body=b"a=1", headers=dict(BROWSER, **{
                "Content-Type": "application/x-www-form-urlencoded"}), timeout=15)
            self.assertEqual(status, 503)
            self.assertNotIn(b"queue/status", data)  # not the waiting page
            self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == 0, timeout=5))
            self.origin.release("x")
            holder.join(10)
            self.assertEqual(self.origin.recorder.hits("/echo"), 0)

    def test_post_is_not_replayed_when_its_origin_connection_fails(self):
        posts = []
        lock = threading.Lock()
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        stop = threading.Event()

        def serve(conn):
            buf = b""
            try:
                while True:
                    while b"\r\n\r\n" not in buf:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        buf += chunk
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        k, _, v = line.partition(b":")
                        if k.strip().lower() == b"content-length":
                            length = int(v)
                    while len(buf) < length:
                        buf += conn.recv(65536)
                    body, buf = buf[:length], buf[length:]
                    if head.startswith(b"POST"):
                        with lock:
                            posts.append(body)
                        return  # the whole request arrived; the connection dies before any answer
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            finally:
                conn.close()

        def accept():
            srv.settimeout(0.2)
            while not stop.is_set():
                try:
                    conn, _ = srv.accept()
                except socket.timeout:
                    continue
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        try:
            with Concert(["-upstream", "http://127.0.0.1:%d" % srv.getsockname()[1]], workers=1) as c:
                self.assertEqual(c.get("/warm")[0], 200)  # leaves a kept-alive origin connection
                status, _, _ = c.request("POST", "/pay", body=b"amount=10",
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
                self.assertEqual(status, 502)
                status, _, _ = c.request("POST", "/pay-empty", body=b"")
                self.assertEqual(status, 502)
                time.sleep(0.5)
                with lock:
                    self.assertEqual(posts, [b"amount=10", b""])  # each exactly once
        finally:
            stop.set()
            acceptor.join(5)
            srv.close()


class CrawlerAndStatusTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def test_crawler_in_a_full_room_gets_503_and_no_ticket(self):
        bot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2) as c:
            self.assertEqual(Visitor(c, accept=BROWSER, agent=bot).get("/")[0], 200)  # room free: served
            holder = fill(c, 1, "/slow?gate=c", headers=JSON, timeout=5)[0]
            self.assertEqual(Visitor(c).get("/page")[0], 429)  # one human waits
            before = c.stats()
            for agent in (bot, "Slackbot-LinkExpanding 1.0", "facebookexternalhit/1.1"):
                status, headers, body = Visitor(c, accept=BROWSER, agent=agent).get("/page")
                self.assertEqual(status, 503, agent)
                self.assertIsNotNone(header(headers, "Retry-After"))
                self.assertEqual(headers_all(headers, "Set-Cookie"), [])
                self.assertNotIn(b"queue/status", body)
            after = c.stats()
            self.assertEqual(after["queue_depth"], before["queue_depth"])
            self.assertEqual(after["queued_total"], before["queued_total"])
            self.origin.release("c")
            holder.join(10)

    def test_queue_status_503_serves_the_waiting_page_with_503(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1", "-queue-status", "503"], workers=1) as c:
            holder = fill(c, 1, "/slow?gate=q", headers=JSON, timeout=5)[0]
            v = Visitor(c, accept=BROWSER)
            status, headers, body = v.get("/page")
            self.assertEqual(status, 503)
            self.assertIsNotNone(header(headers, "Retry-After"))
            self.assertIn(b"queue/status", body)  # the waiting page itself
            self.assertIn("room_ticket", v.jar)
            self.assertEqual(Visitor(c).get("/api")[0], 429)  # API clients unchanged
            self.origin.release("q")
            holder.join(10)
            self.assertTrue(wait_for(lambda: v.get("/page")[0] == 200, timeout=10, interval=1.1))


if __name__ == "__main__":
    unittest.main()
