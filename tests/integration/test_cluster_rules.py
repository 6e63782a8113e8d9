"""The room's rules across hosts, against the real binary, a real redis-server and one fake origin:

  test_a_paused_room_stands_still_on_every_host   two hosts in pause (-mode pause), four visitors
                                                  polling both well past -claim-window: no position
                                                  ever moves or grows, no turn is counted missed; back
                                                  to open, everyone gets in
  test_a_stopped_agent_gives_up_its_share         two hosts, -cap 4, -cluster-fail closed, short requests
                                                  on both; one host's cluster agent is SIGSTOPped past
                                                  -cluster-lease-ttl, so the engine gives its share to
                                                  the other: the origin never sees more than the cap,
                                                  the stopped host reports the engine away, and comes
                                                  back once its agent runs again
  test_a_prequeue_is_shuffled_for_the_room        two hosts in a sale's pre-queue, 30 arrivals on both:
                                                  once the sale starts they go in one at a time (cap 1)
                                                  in one random order for the room, not in arrival
                                                  order, each once
  test_the_admission_rate_holds_for_the_room      two hosts at -admit-rate 5/s under newcomers on both:
                                                  the room admits at most the rate (plus a burst), not
                                                  the rate per host

Each test starts its own redis-server and hosts; cross-host effects are waited for (the hosts sync with
the engine about every 100 ms), never timed. Traffic goes to 127.0.0.1 only; only processes started
here are signalled, by pid.
"""
import datetime
import json
import os
import re
import signal
import threading
import time
import unittest

from concert_harness import wait_for
from test_cluster_hosts import AUTH, ClusterHostsBase, stats_or_empty
from visitor import Visitor, in_thread


def agent_pid(c):
    """The pid of a host's cluster agent, from its log."""
    found = re.findall(r"cluster agent started pid (\d+)", c.log())
    return int(found[-1]) if found else None


