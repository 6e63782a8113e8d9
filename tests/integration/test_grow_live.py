"""A longer -max-queue at a reload grows the segment in place, against the real binary and a counting
origin:

  grown under traffic    60 visitors wait behind 3 requests the origin holds, while 4 clients keep
                         asking for pages and polling; a reload with a longer max-queue grows the ring
                         (the log says so): every waiting visitor keeps its position, arrivals after it
                         go behind them, nobody got a 5xx, the origin never held more than cap, and once
                         it answers everyone is admitted in ticket order with every slot given back
  a worker that will not  one worker stopped (SIGSTOP) cannot park: the reload keeps the running
  park                   max-queue and says why; the worker, let go on, serves on the same segment, and
                         the next reload grows it
  with -state-dir        the grown segment is the state dir's file, and a restart finds the line in it

No timing is asserted. Traffic goes to 127.0.0.1 only; only processes started here are signalled, by pid.
"""
import os
import shutil
import signal
import tempfile
import threading
import time
import unittest

from concert_harness import Concert, wait_for
from fake_origin import FakeOrigin
from visitor import Visitor

CAP = 3


def ring_of(log):
    """The ring sizes the master logged, in order."""
    rings = []
    for line in log.splitlines():
        if "shared memory:" in line and " ring " in line:
            rings.append(int(line.split(" ring ")[1].split(",")[0]))
        if "segment grown from ring" in line:
            rings.append(int(line.split(" to ring ")[1].split(",")[0]))
    return rings


class GrowTestCase(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()
        self.origin.hold()
        self.concerts = []
        self.state = tempfile.mkdtemp(prefix="concert-grow-")

    def tearDown(self):
        self.origin.release()
        for c in self.concerts:
            for pid in c.worker_pids():
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
            c.stop()
        self.origin.stop()
        shutil.rmtree(self.state, ignore_errors=True)

    def concert(self, max_queue, extra=()):
        c = Concert(["-upstream", self.origin.url, "-shutdown-grace", "2s"] + list(extra), workers=2,
                    config_text="cap: %d\nmax-queue: %d\n" % (CAP, max_queue))
        self.concerts.append(c)
        return c.start()

    def reload(self, c, max_queue, generation):
        with open(c.config_path, "w") as f:
            f.write("cap: %d\nmax-queue: %d\n" % (CAP, max_queue))
        c.signal(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: c.stats()["generation"] == generation, 10), c.log())
        c.wait_workers(2)

    def fill(self, c, n):
        """CAP requests held at the origin, then `n` visitors waiting behind them."""
        holders = [threading.Thread(target=lambda: Visitor(c).get("/slow", timeout=60), daemon=True)
                   for _ in range(CAP)]
        for t in holders:
            t.start()
        self.assertTrue(wait_for(lambda: self.origin.recorder.page_in_flight == CAP, 10))
        visitors = [Visitor(c, name="v%d" % i) for i in range(n)]
        for v in visitors:
            status, _, _ = v.get("/page")
            self.assertEqual(status, 429)  # a JSON client that has to wait: its ticket and place
            self.assertIsNotNone(v.ticket)
        return holders, visitors

    def test_grown_under_traffic_keeps_every_place_and_the_cap(self):
        c = self.concert(100)
        holders, visitors = self.fill(c, 60)
        before = [v.position() for v in visitors]
        self.assertEqual(before, list(range(1, 61)))

        stop = threading.Event()
        bad = []
        churn = []

        def traffic(i):
            v = Visitor(c, name="churn%d" % i)
            churn.append(v)
            while not stop.is_set():
                try:
                    status, _, _ = v.get("/page", timeout=10)
                    if status >= 500:
                        bad.append(status)
                    v.poll(wait=False)
                except OSError as e:
                    bad.append(repr(e))
                time.sleep(0.01)

        threads = [threading.Thread(target=traffic, args=(i,), daemon=True) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        self.reload(c, 30000, 2)
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(15)

        self.assertIn("segment grown from ring 4096 to ring", c.log())
        self.assertEqual(ring_of(c.log())[-1], 65536)
        self.assertEqual([v.position() for v in visitors], before)
        late = Visitor(c, name="late")
        late.get("/page")
        self.assertGreater(late.position(), 60)
        self.assertEqual(bad, [])
        self.assertLessEqual(self.origin.recorder.max_page_in_flight, CAP)

        # The origin answers: everyone gets in, in ticket order, and every slot comes back.
        self.origin.release()
        for t in holders:
            t.join(30)
        deadline = time.time() + 60
        for v in visitors:
            v.admit("/page", deadline, use_events=False)
        self.assertLessEqual(self.origin.recorder.max_page_in_flight, CAP)
        self.assertEqual(c.fifo_inversions(), 0)
        self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, 15), c.stats())

    def test_a_worker_that_will_not_park_leaves_everything_as_it_was(self):
        c = self.concert(100)
        _, visitors = self.fill(c, 10)
        before = [v.position() for v in visitors]
        stopped = c.worker_pids()[0]
        os.kill(stopped, signal.SIGSTOP)
        try:
            with open(c.config_path, "w") as f:
                f.write("cap: %d\nmax-queue: 30000\n" % CAP)
            c.signal(signal.SIGHUP)
            self.assertTrue(wait_for(lambda: "cannot be made now" in c.log(), 10), c.log())
        finally:
            os.kill(stopped, signal.SIGCONT)
        self.assertRegex(c.log(), r"reload: max-queue 30000 needs a larger segment, which cannot be made now "
                                  r"\(worker \d+ did not park within a second\); keeping max-queue 100")
        self.assertNotIn("segment grown", c.log())
        c.wait_workers(2)
        self.assertEqual([v.position() for v in visitors], before)
        # The stopped worker, let go on, parked late and was told to go on: the next grow finds it answering.
        self.reload(c, 30000, 3)
        self.assertIn("segment grown from ring 4096", c.log())
        self.assertEqual([v.position() for v in visitors], before)

    def test_grown_state_dir_segment_is_found_after_a_restart(self):
        extra = ["-state-dir", self.state]
        c = self.concert(100, extra)
        _, visitors = self.fill(c, 20)
        before = [v.position() for v in visitors]
        self.reload(c, 30000, 2)
        self.assertIn("segment grown from ring 4096", c.log())
        self.assertEqual(sorted(os.listdir(self.state)), ["lock", "segment"])
        c.kill_all()
        again = Concert(["-upstream", self.origin.url, "-shutdown-grace", "2s"] + extra, workers=2,
                        config_text="cap: %d\nmax-queue: 30000\n" % CAP)
        self.concerts.append(again)
        again.start()
        self.assertEqual(ring_of(again.log())[0], 65536)
        for v in visitors:
            v.target = again
        # Killed with the origin still serving CAP requests: their slots stay in quarantine (counted)
        # for -upstream-timeout, so nobody's turn comes yet and everyone keeps their place.
        self.assertEqual(again.stats()["occupancy"], CAP)
        self.assertEqual([v.position() for v in visitors], before)


if __name__ == "__main__":
    unittest.main()
