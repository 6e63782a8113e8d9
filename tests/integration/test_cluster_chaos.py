"""Chaos for hosts sharing a line: three hosts of the real binary, a real redis-server and one fake
origin, under looping visitors, while processes are stopped, killed, restarted and reloaded:

  test_fail_open     -cluster-fail open: three hosts, cap 6 (their files), -cluster-lease-ttl 2s,
                     24 visitors for CHAOS_SECONDS (30 s unless set) while faults come one at a time
  test_fail_closed   the same with -cluster-fail closed

The faults are drawn with a seeded generator: the seed is printed, and CHAOS_SEED draws the same
faults again (what the hosts do meanwhile still varies). Each lasts 1 to 4 s, is healed, and the
next comes 1 to 3 s after the room is whole again (three hosts, the engine up, cap 6):
  agent-stop      a host's cluster agent SIGSTOPped, then SIGCONT
  agent-kill      a host's cluster agent SIGKILLed (its master starts another)
  redis-stop      the engine SIGSTOPped (its port accepts, nothing answers), then SIGCONT
  redis-restart   the engine SIGKILLed and started again empty on its port
  host-kill       a host's master, workers and agent SIGKILLed; started again with the same
                  arguments (on a new port: the visitors' balancer follows it)
  reload-cap      a host's file goes from cap 6 to 4, SIGHUP; back to 6, SIGHUP
  reload-mode     a host's file goes from open to pause, SIGHUP; back to open, SIGHUP

Each visitor thread is a visitor arriving anew (no pass) again and again at its host for a 200 ms
page (/sleep?ms=200&via=HOST: the origin counts in flight per host), waiting in line as the waiting
page does, polling /queue/status; the balancer sends the polls to any host, and the page requests
to the visitor's host, or to another while that one is down (killed on purpose). A request waits at
most 5 s for its answer. Once the faults end, no new visitor comes and everyone waiting has 40 s to
get in.

Checked at the end, from what the origin and the visitors recorded (a failure shows the faults
around each violation):
  * the origin never has more page requests in flight than 6, the largest cap; nor more than 4
    where a file has said cap 4 for 3 s; nor starts one where a file has said pause for 3 s;
    except while the engine is away (redis-stop, redis-restart) and 1.5 s after it is back (the
    hosts try again every second);
  * while the engine is stopped, from 1.5 s on (the host's own lease, half the TTL, and a page),
    a host has at most cap / hosts (as last seen) in flight with open, and starts none with closed;
  * a host whose agent is stopped starts no page from 1.5 s on (its lease is half the TTL);
  * every request is answered within 5 s, none with a 5xx, except those to a host killed on purpose;
  * no ticket's position ever grows, whichever host answers;
  * everyone waiting when the faults end gets in;
  * concert_fifo_inversions_total summed over every host that ran <= hosts x -cluster-lease.

Traffic goes to 127.0.0.1 only; only processes started here are signalled, by pid (a cluster agent
only after /proc says it is the child of this test's master).
"""
import os
import random
import signal
import sys
import threading
import time
import unittest

from chaos import (ExchangeLog, FaultLog, HostSlot, Route, kill_host, live_agent, most_at_once, over_bound,
                   signal_child, time_at)
from concert_harness import wait_for
from test_cluster_hosts import ClusterHostsBase, mode_of, stats_or_empty
from visitor import Visitor, in_thread

CHAOS_SECONDS = float(os.environ.get("CHAOS_SECONDS", "30"))
HOSTS = ("A", "B", "C")
VISITORS = 24
PAGE_MS = 200
CAP = 6
LOW_CAP = 4
LEASE = 4  # -cluster-lease's default (src/config/schema.cpp)
FILE = "cap: %d\nmode: %s\n"
# No -queue-hold: an answer comes within a round (1 s at most) and a page; a turn that finds no slot
# is held until one frees (here at most while a fault lasts, 4 s).
ANSWER_WAIT = 5.0
SETTLE = 3.0  # a reload's cap or mode is on every host this long after the SIGHUP
AWAY_AFTER = 1.5  # the host's own lease (half the 2 s TTL) and a page; or the retry after the engine is back
DRAIN = 40.0
KINDS = ("agent-stop", "agent-kill", "redis-stop", "redis-restart", "host-kill", "reload-cap", "reload-mode")
SHOWN = 5  # violations shown per check (all are counted)


