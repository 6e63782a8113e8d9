"""Positions never go back (traffic.md §5, issue: the waiting experience): a
visitor who keeps polling sees its position only fall, over well over a
thousand polls, while the line is reaped around it (visitors who never come
back, visitors who walk away before their turn), the configuration is
reloaded and a worker is killed.

Every visitor is a thread with its own cookie jar that polls /queue/status
about once a second, as the waiting page does, and loads the page when it is
told its turn has come."""
import http.client
import json
import os
import signal
import threading
import time
import unittest

from concert_harness import Concert, set_cookies, wait_for
from fake_origin import FakeOrigin

PAGE = "/sleep?ms=200"


def fetch(port, path, cookie=None, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Accept": "text/html"}
        if cookie:
            headers["Cookie"] = cookie
        c.request("GET", path, headers=headers)
        r = c.getresponse()
        return r.status, r.getheaders(), r.read()
    finally:
        c.close()


class Visitor(threading.Thread):
    """kind: "stays" (polls until admitted), "ghost" (never comes back after
    its first page) or "walks" (polls a few times, then leaves for good)."""

    def __init__(self, port, kind, stop):
        super().__init__(daemon=True)
        self.port, self.kind, self.stop = port, kind, stop
        self.jar = {}
        self.positions = []
        self.polls = 0
        self.admitted = False
        self.errors = 0

    def cookie(self):
        return "; ".join("%s=%s" % kv for kv in self.jar.items())

    def run(self):
        status, headers, _ = fetch(self.port, PAGE)
        self.jar.update(set_cookies(headers))
        if status != 200 or "room_ticket" not in self.jar or self.kind == "ghost":
            self.admitted = status == 200 and "room_ticket" not in self.jar
            return
        leave_after = 4 if self.kind == "walks" else None
        while not self.stop.is_set():
            time.sleep(1.05)
            try:
                status, headers, body = fetch(self.port, "/queue/status", self.cookie())
            except OSError:
                self.errors += 1  # a killed worker's connection; try again
                continue
            self.jar.update(set_cookies(headers))
            self.polls += 1
            if status != 200:
                continue
            answer = json.loads(body)
            if answer.get("ready"):
                try:
                    status, headers, body = fetch(self.port, PAGE, self.cookie())
                except OSError:
                    self.errors += 1
                    continue
                self.jar.update(set_cookies(headers))
                if status == 200 and body == b"ok":
                    self.admitted = True
                    return
                continue
            self.positions.append(answer["position"])
            if leave_after is not None and self.polls >= leave_after:
                return


class PositionsTest(unittest.TestCase):
    def test_positions_never_go_back_through_reaping_a_reload_and_a_crash(self):
        origin = FakeOrigin()
        stop = threading.Event()
        try:
            with Concert(["-upstream", origin.url, "-cap", "1", "-first-poll-grace", "2s", "-claim-window", "1s"],
                         workers=2) as c:
                kinds = ["stays"] * 50 + ["ghost"] * 10 + ["walks"] * 10
                kinds = [kinds[(i * 7) % len(kinds)] for i in range(len(kinds))]  # interleaved
                visitors = []
                for kind in kinds:
                    v = Visitor(c.port, kind, stop)
                    v.start()
                    visitors.append(v)
                    time.sleep(0.02)
                time.sleep(6)
                c.signal(signal.SIGHUP)  # a reload mid-line
                self.assertTrue(wait_for(lambda: c.stats()["generation"] == 2, timeout=10))
                time.sleep(6)
                pids = c.worker_pids()
                os.kill(pids[0], signal.SIGKILL)  # a crash mid-line
                self.assertTrue(wait_for(lambda: all(not v.is_alive() for v in visitors), timeout=150, interval=0.5),
                                "visitors still waiting: %d" % sum(v.is_alive() for v in visitors))
                stats = c.stats()
        finally:
            stop.set()
            origin.stop()

        polls = sum(v.polls for v in visitors)
        print("\npositions: %d visitors, %d polls, %d admitted, %d reaped (ghost %d, missed %d)" %
              (len(visitors), polls, sum(v.admitted for v in visitors), stats["evicted_total"] + stats["missed_turns_total"],
               stats["ghost_evicted_total"], stats["missed_turns_total"]))
        self.assertGreaterEqual(polls, 1000)
        for v in visitors:
            self.assertEqual(v.positions, sorted(v.positions, reverse=True),
                             "a %s visitor's position went back: %s" % (v.kind, v.positions))
        stayed = [v for v in visitors if v.kind == "stays"]
        self.assertTrue(all(v.admitted for v in stayed), [v.positions[-3:] for v in stayed if not v.admitted])
        # The line was reaped around them: ghosts and walkers left it (a
        # ghost that found the room empty went straight in instead).
        self.assertGreaterEqual(stats["ghost_evicted_total"] + stats["missed_turns_total"], 10)
        self.assertEqual(stats["fifo_inversions_total"], 0)


if __name__ == "__main__":
    unittest.main()
