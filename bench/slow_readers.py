#!/usr/bin/env python3
"""Slow readers: what a connection that stops reading costs Concert in memory.
Not part of make test or make bench:

    python3 bench/slow_readers.py [--binary build/concert] [--connections 1000,5000,10000]

For each count N, a fresh Concert with one worker (-workers 1 -bypass /big, so
every request is proxied with no admission; -max-connections N + 100;
-send-timeout 10m and -client-header-timeout 60s, so nothing is cut while it
is measured) runs in front of bench/bulk_origin.py, a selectors origin in its
own process that answers every request with --body-bytes (default 64 MiB: more
than Concert and the kernel together ever hold for one connection, so every
origin connection ends up waiting on Concert), sent only as fast as Concert
takes it. Concert on CPU 1, this script and the origin on CPU 0.

  1. Warm-up: one GET /big read to the end through Concert (checks the path,
     and gives the length of Concert's response head).
  2. Before: the worker's VmRSS (/proc/PID/status; the worker is the master's
     only child), after 2 s of quiet.
  3. N client sockets, each with SO_RCVBUF --rcvbuf (4096) set before connect,
     send `GET /big` and never read. Concert relays until its output toward
     the client is over the high-water mark, then stops reading that origin
     connection; the origin's socket fills and it stops too. Stalled: every
     request reached the origin, the origin has sent nothing for
     --settle-seconds and the worker's RSS has not moved by more than 64 KiB
     in that time. Then the worker's VmRSS, RssAnon and VmHWM; where the
     relayed bytes sit, from the kernel's own counters (`ss -tn`: the clients'
     receive queues, Concert's send queues toward the clients, Concert's
     receive queues from the origin, the origin's send queues): what is left
     of what the origin sent is in Concert's buffers; the kernel's TCP memory
     (/proc/net/sockstat `mem`, in no process's RSS) and its TcpExt counters
     of drops and aborts for want of that memory.
  4. After: the clients close, then the origin closes its side (a client that
     goes leaves Concert reading the rest of its response and dropping it: the
     request keeps its slot until the origin is done); once the worker is back
     to its descriptors of step 2 (or after 60 s), 2 s of quiet, VmRSS again.
  --rounds > 1 repeats 3 and 4 on the same Concert: whether the memory the
  allocator kept after the first round is used again.

Reported per N: RSS per connection = (stalled - before) / connections still
established at the stall (the kernel aborts some when its TCP memory runs out,
tcp_mem), against the bound in docs/reliability.md ("Buffered bytes per
connection"). Concert's counters must show no send timeout and no refused
connection.

Concert's worker needs 2N descriptors and a few (a client and an origin socket
per reader; the master raises the soft limit up to the hard one), this script
N and the origin N: the script raises its own soft and hard RLIMIT_NOFILE to
2N + 64 (the processes it starts inherit them) and, where the hard limit
cannot be raised, measures at the largest N that fits and says so. Everything
binds 127.0.0.1; every process started here is stopped by pid.
"""
import argparse
import datetime
import json
import os
import re
import resource
import socket
import subprocess
import sys
import time
import urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LISTEN_RE = re.compile(r"listening on ([0-9.]+):(\d+)")
KIB = 1024
REQUEST = b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def progress(text):
    sys.stderr.write("slow_readers: %s\n" % text)
    sys.stderr.flush()


# ---------------------------------------------------------------- descriptors

def fds_needed(n):
    """Descriptors for n slow readers: Concert's worker holds a client and an origin socket for
    each (plus a few of its own); this script and the origin hold n each."""
    return 2 * n + 64


def fit_fd_limit(counts):
    """Raises this process's RLIMIT_NOFILE (the processes it starts inherit it) for the largest
    count; returns (counts that fit, note or None)."""
    need = fds_needed(max(counts))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
        except (ValueError, OSError):
            pass
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft >= need:
        return counts, None
    largest = (soft - 64) // 2 // 10 * 10
    fitted = sorted({min(n, largest) for n in counts})
    return fitted, ("the open-file hard limit is %d here and cannot be raised (no CAP_SYS_RESOURCE); Concert's "
                    "worker needs two descriptors per slow reader, so the largest count measured is %d"
                    % (hard, largest))


