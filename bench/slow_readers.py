#!/usr/bin/env python3
"""Slow readers: what a connection that stops reading costs a proxy in memory,
Concert, HAProxy and nginx side by side. Not part of make test or make bench:

    python3 bench/slow_readers.py [--binary build/concert] [--connections 1000,5000,10000]
                                  [--proxies concert,haproxy,nginx,nginx-notemp]

For each count N and each proxy of --proxies (default all four below, N in the
outer loop so that the proxies at one N are measured minutes apart, not more),
a fresh proxy runs in front of a fresh bench/bulk_origin.py, a selectors
origin in its own process that answers every request with --body-bytes
(default 64 MiB: more than Concert, HAProxy or nginx without a temp file and
the kernel together ever hold for one connection, so every origin connection
ends up waiting on the proxy), sent only as fast as the proxy takes it. The
proxy on CPU 1, this script and the origin on CPU 0. The process measured is
the one that holds the connections:

  concert       Concert with one worker (-workers 1 -bypass /big, so every
                request is proxied with no admission; -max-connections N + 100;
                -send-timeout 10m and -client-header-timeout 60s, so nothing is
                cut while it is measured); measured: the worker, the master's
                only child.
  haproxy       HAProxy (Debian `haproxy`, /usr/sbin/haproxy -db -f CFG: in the
                foreground, no master) at its defaults but for nbthread 1, mode
                http, maxconn N + 100 (global and frontend), timeout client and
                server 10m, connect 5s; one frontend, one server (the origin);
                measured: the haproxy process itself.
  nginx         nginx (Debian `nginx-light`, /usr/sbin/nginx) as a proxy:
                worker_processes 1, master_process on, daemon off,
                worker_connections 2N + 100 and an eighth more (nginx closes
                idle connections to reuse their slots once fewer than a
                sixteenth are free: with 2N + 100 it reset readers from about
                N = 800 on), proxy_pass to the origin with
                proxy_http_version 1.1 at its default buffering
                (proxy_buffers 8 4k, proxy_max_temp_file_size 1024m: it reads
                the whole response from the origin and spools what the client
                does not take to an unlinked temp file), proxy_read_timeout,
                proxy_send_timeout and send_timeout 10m, access_log off,
                error_log, pid and every temp path in the scratch directory;
                measured: the worker, the master's only child. Spooling writes
                N x --body-bytes to disk: a count whose spool would exceed
                --spool-limit-gib (or leave less than 10 GiB free) is skipped
                for this variant and the report says so.
  nginx-notemp  the same nginx with proxy_max_temp_file_size 0 (no temp file:
                it holds its proxy_buffers and stops reading the origin).

  1. Warm-up: one GET /big read to the end through the proxy (checks the path,
     and gives the length of the proxy's response head).
  2. Before: the measured process's VmRSS (/proc/PID/status), after 2 s of
     quiet.
  3. N client sockets, each with SO_RCVBUF --rcvbuf (4096) set before connect,
     send `GET /big` and never read. The proxy relays until its output toward
     the client is full (Concert: over its high-water mark; HAProxy: its
     response buffer; nginx-notemp: its proxy_buffers), then stops reading that
     origin connection; the origin's socket fills and it stops too (default
     nginx instead reads on into its temp file until the whole body is in).
     Stalled: the request of every client still established (TCP_INFO; a
     connection the proxy's side resets never gets there, and the report
     counts those) reached the origin, the origin has sent nothing
     for --settle-seconds and the process's RSS has not moved by more than
     64 KiB in that time. Then its VmRSS, RssAnon and VmHWM; where the relayed
     bytes sit, from the kernel's own counters (`ss -tn`: the clients' receive
     queues, the proxy's send queues toward the clients, its receive queues
     from the origin, the origin's send queues): what is left of what the
     origin sent is in the proxy (its buffers, or for nginx its temp files,
     whose sizes are read through /proc/PID/fd); the kernel's TCP memory
     (/proc/net/sockstat `mem`, in no process's RSS) and its TcpExt counters
     of drops and aborts for want of that memory.
  4. After: the clients close, then the origin closes its side (a client that
     goes leaves Concert reading the rest of its response and dropping it: the
     request keeps its slot until the origin is done); once the process is
     back to its descriptors of step 2 (or after 60 s), 2 s of quiet, VmRSS
     again.
  --rounds > 1 repeats 3 and 4 on the same proxy: whether the memory the
  allocator kept after the first round is used again.

Reported per N and proxy: RSS per connection = (stalled - before) /
connections still established at the stall (the kernel aborts some when its
TCP memory runs out, tcp_mem), and that figure over HAProxy's at the same N;
for Concert, against the bound in docs/reliability.md ("Buffered bytes per
connection"). Concert's counters must show no send timeout and no refused
connection.

Each proxy needs 2N descriptors and a few (a client and an origin socket per
reader; default nginx one more per reader for its temp file), this script N
and the origin N: the script raises its own soft RLIMIT_NOFILE to the hard
limit (the processes it starts inherit it; Concert's master raises its own
soft limit up to the hard one too) and, where the hard limit is below 2N + 64
and cannot be raised, measures at the largest N that fits and says so.
HAProxy and nginx must be installed (make deps-bench: packages haproxy and
nginx-light); the script stops at once, naming the package, when one that
--proxies asks for is missing. Everything binds 127.0.0.1; every process
started here is stopped by pid.
"""
import argparse
import datetime
import json
import os
import re
import resource
import shutil
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
GIB = 1024 * 1024 * 1024
REQUEST = b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
NGINX_MAX_TEMP_FILE = 1024 * 1024 * 1024  # proxy_max_temp_file_size's default, 1024m
DISK_RESERVE = 10 * GIB                   # free space the default nginx's spool must leave

