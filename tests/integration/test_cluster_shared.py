"""What the hosts of one room share besides the line and the cap, against the real binary and a real
redis-server:

  test_mode_and_cap_set_on_one_host_hold_on_all   POST /_room/mode and /_room/cap on A reach B and C
  test_a_session_ended_on_a_is_over_on_b          Concert-Session: end seen by A: B no longer treats the
                                                  pass as a session (the visitor queues like anyone)
  test_a_ticket_promoted_on_a_collects_on_b       POST /_room/promote on A: the holder's poll on B hands
                                                  over the room pass, and the page goes in on B ahead of
                                                  the line
  test_a_missed_turn_returns_on_another_host      a turn not taken within -claim-window stops holding the
                                                  line (the next visitor goes in); its holder, back on
                                                  another host, goes in ahead of those still waiting
  test_a_reload_keeps_the_host_and_its_share      SIGHUP replaces the cluster agent, which goes on under
                                                  the same host name: the room still counts three hosts

Each test starts its own redis-server and three hosts; cross-host effects are waited for (the hosts
sync about every 100 ms), never timed.
"""
import json
import signal
import time
import unittest

from concert_harness import Concert, wait_for
from redis_server import RedisServer, redis_available
from test_cluster import NAMES, TaggedOrigins, cluster_view, stats_or_empty
from visitor import Visitor, in_thread

ADMIN_TOKEN = "cluster-admin-token-0123456789"
AUTH = {"Authorization": "Bearer " + ADMIN_TOKEN}


