"""One line across hosts, against the real binary, a real redis-server and fake origins.

Several Concert hosts (separate masters, each on its own port, 2 workers each) share one room through
one redis-server started for each test (tests/lib/redis_server.py). What each case checks:

  test_1_300_clients_one_cap_one_line    300 clients spread at random over three hosts, cap 10:
                                         the origin never sees more than 10 at once, everyone gets in, no 5xx,
                                         no ticket's position ever grows whichever host answers, and
                                         fifo_inversions_total summed over the hosts is within hosts x lease
  test_2_a_ticket_works_on_every_host    a ticket from host A has the same position on A, B and C while
                                         the line stands still, it never grows, and the visitor is admitted
                                         in its turn on whichever host it asks (never the one that ticketed it)
  test_3_stats_metrics_and_config        cluster_* in /_room/stats, concert_cluster_* in
                                         /_room/metrics, keys under -cluster-room, -t wants CONCERT_ADMIT_SECRET
  test_4_a_session_from_a_is_a_session_on_b  a pass from A on a full room at B is held as a session
                                         (never the waiting page) and proxied when a slot frees
  test_5_a_ban_on_a_holds_on_b_and_c     a client banned on A gets 403 on B and C; others do not
  test_6_kill_9_host_frees_its_reservations  a SIGKILLed host's reservations expire after
                                         -cluster-lease-ttl and the two others fill the whole cap
  test_7_engine_paused_fail_open         redis SIGSTOPped with -cluster-fail open: every host keeps
                                         admitting on its own, each within cap / hosts, no 5xx; the hosts
                                         re-join when it resumes (same processes), those who waited get in
  test_8_engine_paused_fail_closed       the same with closed: requests already at the origin finish,
                                         no new admission, new visitors get the waiting page, no 5xx; re-join
  test_9_engine_restarted_empty_keeps_the_order  redis SIGKILLed and restarted empty: the hosts
                                         re-join and the waiting visitors keep the relative order every host
                                         showed before, on every host; the cap holds over the restart
  test_10_a_busy_host_gets_the_idle_reservations  with every visitor on one host (a sticky balancer)
                                         the others return the slots they do not need and that host fills
                                         the whole cap

The origin is three FakeOrigin servers, one per host, sharing one in-flight counter (TaggedOrigins):
the shared counter is the origin's view of all hosts together, each server's own counter is one host's
share. A request counts until its work is finished, even when its client or its host went away.
Every cross-host expectation is waited for with wait_for (the hosts sync with the engine about every
100 ms); the timeouts are generous bounds on something that must happen, never speed requirements.
Traffic goes to 127.0.0.1 only; the only processes signalled are the ones started here, by pid.
"""
import http.client
import os
import random
import subprocess
import threading
import time
import unittest
from collections import Counter

from concert_harness import BIN, Concert, TEST_SECRET, request_from, wait_for
from fake_origin import FakeOrigin, Recorder
from redis_server import RedisServer, redis_available
from visitor import BROWSER, JSON, Visitor, in_thread, is_admitted

FORGED_PASS = "A" * 54  # the right length and alphabet, a MAC that is not ours
LEASE = 4  # -cluster-lease default
TTL = "2s"  # -cluster-lease-ttl in these tests (the default is 10s)
NAMES = "ABC"


def log(msg):
    print("    [cluster] " + msg, flush=True)


# -- the origin: one server per host, one shared in-flight count ---------------------------------------

class SharedCount:
    def __init__(self):
        self.lock = threading.Lock()
        self.now = 0
        self.max = 0


class HostRecorder(Recorder):
    """A fake origin's recorder whose page count also moves a count shared by every host's origin
    (under one lock shared by all of them)."""

    def __init__(self, shared):
        self.shared = shared
        self._page = 0
        super().__init__()
        self.lock = shared.lock

    @property
    def page_in_flight(self):
        return self._page

    @page_in_flight.setter
    def page_in_flight(self, value):
        shared = self.__dict__.get("shared")
        if shared is not None:
            shared.now += value - self._page
            shared.max = max(shared.max, shared.now)
        self._page = value