PROXIES = ("concert", "haproxy", "nginx", "nginx-notemp")
LABELS = {"concert": "Concert", "haproxy": "HAProxy", "nginx": "nginx", "nginx-notemp": "nginx (no temp file)"}
# Packages (Debian) that provide the proxies other than Concert; `make deps-bench` installs them.
PACKAGES = {"haproxy": "haproxy", "nginx": "nginx-light"}


def progress(text):
    sys.stderr.write("slow_readers: %s\n" % text)
    sys.stderr.flush()


# ---------------------------------------------------------------- descriptors

def fds_needed(n, per_reader=2):
    """Descriptors for n slow readers: the proxy holds a client and an origin socket for each
    (default nginx a temp file as well), plus a few of its own; this script and the origin hold
    n each."""
    return per_reader * n + 64


def fit_fd_limit(counts):
    """Raises this process's RLIMIT_NOFILE (the processes it starts inherit it) for the largest
    count, the soft limit up to the hard one; returns (counts that fit, note or None)."""
    need = fds_needed(max(counts))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
        except (ValueError, OSError):
            pass
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Up to the hard limit, not just `need`: default nginx needs a third descriptor per reader.
    target = max(need, fds_needed(max(counts), 3)) if hard == resource.RLIM_INFINITY else hard
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft >= need:
        return counts, None
    largest = (soft - 64) // 2 // 10 * 10
    fitted = sorted({min(n, largest) for n in counts})
    return fitted, ("the open-file hard limit is %d here and cannot be raised (no CAP_SYS_RESOURCE); each "
                    "proxy needs two descriptors per slow reader, so the largest count measured is %d"
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


def files_under(pid, directory):
    """(count, bytes, disk bytes) of the regular files under `directory` that pid holds open
    (nginx unlinks its temp files at once: they are only reachable through /proc/PID/fd)."""
    count = size = disk = 0
    prefix = os.path.realpath(directory) + os.sep
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        path = os.path.join(fd_dir, fd)
        try:
            if not os.readlink(path).startswith(prefix):
                continue
            st = os.stat(path)
        except OSError:
            continue
        count += 1
        size += st.st_size
        disk += st.st_blocks * 512
    return count, size, disk


def kernel_tcp_kib():
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                fields = line.split()
                return int(fields[fields.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE") // KIB
    return 0


NETSTAT_KEYS = ("TCPRcvQDrop", "TCPAbortOnMemory", "ListenOverflows")


def tcp_ext():
    """The kernel's TcpExt counters of interest (/proc/net/netstat): receive-queue drops for want
    of memory, connections aborted for want of memory, and handshakes dropped because a listening
    socket's accept queue was full (machine-wide counters)."""
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], (int(v) for v in values.split()[1:])))
            return {k: table.get(k, 0) for k in NETSTAT_KEYS}
    return {k: 0 for k in NETSTAT_KEYS}


TCP_INFO = getattr(socket, "TCP_INFO", 11)
TCP_ESTABLISHED = 1


def established(sock):
    """True while the kernel has this client socket established (tcpi_state, the first byte of
    TCP_INFO): a connection reset by the proxy's side (a slot nginx reused, a handshake a full
    accept queue dropped, an abort for want of memory) is not."""
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 1)[0] == TCP_ESTABLISHED
    except OSError:
        return False