class ClusterRulesTest(ClusterHostsBase):
    def test_a_paused_room_stands_still_on_every_host(self):
        args = ["-cap", "2", "-mode", "pause", "-claim-window", "1s"]
        a, b = self.host("A", args, claim_window=None), self.host("B", args, claim_window=None)
        hosts = [a, b]
        self.wait_hosts(hosts, 2)
        visitors = []
        for k in range(4):
            v = Visitor(name="p%d" % k)
            status, _, _ = v.get("/page", host=hosts[k % 2])
            self.assertIn(status, (200, 429), v)
            self.assertIn("room_ticket", v.jar, v)
            visitors.append(v)
        # Every visitor is placed, then polls both hosts in turn for several claim windows.
        self.assertTrue(wait_for(lambda: all(v.position(hosts[0]) is not None for v in visitors), timeout=20,
                                 interval=0.1), [v.positions[-1:] for v in visitors])
        deadline = time.time() + 7
        rounds = 0
        while time.time() < deadline:
            for k, v in enumerate(visitors):
                doc = v.poll(hosts[(k + rounds) % 2])
                self.assertFalse(doc and doc.get("ready"), "%r: a turn came in pause: %s" % (v, doc))
            rounds += 1
        for v in visitors:
            self.assertEqual(v.increases(), [], "%r: its position grew in pause: %s" % (v, v.positions))
            self.assertEqual(len(set(v.places())), 1, "%r: its position moved in pause: %s" % (v, v.positions))
        self.assertEqual(sorted(v.places()[-1] for v in visitors), [1, 2, 3, 4])
        self.assertEqual(self.missed(hosts), 0, [stats_or_empty(h).get("missed_turns_total") for h in hosts])
        self.assertEqual(self.origin.recorder.hits(), 0)
        # Open again (on one host: the room follows): the line moves and everyone gets in.
        status, _, body = a.request("POST", "/_room/mode", headers=dict(AUTH, **{"Content-Type": "application/json"}),
                                    body=json.dumps({"mode": "open"}).encode())
        self.assertEqual(status, 200, body)
        end = time.time() + 40
        threads = [in_thread(v.admit, "/page", end, use_events=False, pick=lambda k=k: hosts[k % 2])
                   for k, v in enumerate(visitors)]
        for t in threads:
            t.join(50)
        self.assertEqual([bool(t.result) for t in threads], [True] * 4, [t.error for t in threads])

    def test_a_stopped_agent_gives_up_its_share(self):
        args = ["-cap", "4", "-cluster-fail", "closed", "-cluster-lease", "1", "-claim-window", "5s"]
        a, b = self.host("A", args, claim_window=None), self.host("B", args, claim_window=None)
        hosts = [a, b]
        self.wait_hosts(hosts, 2)
        pid = agent_pid(a)
        self.assertIsNotNone(pid, a.log())
        stopped = threading.Event()
        done = threading.Event()

        def resume():
            if stopped.is_set():
                os.kill(pid, signal.SIGCONT)
                stopped.clear()
        self.addCleanup(resume)
        self.addCleanup(done.set)

        # Short requests keep both hosts busy: each visitor, once in, asks for page after page with its
        # pass (a session: no waiting page between them).
        admitted = [0] * 12

        def load(k):
            host, v = hosts[k % 2], Visitor(name="l%d" % k)
            while not done.is_set():
                if v.admit("/sleep?ms=200", time.time() + 20, use_events=False, pick=lambda: host, page_timeout=10):
                    admitted[k] += 1
            return admitted[k]
        threads = [in_thread(load, k) for k in range(len(admitted))]
        # Everyone is in (nobody waits in line): both hosts use their shares for sessions.
        self.assertTrue(wait_for(lambda: min(admitted) >= 1, timeout=40, interval=0.1), admitted)
        self.assertTrue(wait_for(lambda: stats_or_empty(a).get("occupancy", 0) >= 1, timeout=20, interval=0.05),
                        "A admits nobody")
        self.assertLessEqual(self.origin.recorder.max_page_in_flight, 4)
        os.kill(pid, signal.SIGSTOP)
        stopped.set()
        # The engine gives A's share to B once A's lease ends; A must have stopped using it by then.
        self.assertTrue(wait_for(lambda: stats_or_empty(b).get("cluster_hosts") == 1, timeout=15, interval=0.1),
                        "the engine did not drop A's lease")
        hits = self.origin.recorder.hits()
        self.assertTrue(wait_for(lambda: self.origin.recorder.hits() >= hits + 20, timeout=20, interval=0.1),
                        "B did not go on admitting")
        time.sleep(3)  # time for a host that still holds a share the engine gave away to use it
        self.assertLessEqual(self.origin.recorder.max_page_in_flight, 4)
        self.assertEqual(stats_or_empty(a).get("cluster_engine_up"), 0,
                         "A still takes the engine for up with its agent stopped")
        # The agent runs again: A re-joins the room.
        resume()
        self.wait_hosts(hosts, 2)
        time.sleep(1)
        done.set()
        for t in threads:
            t.join(30)
        self.assertLessEqual(self.origin.recorder.max_page_in_flight, 4)

    def test_the_admission_rate_holds_for_the_room(self):
        rate = 5
        args = ["-cap", "50", "-admit-rate", "%d/s" % rate]
        a, b = self.host("A", args), self.host("B", args)
        hosts = [a, b]
        self.wait_hosts(hosts, 2)
        time.sleep(0.5)  # a round past seeing each other: each host meters its part
        done = threading.Event()
        self.addCleanup(done.set)

        def arrive(k):
            # Each visit is a newcomer's (no pass: sessions are never metered), on both hosts in turn.
            n = 0
            while not done.is_set():
                v = Visitor(name="r%d.%d" % (k, n))
                v.admit("/sleep?ms=20", time.time() + 30, use_events=False, pick=lambda: hosts[(k + n) % 2],
                        page_timeout=10)
                n += 1
        threads = [in_thread(arrive, k) for k in range(16)]
        start = time.time()
        time.sleep(7)
        end = time.time()
        done.set()
        for t in threads:
            t.join(40)
        rec = self.origin.recorder
        with rec.lock:
            times = [r["time"] for r in rec.requests if r["path"] == "/sleep"]
        window = [t for t in times if start + 1 <= t < end]
        # At most the rate over the window, plus one burst (a second's worth) and one for the edges.
        bound = rate * (end - start - 1) + rate + 1
        self.assertGreater(len(window), rate, "the room admitted almost nobody: %d" % len(window))
        self.assertLessEqual(len(window), bound,
                             "the room admitted %d in %.1f s at -admit-rate %d/s on two hosts" % (
                                 len(window), end - start - 1, rate))

    def test_a_prequeue_is_shuffled_for_the_room(self):
        start = time.time() + 8
        when = datetime.datetime.fromtimestamp(start, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        args = ["-cap", "1", "-event-start", when, "-prequeue", "1h", "-first-poll-grace", "1h"]
        a, b = self.host("A", args, claim_window="1h"), self.host("B", args, claim_window="1h")
        hosts = [a, b]
        self.wait_hosts(hosts, 2)
        arrival = []
        for k in range(30):
            v = Visitor(name="p%02d" % k)
            status, _, body = v.get("/sleep?ms=30&who=%s" % v.name, host=hosts[k % 2])
            self.assertEqual(status, 429, body)
            self.assertGreater(json.loads(body)["starts_in"], 0)
            arrival.append(v)
        self.assertLess(time.time(), start, "the machine was too slow to arrive before the start")
        while time.time() < start + 0.5:
            time.sleep(0.05)
        # Everyone comes back with its cookie to its host until admitted; the cap of 1 lets them in one at
        # a time, in the room's order.
        pending, deadline = list(enumerate(arrival)), time.time() + 60
        while pending and time.time() < deadline:
            for item in list(pending):
                k, v = item
                status, _, body = v.get("/sleep?ms=30&who=%s" % v.name, host=hosts[k % 2])
                if status == 200 and body.startswith(b"ok"):
                    pending.remove(item)
                else:
                    self.assertEqual(status, 429, body)
            time.sleep(0.01)
        self.assertEqual(pending, [], "not everyone was admitted")
        rec = self.origin.recorder
        with rec.lock:
            order = [re.search(r"who=([^&]+)", r["target"]).group(1)
                     for r in sorted(rec.requests, key=lambda r: r["time"]) if r["path"] == "/sleep"]
        names = [v.name for v in arrival]
        self.assertEqual(sorted(order), sorted(names), "someone went in twice")
        self.assertNotEqual(order, names, "the pre-queue went in in arrival order")
        self.assertLessEqual(rec.max_page_in_flight, 1)
        self.assertTrue(any("pre-queue closed: 30 visitors hold their shuffled places" in h.log() for h in hosts),
                        [h.log()[-2000:] for h in hosts])


if __name__ == "__main__":
    unittest.main()
