#!/usr/bin/env python3
"""System calls and sleeps per proxied request, by type, on each data path.

The e2e layout (bench/e2e.py): nginx serves a 1 KB page, the proxy runs one
worker pinned to CPU 1, wrk (2 threads, 100 connections) and nginx share
CPU 0. For HAProxy, Concert -io-uring on and Concert -io-uring off in turn:
a warm-up, then one measured wrk run while `perf stat` counts the syscall
tracepoints (syscalls:sys_enter_*, raw_syscalls:sys_enter for the total) of
the proxy's processes over the same window. Each count is divided by the
requests wrk completed. "sleeps" are the proxy's voluntary context switches
(/proc/PID/status) per request: how often it blocked and had to be woken.

With --close every request comes on a new connection (wrk sends
"Connection: close" and reconnects after each response): the accept path,
which keep-alive clients seldom use, then counts on every request.

perf's tracepoints cost little next to strace, whose stop at every call
slows the proxy enough to change how many requests a loop turn batches.

Output: a Markdown table on stdout and in bench/results/syscalls.md.
Needs perf with tracefs (root), wrk, nginx, haproxy.
"""
import argparse
import os
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE_PATH = "/page.html"
PAGE = (b"<!doctype html><title>bench</title>" + b"x" * 1024)[:1024]
CALLS = ["read", "write", "readv", "writev", "recvfrom", "sendto", "recvmsg", "sendmsg", "epoll_wait",
         "epoll_pwait", "epoll_ctl", "io_uring_enter", "accept", "accept4", "connect", "socket", "close", "shutdown",
         "setsockopt", "getsockopt", "getsockname", "getpeername", "getppid", "getpid", "getrandom", "futex",
         "clock_gettime", "gettimeofday", "sched_yield", "ioctl", "fcntl"]


def voluntary_switches(pids):
    n = 0
    for pid in pids:
        for line in benchlib.read_text("/proc/%d/status" % pid).splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                n += int(line.split()[1])
    return n


CLOSE_LUA = 'wrk.headers["Connection"] = "close"\n'


def measure(args, procs, pin, tmp, label, proc, port):
    url = "http://127.0.0.1:%d%s" % (port, PAGE_PATH)
    script = benchlib.write_lua(tmp, "close.lua", CLOSE_LUA + benchlib.WRK_DONE_LUA) if args.close else None
    benchlib.run_wrk(procs, pin, url, tmp, args.threads, args.connections, args.warmup, script=script)
    pids = benchlib.descendants(proc.pid)
    events = ["raw_syscalls:sys_enter"] + ["syscalls:sys_enter_" + c for c in CALLS]
    out = os.path.join(tmp, "perf-%d.csv" % len(procs.items))
    sw0 = voluntary_switches(pids)
    perf = subprocess.Popen(["perf", "stat", "-x", ",", "-o", out, "-e", ",".join(events),
                             "-p", ",".join(str(p) for p in pids), "--", "sleep", str(args.duration)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wrk = benchlib.run_wrk(procs, pin, url, tmp, args.threads, args.connections, args.duration, script=script)
    perf.wait()
    sw1 = voluntary_switches(pids)
    counts = {}
    for line in benchlib.read_text(out).splitlines():
        fields = line.split(",")
        if len(fields) < 3 or not fields[0].strip().isdigit():
            continue
        name = fields[2].split(":")[-1].replace("sys_enter_", "")
        counts[name] = int(fields[0])
    requests = max(1, wrk["requests"])
    rps = wrk["requests"] / (wrk["duration_us"] / 1e6)
    print("  %-28s %8.0f req/s  %5.2f syscalls/req" % (label, rps, counts.get("sys_enter", 0) / requests),
          file=sys.stderr)
    return {"label": label, "rps": rps, "per": {k: v / requests for k, v in counts.items()},
            "sleeps": (sw1 - sw0) / requests}


def run(args, tmp, procs, pin):
    origin_proc, origin_port = benchlib.start_nginx_origin(procs, tmp, pin, {PAGE_PATH: PAGE})
    rows = []

    def haproxy():
        proc, port = benchlib.start_haproxy(procs, tmp, pin, origin_port)
        benchlib.wait_http("http://127.0.0.1:%d%s" % (port, PAGE_PATH), proc=proc)
        return proc, port

    def concert(mode):
        proc, port, _ = benchlib.start_concert(procs, tmp, pin, args.concert,
                                               ["-upstream", "http://127.0.0.1:%d" % origin_port, "-workers", "1",
                                                "-cap", "100000", "-io-uring", mode])
        return proc, port

    for label, start in (("HAProxy", haproxy), ("Concert -io-uring on", lambda: concert("on")),
                         ("Concert -io-uring off", lambda: concert("off"))):
        proc, port = start()
        try:
            rows.append(measure(args, procs, pin, tmp, label, proc, port))
        finally:
            procs.stop(proc)
    return rows


def report(args, rows, pin):
    shown = [c for c in ["sys_enter"] + CALLS if any(r["per"].get(c, 0) >= 0.005 for r in rows)]
    out = ["# System calls per proxied request" + (", a new connection each" if args.close else ""), "",
           "%(nproc)d CPUs (%(model)s), kernel %(kernel)s" % benchlib.machine_description() +
           "; %s; wrk -t%d -c%d, %d s measured after %d s of warm-up; load average before: %s." % (
               pin.describe(), args.threads, args.connections, args.duration,
               args.warmup, args.load_before), "",
           "| | req/s | " + " | ".join("all" if c == "sys_enter" else "`%s`" % c for c in shown) + " | sleeps |",
           "|---|---|" + "---|" * len(shown) + "---|"]
    for r in rows:
        out.append("| %s | %.0f | " % (r["label"], r["rps"]) +
                   " | ".join("%.2f" % r["per"].get(c, 0) for c in shown) + " | %.2f |" % r["sleeps"])
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concert", default=os.path.join(os.path.dirname(HERE), "build", "concert"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--connections", type=int, default=100)
    p.add_argument("--duration", type=int, default=5, help="measured seconds per setup")
    p.add_argument("--warmup", type=int, default=2, help="warm-up seconds per setup (not measured)")
    p.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    p.add_argument("--tmp", help="scratch directory (default: a new temporary directory, removed at the end)")
    p.add_argument("--pid-file", help="append the pid of every started process here")
    p.add_argument("--close", action="store_true", help="a new connection for every request (Connection: close)")
    p.add_argument("--out", help="default: bench/results/syscalls.md, or syscalls_close.md with --close")
    args = p.parse_args()
    if not args.out:
        args.out = os.path.join(HERE, "results", "syscalls_close.md" if args.close else "syscalls.md")
    benchlib.run_driver("syscalls_per_request", args, ("wrk", "nginx", "haproxy", "perf"), "concert-syscalls-",
                        lambda tmp, procs, pin: run(args, tmp, procs, pin),
                        lambda rows, pin: report(args, rows, pin))


if __name__ == "__main__":
    main()