# ---------------------------------------------------------------- /proc and ss

def status_kib(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def kernel_tcp_kib():
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                fields = line.split()
                return int(fields[fields.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE") // KIB
    return 0


NETSTAT_KEYS = ("TCPRcvQDrop", "TCPAbortOnMemory")


def tcp_ext():
    """The kernel's TcpExt counters of interest (/proc/net/netstat): receive-queue drops for want
    of memory and connections aborted for want of memory."""
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], (int(v) for v in values.split()[1:])))
            return {k: table.get(k, 0) for k in NETSTAT_KEYS}
    return {k: 0 for k in NETSTAT_KEYS}


def socket_queues(concert_port, origin_port):
    """Byte sums and socket counts of the kernel queues of every established loopback connection
    of the run, by side: the clients, Concert toward the clients, Concert toward the origin, the
    origin."""
    out = subprocess.run(["ss", "-tnH", "state", "established"], capture_output=True, text=True,
                         timeout=60).stdout
    q = {"client_recv": 0, "concert_send": 0, "concert_origin_recv": 0, "origin_send": 0,
         "clients": 0, "concert_client_side": 0, "concert_origin_side": 0, "origin": 0}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        recvq, sendq = int(parts[0]), int(parts[1])
        local, peer = int(parts[2].rsplit(":", 1)[1]), int(parts[3].rsplit(":", 1)[1])
        if peer == concert_port:
            q["client_recv"] += recvq
            q["clients"] += 1
        elif local == concert_port:
            q["concert_send"] += sendq
            q["concert_client_side"] += 1
        elif peer == origin_port:
            q["concert_origin_recv"] += recvq
            q["concert_origin_side"] += 1
        elif local == origin_port:
            q["origin_send"] += sendq
            q["origin"] += 1
    return q


# ---------------------------------------------------------------- origin

def start_origin(procs, tmp, pin, body_bytes, sndbuf):
    log_path = os.path.join(tmp, "bulk-origin.log")
    log = open(log_path, "wb")
    cmd = pin.load([sys.executable, os.path.join(HERE, "bulk_origin.py"), "--port", "0",
                    "--body-bytes", str(body_bytes), "--sndbuf", str(sndbuf)])
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = procs.start("bulk-origin", cmd, stdout=log, stderr=log, env=env)
    log.close()
    port = int(benchlib.wait_log(log_path, LISTEN_RE, proc=proc).group(2))
    return proc, port


def origin_get(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=30) as r:
        return json.loads(r.read())


def read_whole(port, body_bytes):
    """GET /big read to the end; returns the length of Concert's response head."""
    s = socket.create_connection(("127.0.0.1", port))
    try:
        s.sendall(REQUEST)
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = s.recv(65536)
            if not data:
                raise RuntimeError("warm-up: connection closed in the head")
            buf += data
        head_len = buf.index(b"\r\n\r\n") + 4
        if not buf.startswith(b"HTTP/1.1 200"):
            raise RuntimeError("warm-up answered %r" % buf[:40])
        got = len(buf) - head_len
        while got < body_bytes:
            data = s.recv(1 << 20)
            if not data:
                raise RuntimeError("warm-up: body cut at %d of %d bytes" % (got, body_bytes))
            got += len(data)
        return head_len
    finally:
        s.close()


# ---------------------------------------------------------------- one count