def socket_queues(proxy_port, origin_port):
    """Byte sums and socket counts of the kernel queues of every established loopback connection
    of the run, by side: the clients, the proxy toward the clients, the proxy toward the origin,
    the origin."""
    out = subprocess.run(["ss", "-tnH", "state", "established"], capture_output=True, text=True,
                         timeout=60).stdout
    q = {"client_recv": 0, "proxy_send": 0, "proxy_origin_recv": 0, "origin_send": 0,
         "clients": 0, "proxy_client_side": 0, "proxy_origin_side": 0, "origin": 0}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        recvq, sendq = int(parts[0]), int(parts[1])
        local, peer = int(parts[2].rsplit(":", 1)[1]), int(parts[3].rsplit(":", 1)[1])
        if peer == proxy_port:
            q["client_recv"] += recvq
            q["clients"] += 1
        elif local == proxy_port:
            q["proxy_send"] += sendq
            q["proxy_client_side"] += 1
        elif peer == origin_port:
            q["proxy_origin_recv"] += recvq
            q["proxy_origin_side"] += 1
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
    """GET /big read to the end; returns the length of the proxy's response head."""
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


# ---------------------------------------------------------------- proxies

def find_binary(name, given):
    """Path of HAProxy's or nginx's binary (--haproxy / --nginx, else PATH, else /usr/sbin)."""
    if given:
        return given if os.path.isfile(given) and os.access(given, os.X_OK) else None
    path = shutil.which(name) or "/usr/sbin/" + name
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def wait_port(port, proc, timeout=15.0):
    """Until 127.0.0.1:port accepts a connection (closed at once) or proc exits."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("exited with status %s before listening on %d" % (proc.returncode, port))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing listening on %d after %.0f s" % (port, timeout))


def only_child(pid, what, timeout=10.0):
    kids = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        kids = [p for p in benchlib.descendants(pid) if p != pid]
        if len(kids) == 1:
            return kids[0]
        time.sleep(0.05)
    raise RuntimeError("expected one %s, found %r" % (what, kids))


class Proxy:
    """One proxy under test in front of the origin: `port` it listens on, `pid` of the process that
    holds the connections (measured), `spool_dir` where it may write temp files (or None)."""
    spool_dir = None

    def __init__(self, key, args, tmp, procs, pin, n, origin_port):
        self.key, self.args, self.tmp, self.procs, self.pin, self.n = key, args, tmp, procs, pin, n
        self.origin_port = origin_port
        self.proc = None
        self.log_path = None

    def stop(self):
        if self.proc is not None:
            self.procs.stop(self.proc)

    def final_stats(self):
        return {}

    def silent_closes(self):
        return None


class ConcertProxy(Proxy):
    def start(self):
        self.proc, self.port, self.log_path = benchlib.start_concert(
            self.procs, self.tmp, self.pin, self.args.binary,
            ["-upstream", "http://127.0.0.1:%d" % self.origin_port, "-workers", "1", "-bypass", "/big",
             "-max-connections", str(self.n + 100), "-send-timeout", "10m", "-client-header-timeout", "60s"],
            tag="concert-slow-%d" % self.n)
        self.pid = only_child(self.proc.pid, "Concert worker", timeout=1.0)

    def final_stats(self):
        stats = benchlib.concert_stats(self.port)
        return {"send_timeouts": stats.get("timeouts_send_total", 0),
                "refused": stats.get("connections_refused_total", 0)}

    def silent_closes(self):
        """Detached exchanges Concert ended because the origin stayed silent (-upstream-read-timeout)."""
        return benchlib.read_text(self.log_path).count("after its client left; closing it")


HAPROXY_CFG = """global
  nbthread 1
  maxconn {maxconn}
defaults
  mode http
  timeout connect 5s
  timeout client 10m
  timeout server 10m
frontend fe
  bind 127.0.0.1:{port}
  maxconn {maxconn}
  default_backend be
backend be
  server origin 127.0.0.1:{origin}
