"""Who a host is in a shared room, and what a reload tells the room; the real binary, a real
redis-server and one fake origin shared by the hosts:

  test_two_hosts_with_one_name_and_master_pid_one   two hosts whose masters are both pid 1 (each in its
                                                    own pid namespace, as two containers on one machine)
                                                    and share a host name: the room counts two hosts, and
                                                    under 8 visitors the origin never sees more than the cap
  test_a_reload_reaches_the_room                    the file of one host goes from cap 4, open to cap 1,
                                                    pause; SIGHUP: every host follows (the file wins over
                                                    the room's older values), nobody is let in while
                                                    paused; a reload that leaves the mode alone keeps the
                                                    room's; cap 1 holds when A's file opens the room again

Each test starts its own redis-server and hosts; cross-host effects are waited for (the hosts sync
with the engine about every 100 ms), never timed. Traffic goes to 127.0.0.1 only; only processes
started here are signalled, by pid.
"""
import json
import os
import shutil
import signal
import subprocess
import time
import unittest

from concert_harness import Concert, wait_for
from fake_origin import FakeOrigin
from redis_server import RedisServer, redis_available
from visitor import Visitor, in_thread

ADMIN_TOKEN = "cluster-admin-token-0123456789"
AUTH = {"Authorization": "Bearer " + ADMIN_TOKEN}


def stats_or_empty(c):
    try:
        return c.stats()
    except (OSError, ValueError):
        return {}


def mode_of(c):
    try:
        status, _, raw = c.request("GET", "/_room/mode", headers=AUTH)
        return json.loads(raw).get("mode") if status == 200 else None
    except (OSError, ValueError):
        return None