def measure(args, tmp, procs, pin, n):
    origin_proc, origin_port = start_origin(procs, tmp, pin, args.body_bytes, args.origin_sndbuf)
    proc, port, log_path = benchlib.start_concert(
        procs, tmp, pin, args.binary,
        ["-upstream", "http://127.0.0.1:%d" % origin_port, "-workers", "1", "-bypass", "/big",
         "-max-connections", str(n + 100), "-send-timeout", "10m", "-client-header-timeout", "60s"],
        tag="concert-slow-%d" % n)
    kids = [p for p in benchlib.descendants(proc.pid) if p != proc.pid]
    if len(kids) != 1:
        raise RuntimeError("expected one worker, found %r" % kids)
    worker = kids[0]
    try:
        head_len = read_whole(port, args.body_bytes)
        time.sleep(2)
        before, fds0 = status_kib(worker), open_fds(worker)
        progress("N=%d: worker %d, RSS before %.1f MiB, %d fds" % (n, worker, before["VmRSS"] / KIB, fds0))
        rounds = [fill_round(args, n, port, origin_port, worker, fds0, head_len, before, log_path)
                  for _ in range(args.rounds)]
        stats = benchlib.concert_stats(port)
    finally:
        procs.stop(proc)
        procs.stop(origin_proc)
    return {"n": n, "head_len": head_len, "before": before, "fds_before": fds0, "rounds": rounds,
            "send_timeouts": stats.get("timeouts_send_total", 0),
            "refused": stats.get("connections_refused_total", 0)}


def silent_closes(log_path):
    """Detached exchanges Concert ended because the origin stayed silent (-upstream-read-timeout)."""
    return benchlib.read_text(log_path).count("after its client left; closing it")


def fill_round(args, n, port, origin_port, worker, fds0, head_len, before, log_path):
    """N slow readers until stalled; then the clients close and the origin closes its side."""
    silent0 = silent_closes(log_path)
    tcp0, ext0 = kernel_tcp_kib(), tcp_ext()
    o0 = origin_get(origin_port, "/__origin_stats")
    t0 = time.time()
    clients = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
            clients.append(s)
            s.connect(("127.0.0.1", port))
            s.sendall(REQUEST)
        opened = time.time() - t0
        progress("N=%d: %d connections open in %.1f s" % (n, n, opened))
        stalled, settled = wait_stalled(args, worker, origin_port, o0, n)
        fill = time.time() - t0
        queues = socket_queues(port, origin_port)
        tcp1, ext1 = kernel_tcp_kib(), tcp_ext()
        o1 = origin_get(origin_port, "/__origin_stats")
        progress("N=%d: stalled after %.1f s, RSS %.1f MiB" % (n, fill, stalled["VmRSS"] / KIB))
    finally:
        for s in clients:
            s.close()
    # A client that goes leaves Concert reading the rest of its response and dropping it (the
    # request keeps its slot until the origin is done): the origin closes its side right after.
    closed = origin_get(origin_port, "/__origin_close_all")["closed"]
    if not benchlib.wait_until(lambda: open_fds(worker) <= fds0, 60):
        progress("N=%d: worker still has %d fds (before: %d)" % (n, open_fds(worker), fds0))
    fds_after, closed_secs = open_fds(worker), time.time() - t0 - fill
    time.sleep(2)
    after = status_kib(worker)
    progress("N=%d: all closed, RSS %.1f MiB" % (n, after["VmRSS"] / KIB))
    # Connections the kernel aborted for want of memory (TCPAbortOnMemory) are gone from both
    # ends before the stall: per-connection figures are over the connections still established.
    alive = queues["concert_client_side"]
    body_sent = o1["open_body_sent"]
    in_kernel_body = (queues["client_recv"] + queues["concert_send"] - alive * head_len
                      + queues["concert_origin_recv"] + queues["origin_send"])
    return {
        "alive": alive,
        "stalled": stalled, "after": after, "fds_after": fds_after, "opened_secs": opened, "fill_secs": fill,
        "settled": settled, "queues": queues, "origin": o1, "origin_closed": closed, "closed_secs": closed_secs,
        "silent_closes": silent_closes(log_path) - silent0,
        "tcp_ext": {k: ext1[k] - ext0[k] for k in NETSTAT_KEYS},
        "body_sent": body_sent, "held": body_sent - in_kernel_body, "tcp_kib": tcp1 - tcp0,
        "rss_per_conn": (stalled["VmRSS"] - before["VmRSS"]) * KIB / alive,
        "anon_per_conn": (stalled["RssAnon"] - before["RssAnon"]) * KIB / alive,
    }