class TaggedOrigins:
    def __init__(self, n=3):
        self.shared = SharedCount()
        self.servers = []
        for _ in range(n):
            o = FakeOrigin(nodelay=True)
            rec = HostRecorder(self.shared)
            o.recorder = rec
            o.server.recorder = rec
            self.servers.append(o)

    def __getitem__(self, i):
        return self.servers[i]

    @property
    def now(self):
        with self.shared.lock:
            return self.shared.now

    @property
    def max(self):
        with self.shared.lock:
            return self.shared.max

    def host_now(self, i):
        with self.shared.lock:
            return self.servers[i].recorder.page_in_flight

    def host_max(self, i):
        with self.shared.lock:
            return self.servers[i].recorder.max_page_in_flight

    def reset_max(self):
        with self.shared.lock:
            self.shared.max = self.shared.now
            for o in self.servers:
                o.recorder.max_page_in_flight = o.recorder.page_in_flight

    def hits(self, path=None):
        return sum(o.recorder.hits(path) for o in self.servers)

    def requests(self, path=None):
        out = []
        for i, o in enumerate(self.servers):
            with o.recorder.lock:
                out += [dict(r, origin=NAMES[i]) for r in o.recorder.requests if path is None or r["path"] == path]
        return sorted(out, key=lambda r: r["time"])

    def release(self, name=None):
        for o in self.servers:
            o.release(name)

    def release_everything(self):
        for o in self.servers:
            o.recorder.gate.set()
            with o.recorder.lock:
                gates = list(o.recorder.gates.values())
            for g in gates:
                g.set()

    def stop(self):
        for o in self.servers:
            o.stop()


# -- clients -------------------------------------------------------------------------------------------

def wait_in_line(v, path, pick, deadline, page_pick=None, page_timeout=20):
    """`v` asks for `path` until the origin answers it, polling /queue/status (no event stream) on
    pick() while it waits and asking for the page again on page_pick() (pick() by default) once
    ready. True once admitted, False when the deadline passed or it was cancelled first."""
    return v.admit(path, deadline, use_events=False, pick=pick, page_pick=page_pick,
                   page_timeout=page_timeout) is not None


def rotation(hosts, start=0):
    """A picker that cycles through hosts."""
    state = {"i": start}
    lock = threading.Lock()

    def pick():
        with lock:
            h = hosts[state["i"] % len(hosts)]
            state["i"] += 1
        return h
    return pick


def stats_or_empty(c):
    try:
        return c.stats()
    except (OSError, ValueError, http.client.HTTPException):
        return {}


def cluster_view(hosts):
    return {c.name: {k: v for k, v in stats_or_empty(c).items() if k.startswith("cluster_")} for c in hosts}


