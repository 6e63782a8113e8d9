"""Tools for chaos tests of hosts sharing a line (test_cluster_chaos); Python standard library only.

    slot = HostSlot("A", concert, exchanges)   # one host as the balancer knows it: follows a replaced host
    slot.down = True; ...; slot.replace(new)    # a host killed on purpose, then started again (a new port)
    route = Route(slots, rng, preferred=slot)   # what a visitor talks to: its host while it is up, else any
    faults = FaultLog()
    entry = faults.begin("redis-stop", "redis"); ...; faults.heal(entry)
    faults.around(t)                            # the faults near a moment, for a failure message
    most_at_once(records, since, until)         # origin records: the most in flight at once
    time_at(records, level, since, until)       # ... how long `level` or more were in flight
    over_bound(records, bound, exempt)          # moments the origin had more in flight than allowed

A HostSlot records every exchange it carries: when it was sent and answered, its status or the
transport error, and the Concert instance that got it, so that a test can tell a request lost with a
host killed on purpose from one that went unanswered. Times are time.time(), as the fake origin's
records. A Route has the `name` and `request()` of a Concert (what Visitor needs): it sends each
request to a host as a balancer would (its preferred host while that one is up, else any host up)
and names that host in the request's `via=` parameter, so that the origin counts what each host
sends it; its `name` is the host of its last request.

Only processes a test started are signalled, by pid, and only after checking (in /proc) that the
pid is still the child of that test's Concert master.
"""
import os
import re
import signal
import threading
import time
from collections import namedtuple

# One request a visitor sent through a HostSlot: `error` is the transport error's repr (None when
# answered), `status` the answer's status (None when not answered).
Exchange = namedtuple("Exchange", "slot instance method path sent answered status error")


class ExchangeLog:
    def __init__(self):
        self.lock = threading.Lock()
        self.items = []

    def add(self, exchange):
        with self.lock:
            self.items.append(exchange)

    def snapshot(self):
        with self.lock:
            return list(self.items)


class HostSlot:
    """One host of the room as the balancer knows it: requests go to the Concert running there now.
    Every request waits at most `max_wait` s for its answer (a visitor's own timeout, if shorter,
    wins)."""

    def __init__(self, name, concert, log, max_wait=5.0):
        self.name = name
        self.current = concert
        self.log = log
        self.max_wait = max_wait
        self.instances = [concert]  # every Concert that ran here, oldest first
        self.down = False  # killed on purpose and not started again yet: the balancer sends nothing here

    def replace(self, concert):
        self.instances.append(concert)
        self.current = concert
        self.down = False

    def request(self, method, path, headers=None, body=None, timeout=10):
        c = self.current
        sent = time.time()
        try:
            status, hdrs, data = c.request(method, path, headers=headers, body=body,
                                           timeout=min(timeout, self.max_wait))
        except Exception as e:
            self.log.add(Exchange(self.name, c, method, path, sent, time.time(), None, repr(e)))
            raise
        self.log.add(Exchange(self.name, c, method, path, sent, time.time(), status, None))
        return status, hdrs, data

    def get(self, path, headers=None, timeout=10):
        return self.request("GET", path, headers, None, timeout)

    def conn(self, timeout=10):
        return self.current.conn(min(timeout, self.max_wait))

    def __repr__(self):
        return "HostSlot(%r)" % self.name


VIA_RE = re.compile(r"([?&]via=)[^&]*")


class Route:
    """A visitor's way to the room through the balancer: each request goes to `preferred` while it is
    up, else to any slot up (drawn with `rng`), with `via=` in its path naming that slot."""

    def __init__(self, slots, rng, preferred=None):
        self.slots = slots
        self.rng = rng
        self.preferred = preferred
        self.last = preferred or slots[0]

    @property
    def name(self):
        return self.last.name

    def pick(self):
        if self.preferred is not None and not self.preferred.down:
            return self.preferred
        up = [s for s in self.slots if not s.down] or self.slots
        return self.rng.choice(up)

    def request(self, method, path, headers=None, body=None, timeout=10):
        slot = self.last = self.pick()
        return slot.request(method, VIA_RE.sub(lambda m: m.group(1) + slot.name, path), headers, body, timeout)

    def get(self, path, headers=None, timeout=10):
        return self.request("GET", path, headers, None, timeout)

    def conn(self, timeout=10):
        slot = self.last = self.pick()
        return slot.conn(timeout)

    def __repr__(self):
        return "Route(%r)" % (self.preferred.name if self.preferred else "any")