class ClusterSharedTest(unittest.TestCase):
    def setUp(self):
        ok, why = redis_available()
        if not ok:
            self.fail(why)
        self.origins = TaggedOrigins(3)
        self.addCleanup(self.origins.stop)
        self.redis = RedisServer()
        self.addCleanup(self.redis.close)
        self.hosts = []

    def start_hosts(self, cap, *extra):
        for i in range(3):
            args = ["-upstream", self.origins[i].url, "-cap", str(cap), "-cluster", self.redis.url,
                    "-cluster-lease-ttl", "2s"] + list(extra)
            c = Concert(args, workers=2, admin_token=ADMIN_TOKEN)
            c.name = NAMES[i]
            self.addCleanup(self.stop_host, c)
            c.start()
            self.hosts.append(c)
        self.assertTrue(wait_for(lambda: all(stats_or_empty(c).get("cluster_hosts") == 3 for c in self.hosts),
                                 timeout=15, interval=0.1), cluster_view(self.hosts))
        return self.hosts

    def stop_host(self, c):
        self.origins.release_everything()
        c.stop(timeout=5)

    def admin(self, host, method, path, body=None):
        status, _, raw = host.request(method, path, headers=dict(AUTH, **{"Content-Type": "application/json"}),
                                      body=json.dumps(body) if body is not None else None)
        return status, json.loads(raw) if raw[:1] in (b"{", b"[") else raw

    def hold_the_room(self, v, host, gate):
        """`v` takes the room's only slot on `host` with a page the origin holds until release(gate)."""
        t = in_thread(v.get, "/slow?gate=%s&timeout=60" % gate, timeout=70, host=host)
        self.assertTrue(wait_for(lambda: self.origins.now >= 1, timeout=10), "the origin did not get the page")
        return t

    def test_mode_and_cap_set_on_one_host_hold_on_all(self):
        a, b, c = self.start_hosts(5)
        status, doc = self.admin(a, "POST", "/_room/mode", {"mode": "pause"})
        self.assertEqual(status, 200, doc)
        for h in (b, c):
            self.assertTrue(wait_for(lambda: self.admin(h, "GET", "/_room/mode")[1].get("mode") == "pause",
                                     timeout=10, interval=0.1), "%s did not pause" % h.name)
        # Paused everywhere: a newcomer on C queues although slots are free.
        status, _, _ = Visitor(name="n").get("/page", host=c)
        self.assertEqual(status, 429)
        status, doc = self.admin(b, "POST", "/_room/mode", {"mode": "open"})
        self.assertEqual(status, 200, doc)
        self.assertTrue(wait_for(lambda: self.admin(a, "GET", "/_room/mode")[1].get("mode") == "open", timeout=10,
                                 interval=0.1))
        status, doc = self.admin(c, "POST", "/_room/cap", {"cap": 3})
        self.assertEqual(status, 200, doc)
        for h in (a, b, c):
            self.assertTrue(wait_for(lambda: stats_or_empty(h).get("cap") == 3, timeout=10, interval=0.1),
                            "%s: %s" % (h.name, stats_or_empty(h).get("cap")))

    def test_a_session_ended_on_a_is_over_on_b(self):
        a, b, _ = self.start_hosts(1, "-queue-hold", "0")
        v = Visitor(name="shopper")
        status, _, body = v.get("/checkout", host=a)
        self.assertEqual((status, body), (200, b"ok"))
        self.assertIn("concert_admit", v.jar)
        pass_cookie = v.jar["concert_admit"]
        status, _, body = v.get("/end-session", host=a)
        self.assertEqual((status, body), (200, b"session ended"))
        v.jar["concert_admit"] = pass_cookie  # a client that keeps the old pass anyway
        holder = Visitor(name="holder")
        t = self.hold_the_room(holder, a, "full")
        # A session would be held on B for a slot; an ended one queues like anyone (429 at once).
        self.assertTrue(wait_for(lambda: v.get("/next", timeout=20, host=b)[0] == 429, timeout=10, interval=0.3),
                        "B still treats the ended session as one")
        self.origins.release("full")
        t.join(10)

    def test_a_ticket_promoted_on_a_collects_on_b(self):
        a, b, _ = self.start_hosts(1, "-queue-hold", "0")
        holder = Visitor(name="holder")
        t = self.hold_the_room(holder, a, "full")
        first, second = Visitor(name="first"), Visitor(name="second")
        for v in (first, second):
            self.assertEqual(v.get("/page", host=a)[0], 429)
        # Both are placed (their first answers wait for it): A lists them, second behind first.
        status, line = self.admin(a, "GET", "/_room/queue")
        self.assertEqual(len(line), 2, line)
        status, doc = self.admin(a, "POST", "/_room/promote", {"ticket": line[1]["ticket"]})
        self.assertEqual(status, 200, doc)
        # The promoted visitor asks B: its room pass comes with the answer.
        def collected():
            second.poll(b, wait=False)
            return "room_pass" in second.jar
        self.assertTrue(wait_for(collected, timeout=10, interval=0.2), second.jar)
        self.origins.release("full")
        t.join(10)
        status, _, body = second.get("/page", timeout=20, host=b)
        self.assertEqual((status, body), (200, b"ok"))

    def test_a_missed_turn_returns_on_another_host(self):
        # A returned turn not taken within the window leaves the line (a turn comes back once), and
        # the hosts' rounds and this test's polls share that window: 3 s leaves room for both.
        a, b, c = self.start_hosts(1, "-queue-hold", "0", "-claim-window", "3s")
        holder = Visitor(name="holder")
        t = self.hold_the_room(holder, a, "full")
        # Both are placed before their first answers: the sleeper first.
        sleeper, next_one = Visitor(name="sleeper"), Visitor(name="next")
        self.assertEqual(sleeper.get("/page", host=a)[0], 429)
        self.assertEqual(next_one.get("/page", host=b)[0], 429)
        self.origins.release("full")
        t.join(10)

        def ready(v, host):
            doc = v.poll(host, wait=False)
            return bool(doc and doc.get("ready"))

        def head():
            status, doc = self.admin(a, "GET", "/_room/queue")
            return doc[0] if status == 200 and isinstance(doc, list) and doc else {}

        # The sleeper's turn comes and passes unclaimed; then it is the next one's turn.
        self.assertTrue(wait_for(lambda: ready(next_one, b), timeout=15, interval=0.3),
                        "the missed turn still holds the line")
        self.assertGreaterEqual(sum(stats_or_empty(h).get("missed_turns_total", 0) for h in self.hosts), 1)
        # The next one takes its turn with a page the origin holds; a late visitor queues on C.
        t2 = in_thread(next_one.get, "/slow?gate=again&timeout=60", timeout=70, host=b)
        self.assertTrue(wait_for(lambda: self.origins.now >= 1, timeout=10))
        late = Visitor(name="late")
        self.assertEqual(late.get("/page", host=c)[0], 429)
        # The sleeper comes back for the page, on C: back at the head of the line, ahead of the late
        # one. (Polling alone would not have brought the turn back.)
        self.assertEqual(sleeper.get("/page", host=c)[0], 429)
        self.assertTrue(wait_for(lambda: head().get("returned") is True, timeout=10, interval=0.2),
                        "the sleeper was not returned to the head: %s" % head())
        self.origins.release("again")
        t2.join(10)
        self.assertTrue(wait_for(lambda: ready(sleeper, c), timeout=10, interval=0.3))
        doc = late.poll(a, wait=False)
        self.assertFalse(doc and doc.get("ready"), "the late visitor's turn came with the sleeper's: %s" % doc)
        status, _, body = sleeper.get("/page", timeout=20, host=c)
        self.assertEqual((status, body), (200, b"ok"))

    def test_a_reload_keeps_the_host_and_its_share(self):
        a, _, _ = self.start_hosts(6)
        a.signal(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: open(a.log_path).read().count("cluster agent started") >= 2, timeout=10,
                                 interval=0.1), "the agent was not replaced")
        time.sleep(0.5)  # a few rounds of the new agent
        self.assertTrue(wait_for(lambda: stats_or_empty(a).get("cluster_engine_up") == 1, timeout=10))
        self.assertEqual([stats_or_empty(h).get("cluster_hosts") for h in self.hosts], [3, 3, 3])
        self.assertEqual(len(self.redis.command("HKEYS", "concert:resv")), 3)
        status, _, body = Visitor(name="after").get("/page", host=a)
        self.assertEqual((status, body), (200, b"ok"))


if __name__ == "__main__":
    unittest.main()