def write_file(path, text):
    with open(path, "w") as f:
        f.write(text)


class ClusterChaosTest(ClusterHostsBase):
    def test_fail_open(self):
        self.chaos("open")

    def test_fail_closed(self):
        self.chaos("closed")

    # ------------------------------------------------------------ the run
    def chaos(self, fail):
        seed = self.seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1, 1 << 31))
        print("\n%s: CHAOS_SEED=%d CHAOS_SECONDS=%g" % (self.id(), seed, CHAOS_SECONDS), file=sys.stderr, flush=True)
        rng = random.Random(seed)
        self.fail_mode = fail
        # A killed host drops the connections the origin is answering: no traceback for each.
        self.origin.server.handle_error = lambda request, client_address: None
        self.args = ["-cluster-fail", fail]
        self.exchanges = ExchangeLog()
        self.slots = [HostSlot(name, self.host(name, self.args, config_text=FILE % (CAP, "open")), self.exchanges,
                               ANSWER_WAIT) for name in HOSTS]
        self.wait_hosts([s.current for s in self.slots], len(HOSTS))
        self.stopped = set()  # (concert, pid) of agents SIGSTOPped here and not resumed yet
        self.addCleanup(self.resume_agents)
        t0 = time.time()
        self.faults = FaultLog(t0)
        self.violations = []  # (check, time or None, text)

        # Stats of every host every half second: the last ones of a killed host are its counters.
        watching = threading.Event()
        self.addCleanup(watching.set)

        def watch():
            while not watching.is_set():
                for slot in self.slots:
                    c = slot.current
                    s = stats_or_empty(c)
                    if s:
                        c.last_stats = s
                watching.wait(0.5)
        watcher = in_thread(watch)

        # The visitors: thread k arrives at host k % 3 again and again (at another while that one is
        # down: the balancer's health check); its polls go to any host up.
        stop_new = threading.Event()
        cancel = threading.Event()
        self.addCleanup(cancel.set)  # before the hosts stop (cleanups run last first)
        visitors = []
        deadline = t0 + CHAOS_SECONDS + 600  # admit's own; the drain below bounds the wait

        def loop(k):
            home = self.slots[k % len(self.slots)]
            draws = random.Random(seed * 1000 + k)  # the balancer's picks for this visitor thread
            page, poll = Route(self.slots, draws, preferred=home), Route(self.slots, draws)
            n = 0
            while not stop_new.is_set() and not cancel.is_set():
                v = Visitor(name="%s%d.%d" % (home.name, k, n), cancelled=cancel)
                visitors.append(v)
                # The path's via= names the host each page request goes to (the route sets it).
                v.admit("/sleep?ms=%d&via=%s" % (PAGE_MS, home.name), deadline, use_events=False,
                        page_pick=lambda: page, pick=lambda: poll, page_timeout=ANSWER_WAIT)
                n += 1
        threads = [in_thread(loop, k) for k in range(VISITORS)]
        rec = self.origin.recorder
        self.assertTrue(wait_for(lambda: rec.hits() >= 30, timeout=30, interval=0.1), "nobody got in")

        # The faults, one at a time.
        end = t0 + CHAOS_SECONDS
        while time.time() < end:
            kind, slot = rng.choice(KINDS), rng.choice(self.slots)
            lasting, calm = rng.uniform(1, 4), rng.uniform(1, 3)
            try:
                getattr(self, "fault_" + kind.replace("-", "_"))(slot, lasting)
            except Exception as e:  # the run goes on to its checks; the fault log says what happened
                self.violations.append(("fault", time.time(), "%s on %s raised %r" % (kind, slot.name, e)))
                break
            if not self.whole_again():  # no further fault on a room that did not recover
                break
            time.sleep(calm)

        # Every fault is healed: nobody new comes, everyone waiting gets in.
        stop_new.set()
        drained_from = time.time()
        for t in threads:
            t.join(max(0.1, drained_from + DRAIN - time.time()))
        waiting = [v for v in visitors if v.admitted_at is None]
        cancel.set()
        for t in threads:
            t.join(10)
        for slot in self.slots:
            s = stats_or_empty(slot.current)
            if s:
                slot.current.last_stats = s
        watching.set()
        watcher.join(5)
        self.report(visitors, waiting, t0)

    def whole_again(self):
        """Waits for the room to be whole (every host up, seeing three hosts, cap 6, open); a
        violation when it is not within 30 s."""
        def whole():
            for slot in self.slots:
                s = stats_or_empty(slot.current)
                if (s.get("cluster_engine_up"), s.get("cluster_hosts"), s.get("cap")) != (1, len(HOSTS), CAP):
                    return False
            return all(mode_of(slot.current) == "open" for slot in self.slots)
        if wait_for(whole, timeout=30, interval=0.2):
            return True
        seen = [(slot.name, {k: stats_or_empty(slot.current).get(k) for k in ("cluster_engine_up", "cluster_hosts",
                                                                             "cap")}, mode_of(slot.current))
                for slot in self.slots]
        self.violations.append(("recovery", time.time(), "the room was not whole again within 30 s: %s" % seen))
        return False

    def resume_agents(self):
        for c, pid in list(self.stopped):
            signal_child(c, pid, signal.SIGCONT)
        self.stopped.clear()

    # ------------------------------------------------------------ faults
    def agent_of(self, slot):
        """The pid of the slot's cluster agent, or None (noted as a violation: every host runs one)."""
        pid = live_agent(slot.current)
        if pid is None:
            self.violations.append(("fault", time.time(), "%s runs no cluster agent" % slot.name))
        return pid

    def fault_agent_stop(self, slot, lasting):
        c = slot.current
        pid = self.agent_of(slot)
        if pid is None:
            return
        entry = self.faults.begin("agent-stop", slot.name, "pid %d" % pid)
        signal_child(c, pid, signal.SIGSTOP)
        self.stopped.add((c, pid))
        time.sleep(lasting)
        signal_child(c, pid, signal.SIGCONT)
        self.stopped.discard((c, pid))
        self.faults.heal(entry)

    def fault_agent_kill(self, slot, lasting):
        c = slot.current
        pid = self.agent_of(slot)
        if pid is None:
            return
        entry = self.faults.begin("agent-kill", slot.name, "pid %d" % pid)
        signal_child(c, pid, signal.SIGKILL)
        time.sleep(lasting)
        new = wait_for(lambda: live_agent(c) not in (None, pid) and live_agent(c), timeout=10, interval=0.1)
        self.faults.heal(entry, "new agent pid %s" % new if new else "no new agent within 10 s")
        if not new:
            self.violations.append(("fault", time.time(), "%s: the master started no new cluster agent" % slot.name))

    def fault_redis_stop(self, slot, lasting):
        entry = self.engine_fault("redis-stop")
        self.redis.pause()
        time.sleep(lasting)
        self.redis.resume()
        self.faults.heal(entry)

    def fault_redis_restart(self, slot, lasting):
        entry = self.engine_fault("redis-restart")
        self.redis.restart_empty()
        self.faults.heal(entry)
        time.sleep(lasting)

    def engine_fault(self, kind):
        # The fail-open share each host takes while the engine is away: the cap over the hosts it last saw.
        seen = {slot.name: stats_or_empty(slot.current).get("cluster_hosts") for slot in self.slots}
        entry = self.faults.begin(kind, "redis", "hosts seen %s" % seen)
        entry["hosts_seen"], entry["cap"] = seen, CAP
        return entry

    def fault_host_kill(self, slot, lasting):
        c = slot.current
        entry = self.faults.begin("host-kill", slot.name, "master pid %d, port %d" % (c.proc.pid, c.port))
        slot.down = True
        c.killed_at = time.time()
        kill_host(c)
        time.sleep(lasting)
        new = self.host(slot.name, self.args, config_text=FILE % (CAP, "open"))
        slot.replace(new)
        self.faults.heal(entry, "again as pid %d, port %d" % (new.proc.pid, new.port))

    def fault_reload_cap(self, slot, lasting):
        self.reload_fault("reload-cap", slot, lasting, FILE % (LOW_CAP, "open"))

    def fault_reload_mode(self, slot, lasting):
        self.reload_fault("reload-mode", slot, lasting, FILE % (CAP, "pause"))

    def reload_fault(self, kind, slot, lasting, text):
        c = slot.current
        entry = self.faults.begin(kind, slot.name, text.replace("\n", " ").strip())
        self.reload(c, text)
        time.sleep(max(0.0, entry["start"] + lasting - time.time()))
        self.faults.heal(entry)  # from the SIGHUP that undoes it, the file no longer holds
        self.reload(c, FILE % (CAP, "open"))

    def reload(self, c, text):
        accepted = c.log().count("reload accepted")
        write_file(c.config_path, text)
        c.signal(signal.SIGHUP)
        if not wait_for(lambda: c.log().count("reload accepted") > accepted, timeout=10, interval=0.05):
            self.violations.append(("fault", time.time(), "reload not accepted: %s" % c.log()[-2000:]))

    # ------------------------------------------------------------ checks
    def report(self, visitors, waiting, t0):
        faults = self.faults
        now = time.time()
        healed = lambda e: e["healed"] if e["healed"] is not None else now  # noqa: E731
        with self.origin.recorder.lock:
            pages = [r for r in self.origin.recorder.requests if r["path"] == "/sleep"]
        rel = faults.rel
        problems, totals = [], {}

        def show(check, t, text):  # every violation is counted, the first SHOWN of each check shown
            totals[check] = totals.get(check, 0) + 1
            if totals[check] <= SHOWN:
                problems.append((check, t, text))

        for check, t, text in self.violations:
            show(check, t, text)

        # The cap, while the engine is reachable.
        low = [(e["start"] + SETTLE, healed(e)) for e in faults.of("reload-cap")]
        paused = [(e["start"] + SETTLE, healed(e)) for e in faults.of("reload-mode")]
        away = [(e["start"], healed(e) + AWAY_AFTER) for e in faults.of("redis-stop", "redis-restart")]

        def bound(t):
            if any(a <= t <= b for a, b in paused):
                return 0
            if any(a <= t <= b for a, b in low):
                return LOW_CAP
            return CAP
        for t, n, allowed, flight in over_bound(pages, bound, away):
            show("cap", t, "%d page requests in flight at the origin, %d allowed:\n%s" % (n, allowed, "\n".join(
                "      %s started %s, done %s" % (r["via"], rel(r["time"]), rel(r["done"])) for r in flight)))

        # The engine stopped: each host's fail-mode share.
        for e in faults.of("redis-stop"):
            since, until = e["start"] + AWAY_AFTER, healed(e)
            if until <= since:
                continue
            for slot in self.slots:
                mine = [r for r in pages if r["via"] == slot.name and since <= r["time"] < until]
                if self.fail_mode == "closed":
                    allowed = 0
                else:
                    allowed = max(1, e["cap"] // max(1, e["hosts_seen"].get(slot.name) or len(HOSTS)))
                most = most_at_once(mine, since, until + 60)
                if most > allowed:
                    show("share", since, "%s had %d page requests in flight at once (started from %s to %s) with "
                         "the engine stopped and -cluster-fail %s: at most %d" % (
                             slot.name, most, rel(since), rel(until), self.fail_mode, allowed))

        # A stopped agent: its host lets nobody new in once its own lease is over.
        for e in faults.of("agent-stop"):
            since, until = e["start"] + AWAY_AFTER, healed(e)
            late = [r for r in pages if r["via"] == e["target"] and since <= r["time"] < until]
            if late:
                show("agent", since, "%s let %d page requests in with its agent stopped (from %s to %s): %s" % (
                    e["target"], len(late), rel(since), rel(until), [rel(r["time"]) for r in late[:10]]))

        # Every request answered, none with a 5xx, but those to a host killed on purpose.
        def excused(x):
            killed = getattr(x.instance, "killed_at", None)
            return killed is not None and x.answered >= killed
        exchanges = self.exchanges.snapshot()
        unanswered = [x for x in exchanges if x.error is not None and not excused(x)]
        for x in unanswered:
            show("answer", x.sent, "%s %s to %s sent at %s: %s after %.2f s" % (
                x.method, x.path, x.slot, rel(x.sent), x.error, x.answered - x.sent))
        failed = [x for x in exchanges if x.status is not None and x.status >= 500 and not excused(x)]
        for x in failed:
            show("5xx", x.sent, "%s %s to %s sent at %s: %d" % (x.method, x.path, x.slot, rel(x.sent), x.status))

        # No position grows, whichever host answers.
        grown = []
        for v in visitors:
            last = {}
            seen = [(p, doc) for p in v.polls for doc in [p.doc] if doc and not doc.get("ready")
                    and doc.get("position") is not None]
            for (poll, doc), (ticket, pos, host) in zip(seen, v.positions):
                if ticket in last and pos > last[ticket][0]:
                    grown.append((poll.sent, v, ticket, last[ticket], (pos, host, poll.sent)))
                last[ticket] = (pos, host, poll.sent)
        for t, v, ticket, before, after in sorted(grown, key=lambda g: g[0]):
            polls = ["%s %s %s" % (rel(p.sent).strip(), p.host, p.status if not p.doc else
                                   "ready" if p.doc.get("ready") else p.doc.get("position"))
                     for p in v.polls if before[2] - 6 <= p.sent <= after[2] + 3]
            show("position", t, "%s ticket %s: position %d on %s at %s, then %d on %s at %s; its polls (time, "
                 "host, position or status): %s" % (v.name, ticket, before[0], before[1], rel(before[2]), after[0],
                                                   after[1], rel(after[2]), ", ".join(polls)))

        # Everyone gets in.
        for v in waiting:
            last = v.polls[-1] if v.polls else None
            show("admitted", None, "%s (arrived at %s) was not let in within %.0f s of the end of the faults; "
                 "last poll %s" % (v.name, rel(v.arrived_at) if v.arrived_at else "never",
                                   DRAIN, (rel(last.sent), last.host, last.status, last.doc) if last else None))

        # Inversions: at most hosts x lease, over every host that ran (a killed one's last counters).
        by_instance = [(slot.name, getattr(c, "last_stats", {}).get("fifo_inversions_total"))
                       for slot in self.slots for c in slot.instances]
        inversions = sum(n or 0 for _, n in by_instance)
        if inversions > len(HOSTS) * LEASE:
            show("fifo", None, "fifo_inversions_total %d over the hosts %s: at most %d" % (
                inversions, by_instance, len(HOSTS) * LEASE))

        # What the run did, whatever the outcome.
        answered = [x for x in exchanges if x.error is None]
        slowest = max(answered, key=lambda x: x.answered - x.sent, default=None)
        kinds = {}
        for e in faults.entries:
            kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
        loaded = (pages[0]["time"], max(r["done"] or now for r in pages)) if pages else (t0, now)
        at_cap = time_at(pages, CAP, *loaded) / max(0.001, loaded[1] - loaded[0])
        summary = ("faults %s; %d page requests at the origin (most at once %d, per host %s; %d%% of the time at "
                   "the cap); %d visitors, %d "
                   "waiting at the end; %d requests, %d lost with killed hosts, slowest answer %.2f s (%s %s); "
                   "fifo inversions %d" % (
                       kinds, len(pages), self.origin.recorder.max_page_in_flight,
                       self.origin.recorder.max_page_in_flight_by, 100 * at_cap, len(visitors), len(waiting),
                       len(exchanges),
                       sum(1 for x in exchanges if x.error is not None and excused(x)),
                       (slowest.answered - slowest.sent) if slowest else 0, slowest.path if slowest else "",
                       slowest.slot if slowest else "", inversions))
        print("%s: %s" % (self.id(), summary), file=sys.stderr, flush=True)
        if problems:
            lines = ["chaos run CHAOS_SEED=%d CHAOS_SECONDS=%g -cluster-fail %s: %s" % (
                self.seed, CHAOS_SECONDS, self.fail_mode, totals)]
            for check, t, text in problems:
                lines.append("[%s] at %s: %s" % (check, rel(t) if t else "end", text))
                if t is not None:
                    lines.append("  faults around it:\n" + faults.around(t))
            lines.append("all faults (seconds from the start; the origin's times are the same clock):\n" +
                         faults.text())
            lines.append(summary)
            lines.append("host logs: " + ", ".join("%s %s" % (slot.name, c.log_path)
                                                    for slot in self.slots for c in slot.instances))
            self.fail("\n".join(lines))


if __name__ == "__main__":
    unittest.main()