# ---------------------------------------------------------------- processes
def parent_of(pid):
    """The parent pid of `pid` from /proc, or None (gone, or a zombie)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[1])


def agent_pids(c):
    """Pids of every cluster agent the master of Concert `c` reported starting, oldest first."""
    return [int(p) for p in re.findall(r"cluster agent started pid (\d+)", c.log())]


def live_agent(c):
    """The pid of `c`'s cluster agent when it runs as a child of `c`'s master, else None."""
    pids = agent_pids(c)
    if not pids or c.proc is None or c.proc.poll() is not None:
        return None
    pid = pids[-1]
    return pid if parent_of(pid) == c.proc.pid else None


def signal_child(c, pid, sig):
    """Sends `sig` to `pid` only if it is a child of `c`'s master; True when sent."""
    if c.proc is None or parent_of(pid) != c.proc.pid:
        return False
    try:
        os.kill(pid, sig)
    except OSError:
        return False
    return True


def kill_host(c):
    """SIGKILL of a host: its master is stopped first (so it forks no replacement meanwhile), then
    every child of it (workers, cluster agent) and the master are killed, by pid."""
    if c.proc is None or c.proc.poll() is not None:
        return
    try:
        os.kill(c.proc.pid, signal.SIGSTOP)
    except OSError:
        pass
    c.kill_all()


# ---------------------------------------------------------------- the fault log
class FaultLog:
    """(kind, target, start, healed, note) of every fault, in order; times are time.time()."""

    def __init__(self, t0=None):
        self.t0 = time.time() if t0 is None else t0
        self.lock = threading.Lock()
        self.entries = []

    def begin(self, kind, target, note=""):
        entry = {"kind": kind, "target": target, "start": time.time(), "healed": None, "note": note}
        with self.lock:
            self.entries.append(entry)
        return entry

    def heal(self, entry, note=""):
        entry["healed"] = time.time()
        if note:
            entry["note"] = (entry["note"] + "; " + note).strip("; ")

    def of(self, *kinds):
        with self.lock:
            return [e for e in self.entries if e["kind"] in kinds]

    def rel(self, t):
        return "%7.2f" % (t - self.t0) if t is not None else "   open"

    def line(self, e):
        return "%s .. %s  %-14s %-6s %s" % (self.rel(e["start"]), self.rel(e["healed"]), e["kind"], e["target"],
                                           e["note"])

    def around(self, t, before=12.0, after=4.0):
        """The faults that were on, or began or healed, within [t - before, t + after]."""
        with self.lock:
            near = [e for e in self.entries
                    if e["start"] <= t + after and (e["healed"] is None or e["healed"] >= t - before)]
        if not near:
            return "    (no fault within %.0f s before and %.0f s after)" % (before, after)
        return "\n".join("    " + self.line(e) for e in near)

    def text(self):
        with self.lock:
            return "\n".join("    " + self.line(e) for e in self.entries)


# ---------------------------------------------------------------- in flight at the origin
def end_of(record, now=None):
    return record["done"] if record["done"] is not None else (now or time.time())


def most_at_once(records, since, until):
    """The most of `records` (fake origin records: "time", "done") in flight at once within [since, until]."""
    edges = []
    now = time.time()
    for r in records:
        start, end = r["time"], end_of(r, now)
        if end <= since or start >= until:
            continue
        edges += [(max(start, since), 1), (min(end, until), -1)]
    edges.sort(key=lambda e: (e[0], e[1]))
    count = best = 0
    for _, d in edges:
        count += d
        best = max(best, count)
    return best


def time_at(records, level, since, until):
    """Seconds within [since, until] during which `level` or more of `records` were in flight."""
    edges = []
    now = time.time()
    for r in records:
        start, end = max(r["time"], since), min(end_of(r, now), until)
        if end > start:
            edges += [(start, 1), (end, -1)]
    edges.sort(key=lambda e: (e[0], e[1]))
    count, total, last = 0, 0.0, since
    for t, d in edges:
        if count >= level:
            total += t - last
        count += d
        last = t
    return total


def over_bound(records, bound, exempt=()):
    """Moments a request started at the origin with more requests in flight (itself included) than
    `bound(t)` allows, t its start; starts within an `exempt` window (since, until) are not checked.
    Returns [(t, in_flight, bound, [records in flight])], in time order."""
    now = time.time()
    edges = []
    for r in records:
        edges.append((r["time"], 1, r))
        edges.append((end_of(r, now), -1, r))
    # A request that ended at the moment another started is not counted with it.
    edges.sort(key=lambda e: (e[0], e[1]))
    flight = {}
    out = []
    for t, d, r in edges:
        if d < 0:
            flight.pop(id(r), None)
            continue
        flight[id(r)] = r
        if any(a <= t <= b for a, b in exempt):
            continue
        allowed = bound(t)
        if len(flight) > allowed:
            out.append((t, len(flight), allowed, sorted(flight.values(), key=lambda x: x["time"])))
    return out