def pid_namespaces_work():
    """"" when `unshare --pid --fork` runs a command as pid 1 here, else why not."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    try:
        out = subprocess.run(["unshare", "--pid", "--fork", "sh", "-c", "echo $$"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return "unshare: %s" % e
    return "" if out.stdout.strip() == b"1" else "unshare --pid did not give pid 1: %r" % out.stdout[:200]


class ClusterHostsBase(unittest.TestCase):
    """A redis-server, one fake origin and the hosts a test starts (test_cluster_rules uses it too)."""

    def setUp(self):
        ok, why = redis_available()
        if not ok:
            self.fail(why)
        self.origin = FakeOrigin()
        self.addCleanup(self.origin.stop)
        self.redis = RedisServer()
        self.addCleanup(self.redis.close)

    def host(self, name, args, claim_window="2s", **kw):
        # A short claim window by default: tickets a test leaves behind stop holding the line soon.
        base = ["-upstream", self.origin.url, "-cluster", self.redis.url, "-cluster-lease-ttl", "2s"]
        if claim_window:
            base += ["-claim-window", claim_window]
        c = Concert(base + args, workers=2, admin_token=ADMIN_TOKEN, **kw)
        c.name = name
        self.addCleanup(self.stop_host, c)
        c.start()
        return c

    def stop_host(self, c):
        for gate in ("g", "h"):
            self.origin.release(gate)
        c.stop(timeout=10)

    def wait_hosts(self, hosts, n):
        self.assertTrue(wait_for(lambda: all(stats_or_empty(h).get("cluster_hosts") == n and
                                             stats_or_empty(h).get("cluster_engine_up") == 1 for h in hosts),
                                 timeout=20, interval=0.1),
                        "the hosts did not all see %d hosts: %s" % (
                            n, [(h.name, stats_or_empty(h).get("cluster_hosts")) for h in hosts]))

    def missed(self, hosts):
        return sum(stats_or_empty(h).get("missed_turns_total", 0) for h in hosts)

    def crowd(self, hosts, n, gate, seconds):
        """n visitors who each ask for /slow (held by the origin until `gate` opens) through the
        waiting room, alternating hosts, for about `seconds`; returns their threads."""
        deadline = time.time() + seconds

        def visit(k):
            v = Visitor(name="%s%d" % (gate, k))
            host = hosts[k % len(hosts)]
            return v.admit("/slow?gate=%s&k=%d&timeout=60" % (gate, k), deadline, use_events=False,
                           pick=lambda: host, page_timeout=70)
        return [in_thread(visit, k) for k in range(n)]


class ClusterHostsTest(ClusterHostsBase):
    def test_two_hosts_with_one_name_and_master_pid_one(self):
        why = pid_namespaces_work()
        if why:
            self.fail(why)
        # Both masters are pid 1 in their own namespace; the host name is this machine's for both.
        wrapper = ["unshare", "--pid", "--fork", "--kill-child=SIGTERM"]
        a = self.host("A", ["-cap", "2"], wrapper=wrapper)
        b = self.host("B", ["-cap", "2"], wrapper=wrapper)
        self.wait_hosts([a, b], 2)
        self.assertEqual(len(self.redis.command("HKEYS", "concert:resv")), 2)
        threads = self.crowd([a, b], 8, "g", 40)
        # The cap's worth of pages reach the origin and stay there (the gate is shut) while six more
        # visitors wait on two hosts.
        self.assertTrue(wait_for(lambda: self.origin.recorder.page_in_flight >= 2, timeout=20, interval=0.1),
                        "the origin did not get the cap's worth of pages")
        time.sleep(2)  # time for a host that thinks it holds the whole cap to let more in
        self.assertLessEqual(self.origin.recorder.max_page_in_flight, 2)
        self.origin.release("g")
        for t in threads:
            t.join(80)
        self.assertLessEqual(self.origin.recorder.max_page_in_flight, 2)
        self.assertEqual(sum(1 for t in threads if t.result), 8, [t.error for t in threads if t.error])

    def test_a_reload_reaches_the_room(self):
        a = self.host("A", [], config_text="cap: 4\nmode: open\n")
        b = self.host("B", [], config_text="cap: 4\nmode: open\n")
        self.wait_hosts([a, b], 2)
        with open(a.config_path, "w") as f:
            f.write("cap: 1\nmode: pause\n")
        a.signal(signal.SIGHUP)
        for h in (a, b):
            self.assertTrue(wait_for(lambda: mode_of(h) == "pause" and stats_or_empty(h).get("cap") == 1,
                                     timeout=15, interval=0.1),
                            "%s: mode %s, cap %s" % (h.name, mode_of(h), stats_or_empty(h).get("cap")))
        time.sleep(1)  # several rounds: the room's older values must not come back
        for h in (a, b):
            self.assertEqual((mode_of(h), stats_or_empty(h).get("cap")), ("pause", 1), h.name)
        self.assertNotIn("by another host", a.log())
        # Paused: nobody goes in on either host.
        for h in (a, b):
            status, _, _ = Visitor(name="n" + h.name).get("/page", host=h)
            self.assertEqual(status, 429, h.name)
        self.assertEqual(self.origin.recorder.hits("/page"), 0)
        # B's file changes too, but not its mode: a mode the room has keeps (as a runtime mode would).
        with open(b.config_path, "w") as f:
            f.write("cap: 1\nmode: open\n")
        b.signal(signal.SIGHUP)
        self.assertTrue(wait_for(lambda: b.log().count("reload accepted") >= 1, timeout=10, interval=0.1))
        time.sleep(1)
        self.assertEqual((mode_of(a), mode_of(b)), ("pause", "pause"))
        # A's file opens the room again: cap 1 holds across both hosts.
        with open(a.config_path, "w") as f:
            f.write("cap: 1\nmode: open\n")
        a.signal(signal.SIGHUP)
        for h in (a, b):
            self.assertTrue(wait_for(lambda: mode_of(h) == "open", timeout=15, interval=0.1), h.name)
        threads = self.crowd([a, b], 6, "h", 40)
        self.assertTrue(wait_for(lambda: self.origin.recorder.page_in_flight >= 1, timeout=20, interval=0.1))
        time.sleep(2)
        self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)
        self.origin.release("h")
        for t in threads:
            t.join(80)
        self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)


if __name__ == "__main__":
    unittest.main()
