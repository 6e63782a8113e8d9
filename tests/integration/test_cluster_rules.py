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

Each test starts its own redis-server and hosts; cross-host effects are waited for (the hosts sync with
the engine about every 100 ms), never timed. Traffic goes to 127.0.0.1 only; only processes started
here are signalled, by pid.
"""
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


if __name__ == "__main__":
    unittest.main()
