"""What hosts sharing a line do while the engine (Redis) does not answer; the real binary, a real
redis-server (SIGSTOPped: its port accepts connections, nothing answers) and one fake origin:

  test_fail_open_admits_each_hosts_share     two hosts, -cap 4, -cluster-fail open, 20 visitors
                                             arriving anew on 300 ms pages, Redis stopped for 8 s:
                                             each host goes on admitting from its own line, never
                                             more than cap / hosts at once once the engine is taken
                                             for away; every request is answered within a second
                                             past its page; the workers wait on events (they use a
                                             small part of a CPU, not all of it); after the stall
                                             everyone gets in and no position grew
  test_fail_open_with_queue_hold             the same with -queue-hold 3s: held requests are admitted
                                             from the line while the engine is away
  test_fail_closed_admits_nobody_new         the same with -cluster-fail closed: once the host's
                                             lease is over nobody new reaches the origin, every
                                             request is still answered, and the room moves again
                                             when Redis is back
  test_queue_hold_with_cluster               -queue-hold 5s with -cluster: held page requests are
                                             answered by the origin as the line moves, on both hosts

Each test starts its own redis-server and hosts. The origin tags each request with the host that
sent it (`via=`) and counts what is in flight per host. Traffic goes to 127.0.0.1 only; only
processes started here are signalled, by pid.
"""
import os
import threading
import time
import unittest

from chaos import most_at_once
from concert_harness import wait_for
from test_cluster_hosts import ClusterHostsBase, stats_or_empty
from visitor import Visitor, in_thread

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total / CLOCK_TICKS


class ClusterFailTest(ClusterHostsBase):
    PAGE_MS = 300
    VISITORS = 20

    def crowd_loop(self, hosts, done):
        """VISITORS visitors, each arriving anew (no pass) at its host again and again for a 300 ms page
        until `done`; every request waits at most 5 s for its answer. Returns (visitors, threads)."""
        visitors = []

        def loop(k):
            host = hosts[k % len(hosts)]
            n = 0
            while not done.is_set():
                v = Visitor(name="%s%d.%d" % (host.name, k, n))
                visitors.append(v)
                v.admit("/sleep?ms=%d&via=%s" % (self.PAGE_MS, host.name), time.time() + 60, use_events=False,
                        pick=lambda: host, page_timeout=5)
                n += 1
        return visitors, [in_thread(loop, k) for k in range(self.VISITORS)]

    def stall(self, mode, extra=()):
        args = ["-cap", "4", "-cluster-fail", mode, "-claim-window", "3s"] + list(extra)
        a, b = self.host("A", args, claim_window=None), self.host("B", args, claim_window=None)
        hosts = [a, b]
        self.wait_hosts(hosts, 2)
        done = threading.Event()
        self.addCleanup(done.set)
        self.addCleanup(self.redis.resume)
        visitors, threads = self.crowd_loop(hosts, done)
        rec = self.origin.recorder
        self.assertTrue(wait_for(lambda: rec.hits() >= 20, timeout=30, interval=0.1), "nobody got in")
        workers = [p for h in hosts for p in h.worker_pids()]
        self.redis.pause()
        stopped = time.time()
        cpu_before = cpu_seconds(workers)
        time.sleep(8)
        cpu = cpu_seconds(workers) - cpu_before
        self.redis.resume()
        resumed = time.time()
        # Back: the hosts re-join and the line moves again.
        self.wait_hosts(hosts, 2)
        hits = rec.hits()
        self.assertTrue(wait_for(lambda: rec.hits() >= hits + 10, timeout=30, interval=0.1),
                        "the room did not move again after the engine came back")
        done.set()
        for t in threads:
            t.join(70)
        # Every request was answered: no transport error (a 5 s timeout among them) on any visitor.
        errors = [(v.name, v.errors) for v in visitors if v.errors]
        self.assertEqual(errors, [], "requests went unanswered")
        bad = [(v.name, v.bad) for v in visitors if v.bad]
        self.assertEqual(bad, [], "5xx answers")
        self.assertLessEqual(rec.max_page_in_flight, 4)
        increases = [(v.name, v.increases()) for v in visitors if v.increases()]
        self.assertEqual(increases, [], "positions grew")
        # Waiting on events, not spinning: two hosts' four workers, 8 s of wall time.
        self.assertLess(cpu, 4.0, "the workers spun while the engine was away: %.1f s of CPU in 8 s" % cpu)
        with rec.lock:
            requests = list(rec.requests)
        # The host's own lease lasts half the TTL (1 s) past its last round; allow a page more.
        away_from = stopped + 1.0 + self.PAGE_MS / 1000 + 0.2
        during = [r for r in requests if away_from <= r["time"] < resumed]
        return hosts, requests, during, away_from, resumed

    def test_fail_open_admits_each_hosts_share(self):
        hosts, requests, during, since, until = self.stall("open")
        for h in hosts:
            mine = [r for r in requests if r["via"] == h.name]
            self.assertGreater(len([r for r in during if r["via"] == h.name]), 0,
                               "%s admitted nobody while the engine was away" % h.name)
            self.assertLessEqual(most_at_once(mine, since, until), 2,
                                 "%s used more than cap / hosts while the engine was away" % h.name)

    def test_fail_open_with_queue_hold(self):
        hosts, requests, during, since, until = self.stall("open", ["-queue-hold", "3s"])
        for h in hosts:
            self.assertGreater(len([r for r in during if r["via"] == h.name]), 0,
                               "%s admitted no held request while the engine was away" % h.name)

    def test_fail_closed_admits_nobody_new(self):
        hosts, requests, during, since, until = self.stall("closed")
        self.assertEqual(during, [], "a host admitted someone with -cluster-fail closed and the engine away")

    def test_queue_hold_with_cluster(self):
        args = ["-cap", "2", "-queue-hold", "5s"]
        a, b = self.host("A", args), self.host("B", args)
        hosts = [a, b]
        self.wait_hosts(hosts, 2)
        rec = self.origin.recorder
        # Eight visitors ask for a 300 ms page at once; each request is held (no waiting page) until
        # its turn, so everyone's first request is answered by the origin within the hold.
        answers = []

        def one(k):
            v = Visitor(name="q%d" % k)
            host = hosts[k % 2]
            status, _, body = v.get("/sleep?ms=%d&via=%s" % (self.PAGE_MS, host.name), host=host, timeout=10)
            answers.append((v.name, status, body[:40]))
        threads = [in_thread(one, k) for k in range(8)]
        for t in threads:
            t.join(20)
        self.assertEqual(sorted(s for _, s, _ in answers), [200] * 8, answers)
        self.assertEqual(sum(1 for _, _, body in answers if body.startswith(b"ok")), 8, answers)
        self.assertLessEqual(rec.max_page_in_flight, 2)
        self.assertEqual([stats_or_empty(h).get("cluster_engine_up") for h in hosts], [1, 1])


if __name__ == "__main__":
    unittest.main()