def wait_stalled(args, worker, origin_port, o0, n):
    """Samples every 0.5 s until the origin sent nothing and the worker's RSS moved by at most
    64 KiB for --settle-seconds, with every request at the origin."""
    start = time.time()
    deadline = start + args.fill_timeout
    history = []
    samples = 0
    while True:
        time.sleep(0.5)
        samples += 1
        mem = status_kib(worker)
        o = origin_get(origin_port, "/__origin_stats")
        now = time.time()
        history.append((now, mem["VmRSS"]))
        if samples % 10 == 0:
            progress("  %3.0f s: %d of %d requests at the origin, %.0f MiB sent, origin idle %.1f s, worker RSS "
                     "%.1f MiB, kernel TCP %.0f MiB" % (now - start, o["responses"] - o0["responses"], n,
                                                       (o["body_sent"] - o0["body_sent"]) / KIB / KIB,
                                                       o["idle_seconds"], mem["VmRSS"] / KIB,
                                                       kernel_tcp_kib() / KIB))
        window = [rss for t, rss in history if t >= now - args.settle_seconds]
        flat = (history[0][0] <= now - args.settle_seconds and max(window) - min(window) <= 64)
        if (o["responses"] - o0["responses"] >= n and o["idle_seconds"] >= args.settle_seconds and flat):
            return status_kib(worker), True
        if now > deadline:
            progress("not settled after %.0f s: %d of %d requests at the origin, origin idle %.1f s"
                     % (args.fill_timeout, o["responses"] - o0["responses"], n, o["idle_seconds"]))
            return status_kib(worker), False


# ---------------------------------------------------------------- report

def mib(kib):
    return "%.1f" % (kib / KIB)


