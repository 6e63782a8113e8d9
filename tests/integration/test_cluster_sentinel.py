"""Hosts that find their engine through Redis Sentinel (-cluster redis+sentinel://...); the real
binary, a real redis-server master and one replica, redis-sentinel processes (or a stand-in sentinel)
and one fake origin:

  test_failover_keeps_the_room          two hosts, -cap 2, -cluster-fail closed, three sentinels:
                                        both hosts join the room at the master the sentinels name,
                                        and say so in their log; four visitors queue behind two held
                                        pages and are all admitted; six more queue behind two held
                                        pages, and the master is SIGKILLed: the sentinels promote the
                                        replica, each host logs the new master once, both re-join it
                                        (engine up, two hosts) and the room's keys are there; once the
                                        held pages finish the line moves again and all six are
                                        admitted; the origin never has more than two pages in flight
  test_a_replica_is_not_taken_for_the_master
                                        the URL lists a port no sentinel listens on, then a stand-in
                                        sentinel that names the replica: the host asks the next
                                        sentinel, connects, hears from ROLE that it is a replica and
                                        takes the engine for away (logged once, with why), asking
                                        again every second; once the stand-in names the master the
                                        host joins the room there, and each master named is logged
                                        once

-cluster-fail closed keeps the cap whole during the failover: with open, each host would admit up to
cap / hosts on its own while the other still held its pages. The tests fail (they do not skip) when
redis-server or redis-sentinel is not installed. The sentinels run with quorum 2, down-after 1 s and
failover-timeout 3 s, so a failover takes a few seconds; it and every cross-host effect are waited
for, never timed. Traffic goes to 127.0.0.1 only; only processes started here are signalled, by pid.
"""
import unittest

from concert_harness import Concert, wait_for
from fake_origin import closed_port
from redis_sentinel import (FakeSentinel, RedisSentinel, replicate, sentinel_available, sentinel_url,
                            wait_sentinels_ready)
from redis_server import RedisServer
from test_cluster_hosts import ADMIN_TOKEN, ClusterHostsBase, stats_or_empty

MASTER = "mymaster"
CAP = 2


def names_master(c, port):
    return "cluster engine: sentinel names master 127.0.0.1:%d for %s" % (port, MASTER) in c.log()