"""


class HAProxyProxy(Proxy):
    def start(self):
        self.port = benchlib.free_port()
        conf = os.path.join(self.tmp, "haproxy-slow-%d.cfg" % self.n)
        with open(conf, "w") as f:
            f.write(HAPROXY_CFG.format(maxconn=self.n + 100, port=self.port, origin=self.origin_port))
        self.log_path = os.path.join(self.tmp, "haproxy-slow-%d.log" % self.n)
        log = open(self.log_path, "wb")
        # taskset execs haproxy: the pid is haproxy's, and with -db there is no master to skip.
        self.proc = self.procs.start("haproxy", self.pin.proxy([self.args.haproxy, "-db", "-f", conf]),
                                     stdout=log, stderr=log)
        log.close()
        try:
            wait_port(self.port, self.proc)
        except RuntimeError as e:
            raise RuntimeError("haproxy %s; its log: %s" % (e, benchlib.read_text(self.log_path)[-1000:]))
        self.pid = self.proc.pid


NGINX_CFG = """worker_processes 1;
daemon off;
master_process on;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections {wc}; }}
http {{
  access_log off;
  client_body_temp_path {d}/client_body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://127.0.0.1:{origin};
      proxy_http_version 1.1;
      proxy_read_timeout 10m;
      proxy_send_timeout 10m;
      send_timeout 10m;{extra}
    }}
  }}
}}
"""


def nginx_worker_connections(n):
    """2N + 100 and an eighth more: nginx counts a client and an upstream connection per reader, and
    once fewer than a sixteenth of its slots are free it closes idle (waiting-for-request)
    connections to reuse theirs ("worker_connections are not enough, reusing connections"), which
    resets readers whose request it has not read yet."""
    base = 2 * n + 100
    return base + base // 8


class NginxProxy(Proxy):
    def start(self):
        d = os.path.join(self.tmp, "%s-%d" % (self.key, self.n))
        os.makedirs(d, exist_ok=True)
        # The worker runs as nobody (started by root): it must reach the temp paths the master makes.
        for path in (self.tmp, d):
            os.chmod(path, 0o755)
        self.port = benchlib.free_port()
        conf = os.path.join(d, "nginx.conf")
        extra = "\n      proxy_max_temp_file_size 0;" if self.key == "nginx-notemp" else ""
        with open(conf, "w") as f:
            f.write(NGINX_CFG.format(d=d, wc=nginx_worker_connections(self.n), port=self.port,
                                     origin=self.origin_port, extra=extra))
        self.log_path = os.path.join(d, "error.log")
        out = open(os.path.join(d, "stderr.log"), "wb")
        self.proc = self.procs.start(self.key, self.pin.proxy(
            [self.args.nginx, "-e", self.log_path, "-p", d, "-c", conf]), stdout=out, stderr=out)
        out.close()
        try:
            wait_port(self.port, self.proc)
        except RuntimeError as e:
            raise RuntimeError("nginx %s; its log: %s" % (e, (benchlib.read_text(os.path.join(d, "stderr.log"))
                                                              + benchlib.read_text(self.log_path))[-1000:]))
        self.pid = only_child(self.proc.pid, "nginx worker")
        self.spool_dir = os.path.join(d, "proxy")


CLASSES = {"concert": ConcertProxy, "haproxy": HAProxyProxy, "nginx": NginxProxy, "nginx-notemp": NginxProxy}


def spool_skip_reason(args, tmp, n):
    """Why default nginx (which spools whole responses, up to proxy_max_temp_file_size) cannot run
    at n here, or None."""
    spool = n * min(args.body_bytes, NGINX_MAX_TEMP_FILE)
    st = os.statvfs(tmp)
    free = st.f_bavail * st.f_frsize
    if spool > args.spool_limit_gib * GIB:
        return ("it would spool about %.1f GiB to its temp files (N x %.0f MiB), over --spool-limit-gib %g"
                % (spool / GIB, min(args.body_bytes, NGINX_MAX_TEMP_FILE) / KIB / KIB, args.spool_limit_gib))
    if spool > free - DISK_RESERVE:
        return ("it would spool about %.1f GiB to its temp files and %s has %.1f GiB free (10 GiB kept)"
                % (spool / GIB, tmp, free / GIB))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < fds_needed(n, 3):
        return "it needs three descriptors per reader (a temp file each) and the open-file limit is too low"
    return None


# ---------------------------------------------------------------- one count, one proxy

def measure(args, tmp, procs, pin, n, key):
    origin_proc, origin_port = start_origin(procs, tmp, pin, args.body_bytes, args.origin_sndbuf)
    proxy = CLASSES[key](key, args, tmp, procs, pin, n, origin_port)
    try:
        proxy.start()
        try:
            head_len = read_whole(proxy.port, args.body_bytes)
            time.sleep(2)
            before, fds0 = status_kib(proxy.pid), open_fds(proxy.pid)
            progress("N=%d %s: pid %d, RSS before %.1f MiB, %d fds"
                     % (n, LABELS[key], proxy.pid, before["VmRSS"] / KIB, fds0))
            rounds = [fill_round(args, n, proxy, origin_port, fds0, head_len, before) for _ in range(args.rounds)]
            extra = proxy.final_stats()
        finally:
            proxy.stop()
    finally:
        procs.stop(origin_proc)
    return {"n": n, "proxy": key, "head_len": head_len, "before": before, "fds_before": fds0, "rounds": rounds,
            "extra": extra}


def fill_round(args, n, proxy, origin_port, fds0, head_len, before):
    """N slow readers until stalled; then the clients close and the origin closes its side."""
    pid, port = proxy.pid, proxy.port
    silent0 = proxy.silent_closes()
    tcp0, ext0 = kernel_tcp_kib(), tcp_ext()
    o0 = origin_get(origin_port, "/__origin_stats")
    disk0 = os.statvfs(proxy.spool_dir) if proxy.spool_dir else None
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
        stalled, settled = wait_stalled(args, pid, origin_port, o0, n, clients)
        reset = sum(1 for c in clients if not established(c))
        fill = time.time() - t0
        queues = socket_queues(port, origin_port)
        tcp1, ext1 = kernel_tcp_kib(), tcp_ext()
        o1 = origin_get(origin_port, "/__origin_stats")
        spool = files_under(pid, proxy.spool_dir) if proxy.spool_dir else None
        if disk0 is not None:
            disk1 = os.statvfs(proxy.spool_dir)
            disk_used = (disk0.f_bavail - disk1.f_bavail) * disk1.f_frsize
        else:
            disk_used = None
        progress("N=%d: stalled after %.1f s, RSS %.1f MiB%s" % (
            n, fill, stalled["VmRSS"] / KIB,
            ", %d temp files, %.1f MiB" % (spool[0], spool[1] / KIB / KIB) if spool else ""))
    finally:
        for s in clients:
            s.close()
    # A client that goes leaves Concert reading the rest of its response and dropping it (the
    # request keeps its slot until the origin is done): the origin closes its side right after.
    closed = origin_get(origin_port, "/__origin_close_all")["closed"]
    if not benchlib.wait_until(lambda: open_fds(pid) <= fds0, 60):
        progress("N=%d: process still has %d fds (before: %d)" % (n, open_fds(pid), fds0))
    fds_after, closed_secs = open_fds(pid), time.time() - t0 - fill
    time.sleep(2)
    after = status_kib(pid)
    progress("N=%d: all closed, RSS %.1f MiB" % (n, after["VmRSS"] / KIB))
    # Connections the kernel aborted for want of memory (TCPAbortOnMemory) are gone from both
    # ends before the stall: per-connection figures are over the connections still established.
    alive = queues["proxy_client_side"]
    # Body bytes of this round on the origin connections still open, plus the whole bodies of the
    # responses the origin completed (default nginx takes them whole and closes its side).
    completed = o1["completed"] - o0["completed"]
    body_sent = o1["open_body_sent"] + completed * args.body_bytes
    in_kernel_body = (queues["client_recv"] + queues["proxy_send"] - alive * head_len
                      + queues["proxy_origin_recv"] + queues["origin_send"])
    silent1 = proxy.silent_closes()
    return {
        "alive": alive, "reset": reset,
        "stalled": stalled, "after": after, "fds_after": fds_after, "opened_secs": opened, "fill_secs": fill,
        "settled": settled, "queues": queues, "origin": o1, "origin_closed": closed, "closed_secs": closed_secs,
        "completed": completed, "spool": spool, "disk_used": disk_used,
        "silent_closes": None if silent1 is None else silent1 - silent0,
        "tcp_ext": {k: ext1[k] - ext0[k] for k in NETSTAT_KEYS},
        "body_sent": body_sent, "held": body_sent - in_kernel_body, "tcp_kib": tcp1 - tcp0,
        "rss_per_conn": (stalled["VmRSS"] - before["VmRSS"]) * KIB / max(alive, 1),
        "anon_per_conn": (stalled["RssAnon"] - before["RssAnon"]) * KIB / max(alive, 1),
    }


def wait_stalled(args, pid, origin_port, o0, n, clients):
    """Samples every 0.5 s until the origin sent nothing and the process's RSS moved by at most
    64 KiB for --settle-seconds, with the request of every client still established at the origin
    (a client whose connection the proxy's side reset never gets there)."""
    start = time.time()
    deadline = start + args.fill_timeout
    history = []
    samples = 0
    while True:
        time.sleep(0.5)
        samples += 1
        mem = status_kib(pid)
        o = origin_get(origin_port, "/__origin_stats")
        live = sum(1 for c in clients if established(c))
        now = time.time()
        history.append((now, mem["VmRSS"]))
        if samples % 10 == 0:
            progress("  %3.0f s: %d of %d requests at the origin (%d clients established), %.0f MiB sent, origin "
                     "idle %.1f s, RSS %.1f MiB, kernel TCP %.0f MiB"
                     % (now - start, o["responses"] - o0["responses"], n, live,
                        (o["body_sent"] - o0["body_sent"]) / KIB / KIB, o["idle_seconds"], mem["VmRSS"] / KIB,
                        kernel_tcp_kib() / KIB))
        window = [rss for t, rss in history if t >= now - args.settle_seconds]
        flat = (history[0][0] <= now - args.settle_seconds and max(window) - min(window) <= 64)
        if (o["responses"] - o0["responses"] >= live and o["idle_seconds"] >= args.settle_seconds and flat):
            return status_kib(pid), True
        if now > deadline:
            progress("not settled after %.0f s: %d of %d requests at the origin (%d clients established), origin "
                     "idle %.1f s" % (args.fill_timeout, o["responses"] - o0["responses"], n, live,
                                      o["idle_seconds"]))
            return status_kib(pid), False


# ---------------------------------------------------------------- report

def mib(kib):
    return "%.1f" % (kib / KIB)


def proxy_settings(result):
    """One line per proxy run: how it was configured."""
    p = result["proxies"]
    out = []
    if "concert" in p:
        out.append("* Concert (`%s`): `-workers 1 -bypass /big -max-connections N+100 -send-timeout 10m "
                   "-client-header-timeout 60s`; measured: the worker." % result["binary"])
    if "haproxy" in p:
        out.append("* HAProxy (%s): `haproxy -db -f CFG`, defaults but `nbthread 1`, `mode http`, `maxconn N+100` "
                   "(global and frontend), `timeout connect 5s`, `timeout client 10m`, `timeout server 10m`; "
                   "one frontend, one server; measured: the haproxy process." % result["versions"]["haproxy"])
    if "nginx" in p or "nginx-notemp" in p:
        out.append("* nginx (%s): `worker_processes 1; master_process on; daemon off; worker_connections (2N+100)×9/8;` "
                   "`proxy_pass http://127.0.0.1:ORIGIN; proxy_http_version 1.1; proxy_read_timeout 10m; "
                   "proxy_send_timeout 10m; send_timeout 10m;` `access_log off`, error log, pid and temp paths in "
                   "the scratch directory (on %s), default buffering (`proxy_buffers 8 4k`, `proxy_buffer_size 4k`, "
                   "`proxy_max_temp_file_size 1024m`); \"nginx (no temp file)\" adds `proxy_max_temp_file_size 0`; "
                   "measured: the worker." % (result["versions"]["nginx"], result["spool_fs"]))
    return out


def ratio_text(x, base):
    if base is None:
        return "—"
    if base["rss_per_conn"] <= 0:
        return "n/a"
    return "%.2f×" % (x["rss_per_conn"] / base["rss_per_conn"])


def report(result, pin):
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = benchlib.machine_description()
    rows = result["rows"]
    names = ", ".join(LABELS[k] for k in result["proxies"])
    out = ["## Slow readers: %s (%s; %d CPUs, %s, kernel %s; pinning: %s; load before %s)"
           % (names, when, machine["nproc"], machine["model"], machine["kernel"],
              "the proxy on CPU %s, this script and the origin on CPU %s" % (pin.proxy_cpu, pin.load_cpu)
              if pin.enabled else "none", result["load_before"]), "",
           "Origin bench/bulk_origin.py (fresh for every row), %d-byte bodies%s; each client: SO_RCVBUF %d, "
           "GET /big, never reads; %d round(s) per proxy; stalled = origin silent and the measured process's "
           "RSS flat for %g s. Every proxy fresh for every row, the same origin program, clients and pinning:"
           % (result["body_bytes"], ", SO_SNDBUF %d" % result["origin_sndbuf"] if result["origin_sndbuf"] else "",
              result["rcvbuf"], result["rounds"], result["settle"]), ""]
    out += proxy_settings(result) + [""]
    notes = ([result["note"]] if result["note"] else []) + result["skipped"]
    for note in notes:
        out += ["Note: %s." % note]
    if notes:
        out.append("")
    out += ["| connections | proxy | alive at the stall | RSS MiB before / stalled / after | RSS per connection "
            "| vs HAProxy | RssAnon per connection | bytes in the proxy per connection | temp file per connection "
            "| kernel TCP memory per connection (not RSS) | stalled after s |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    base = {(r["n"], i): x for r in rows if r["proxy"] == "haproxy" for i, x in enumerate(r["rounds"])}
    for r in rows:
        for i, x in enumerate(r["rounds"]):
            a = max(x["alive"], 1)
            out.append("| " + " | ".join([
                "{:,}".format(r["n"]) + (" (round %d)" % (i + 1) if len(r["rounds"]) > 1 else ""),
                LABELS[r["proxy"]],
                "{:,}".format(x["alive"]),
                "%s / %s / %s" % (mib(r["before"]["VmRSS"]), mib(x["stalled"]["VmRSS"]), mib(x["after"]["VmRSS"])),
                "**%.1f KiB**" % (x["rss_per_conn"] / KIB),
                ratio_text(x, base.get((r["n"], i))),
                "%.1f KiB" % (x["anon_per_conn"] / KIB),
                "%.1f KiB" % (x["held"] / a / KIB),
                "%.1f MiB" % (x["spool"][1] / a / KIB / KIB) if x["spool"] else "—",
                "%.1f KiB" % (x["tcp_kib"] / a),
                "%.1f%s" % (x["fill_secs"], "" if x["settled"] else " (not settled)")]) + " |")
    out.append("")
    for r in rows:
        for i, x in enumerate(r["rounds"]):
            q, a = x["queues"], max(x["alive"], 1)
            line = (
                "{} at N = {:,}{}: {}VmHWM {} MiB; kernel queues per connection: client receive {:.1f} KiB, proxy send "
                "{:.1f} KiB, proxy receive from the origin {:.1f} KiB, origin send {:.1f} KiB; origin sent {:.1f} KiB "
                "per connection ({} responses completed; on the connections still open {:.0f}–{:.0f} KiB); kernel: {} "
                "connections aborted for want of memory, {} packets dropped from receive queues, {} handshakes dropped by a "
                "full accept queue (ListenOverflows); after: fds {} "
                "(before {}) {:.1f} s after the stall, {} origin connections closed".format(
                    LABELS[r["proxy"]], r["n"], " round %d" % (i + 1) if len(r["rounds"]) > 1 else "",
                    "{:,} clients reset before the stall; ".format(x["reset"]) if x["reset"] else "",
                    mib(x["stalled"]["VmHWM"]),
                    q["client_recv"] / a / KIB, q["proxy_send"] / a / KIB, q["proxy_origin_recv"] / a / KIB,
                    q["origin_send"] / a / KIB, x["body_sent"] / a / KIB, x["completed"],
                    x["origin"]["least_sent"] / KIB, x["origin"]["most_sent"] / KIB,
                    x["tcp_ext"]["TCPAbortOnMemory"], x["tcp_ext"]["TCPRcvQDrop"], x["tcp_ext"]["ListenOverflows"],
                    x["fds_after"], r["fds_before"], x["closed_secs"], x["origin_closed"]))
            if x["spool"] is not None:
                count, size, disk = x["spool"]
                line += ("; temp files open at the stall: {:,}, {:.2f} GiB ({:.2f} GiB of blocks; the file "
                         "system's free space fell by {:.2f} GiB)".format(count, size / GIB, disk / GIB,
                                                                        x["disk_used"] / GIB))
            if x["silent_closes"] is not None:
                line += ", {} exchanges ended by -upstream-read-timeout".format(x["silent_closes"])
            if r["extra"]:
                line += "; Concert's counters: {} send timeouts, {} refused".format(
                    r["extra"]["send_timeouts"], r["extra"]["refused"])
            out.append(line + ".")
    out.append("")
    heads = ", ".join("%s %d" % (LABELS[k], h) for k, h in
                      sorted({(r["proxy"], r["head_len"]) for r in rows}, key=lambda kh: PROXIES.index(kh[0])))
    out.append("RSS per connection = (stalled - before) / connections alive at the stall (the proxy's established "
               "client sockets); vs HAProxy = that over HAProxy's at the same N. Bytes in the proxy = body bytes the "
               "origin sent in the round (on the connections still open, and whole bodies of the responses it "
               "completed) - what the four kernel queues hold (`ss -tn`; the response head, in the client-side "
               "queues, is left out: bytes %s), in its memory or, for nginx, its temp files. Temp file = the size of "
               "the temp files the nginx worker held open at the stall (unlinked at once, so read through "
               "/proc/PID/fd; on disk and in the page cache, not in its RSS); a temp file keeps what nginx already "
               "read back from it and sent, so it can exceed the bytes in the proxy. The kernel's TCP memory and "
               "its TcpExt counters are machine-wide: anything else running moves them." % heads)
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(os.path.dirname(HERE), "build", "concert"))
    p.add_argument("--proxies", default=",".join(PROXIES),
                   help="comma list of %s (default: all)" % ", ".join(PROXIES))
    p.add_argument("--haproxy", default=None, help="HAProxy binary (default: haproxy on PATH or /usr/sbin)")
    p.add_argument("--nginx", default=None, help="nginx binary (default: nginx on PATH or /usr/sbin)")
    p.add_argument("--connections", default="1000,5000,10000", help="comma list of counts, one run each")
    p.add_argument("--body-bytes", type=int, default=64 * 1024 * 1024)
    p.add_argument("--rcvbuf", type=int, default=4096, help="SO_RCVBUF of each client socket")
    p.add_argument("--origin-sndbuf", type=int, default=0,
                   help="SO_SNDBUF of the origin's sockets (0: the kernel's autotuning)")
    p.add_argument("--rounds", type=int, default=1,
                   help="fills per proxy: the later ones show whether what the allocator kept is reused")
    p.add_argument("--settle-seconds", type=float, default=10.0,
                   help="origin silent and RSS flat this long = stalled (the kernel backs off for seconds when "
                        "its TCP memory runs short)")
    p.add_argument("--fill-timeout", type=float, default=180.0)
    p.add_argument("--spool-limit-gib", type=float, default=24.0,
                   help="default nginx spools N x min(body, 1 GiB) to disk: counts over this are skipped for it")
    p.add_argument("--out", default=os.path.join(HERE, "results", "slow_readers.md"))
    p.add_argument("--tmp", default=None)
    p.add_argument("--pid-file", default=None)
    p.add_argument("--no-pin", action="store_true")
    args = p.parse_args()
    proxies = [x.strip() for x in args.proxies.split(",") if x.strip()]
    unknown = [x for x in proxies if x not in PROXIES]
    if unknown or not proxies:
        sys.exit("slow_readers: --proxies takes a comma list of %s, not %r" % (", ".join(PROXIES), args.proxies))
    proxies = [k for k in PROXIES if k in proxies]
    versions = {}
    if "concert" in proxies and not benchlib.concert_usable(args.binary):
        sys.exit("slow_readers: %s is not a usable concert binary" % args.binary)
    for name in ("haproxy", "nginx"):
        if not any(k.startswith(name) for k in proxies):
            continue
        path = find_binary(name, getattr(args, name))
        if path is None:
            sys.exit("slow_readers: %s not found%s: install the Debian package %s (make deps-bench, or apt-get "
                     "install %s), or leave it out of --proxies"
                     % (name, " at %s" % getattr(args, name) if getattr(args, name) else " on PATH or in /usr/sbin",
                        PACKAGES[name], PACKAGES[name]))
        setattr(args, name, path)
        versions[name] = benchlib.tool_version([path, "-v"])
    counts, note = fit_fd_limit([int(x) for x in args.connections.split(",") if x.strip()])

    def run(tmp, procs, pin):
        if pin.enabled:
            os.sched_setaffinity(0, {int(pin.load_cpu)})
        rows, skipped = [], []
        for n in counts:
            for key in proxies:
                if key == "nginx":
                    why = spool_skip_reason(args, tmp, n)
                    if why:
                        progress("N=%d nginx skipped: %s" % (n, why))
                        skipped.append("nginx (default buffering) not measured at N = {:,}: {}".format(n, why))
                        continue
                rows.append(measure(args, tmp, procs, pin, n, key))
        spool_fs = subprocess.run(["df", "--output=source,fstype", tmp], capture_output=True,
                                  text=True).stdout.split("\n")[1:2]
        return {"rows": rows, "note": note, "skipped": skipped, "body_bytes": args.body_bytes, "rcvbuf": args.rcvbuf,
                "rounds": args.rounds, "settle": args.settle_seconds, "origin_sndbuf": args.origin_sndbuf,
                "load_before": args.load_before, "proxies": proxies, "versions": versions, "binary": args.binary,
                "spool_fs": " ".join(spool_fs[0].split()) if spool_fs and spool_fs[0].strip() else tmp}

    benchlib.run_driver("slow_readers", args, ["ss"], "concert-slow-", run, report)


if __name__ == "__main__":
    main()
