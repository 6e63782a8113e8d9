"""Admission never stalls, against the real binary and a fake origin.

The rules, and the case that checks each:
  (a) only live tickets bound the line, nothing else does (not a long request, not the ticket ring)
  (b) a missed turn does not hold the line: after -claim-window the next visitor goes in
  (c) ghost tickets (never polled) leave quickly and stop counting towards -max-queue
  (d) a freed slot is taken at once by a browser following the waiting page (events, else polling)
  (e) positions never increase while a visitor polls

  test_1_long_request_does_not_pin_the_ring         (a)
  test_2_ghost_tickets_do_not_freeze_the_room       (c), and (b)
  test_3_missed_turn_stops_blocking_then_keeps_place (b)
  test_4_flood_then_a_real_visitor_gets_a_ticket    (c), and (a)
  test_5_browsers_following_the_page_are_admitted   (d)
  test_6_positions_never_increase                   (e)
  test_7_kill_9_of_a_worker_leaves_the_line_moving  (a) to (d) with a SIGKILLed worker (crash safety)

Everything is bounded in time and in count; traffic goes to 127.0.0.1 only; the only processes
signalled are the ones these tests started (by pid). The only timing checks are the contract's own
admission bounds: claim window + grace + a few seconds for a line blocked by missed turns or ghosts,
1.25 x N*S/C + 2 s for browsers following the page's protocol. Every other wait is a generous bound
on something that must happen, not a speed requirement.
"""
import http.client
import os
import signal
import socket
import sys
import threading
import time
import unittest

from concert_harness import Concert, in_thread, wait_for
from fake_origin import FakeOrigin
from visitor import BROWSER, POLL_EVERY, Visitor, is_admitted, is_waiting_page


def ring_size(max_queue, cap):
    """The ticket ring today (src/shm/segment.cpp computeGeometry): next power of two
    >= 2 * (max_queue + cap), at least 4096."""
    live = max_queue + max(cap, 1)
    return max(1 << (2 * live - 1).bit_length(), 4096)


def browser(concert, name):
    """A browser with a cookie jar that follows the waiting page's protocol (Visitor.admit)."""
    return Visitor(concert, name, accept=BROWSER)


class StallTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin(nodelay=True)  # thousands of requests: no 40 ms delayed-ACK stall each

    def tearDown(self):
        self.origin.stop()

    def concert(self, *args, workers=2, **kw):
        return Concert(["-upstream", self.origin.url] + list(args), workers=workers, **kw)

    def counter(self, stats, name):
        self.assertIn(name, stats, "/_room/stats has no %s" % name)
        return stats[name]

    def fill(self, c, n, path="/slow"):
        """n page requests that hold their slots until the origin's gate opens."""
        held = [in_thread(c.get, "%s%sholder=%d" % (path, "&" if "?" in path else "?", i), None, 60)
                for i in range(n)]
        self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == n, timeout=10), c.log())
        return held

    # ------------------------------------------------------------------ (a)
    def test_1_long_request_does_not_pin_the_ring(self):
        """One event stream open for the whole test plus more short page requests than the ring has
        entries: none is refused, ring_full_total stays 0."""
        cap, max_queue = 4, 10
        n = ring_size(max_queue, cap) + 128
        with self.concert("-cap", str(cap), "-max-queue", str(max_queue)) as c:
            stream = socket.create_connection(("127.0.0.1", c.port), timeout=10)
            try:
                # The fake origin holds the stream open until release(), at most 300 s.
                stream.sendall(b"GET /sse?timeout=300 HTTP/1.1\r\nHost: concert.test\r\n"
                               b"Accept: text/event-stream\r\n\r\n")
                got = b""
                while b"data: hello" not in got:
                    chunk = stream.recv(4096)
                    self.assertTrue(chunk, "the event stream closed before its first event: %r" % got)
                    got += chunk
                self.assertTrue(got.startswith(b"HTTP/1.1 200"), got[:200])
                self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 1, timeout=10), c.log())

                # Two keep-alive clients: with the stream that is 3 in flight at most, under cap 4,
                # so no short request ever has to queue.
                statuses = {}
                refused = []
                lock = threading.Lock()

                def client(first):
                    conn = c.conn(timeout=10)
                    try:
                        for i in range(first, n, 2):
                            for attempt in range(3):
                                try:
                                    conn.request("GET", "/short?i=%d" % i)
                                    r = conn.getresponse()
                                    r.read()
                                    break
                                except (OSError, http.client.HTTPException):
                                    conn.close()
                                    conn = c.conn(timeout=10)
                                    if attempt == 2:
                                        raise
                            with lock:
                                statuses[r.status] = statuses.get(r.status, 0) + 1
                                if r.status == 503:
                                    refused.append(i)
                    finally:
                        conn.close()

                clients = [in_thread(client, k) for k in range(2)]
                for t in clients:
                    t.join(120)
                    self.assertFalse(t.is_alive(), "short requests still running after 120 s")
                    if t.error is not None:
                        raise t.error
                stats = c.stats()
                self.assertEqual(sum(statuses.values()), n)
                self.assertEqual(len(refused), 0, "%d of %d short requests got 503 (ring of %d entries); statuses %s; "
                                                  "occupancy %d, live_queue_depth %d, ring_full_total %d" % (
                                                      len(refused), n, ring_size(max_queue, cap), statuses,
                                                      stats["occupancy"], stats["live_queue_depth"],
                                                      stats["ring_full_total"]))
                self.assertEqual(statuses, {200: n})
                self.assertEqual(stats["ring_full_total"], 0)

                # The stream was open all along.
                stream.settimeout(0.2)
                try:
                    tail = stream.recv(4096)
                    self.assertFalse(tail == b"" or tail.endswith(b"0\r\n\r\n"), "the event stream ended: %r" % tail)
                except socket.timeout:
                    pass
                self.assertEqual(c.stats()["occupancy"], 1)
            finally:
                stream.close()
                self.origin.release()
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=10))

    # ------------------------------------------------------------------ (c), (b)
    def test_2_ghost_tickets_do_not_freeze_the_room(self):
        """Two cookie-less requests take the waiting page and never come back; a real visitor behind
        them is admitted within claim window + grace + a few seconds of the slots freeing."""
        claim, grace = 2, 3
        with self.concert("-cap", "2", "-token-ttl", "30s", "-claim-window", "%ds" % claim,
                          "-first-poll-grace", "%ds" % grace) as c:
            holders = self.fill(c, 2)
            for i in range(2):
                status, headers, body = c.get("/page?ghost=%d" % i, BROWSER)
                self.assertTrue(is_waiting_page(status, headers, body), (status, headers, body[:200]))
            visitor = browser(c, "visitor")
            status, headers, body = visitor.get("/page?who=visitor")
            self.assertTrue(is_waiting_page(status, headers, body), (status, headers, body[:200]))
            doc = visitor.poll()
            self.assertIsNotNone(doc)
            self.assertFalse(doc.get("ready"), doc)

            self.origin.release()
            for t in holders:
                t.outcome(15)
            freed = time.time()
            bound = claim + grace + 4
            admitted = visitor.admit("/page?who=visitor", freed + bound, use_events=False)
            stats = c.stats()
            self.assertIsNotNone(admitted, "visitor not admitted within %ds of the slots freeing (claim window %ds "
                                           "+ grace %ds + 4 s); positions seen %s; stats %s" % (
                                               bound, claim, grace, visitor.places(), stats))
            self.assertGreaterEqual(self.counter(stats, "ghost_evicted_total")
                                    + self.counter(stats, "missed_turns_total"), 1, stats)
            self.assertEqual(self.origin.recorder.hits("/page"), 1)  # the ghosts never reached the origin

    # ------------------------------------------------------------------ (b)
    def test_3_missed_turn_stops_blocking_then_keeps_place(self):
        """A's turn comes and A does not claim it: after -claim-window B (behind A) is admitted. A comes
        back before its TTL and is admitted at the next free slot, ahead of C who queued after B."""
        claim = 2
        with self.concert("-cap", "1", "-token-ttl", "30s", "-claim-window", "%ds" % claim) as c:
            holders = self.fill(c, 1)
            a, b = browser(c, "A"), browser(c, "B")
            for v in (a, b):
                status, headers, body = v.get("/slow?who=%s" % v.name)
                self.assertTrue(is_waiting_page(status, headers, body), (v.name, status, body[:200]))
                doc = v.poll()  # both came back once: live visitors, not ghosts
                self.assertIsNotNone(doc)
                self.assertFalse(doc.get("ready"), doc)

            self.origin.release()
            for t in holders:
                t.outcome(15)
            turn_came = time.time()
            self.origin.hold()  # B's page (/slow?who=B) will hold the slot until released again
            # A does nothing now. B polls like the page and takes its turn once A's has lapsed.
            bound = claim + 8
            self.assertTrue(b.wait_turn(turn_came + bound, use_events=False),
                            "B still not ready %ds after A's turn came (claim window %ds); B's positions %s; "
                            "stats %s" % (bound, claim, b.places(), c.stats()))
            b_page = in_thread(b.get, "/slow?who=B", None, 60)
            self.assertTrue(wait_for(lambda: self.origin.recorder.hits("/slow") == 2, timeout=10),
                            "B's page did not reach the origin: %s" % (b.page_statuses(),))
            stats = c.stats()
            self.assertGreaterEqual(self.counter(stats, "missed_turns_total"), 1, stats)

            # C queues behind B; then A comes back (well inside its 30 s TTL) while B holds the slot.
            cv = browser(c, "C")
            status, headers, body = cv.get("/page?who=C")
            self.assertTrue(is_waiting_page(status, headers, body), (status, body[:200]))
            deadline = time.time() + 20
            runs = [in_thread(v.admit, "/page?who=%s" % v.name, deadline, False) for v in (a, cv)]
            time.sleep(2 * POLL_EVERY)  # both are polling while the slot is still taken
            self.assertEqual(self.origin.recorder.hits("/page"), 0, "admitted while B still holds the only slot")
            self.origin.release()
            status, _, body = b_page.outcome(15)
            self.assertTrue(is_admitted(status, body), (status, body[:200]))
            for t, v in zip(runs, (a, cv)):
                self.assertIsNotNone(t.outcome(25), "%s was not admitted; stats %s" % (
                    v.name, c.stats()))
            with self.origin.recorder.lock:
                order = [r["target"] for r in self.origin.recorder.requests if r["path"] == "/page"]
            self.assertEqual(order, ["/page?who=A", "/page?who=C"], "A keeps its place ahead of the line")
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)

    # ------------------------------------------------------------------ (c), (a)
    def test_4_flood_then_a_real_visitor_gets_a_ticket(self):
        """A cookie-less flood of 10 x -max-queue trips the breaker; once -first-poll-grace has passed
        the flood's tickets are gone and a real visitor gets a ticket (not 503) at position 1."""
        max_queue, grace = 5, 3
        with self.concert("-cap", "2", "-max-queue", str(max_queue), "-first-poll-grace", "%ds" % grace) as c:
            holders = self.fill(c, 2)
            statuses = {}
            for i in range(10 * max_queue):
                status, headers, body = c.get("/page?flood=%d" % i)  # like ab/curl: no cookies, no Accept
                statuses[status] = statuses.get(status, 0) + 1
            last_ticket = time.time()
            self.assertLessEqual(set(statuses), {200, 429, 503}, statuses)
            self.assertGreaterEqual(statuses.get(503, 0), 1, "the breaker never tripped: %s" % statuses)
            self.assertEqual(self.origin.recorder.hits("/page"), 0)

            time.sleep(grace)
            visitor = browser(c, "visitor")
            deadline = last_ticket + grace + 5
            seen = []
            while True:
                status, headers, body = visitor.get("/page?who=visitor")
                seen.append(status)
                if status != 503 or time.time() >= deadline:
                    break
                time.sleep(0.5)
            stats = c.stats()
            self.assertTrue(is_waiting_page(status, headers, body),
                            "the real visitor got %s %d s after the grace (statuses %s); flood %s; stats %s" % (
                                seen, int(time.time() - last_ticket - grace), seen, statuses, stats))
            doc = visitor.poll()
            self.assertIsNotNone(doc)
            self.assertEqual((doc.get("ready"), doc.get("position")), (False, 1), doc)
            stats = c.stats()
            self.assertEqual(stats["live_queue_depth"], 1, stats)
            self.assertGreaterEqual(self.counter(stats, "ghost_evicted_total"), statuses.get(200, 0)
                                    + statuses.get(429, 0), stats)
            self.assertGreaterEqual(stats["evicted_total"], self.counter(stats, "ghost_evicted_total"), stats)

            self.origin.release()
            for t in holders:
                t.outcome(15)
            self.assertIsNotNone(visitor.admit("/page?who=visitor", time.time() + 15, use_events=False),
                                 c.stats())

    # ------------------------------------------------------------------ (d)
    def test_5_browsers_following_the_page_are_admitted(self):
        """N browsers, -cap C, S-second pages, each following the page's protocol (events, else polling
        every 1 s): all admitted within 1.25 x N*S/C + 2 s."""
        n, cap, s = 30, 2, 0.2
        bound = 1.25 * n * s / cap + 2  # 5.75 s for N=30, C=2, S=0.2 (ideal N*S/C = 3 s)
        with self.concert("-cap", str(cap)) as c:
            visitors = [browser(c, "b%d" % i) for i in range(n)]
            barrier = threading.Barrier(n + 1)
            admitted = {}
            lock = threading.Lock()

            def browse(v):
                barrier.wait(30)
                t = v.admit("/sleep?ms=%d&who=%s" % (int(s * 1000), v.name), time.time() + 40)
                with lock:
                    admitted[v.name] = t

            threads = [threading.Thread(target=browse, args=(v,), daemon=True) for v in visitors]
            for t in threads:
                t.start()
            barrier.wait(30)
            start = time.time()
            for t in threads:
                t.join(60)
            done = sorted(t - start for t in admitted.values() if t is not None)
            missing = sorted(name for name, t in admitted.items() if t is None)
            streams = sum(1 for v in visitors if v.events_used)
            self.assertFalse(missing, "not admitted within 40 s: %s" % missing)
            self.assertEqual(len(done), n)
            sys.stderr.write("browsers: N=%d C=%d S=%.1f s: last admitted after %.2f s (ideal N*S/C %.2f s, "
                             "bound %.2f s), %d used /queue/events\n" % (n, cap, s, done[-1], n * s / cap, bound,
                                                                          streams))
            self.assertLessEqual(done[-1], bound, "last of %d browsers admitted after %.1f s, bound %.1f s "
                                                  "(1.25 x N*S/C + 2 s); %d used /queue/events; admissions at %s" % (
                                                      n, done[-1], bound, streams,
                                                      ["%.1f" % d for d in done]))
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, cap)
            self.assertEqual(self.origin.recorder.hits("/sleep"), n)

    # ------------------------------------------------------------------ (e)
    def test_6_positions_never_increase(self):
        """A backlog of polling visitors with ghosts among them; the line moves as visitors are
        admitted and the master reaps the ghosts; one SIGHUP reload in the middle. Over 1,000 accepted
        polls (several tickets, each polled at the page's pace) no ticket's position ever increases."""
        pollers, want = 30, 1000
        with self.concert("-cap", "1", "-token-ttl", "30s", "-reaper", "5s") as c:
            holders = self.fill(c, 1)
            stop = threading.Event()  # every visitor's `cancelled`
            line = []
            for i in range(pollers):
                v = Visitor(c, "p%d" % i, accept=BROWSER, cancelled=stop)
                status, headers, body = v.get("/sleep?ms=50&who=p%d" % i)
                self.assertTrue(is_waiting_page(status, headers, body), (status, body[:200]))
                line.append(v)
                status, headers, body = c.get("/page?ghost=%d" % i, BROWSER)  # never comes back
                self.assertTrue(is_waiting_page(status, headers, body), (status, body[:200]))
            self.origin.release()
            for t in holders:
                t.outcome(15)

            lock = threading.Lock()
            totals = {"admitted": 0}

            def accepted():
                """Accepted polls that gave a position, over the whole line."""
                return sum(len(v.positions) for v in line)

            def rejoin(v, serial):
                """The same person queues again with a fresh ticket at the back of the line."""
                while not stop.is_set():
                    v.jar.clear()
                    try:
                        status, headers, body = v.get("/sleep?ms=50&who=%s.%d" % (v.name, serial))
                    except (OSError, http.client.HTTPException):
                        time.sleep(0.2)
                        continue
                    if is_waiting_page(status, headers, body):
                        return serial
                    if is_admitted(status, body):  # nobody waiting: in at once
                        with lock:
                            totals["admitted"] += 1
                        serial += 1
                    else:
                        time.sleep(0.5)
                return serial

            def visitor(v):
                """Polls at the page's pace (each accepted position lands in v.positions); when its
                turn comes it asks for the page, and once in it queues again."""
                serial = 0
                while not stop.is_set():
                    if not v.wait_turn(time.time() + 120, use_events=False):
                        continue  # stopped, or no place in line: polls on
                    try:
                        status, headers, body = v.get("/sleep?ms=50&who=%s.%d" % (v.name, serial))
                    except (OSError, http.client.HTTPException):
                        continue
                    if is_admitted(status, body):
                        with lock:
                            totals["admitted"] += 1
                        serial = rejoin(v, serial + 1)

            threads = [threading.Thread(target=visitor, args=(v,), daemon=True) for v in line]
            for t in threads:
                t.start()
            start = time.time()
            reloaded = False
            while time.time() - start < 60:
                polled = accepted()
                if not reloaded and (polled >= want // 2 or time.time() - start > 25):
                    c.signal(signal.SIGHUP)
                    reloaded = True
                if reloaded and polled >= want and c.stats()["evicted_total"] >= 1:
                    break
                time.sleep(0.5)
            stop.set()
            for t in threads:
                t.join(15)
            stats = c.stats()
            self.assertTrue(reloaded)
            self.assertTrue(wait_for(lambda: c.stats()["generation"] == 2, timeout=10), c.log())
            self.assertGreaterEqual(stats["reloads_total"], 1, stats)
            self.assertGreaterEqual(stats["evicted_total"], 1,
                                    "the master reaped nothing while they polled: %s" % stats)
            totals["accepted"] = accepted()
            totals["errors"] = sum(len(v.errors) for v in line)
            self.assertGreaterEqual(totals["accepted"], want, "only %s accepted polls in 60 s" % totals)
            seen = {}  # ticket -> positions in the order they were answered
            for v in line:
                for ticket, position, _ in v.positions:
                    seen.setdefault(ticket, []).append(position)
            increased = {t: p for t, p in seen.items() if any(b > a for a, b in zip(p, p[1:]))}
            self.assertFalse(increased, "positions increased for %d of %d tickets, e.g. %s" % (
                len(increased), len(seen), list(increased.items())[:3]))
            self.assertGreaterEqual(totals["admitted"], 1, "the line never moved: %s" % totals)

    # ------------------------------------------------------------------ (a)-(d), crash safety
    def test_7_kill_9_of_a_worker_leaves_the_line_moving(self):
        """SIGKILL the (only) worker while a request is in flight, a ticket is ready and unclaimed, two
        page requests are held (-queue-hold) and a visitor waits on /queue/events. After the master
        respawns it, a new visitor is admitted within claim window + grace + a few seconds, and once
        everyone has ended occupancy and the line are back to 0."""
        claim, grace, hold = 2, 3, 8
        # One worker: every connection of the scene is on the worker that dies.
        # The killed request's page slot stays in quarantine for -upstream-timeout (the origin is
        # still serving it), then comes back.
        with self.concert("-cap", "2", "-queue-hold", "%ds" % hold, "-token-ttl", "30s", "-upstream-timeout", "5s",
                          "-claim-window", "%ds" % claim, "-first-poll-grace", "%ds" % grace, workers=1) as c:
            in_flight = in_thread(c.get, "/slow?who=inflight", None, 60)
            other = in_thread(c.get, "/slow?gate=b&who=other", None, 60)
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 2, timeout=10), c.log())

            # R and E queue (their holds run out into the waiting page with their cookies).
            r, e = browser(c, "R"), browser(c, "E")
            pages = []
            for depth, v in enumerate((r, e), 1):
                pages.append(in_thread(v.get, "/page?who=%s" % v.name, None, hold + 10))
                self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == depth, timeout=10), c.stats())
            for t, v in zip(pages, (r, e)):
                status, headers, body = t.outcome(hold + 15)
                self.assertTrue(is_waiting_page(status, headers, body), (v.name, status, body[:200]))
            self.assertIsNotNone(r.poll())  # R came back once: a live visitor

            # E waits on the event stream; two more page requests are held on their connections.
            stream = in_thread(e.events, time.time() + 60)
            held = [in_thread(c.get, "/page?who=h%d" % i, BROWSER, 60) for i in range(2)]
            self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == 4, timeout=5), c.stats())

            # One slot frees: R's turn comes; R does not claim it.
            self.origin.release("b")
            other.outcome(15)
            self.assertTrue(wait_for(lambda: (r.poll() or {}).get("ready"), timeout=5, interval=0),
                            "R's turn did not come: %s" % c.stats())
            for t in held + [stream]:
                self.assertTrue(t.is_alive(), "setup: a held request or the event stream ended before the kill")

            pids = c.worker_pids()
            self.assertEqual(len(pids), 1, pids)
            os.kill(pids[0], signal.SIGKILL)
            self.assertTrue(wait_for(lambda: c.worker_pids() not in ([], pids), timeout=10), c.log())
            c.wait_workers(1)
            respawned = time.time()
            for t in held:
                t.join(10)
                self.assertFalse(t.is_alive())
                self.assertIsNotNone(t.error, "setup: a held request was answered before the kill: %r" % (
                    (t.result or ("?",))[0],))
            stream.join(10)

            # A new visitor, and E (whose stream broke, so it polls) are admitted; R has missed its turn.
            bound = claim + grace + 5
            runs = {v.name: in_thread(v.admit, "/page?who=%s2" % v.name, respawned + bound)
                    for v in (browser(c, "N"), e)}
            for name, t in runs.items():
                when = t.outcome(bound + 15)
                self.assertIsNotNone(when, "%s not admitted within %ds of the worker's respawn (claim window %ds "
                                           "+ grace %ds + 5 s); stats %s" % (name, bound, claim, grace, c.stats()))
            # R comes back inside its TTL: admitted.
            self.assertIsNotNone(r.admit("/page?who=R2", time.time() + 15, use_events=False), c.stats())

            self.origin.release()
            in_flight.join(15)  # its client connection died with the worker
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=15), c.stats())
            self.assertTrue(wait_for(lambda: c.stats()["live_queue_depth"] == 0, timeout=10), c.stats())
            stats = c.stats()
            self.assertGreaterEqual(stats["worker_restarts_total"], 1, stats)
            self.assertGreaterEqual(stats["slots_reclaimed_total"], 1, stats)
            self.assertEqual(c.get("/_room/healthz")[0], 200)


if __name__ == "__main__":
    unittest.main()