class ClusterSentinelTest(ClusterHostsBase):
    """A master (self.redis, started by ClusterHostsBase) and its replica; each test adds its
    sentinels and sets self.url."""

    def setUp(self):
        ok, why = sentinel_available()
        if not ok:
            self.fail(why)
        super().setUp()
        self.replica = RedisServer()
        self.addCleanup(self.replica.close)
        replicate(self.replica, self.redis)
        self.url = None

    def host(self, name, args, claim_window="2s", **kw):
        c = Concert(["-upstream", self.origin.url, "-cluster", self.url, "-cluster-lease-ttl", "2s",
                     "-claim-window", claim_window] + args, workers=2, admin_token=ADMIN_TOKEN, **kw)
        c.name = name
        self.addCleanup(self.stop_host, c)
        c.start()
        return c

    def queue_behind_held_pages(self, hosts, n, gate):
        """n visitors through the room for a page the origin holds until `gate` opens; returns their
        threads once the cap's worth of pages is at the origin and the rest wait in line."""
        threads = self.crowd(hosts, n, gate, 60)
        rec = self.origin.recorder
        self.assertTrue(wait_for(lambda: rec.page_in_flight >= CAP, timeout=20, interval=0.1),
                        "the origin did not get the cap's worth of pages")
        self.assertTrue(wait_for(lambda: stats_or_empty(hosts[0]).get("queue_depth", 0) >= n - CAP,
                                 timeout=20, interval=0.1),
                        "the others are not in line: %s" % stats_or_empty(hosts[0]).get("queue_depth"))
        return threads

    def admitted(self, threads, n):
        for t in threads:
            t.join(70)
        self.assertEqual(sum(1 for t in threads if t.result), n, [t.error for t in threads if t.error])

    def test_failover_keeps_the_room(self):
        sentinels = []
        for _ in range(3):
            s = RedisSentinel(MASTER, self.redis.port)
            self.addCleanup(s.close)
            sentinels.append(s)
        wait_sentinels_ready(sentinels, replicas=1)
        self.url = sentinel_url(sentinels, MASTER)
        rec = self.origin.recorder
        args = ["-cap", str(CAP), "-cluster-fail", "closed"]
        a, b = self.host("A", args), self.host("B", args)
        hosts = [a, b]
        self.wait_hosts(hosts, 2)
        for h in hosts:
            self.assertTrue(names_master(h, self.redis.port), h.log())
        self.assertTrue(self.redis.keys("concert:*"), "the room is not on the master")

        # Before the failover: the line moves.
        threads = self.queue_behind_held_pages(hosts, 4, "g")
        self.origin.release("g")
        self.admitted(threads, 4)
        self.assertLessEqual(rec.max_page_in_flight, CAP)

        # Six in the room, two of them at the origin, when the master dies.
        threads = self.queue_behind_held_pages(hosts, 6, "h")
        self.redis.kill()
        for h in hosts:
            self.assertTrue(wait_for(lambda: names_master(h, self.replica.port), timeout=30, interval=0.1),
                            "%s did not hear of the new master:\n%s" % (h.name, h.log()))
        self.wait_hosts(hosts, 2)
        self.assertEqual(self.replica.command("ROLE")[0], "master")
        self.assertTrue(self.replica.keys("concert:*"), "the room is not on the new master")
        for h in hosts:
            log = h.log()
            self.assertEqual(log.count("sentinel names master"), 2, log)  # once per change
            self.assertIn("cluster engine %s at redis://127.0.0.1:%d up" % (MASTER, self.replica.port), log)
        self.assertLessEqual(rec.max_page_in_flight, CAP)

        # After it: the held pages finish and everyone in line gets in.
        self.origin.release("h")
        self.admitted(threads, 6)
        self.assertLessEqual(rec.max_page_in_flight, CAP)
        self.assertEqual([stats_or_empty(h).get("cluster_engine_up") for h in hosts], [1, 1])

    def test_a_replica_is_not_taken_for_the_master(self):
        fake = FakeSentinel(("127.0.0.1", self.replica.port))
        self.addCleanup(fake.close)
        self.url = "redis+sentinel://127.0.0.1:%d,%s/%s" % (closed_port(), fake.address, MASTER)
        a = self.host("A", ["-cap", str(CAP), "-cluster-fail", "closed"])
        self.assertTrue(wait_for(lambda: "ROLE says slave" in a.log(), timeout=10, interval=0.1), a.log())
        asked = fake.asked
        self.assertTrue(wait_for(lambda: fake.asked >= asked + 2, timeout=10, interval=0.1),
                        "the host did not ask the sentinels again")
        self.assertEqual(stats_or_empty(a).get("cluster_engine_up"), 0)
        log = a.log()
        self.assertEqual(log.count("unreachable"), 1, log)  # logged once
        self.assertIn("cluster engine %s at redis://127.0.0.1:%d unreachable (not the master: ROLE says slave)" % (
            MASTER, self.replica.port), log)
        self.assertEqual(log.count("sentinel names master"), 1, log)
        self.assertNotIn(" up: ", log)
        self.assertEqual(self.replica.keys("concert:*"), [])

        fake.answer = ("127.0.0.1", self.redis.port)
        self.wait_hosts([a], 1)
        log = a.log()
        self.assertTrue(names_master(a, self.redis.port), log)
        self.assertEqual(log.count("sentinel names master"), 2, log)
        self.assertIn("cluster engine %s at redis://127.0.0.1:%d up" % (MASTER, self.redis.port), log)
        self.assertTrue(self.redis.keys("concert:*"), "the room is not on the master")


if __name__ == "__main__":
    unittest.main()