def report(result, pin):
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = benchlib.machine_description()
    rows = result["rows"]
    out = ["## Slow readers (%s; %d CPUs, %s, kernel %s; pinning: %s; load before %s)"
           % (when, machine["nproc"], machine["model"], machine["kernel"],
              "Concert on CPU %s, this script and the origin on CPU %s" % (pin.proxy_cpu, pin.load_cpu)
              if pin.enabled else "none", result["load_before"]), "",
           "Concert -workers 1 -bypass /big -max-connections N+100 -send-timeout 10m -client-header-timeout 60s; "
           "origin bench/bulk_origin.py, %d-byte bodies%s; each client: SO_RCVBUF %d, GET /big, never reads; "
           "%d round(s) per Concert; stalled = origin silent and worker RSS flat for %g s."
           % (result["body_bytes"], ", SO_SNDBUF %d" % result["origin_sndbuf"] if result["origin_sndbuf"] else "",
              result["rcvbuf"], result["rounds"], result["settle"]), ""]
    if result["note"]:
        out += ["Note: %s." % result["note"], ""]
    out += ["| connections | alive at the stall | worker RSS MiB before / stalled / after | RSS per connection "
            "| bytes in Concert's buffers per connection | kernel TCP memory per connection (not RSS) "
            "| stalled after s | send timeouts | refused |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for i, x in enumerate(r["rounds"]):
            out.append("| " + " | ".join([
                "{:,}".format(r["n"]) + (" (round %d)" % (i + 1) if len(r["rounds"]) > 1 else ""),
                "{:,}".format(x["alive"]),
                "%s / %s / %s" % (mib(r["before"]["VmRSS"]), mib(x["stalled"]["VmRSS"]), mib(x["after"]["VmRSS"])),
                "%.1f KiB" % (x["rss_per_conn"] / KIB),
                "%.1f KiB" % (x["held"] / x["alive"] / KIB),
                "%.1f KiB" % (x["tcp_kib"] / x["alive"]),
                "%.1f%s" % (x["fill_secs"], "" if x["settled"] else " (not settled)"),
                str(r["send_timeouts"]), str(r["refused"])]) + " |")
    out.append("")
    for r in rows:
        for i, x in enumerate(r["rounds"]):
            q, a = x["queues"], x["alive"]
            out.append(
                "N = {:,}{}: RssAnon {:.1f} KiB per connection, worker VmHWM {} MiB; kernel queues per connection: "
                "client receive {:.1f} KiB, Concert send {:.1f} KiB, Concert receive from the origin {:.1f} KiB, "
                "origin send {:.1f} KiB; origin sent {:.1f} KiB per connection ({:.0f}–{:.0f}); kernel: {} "
                "connections aborted for want of memory, {} packets dropped from receive queues; after: fds {} "
                "(before {}) {:.1f} s after the stall, {} exchanges ended by -upstream-read-timeout, {} origin "
                "connections closed.".format(
                    r["n"], " round %d" % (i + 1) if len(r["rounds"]) > 1 else "",
                    x["anon_per_conn"] / KIB, mib(x["stalled"]["VmHWM"]),
                    q["client_recv"] / a / KIB, q["concert_send"] / a / KIB, q["concert_origin_recv"] / a / KIB,
                    q["origin_send"] / a / KIB, x["body_sent"] / a / KIB, x["origin"]["least_sent"] / KIB,
                    x["origin"]["most_sent"] / KIB, x["tcp_ext"]["TCPAbortOnMemory"], x["tcp_ext"]["TCPRcvQDrop"],
                    x["fds_after"], r["fds_before"], x["closed_secs"], x["silent_closes"], x["origin_closed"]))
    out.append("")
    out.append("RSS per connection = (stalled - before) / connections alive at the stall (Concert's established "
               "client sockets). Bytes in Concert's buffers = body bytes the origin sent on the connections still "
               "open - what the four kernel queues hold (`ss -tn`; Concert's response head, %d bytes, is in the "
               "client-side queues)." % rows[0]["head_len"])
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(os.path.dirname(HERE), "build", "concert"))
    p.add_argument("--connections", default="1000,5000,10000", help="comma list of counts, one run each")
    p.add_argument("--body-bytes", type=int, default=64 * 1024 * 1024)
    p.add_argument("--rcvbuf", type=int, default=4096, help="SO_RCVBUF of each client socket")
    p.add_argument("--origin-sndbuf", type=int, default=0,
                   help="SO_SNDBUF of the origin's sockets (0: the kernel's autotuning)")
    p.add_argument("--rounds", type=int, default=1,
                   help="fills per Concert: the later ones show whether what the allocator kept is reused")
    p.add_argument("--settle-seconds", type=float, default=10.0,
                   help="origin silent and RSS flat this long = stalled (the kernel backs off for seconds when "
                        "its TCP memory runs short)")
    p.add_argument("--fill-timeout", type=float, default=180.0)
    p.add_argument("--out", default=os.path.join(HERE, "results", "slow_readers.md"))
    p.add_argument("--tmp", default=None)
    p.add_argument("--pid-file", default=None)
    p.add_argument("--no-pin", action="store_true")
    args = p.parse_args()
    if not benchlib.concert_usable(args.binary):
        sys.exit("slow_readers: %s is not a usable concert binary" % args.binary)
    counts, note = fit_fd_limit([int(x) for x in args.connections.split(",") if x.strip()])

    def run(tmp, procs, pin):
        if pin.enabled:
            os.sched_setaffinity(0, {int(pin.load_cpu)})
        rows = [measure(args, tmp, procs, pin, n) for n in counts]
        return {"rows": rows, "note": note, "body_bytes": args.body_bytes, "rcvbuf": args.rcvbuf,
                "rounds": args.rounds, "settle": args.settle_seconds, "origin_sndbuf": args.origin_sndbuf,
                "load_before": args.load_before}

    benchlib.run_driver("slow_readers", args, ["ss"], "concert-slow-", run, report)


if __name__ == "__main__":
    main()
