#!/usr/bin/env python3
"""What one round with the cluster engine costs as the line and the marks grow.

Runs the engine's own scripts (src/cluster/*.lua) against a throw-away
redis-server on 127.0.0.1, as three hosts' agents would, for lines of
--lengths tickets:

  SYNC            one host's round (lease, share, turns, marks): the line
                  stands still (its head's turns already marked)
  SYNC, marks     the same with 3 x 8,192 marks in force (bans, promotions,
                  ended sessions) and one new since the host's copy: only
                  that change goes (the log of changes), then the same host
                  with no copy at all (every list, as after a restart)
  FETCH, anew     the line read by a host with no copy: the first page
                  (16,384 tickets)
  FETCH, changes  what a host with a copy reads after a round in which 64
                  tickets were enrolled and 64 left
  NOTES           that round's notes (64 enrolments, 64 departures)

For each: Redis's own time per call (INFO commandstats, µs; the round trip
on loopback adds about 0.1 ms) and the reply's size in bytes. Prints a
Markdown table; --out writes it to a file as well.

    python3 bench/engine_cost.py [--lengths 1000,4000,16000,64000] [--calls 50] [--out FILE]
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))

from redis_server import RedisServer, encode_command, _Reader  # noqa: E402
import socket  # noqa: E402

ROOM = "b"
NOTES_KEYS = ["line", "tix", "seen", "ver", "seq", "order", "back", "missed", "ready", "epoch", "promoted",
              "revoked", "marks", "clients", "full", "marklog", "gone", "gonefloor", "held", "pre"]
SYNC_KEYS = ["hosts", "resv", "busy", "cap", "mode", "line", "seen", "tix", "ver", "epoch", "grace", "seq",
             "bans", "back", "missed", "ready", "order", "promoted", "revoked", "marks", "want", "held",
             "clients", "full", "marklog", "gone", "gonefloor", "pre"]
FETCH_KEYS = ["line", "tix", "back", "missed", "gone", "gonefloor", "ver"]
MIRROR = 16384


def script(name):
    """The script as the binary embeds it (its includes put in)."""
    sys.path.insert(0, os.path.join(ROOT, "src", "cluster"))
    from embed_scripts import expand
    return expand(os.path.join(ROOT, "src", "cluster", name + ".lua")).decode()


class Counted(_Reader):
    """A RESP reader that counts the bytes it received."""

    def __init__(self, sock):
        super().__init__(sock)
        self.received = 0

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("redis closed the connection")
        self.received += len(chunk)
        self.buf += chunk


class Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.reader = Counted(self.sock)

    def call(self, *args):
        self.sock.sendall(encode_command(list(args)))
        before = self.reader.received
        reply = self.reader.reply()
        return reply, self.reader.received - before

    def evalsha(self, sha, keys, args):
        return self.call("EVALSHA", sha, len(keys), *([ROOM + ":" + k for k in keys] + list(args)))


def sync_args(host, marks_version="-1", bans=()):
    # host, ttl, lease, busy, wanted, cap, push_cap, mode, push_mode, epoch, new_epoch, block, reap_limit,
    # claim_window, marks, held, bans...
    return [host, "10000", "4", "10", "0", "10", "0", "open", "0", "e1", "e1", "0", "1000", "10000",
            marks_version, "0", "0"] + list(bans)


def usec_per_call(c):
    info, _ = c.call("INFO", "commandstats")
    for line in info.splitlines():
        if line.startswith("cmdstat_evalsha:"):
            fields = dict(kv.split("=") for kv in line.split(":", 1)[1].split(","))
            return int(fields["calls"]), float(fields["usec"])
    return 0, 0.0


def measure(c, calls, fn):
    """Redis µs per call and the last reply's bytes, over `calls` calls of fn()."""
    c.call("CONFIG", "RESETSTAT")
    size = 0
    for _ in range(calls):
        _, size = fn()
    n, usec = usec_per_call(c)
    return (usec / n if n else 0.0), size


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", default="1000,4000,16000,64000")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--out")
    opts = ap.parse_args()
    redis = RedisServer()
    try:
        c = Client(redis.port)
        shas = {name: c.call("SCRIPT", "LOAD", script(name))[0] for name in ("notes", "sync", "fetch")}
        rows = []
        for length in [int(x) for x in opts.lengths.split(",")]:
            c.call("FLUSHALL")
            notes_args = ["300000", "300000", "", "0"]
            for start in range(1, length + 1, 4096):
                batch = ["E %d %016x %d" % (i, i, 1_700_000_000_000 + i)
                         for i in range(start, min(start + 4096, length + 1))]
                c.evalsha(shas["notes"], NOTES_KEYS, notes_args + batch)
            for h in ("h1", "h2", "h3"):
                c.evalsha(shas["sync"], SYNC_KEYS, sync_args(h))
            marks_version = str(c.call("GET", ROOM + ":marks")[0] or 0)
            sync_us, sync_b = measure(c, opts.calls, lambda: c.evalsha(shas["sync"], SYNC_KEYS,
                                                                         sync_args("h1", marks_version)))
            fetch_us, fetch_b = measure(c, max(5, opts.calls // 5),
                                        lambda: c.evalsha(shas["fetch"], FETCH_KEYS, [str(MIRROR), "-1", "-1"]))
            # A round: 64 enrolments at the back and 64 departures from the head, then a host's FETCH of it.
            next_id, head = [length + 1], [1]
            notes_times, fetch_times, fetch_size = [], [], [0]

            def round_trip():
                first = next_id[0]
                next_id[0] += 64
                batch = ["E %d %016x 1" % (i, i) for i in range(first, first + 64)]
                batch += ["L %d" % i for i in range(head[0], head[0] + 64)]
                head[0] += 64
                c.call("CONFIG", "RESETSTAT")
                c.evalsha(shas["notes"], NOTES_KEYS, notes_args + batch)
                notes_times.append(usec_per_call(c)[1])
                ver = c.call("GET", ROOM + ":ver")[0]
                c.call("CONFIG", "RESETSTAT")
                # the host's copy: the version before this round, the last number before these enrolments
                _, size = c.evalsha(shas["fetch"], FETCH_KEYS, [str(MIRROR), str(order[0]), str(int(ver) - 1)])
                fetch_times.append(usec_per_call(c)[1])
                fetch_size[0] = size
                order[0] = int(c.call("GET", ROOM + ":order")[0])
            order = [int(c.call("GET", ROOM + ":order")[0])]
            for _ in range(opts.calls):
                round_trip()
            notes_us = sum(notes_times) / len(notes_times)
            delta_fetch_us, delta_fetch_b = sum(fetch_times) / len(fetch_times), fetch_size[0]
            # Marks: 3 x 8,192 in force, written straight into the lists, then one change through the log.
            until = int(time.time()) + 3600
            for key, fmt in (("bans", "%032x"), ("promoted", "%d:00000000000000ff"), ("revoked", "%016x:0000000000000001")):
                for start in range(0, 8192, 1024):
                    members = []
                    for i in range(start + 1, start + 1025):
                        members += [str(until), fmt % i]
                    c.call("ZADD", ROOM + ":" + key, *members)
            c.evalsha(shas["sync"], SYNC_KEYS, sync_args("h2"))
            version = str(c.call("GET", ROOM + ":marks")[0] or 0)
            c.evalsha(shas["notes"], NOTES_KEYS, notes_args + ["P 424242 00000000000000aa %d" % until])

            def delta_round():
                c.call("SET", ROOM + ":marks", int(version) + 1)  # each call: the host one change behind
                return c.evalsha(shas["sync"], SYNC_KEYS, sync_args("h2", version))
            delta_us, delta_b = measure(c, opts.calls, delta_round)
            full_us, full_b = measure(c, max(5, opts.calls // 10),
                                      lambda: c.evalsha(shas["sync"], SYNC_KEYS, sync_args("h3", "-1")))
            rows.append((length, sync_us, sync_b, delta_us, delta_b, full_us, full_b, fetch_us, fetch_b, delta_fetch_us,
                         delta_fetch_b, notes_us))
        lines = ["| line | SYNC µs | SYNC bytes | SYNC, 24,576 marks, one new: µs | bytes | SYNC, every mark: µs | "
                 "bytes | FETCH anew µs | bytes | FETCH changes µs | bytes | NOTES (64 + 64) µs |",
                 "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            lines.append("| {:,} | {:.0f} | {:,} | {:.0f} | {:,} | {:.0f} | {:,} | {:.0f} | {:,} | {:.0f} | {:,} | "
                         "{:.0f} |".format(*r))
        out = "\n".join(lines)
        print(out)
        if opts.out:
            with open(opts.out, "w") as f:
                f.write(out + "\n")
    finally:
        redis.close()


if __name__ == "__main__":
    main()