class ClusterTest(unittest.TestCase):
    preflight = None

    @classmethod
    def check_preflight(cls):
        """Why these tests cannot run here ("" when they can): every test then fails saying so."""
        if cls.preflight is None:
            ok, why = redis_available()
            if ok:
                try:
                    out = subprocess.run([BIN, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         timeout=10).stdout
                    if b"-cluster-lease" not in out:
                        why = "%s has no -cluster mode (its --help does not list -cluster-lease)" % BIN
                except (OSError, subprocess.SubprocessError) as e:
                    why = "cannot run %s: %s" % (BIN, e)
            cls.preflight = why
        return cls.preflight

    def setUp(self):
        why = self.check_preflight()
        if why:
            self.fail(why)
        self.origins = TaggedOrigins(3)
        self.addCleanup(self.origins.stop)
        self.redis = RedisServer()
        self.addCleanup(self.redis.close)
        self.hosts = []

    # -- hosts
    def start_hosts(self, cap, *extra, n=3, ttl=TTL, workers=2):
        for i in range(n):
            args = ["-upstream", self.origins[i].url, "-cap", str(cap), "-max-queue", "2000",
                    "-cluster", self.redis.url, "-cluster-lease-ttl", ttl] + list(extra)
            c = Concert(args, workers=workers)
            c.name = NAMES[i]
            self.addCleanup(self.stop_host, c)
            c.start()
            self.hosts.append(c)
        self.wait_joined(n)
        return self.hosts

    def stop_host(self, c):
        self.origins.release_everything()
        self.redis.resume()
        try:
            c.stop(timeout=5)
        finally:
            if getattr(c, "stderr", None):
                c.stderr.close()

    def wait_joined(self, n, hosts=None, timeout=15):
        hosts = hosts or self.hosts

        def joined():
            for c in hosts:
                s = stats_or_empty(c)
                if s.get("cluster_engine_up") != 1 or s.get("cluster_hosts") != n:
                    return False
            return True
        self.assertTrue(wait_for(joined, timeout=timeout, interval=0.1),
                        "the hosts did not all see the engine up and %d hosts: %s" % (n, cluster_view(hosts)))

    def wait_engine(self, up, hosts=None, timeout=15):
        hosts = hosts or self.hosts
        self.assertTrue(wait_for(lambda: all(stats_or_empty(c).get("cluster_engine_up") == up for c in hosts),
                                 timeout=timeout, interval=0.1),
                        "cluster_engine_up did not become %d on every host: %s" % (up, cluster_view(hosts)))

    def fill(self, n, gate, hosts=None):
        """n visitors who wait in line for a page that the origin holds until release(gate); returns
        once the origin has all n. With `hosts` they ask those hosts in turn; without, the whole cap
        is filled: each host gets as many as its reservation (cluster_slots_reserved) while the room
        is idle, so that every slot is taken where it is held. (threads, visitors, {name: admitted})."""
        deadline = time.time() + 100
        ok = {}
        if hosts is None:
            self.assertEqual(self.origins.now, 0)
            shares = {}

            def reserved():
                shares.clear()
                for h in self.hosts:
                    shares[h.name] = stats_or_empty(h).get("cluster_slots_reserved", 0)
                return sum(shares.values()) == n
            self.assertTrue(wait_for(reserved, timeout=10, interval=0.1),
                            "the reservations of an idle room do not add up to %d: %s" % (n, cluster_view(self.hosts)))
            assign = [[h] for h in self.hosts for _ in range(shares[h.name])]
        else:
            assign = [hosts[k % len(hosts):] + hosts[:k % len(hosts)] for k in range(n)]

        def go(k, v):
            ok[v.name] = wait_in_line(v, "/slow?gate=%s&k=%d&timeout=90" % (gate, k), rotation(assign[k]),
                                      deadline, page_timeout=100)
        visitors = [Visitor(name="%s%d" % (gate, k)) for k in range(n)]
        threads = [in_thread(go, k, v) for k, v in enumerate(visitors)]
        self.assertTrue(wait_for(lambda: self.origins.now >= n, timeout=20, interval=0.1),
                        "the origin did not get the %d %s requests: %d in flight (per host %s), %s"
                        % (n, gate, self.origins.now, [self.origins.host_now(i) for i in range(3)],
                           cluster_view(self.hosts)))
        self.addCleanup(self.origins.release, gate)
        return threads, visitors, ok

    def finish(self, threads, visitors, ok, timeout=30):
        for t in threads:
            t.join(timeout)
        self.assertEqual(ok, {v.name: True for v in visitors})
        self.assert_no_5xx(visitors)

    def inversions(self, hosts=None):
        return sum(stats_or_empty(c).get("fifo_inversions_total", 0) for c in (hosts or self.hosts))

    def ticketed(self, v, host, path="/line"):
        status, hdrs, body = v.get(path, host=host)
        self.assertEqual(status, 429, "%s on %s: expected the JSON waiting answer, got %d %r"
                         % (v.name, host.name, status, body[:200]))
        self.assertIn("room_ticket", v.jar, "%s got no ticket on %s" % (v.name, host.name))

    def poll_round(self, visitors, host):
        """Every visitor polls `host` once: {name: ("ready",) | position | None}."""
        out = {}
        for v in visitors:
            doc = v.poll(host)
            if doc is None:
                out[v.name] = None
            elif doc.get("ready"):
                out[v.name] = "ready"
            else:
                out[v.name] = doc.get("position")
        return out

    def assert_no_5xx(self, visitors):
        bad = [(v.name,) + b for v in visitors for b in v.bad]
        self.assertEqual(bad, [], "5xx answers: %s" % bad[:10])

    def assert_never_increase(self, visitors):
        grown = [(v.name,) + g for v in visitors for g in v.increases()]
        if grown:
            # Say whether the lower figure was the ticket's first answer (given before the engine had
            # placed the ticket) or came later.
            first = 0
            for v in visitors:
                for ticket, before, _ in v.increases():
                    answers = [(p, h) for t, p, h in v.positions if t == ticket]
                    if answers and answers[0] == before and answers.index(before) == 0:
                        first += 1
            self.fail("%d positions grew (%d of them after the ticket's first poll, %d later); "
                      "(visitor, ticket, (before, host), (after, host)): %s"
                      % (len(grown), first, len(grown) - first, grown[:8]))

    # -- one cap and one line over every host
    def test_1_300_clients_one_cap_one_line(self):
        cap, n = 10, 300
        hosts = self.start_hosts(cap)
        visitors = [Visitor(name="v%d" % i) for i in range(n)]
        deadline = time.time() + 110
        done = []
        lock = threading.Lock()

        def client(i):
            rnd = random.Random(i)
            v = visitors[i]

            def pick():
                return rnd.choice(hosts)
            if wait_in_line(v, "/sleep?ms=300&v=%d" % i, pick, deadline):
                with lock:
                    done.append(i)

        stop = threading.Event()
        occupancy = {c.name: 0 for c in hosts}

        def watch():
            while not stop.is_set():
                for c in hosts:
                    s = stats_or_empty(c)
                    occupancy[c.name] = max(occupancy[c.name], s.get("occupancy", 0))
                time.sleep(0.1)

        watcher = in_thread(watch)
        threads = []
        for i in range(n):
            threads.append(in_thread(client, i))
            if i % 30 == 29:
                time.sleep(0.1)
        for t in threads:
            t.join(max(1, deadline + 15 - time.time()))
        stop.set()
        watcher.join(5)
        inv = self.inversions()
        statuses = sum((v.tally() for v in visitors), Counter())
        log("300 clients: admitted %d, origin max %d (per host %s), host occupancy max %s, "
            "inversions %d, answers %s" % (len(done), self.origins.max,
                                           [self.origins.host_max(i) for i in range(3)], occupancy, inv,
                                           dict(sorted(statuses.items(), key=str))))
        self.assertLessEqual(self.origins.max, cap, "the origin saw more than cap at once")
        self.assertGreaterEqual(self.origins.max, 1)
        self.assertEqual(len(done), n, "not everyone got in: %s" % sorted(set(range(n)) - set(done))[:20])
        self.assertEqual(self.origins.hits("/sleep"), n)
        self.assert_no_5xx(visitors)
        odd = {k: v for k, v in statuses.items() if k[1] not in (200, 429)}
        self.assertEqual(odd, {}, "answers other than 200/429")
        self.assertLessEqual(inv, len(hosts) * LEASE, "fifo_inversions_total summed over the hosts")
        for c in hosts:
            self.assertLessEqual(occupancy[c.name], cap)
        # Every first poll comes right after the ticket, as the waiting page's event stream does.
        self.assert_never_increase(visitors)

    def test_2_a_ticket_works_on_every_host(self):
        cap = 10
        a, b, c = hosts = self.start_hosts(cap)
        holders = self.fill(cap, "hold")
        line = [Visitor(name="V%d" % (k + 1)) for k in range(5)]
        for v in line:
            self.ticketed(v, a)
        # While the line stands still every host gives every ticket the same place.
        want = {v.name: k + 1 for k, v in enumerate(line)}
        seen = {}
        order = [b, c, a]
        deadline = time.time() + 15
        r = 0
        while time.time() < deadline:
            host = order[r % 3]
            seen[host.name] = self.poll_round(line, host)
            r += 1
            if len(seen) == 3 and all(s == want for s in seen.values()):
                break
        self.assertEqual(seen, {h.name: want for h in hosts}, "positions of A's tickets on each host")
        # The line moves: each visitor polls the hosts in turn and asks for its page on B or C,
        # never on A where it got its ticket.
        self.origins.release("hold")
        self.finish(*holders)
        deadline = time.time() + 45
        ok = {}

        def go(k, v):
            ok[v.name] = wait_in_line(v, "/sleep?ms=200&v=%s" % v.name, rotation(hosts, k),
                                      deadline, page_pick=rotation([b, c], k))
        workers = [in_thread(go, k, v) for k, v in enumerate(line)]
        for t in workers:
            t.join(max(1, deadline + 5 - time.time()))
        admitted = [r["target"].split("v=")[1] for r in self.origins.requests("/sleep")]
        log("admission order %s, ready seen on %s, admitted on %s" %
            (admitted, {v.name: v.ready_on for v in line}, {v.name: v.admitted_on for v in line}))
        self.assertEqual(ok, {v.name: True for v in line}, "visitors admitted")
        self.assertEqual({v.admitted_on for v in line} - {"B", "C"}, set())
        self.assert_no_5xx(line)
        self.assertLessEqual(self.origins.max, cap)
        swaps = sum(1 for i in range(len(admitted)) for j in range(i + 1, len(admitted))
                    if int(admitted[i][1:]) > int(admitted[j][1:]))
        self.assertLessEqual(swaps, len(hosts) * LEASE)
        self.assertLessEqual(self.inversions(), len(hosts) * LEASE)
        # The first polls on B came right after the tickets were issued on A.
        self.assert_never_increase(line)

    # -- what the hosts report, and the configuration
    def test_3_stats_metrics_and_config(self):
        room = "croom%d" % os.getpid()
        hosts = self.start_hosts(10, "-cluster-room", room)
        # Some traffic so that every host talks to the engine.
        for c in hosts:
            self.assertTrue(is_admitted(*c.get("/sleep?ms=1", JSON)[::2]))
        for c in hosts:
            s = c.stats()
            self.assertEqual(s["cluster_engine_up"], 1)
            self.assertEqual(s["cluster_hosts"], 3)
            self.assertIn("cluster_slots_reserved", s)
            self.assertGreaterEqual(s["cluster_slots_reserved"], 0)
            self.assertLessEqual(s["cluster_slots_reserved"], 10)
            self.assertIn("fifo_inversions_total", s)

            def engine_seconds():
                samples = c.metrics()[1]
                return sum(v for (name, _), v in samples.items() if name == "concert_cluster_engine_seconds_count")
            self.assertTrue(wait_for(lambda: engine_seconds() > 0, timeout=5), "no engine round trip counted")
            text, samples = c.metrics()
            names = {name for name, _ in samples}
            for name in ["concert_cluster_engine_up", "concert_cluster_hosts", "concert_cluster_slots_reserved",
                         "concert_cluster_engine_seconds_bucket", "concert_cluster_engine_seconds_sum",
                         "concert_cluster_engine_seconds_count", "concert_fifo_inversions_total"]:
                self.assertIn(name, names, "%s missing from /_room/metrics on %s" % (name, c.name))
            self.assertEqual(samples[("concert_cluster_engine_up", ())], 1)
            self.assertEqual(samples[("concert_cluster_hosts", ())], 3)
            self.assertIn("# TYPE concert_cluster_engine_seconds histogram", text)
        keys = self.redis.keys()
        self.assertTrue(keys, "nothing in the engine")
        strays = [k for k in keys if not (k.startswith(room) or k.startswith("{" + room + "}"))]
        self.assertEqual(strays, [], "keys outside -cluster-room %s" % room)
        # -cluster without CONCERT_ADMIT_SECRET is a configuration error that -t names.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONCERT_")}
        args = [BIN, "-t", "-upstream", self.origins[0].url, "-cluster", self.redis.url]
        p = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=15)
        self.assertNotEqual(p.returncode, 0, "-t accepted -cluster without CONCERT_ADMIT_SECRET")
        self.assertIn(b"CONCERT_ADMIT_SECRET", p.stdout + p.stderr)
        env["CONCERT_ADMIT_SECRET"] = TEST_SECRET
        p = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=15)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    # -- sessions and bans hold on every host
    def test_4_a_session_from_a_is_a_session_on_b(self):
        cap = 10
        a, b, c = self.start_hosts(cap)
        shopper = Visitor(name="shopper")
        status, _, body = shopper.get("/home", host=a)
        self.assertTrue(is_admitted(status, body), (status, body[:200]))
        self.assertIn("concert_admit", shopper.jar)
        # With free slots B sends it straight on, without a ticket.
        status, _, body = shopper.get("/next", host=b)
        self.assertTrue(is_admitted(status, body), (status, body[:200]))
        self.assertNotIn("room_ticket", shopper.jar)
        # The room fills up; a newcomer on B waits in line.
        holders = self.fill(cap, "hold")
        newcomer = Visitor(name="newcomer")
        self.ticketed(newcomer, b)
        # The shopper's next page on B is not the waiting page: it is held, and goes in when a slot frees.
        answer = {}

        def click():
            try:
                answer["r"] = shopper.get("/checkout", timeout=40, host=b)
            except (OSError, http.client.HTTPException) as e:
                answer["r"] = (None, [], repr(e).encode())
        t = in_thread(click)
        time.sleep(1)  # let the request reach B and be held there (the hold is what is checked below)
        self.origins.release("hold")
        t.join(30)
        self.assertFalse(t.is_alive(), "the session request was never answered")
        status, hdrs, body = answer["r"]
        self.assertTrue(is_admitted(status, body), "the session on B got %s %r" % (status, body[:200]))
        self.assertNotIn("room_ticket", shopper.jar)
        self.assertEqual(self.origins.hits("/checkout"), 1)
        self.assertLessEqual(self.origins.max, cap)
        # And on C as well.
        status, _, body = shopper.get("/thanks", host=c)
        self.assertTrue(is_admitted(status, body), (status, body[:200]))
        self.assertNotIn("room_ticket", shopper.jar)
        self.assert_no_5xx([shopper, newcomer])
        self.finish(*holders)

    def test_5_a_ban_on_a_holds_on_b_and_c(self):
        a, b, c = self.start_hosts(10, "-abuse-threshold", "10", "-abuse-ban", "60s")
        forged = {"Cookie": "concert_admit=" + FORGED_PASS, "Accept": "text/html"}
        for _ in range(2):  # two forged passes, 5 strikes each
            status, _, _ = request_from(a.port, "127.0.0.2", "/page", forged)
        self.assertEqual(status, 403)
        self.assertEqual(a.stats()["banned_clients"], 1)
        for host in (b, c):
            self.assertTrue(wait_for(lambda: request_from(host.port, "127.0.0.2", "/page")[0] == 403,
                                     timeout=5, interval=0.1),
                            "127.0.0.2, banned on A, is not refused on %s" % host.name)
            for path in ["/page", "/queue/status", "/other"]:
                self.assertEqual(request_from(host.port, "127.0.0.2", path)[0], 403, (host.name, path))
            self.assertEqual(request_from(host.port, "127.0.0.2", "/_room/healthz")[0], 200)
            # Another client is untouched.
            status, _, body = request_from(host.port, "127.0.0.3", "/page")
            self.assertTrue(is_admitted(status, body), (host.name, status, body[:200]))

    # -- a host that dies
    def test_6_kill_9_host_frees_its_reservations(self):
        cap = 10
        a, b, c = hosts = self.start_hosts(cap)
        _, on_c, _ = self.fill(LEASE, "c", hosts=[c])
        self.assertEqual(self.origins.host_now(2), LEASE)
        self.assertTrue(wait_for(lambda: stats_or_empty(c).get("cluster_slots_reserved", 0) >= LEASE, timeout=5),
                        "C does not report its reservation: %s" % cluster_view([c]))
        c.kill_all()
        self.assertIsNotNone(c.proc.poll())
        for v in on_c:
            v.cancelled.set()
        # The origin finishes what C had sent it (nobody reads the answers: no traceback for that).
        self.origins[2].server.handle_error = lambda *args: None
        self.origins.release("c")
        self.assertTrue(wait_for(lambda: self.origins.now == 0, timeout=10))
        self.origins.reset_max()
        # A and B have more visitors than the cap: once C's reservations expire they use all of it.
        survivors = [a, b]
        visitors = [Visitor(name="w%d" % i) for i in range(cap + 4)]
        deadline = time.time() + 60
        ok = {}

        def go(i, v):
            host = survivors[i % 2]
            ok[v.name] = wait_in_line(v, "/slow?gate=ab&v=%d" % i, lambda: host, deadline)
        workers = [in_thread(go, i, v) for i, v in enumerate(visitors)]
        full = wait_for(lambda: self.origins.now == cap, timeout=20, interval=0.1)
        view = cluster_view(survivors)
        log("after kill -9 of C: origin in flight %d (A %d, B %d), %s" %
            (self.origins.now, self.origins.host_now(0), self.origins.host_now(1), view))
        self.assertTrue(full, "A and B did not reach the whole cap after C died: %d in flight, %s"
                        % (self.origins.now, view))
        self.wait_joined(2, survivors)
        self.origins.release("ab")
        for t in workers:
            t.join(max(1, deadline + 5 - time.time()))
        self.assertEqual(ok, {v.name: True for v in visitors})
        self.assertLessEqual(self.origins.max, cap)
        self.assert_no_5xx(visitors)

    # -- the engine paused or restarted
    def load(self, hosts, per_host, end, path="/sleep?ms=200"):
        """per_host clients on each host that keep coming until `end`, each waiting in line like the
        waiting page (on its host) and coming back as a new visitor after every admission. A visitor
        still waiting at `end` keeps waiting, up to 40 s more."""
        visitors = []
        admitted = Counter()
        lock = threading.Lock()

        def client(host, k):
            serial = 0
            while time.time() < end:
                v = Visitor(name="%s%d.%d" % (host.name, k, serial))
                serial += 1
                with lock:
                    visitors.append(v)
                if wait_in_line(v, "%s&h=%s&v=%s" % (path, host.name, v.name), lambda: host, end + 40):
                    with lock:
                        admitted[host.name] += 1
        threads = [in_thread(client, host, k) for host in hosts for k in range(per_host)]
        return threads, visitors, admitted

    def test_7_engine_paused_fail_open(self):
        cap = 9
        hosts = self.start_hosts(cap, "-cluster-fail", "open")
        pids = [c.proc.pid for c in hosts]
        self.redis.pause()
        self.wait_engine(0)
        self.origins.reset_max()
        hits_before = [self.origins[i].recorder.hits("/sleep") for i in range(3)]
        occupancy = {c.name: 0 for c in hosts}
        end = time.time() + 4
        threads, visitors, admitted = self.load(hosts, 6, end)
        while time.time() < end:
            for c in hosts:
                occupancy[c.name] = max(occupancy[c.name], stats_or_empty(c).get("occupancy", 0))
            time.sleep(0.1)
        # What the origin saw while the engine was away.
        total_max = self.origins.max
        per_host = [self.origins.host_max(i) for i in range(3)]
        during = [self.origins[i].recorder.hits("/sleep") - hits_before[i] for i in range(3)]
        engine_seen = [stats_or_empty(c).get("cluster_engine_up") for c in hosts]
        log("engine paused, open: admitted %s, origin max %d per host %s, host occupancy max %s, engine_up %s" %
            (dict(admitted), total_max, per_host, occupancy, engine_seen))
        self.redis.resume()
        self.assertEqual(engine_seen, [0, 0, 0], "a host saw the engine during the pause")
        for i, c in enumerate(hosts):
            self.assertGreater(during[i], 0, "%s admitted nobody while the engine was away" % c.name)
            self.assertLessEqual(per_host[i], cap // 3, "%s let more than cap / hosts reach the origin" % c.name)
            self.assertLessEqual(occupancy[c.name], cap // 3, c.name)
        self.assertLessEqual(total_max, cap)
        # The engine is back: the same processes re-join, and whoever still waited gets in.
        self.wait_joined(3)
        self.assertEqual([c.proc.pid for c in hosts], pids)
        self.assertTrue(all(c.proc.poll() is None for c in hosts))
        for t in threads:
            t.join(50)
        waited = [v.name for v in visitors if v.admitted_on is None]
        self.assertEqual(waited, [], "visitors from the outage that never got in")
        self.assert_no_5xx(visitors)
        # And newcomers on every host get in through the engine.
        late = [Visitor(name="late-%s" % c.name) for c in hosts]
        for v, c in zip(late, hosts):
            self.assertTrue(wait_in_line(v, "/sleep?ms=1&late=1", lambda: c, time.time() + 20),
                            "%s does not admit after the engine came back" % c.name)
        self.assertLessEqual(self.origins.max, cap)

    def test_8_engine_paused_fail_closed(self):
        cap = 9
        a, b, c = hosts = self.start_hosts(cap, "-cluster-fail", "closed")
        inflight = self.fill(2, "inflight", hosts=[a])
        self.redis.pause()
        self.wait_engine(0)
        waiting = []

        def newcomers(round_):
            for host in hosts:
                for k in range(3):
                    v = Visitor(name="%s-json-%d-%d" % (host.name, round_, k))
                    status, _, body = v.get("/new?h=%s" % host.name, host=host)
                    self.assertEqual(status, 429, "%s: new JSON visitor got %d %r (engine away, closed)"
                                     % (host.name, status, body[:200]))
                    waiting.append((v, host))
                v = Visitor(name="%s-html-%d" % (host.name, round_), accept=BROWSER)
                status, hdrs, body = v.get("/new?h=%s" % host.name, host=host)
                self.assertIn(status, (200, 429), "%s: new browser got %d" % (host.name, status))
                self.assertIn(b"/queue/", body, "%s: not the waiting page: %r" % (host.name, body[:200]))
                waiting.append((v, host))
                # Polling its place is answered too.
                if v.ticket:
                    status, _, _ = v.get("/queue/status", host=host)
                    self.assertIn(status, (200, 429))
        newcomers(1)
        self.assertEqual(self.origins.hits("/new"), 0, "a new visitor was admitted with the engine away")
        # What was already at the origin finishes; the freed slots stay unused.
        self.origins.release("inflight")
        self.finish(*inflight)
        newcomers(2)
        self.assertEqual(self.origins.hits("/new"), 0, "a new visitor was admitted with the engine away")
        self.assert_no_5xx([v for v, _ in waiting])
        self.redis.resume()
        self.wait_joined(3)
        # Those who waited get in now, on whichever host they ask.
        deadline = time.time() + 40
        ok = {}

        def go(k, v):
            ok[v.name] = wait_in_line(v, "/new?after=1", rotation(hosts, k), deadline)
        workers = [in_thread(go, k, v) for k, (v, _) in enumerate(waiting)]
        for t in workers:
            t.join(max(1, deadline + 5 - time.time()))
        self.assertEqual(ok, {v.name: True for v, _ in waiting})
        self.assert_no_5xx([v for v, _ in waiting])
        self.assertLessEqual(self.origins.max, cap)

    def test_9_engine_restarted_empty_keeps_the_order(self):
        cap = 10
        a, b, c = hosts = self.start_hosts(cap)
        holders = self.fill(cap, "hold")
        line = [Visitor(name="V%d" % (k + 1)) for k in range(6)]
        for k, v in enumerate(line):
            self.ticketed(v, hosts[k % 3])
        # The engine places tickets in the order it enrols them (each host's next round), so tickets
        # issued on different hosts within one round may be placed in any order: the order to keep
        # is the one every host shows before the restart.
        seen = {}
        deadline = time.time() + 15
        r = 0

        def settled():
            maps = list(seen.values())
            return (len(seen) == 3 and all(m == maps[0] for m in maps)
                    and sorted(maps[0].values(), key=str) == list(range(1, len(line) + 1)))
        while time.time() < deadline:
            host = hosts[r % 3]
            seen[host.name] = self.poll_round(line, host)
            r += 1
            if settled():
                break
        self.assertTrue(settled(), "the hosts do not show the same places 1..%d: %s" % (len(line), seen))
        before = seen["A"]
        names = sorted(before, key=before.get)  # the line's order before the restart
        log("places before the restart: %s" % before)
        keys_before = self.redis.dbsize()
        self.redis.restart_empty()
        log("engine restarted empty (had %d keys)" % keys_before)
        # The hosts re-join (polls keep going meanwhile, so nobody turns into a ghost).
        rejoin_deadline = time.time() + 20
        rounds = []
        r = 0
        while time.time() < rejoin_deadline:
            rounds.append((hosts[r % 3].name, self.poll_round(line, hosts[r % 3])))
            r += 1
            if all(stats_or_empty(h).get("cluster_engine_up") == 1 and stats_or_empty(h).get("cluster_hosts") == 3
                   for h in hosts):
                break
        self.wait_joined(3)
        self.assertTrue(wait_for(lambda: self.redis.dbsize() > 0, timeout=10), "nothing came back to the engine")
        # Then every host, in turn, gives the waiting visitors places in their old order. A visitor told
        # "ready" asks for its page at once (the cap is checked at the origin at the end).
        entered = []

        by_name = {v.name: v for v in line}

        def in_order(answers):
            ready = [n for n in names if answers.get(n) == "ready"]
            for n in ready:
                v = by_name[n]
                status, _, body = v.get("/sleep?ms=10&v=%s" % n, host=hosts[0])
                if is_admitted(status, body):
                    entered.append(n)
            gone = set(entered)
            rest = [n for n in names if n not in gone and answers.get(n) != "ready"]
            places = [answers.get(n) for n in rest]
            if not rest or any(not isinstance(p, int) for p in places):
                return False
            prefix = names[:len(gone)]
            return sorted(gone) == sorted(prefix) and places == sorted(places) and len(set(places)) == len(places)

        good = 0
        deadline = time.time() + 25
        while time.time() < deadline and good < 3:
            host = hosts[r % 3]
            answers = self.poll_round(line, host)
            rounds.append((host.name, answers))
            r += 1
            good = good + 1 if in_order(answers) else 0
        log("polls after the restart: %s" % rounds[-6:])
        self.assertEqual(good, 3, "the waiting visitors did not keep their order on every host: %s" % rounds[-6:])
        # The line still works: everyone gets in, and the cap held all along.
        self.origins.release("hold")
        self.finish(*holders)
        deadline = time.time() + 40
        ok = {}

        def go(k, v):
            ok[v.name] = v.name in entered or wait_in_line(v, "/sleep?ms=100&v=%s" % v.name,
                                                           rotation(hosts, k), deadline)
        workers = [in_thread(go, k, v) for k, v in enumerate(line)]
        for t in workers:
            t.join(max(1, deadline + 5 - time.time()))
        self.assertEqual(ok, {v.name: True for v in line})
        self.assertLessEqual(self.origins.max, cap, "the origin saw more than cap over the engine restart")
        self.assert_no_5xx(line)

    # -- reservations follow the demand
    def test_10_a_busy_host_gets_the_idle_reservations(self):
        """All the visitors reach one host (a sticky balancer): the others return the slots they do
        not need within a lease TTL, so that host alone fills the whole cap."""
        cap = 10
        a, b, c = self.start_hosts(cap)
        deadline = time.time() + 60
        visitors = [Visitor(name="s%d" % k) for k in range(cap + 2)]
        ok = {}

        def go(k, v):
            ok[v.name] = wait_in_line(v, "/slow?gate=sticky&k=%d&timeout=60" % k, lambda: c, deadline,
                                      page_timeout=70)
        threads = [in_thread(go, k, v) for k, v in enumerate(visitors)]
        full = wait_for(lambda: self.origins.now == cap, timeout=15, interval=0.1)
        view = cluster_view(self.hosts)
        in_flight = self.origins.now
        log("all visitors on C: origin in flight %d, %s" % (in_flight, view))
        self.origins.release("sticky")
        for t in threads:
            t.join(max(1, deadline + 5 - time.time()))
        self.assertTrue(full, "C alone never reached the cap: %d in flight at the origin, %s" % (in_flight, view))
        self.assertEqual(ok, {v.name: True for v in visitors})
        self.assertLessEqual(self.origins.max, cap)
        self.assert_no_5xx(visitors)


if __name__ == "__main__":
    unittest.main()
