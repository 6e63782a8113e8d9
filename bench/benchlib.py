"""Shared plumbing for the end-to-end benchmarks (bench/e2e.py, bench/churn.py,
bench/queue_scale.py).

What it owns: starting and stopping the processes a benchmark run needs (nginx as
origin or proxy, HAProxy, Concert, wrk in the foreground or background), pinning
them to CPUs, reading CPU time (clock ticks or exact schedstat run time) and
memory of a process tree from /proc, reading Concert's stats, and minting
`concert_admit` passes.

Every process is started here as a direct child, recorded in `Procs`, written to a
pid file (so bench/run.sh's trap can stop it if Python itself is killed) and stopped
by pid with SIGTERM (then SIGKILL after a grace) when the run ends. Nothing is
signalled by name. Everything binds 127.0.0.1 only.
"""
import base64
import hashlib
import hmac
import json
import os
import platform
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")
BENCH_SECRET = "concert-bench-secret-0123456789abcdef0123456789"
LISTEN_RE = re.compile(r"listening on ([0-9.]+):(\d+)")


# ---------------------------------------------------------------- machine

def machine_description():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "model": model, "kernel": platform.release()}


def load_average():
    """1-minute load average: other work on the machine skews every number, so reports show it."""
    return "%.2f" % os.getloadavg()[0]


def tool_version(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[0].strip() if text else "unknown"


class Pinning:
    """CPU placement. On 2+ CPUs the measured proxy gets CPU 1 to itself; the load
    generator and the origin share CPU 0. With one CPU nothing is pinned."""

    def __init__(self, enabled=True):
        self.enabled = enabled and (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None
        self.proxy_cpu = "1"
        self.load_cpu = "0"

    def proxy(self, cmd):
        return ["taskset", "-c", self.proxy_cpu] + cmd if self.enabled else cmd

    def load(self, cmd):
        return ["taskset", "-c", self.load_cpu] + cmd if self.enabled else cmd

    def describe(self):
        if not self.enabled:
            return "none (fewer than 2 CPUs or no taskset)"
        return "proxy under test on CPU %s; wrk and the origin nginx on CPU %s" % (self.proxy_cpu, self.load_cpu)


# ---------------------------------------------------------------- processes

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Procs:
    """The children of one benchmark run, stopped by pid in reverse start order."""

    def __init__(self, pid_file=None):
        self.items = []
        self.pid_file = pid_file

    def start(self, name, cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=None):
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=env, stdin=subprocess.DEVNULL)
        self.items.append((name, proc))
        if self.pid_file:
            with open(self.pid_file, "a") as f:
                f.write("%d\n" % proc.pid)
        return proc

    def stop(self, proc, grace=10.0):
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            except OSError:
                pass
        self.items = [(n, p) for n, p in self.items if p is not proc]

    def stop_all(self):
        for _, proc in reversed(list(self.items)):
            self.stop(proc)


def install_signal_exit():
    """SIGTERM/SIGINT unwind through the callers' finally blocks, which stop the children."""
    def handler(signum, _frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def wait_http(url, timeout=15.0, proc=None, expect=200, headers=None):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("process exited with %s before answering %s" % (proc.returncode, url))
        try:
            req = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status == expect:
                    return
                last = r.status
        except urllib.error.HTTPError as e:
            last = e.code
            if e.code == expect:
                return
        except OSError as e:
            last = e
        time.sleep(0.05)
    raise RuntimeError("%s not ready: %s" % (url, last))


def wait_log(path, regex, timeout=15.0, proc=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(path, "rb") as f:
                m = regex.search(f.read().decode("utf-8", "replace"))
            if m:
                return m
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.02)
    tail = [l for l in read_text(path).splitlines() if l.strip()][-1:] or ["(empty)"]
    status = proc.poll() if proc is not None else None
    raise RuntimeError("%s before logging %r; last log line: %s" % (
        "exited with status %s" % status if status is not None else "timed out", regex.pattern, tail[0]))


def wait_until(predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if predicate():
                return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# ---------------------------------------------------------------- /proc accounting

def _stat_fields(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()


def descendants(root):
    """root and every live descendant, from the ppid links in /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(_stat_fields(int(entry))[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, pending = [], [root]
    while pending:
        pid = pending.pop()
        out.append(pid)
        pending.extend(children.get(pid, []))
    return out


def tree_cpu_seconds(root):
    """utime+stime of root and its live descendants, in seconds."""
    total = 0
    for pid in descendants(root):
        try:
            f = _stat_fields(pid)
            total += int(f[11]) + int(f[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / CLK_TCK


HAVE_SCHEDSTAT = os.path.exists("/proc/self/schedstat")


def tree_cpu_ns(root):
    """CPU time of root and its live descendants in nanoseconds, every thread included, from
    /proc/PID/task/TID/schedstat (the scheduler's own run-time account, exact where utime+stime
    come in clock ticks of 10 ms). Falls back to utime+stime when the kernel has no schedstat."""
    if not HAVE_SCHEDSTAT:
        return int(tree_cpu_seconds(root) * 1e9)
    return sum(process_cpu_ns(pid) for pid in descendants(root))


def process_cpu_ns(pid):
    """CPU time of one process (all its threads), nanoseconds, from schedstat."""
    if not HAVE_SCHEDSTAT:
        try:
            f = _stat_fields(pid)
            return (int(f[11]) + int(f[12])) * 1000000000 // CLK_TCK
        except (OSError, IndexError, ValueError):
            return 0
    total = 0
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return 0
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return total


def cpu_busy_seconds(cpu):
    """Busy time (all but idle and iowait) of one CPU since boot, from /proc/stat."""
    if cpu is None:
        return 0.0
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu%s " % cpu):
                v = [int(x) for x in line.split()[1:]]
                return (sum(v[:8]) - v[3] - v[4]) / CLK_TCK
    return 0.0


def tree_memory_detail(root):
    """Sums over the tree, KiB: rss, pss, and pss_own = Pss_Anon + Pss_Shmem (heap, stacks and
    shared memory such as Concert's segment, without the file pages of the binary and libraries,
    whose PSS moves whenever other processes on the machine map the same libraries)."""
    out = {"rss": 0, "pss": 0, "pss_own": 0}
    fields = {"Rss:": "rss", "Pss:": "pss", "Pss_Anon:": "pss_own", "Pss_Shmem:": "pss_own"}
    for pid in descendants(root):
        try:
            with open("/proc/%d/smaps_rollup" % pid) as f:
                for line in f:
                    key = fields.get(line.split(None, 1)[0])
                    if key:
                        out[key] += int(line.split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return out


def tree_memory_kib(root):
    """Sum of RSS and of PSS (proportional: shared pages split between sharers) over the tree."""
    d = tree_memory_detail(root)
    return d["rss"], d["pss"]


def largest_shared_mapping_kib(pid):
    """Size of the largest shared (s) mapping of pid: Concert's anonymous segment."""
    best = 0
    try:
        with open("/proc/%d/maps" % pid) as f:
            for line in f:
                parts = line.split()
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if parts[1][3] == "s":
                    best = max(best, (hi - lo) // 1024)
    except OSError:
        return 0
    return best


# ---------------------------------------------------------------- passes

def mint_pass(secret=BENCH_SECRET, ttl=600, now=None, pass_id=None):
    """concert_admit value: id(16) | expiry u64 BE | HMAC-SHA256(secret, first 24)[:16], base64url, no padding."""
    pass_id = pass_id if pass_id is not None else os.urandom(16)
    expiry = int(now if now is not None else time.time()) + ttl
    head = pass_id + struct.pack(">Q", expiry)
    mac = hmac.new(secret.encode(), head, hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(head + mac).rstrip(b"=").decode()


# ---------------------------------------------------------------- servers

NGINX_COMMON = """worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 20000; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/client_body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
{body}
}}
"""

NGINX_ORIGIN_BODY = """  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    root {root};
  }}"""

NGINX_PROXY_BODY = """  upstream origin {{
    server 127.0.0.1:{origin};
    keepalive 64;
    keepalive_requests 1000000;
  }}
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}"""

HAPROXY_CFG = """global
  nbthread 1
  maxconn 8000{global_opts}
defaults
  mode http
  option http-keep-alive
  http-reuse always
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout queue 30s
  timeout http-keep-alive 120s
frontend fe
  bind 127.0.0.1:{port}
  default_backend be
backend be
  server origin 127.0.0.1:{origin}{server_opts}
"""


def _nginx_dir(tmp, name):
    d = os.path.join(tmp, name)
    for sub in ("", "client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    return d


def start_nginx_origin(procs, tmp, pin, files):
    """nginx with one worker serving `files` ({url path: bytes}) from a temp root."""
    d = _nginx_dir(tmp, "origin-nginx")
    root = os.path.join(d, "www")
    for path, data in files.items():
        full = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
    # nginx workers started by root run as nobody and must read the root.
    for dirpath, _, _ in os.walk(tmp):
        os.chmod(dirpath, 0o755)
    for dirpath, _, filenames in os.walk(root):
        for fn in filenames:
            os.chmod(os.path.join(dirpath, fn), 0o644)
    port = free_port()
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_COMMON.format(tmp=d, body=NGINX_ORIGIN_BODY.format(port=port, root=root)))
    proc = procs.start("nginx-origin", pin.load(["nginx", "-e", os.path.join(d, "error.log"), "-p", d, "-c", conf,
                                                 "-g", "daemon off;"]))
    wait_http("http://127.0.0.1:%d%s" % (port, next(iter(files))), proc=proc)
    return proc, port


def start_nginx_proxy(procs, tmp, pin, origin_port):
    d = _nginx_dir(tmp, "proxy-nginx")
    os.chmod(d, 0o755)
    port = free_port()
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_COMMON.format(tmp=d, body=NGINX_PROXY_BODY.format(port=port, origin=origin_port)))
    proc = procs.start("nginx-proxy", pin.proxy(["nginx", "-e", os.path.join(d, "error.log"), "-p", d, "-c", conf,
                                                 "-g", "daemon off;"]))
    return proc, port


def start_haproxy(procs, tmp, pin, origin_port, server_maxconn=None, busy_polling=False):
    port = free_port()
    conf = os.path.join(tmp, "haproxy-%d.cfg" % port)
    opts = " maxconn %d" % server_maxconn if server_maxconn else ""
    with open(conf, "w") as f:
        f.write(HAPROXY_CFG.format(port=port, origin=origin_port, server_opts=opts,
                                   global_opts="\n  busy-polling" if busy_polling else ""))
    log = open(os.path.join(tmp, "haproxy-%d.log" % port), "wb")
    proc = procs.start("haproxy", pin.proxy(["haproxy", "-db", "-f", conf]), stdout=log, stderr=log)
    log.close()
    return proc, port


def concert_env(secret=BENCH_SECRET):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCERT_")}
    env["CONCERT_ADMIT_SECRET"] = secret
    return env


def start_concert(procs, tmp, pin, binary, args, tag="concert"):
    """Concert with -listen 127.0.0.1:0; returns (proc, port, log path) once it serves healthz."""
    log_path = os.path.join(tmp, "%s-%d.log" % (tag, len(procs.items)))
    log = open(log_path, "wb")
    cmd = [binary, "-listen", "127.0.0.1:0", "-access-log=false"] + list(args)
    proc = procs.start(tag, pin.proxy(cmd), stdout=subprocess.DEVNULL, stderr=log, env=concert_env())
    log.close()
    m = wait_log(log_path, LISTEN_RE, proc=proc)
    port = int(m.group(2))
    wait_http("http://127.0.0.1:%d/_room/healthz" % port, proc=proc)
    return proc, port, log_path


def concert_usable(binary):
    """True when `binary -version` runs: the binary exists and links."""
    if not binary or not os.path.isfile(binary) or not os.access(binary, os.X_OK):
        return False
    try:
        out = subprocess.run([binary, "-version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def concert_stats(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/_room/stats" % port, timeout=5) as r:
        return json.loads(r.read())


def leftover_waiting(port, settle=1.0):
    """After the load has stopped, when every client has gone: the tickets still waiting with no page
    request in flight (a -queue-hold run should leave none: a held request whose client closes the
    connection gives its place up). Returns (live waiting, occupancy) or None if stats do not answer."""
    time.sleep(settle)
    try:
        st = concert_stats(port)
    except (OSError, ValueError):
        return None
    return st.get("live_queue_depth", 0), st.get("occupancy", 0)


def concert_has_flag(binary, flag):
    """True when `binary --help` lists `flag` (settings still being added are optional here)."""
    try:
        out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return re.search(r"(^|\s)%s(\s|=|$)" % re.escape(flag), out.stdout + out.stderr, re.M) is not None


# ---------------------------------------------------------------- wrk

WRK_DONE_LUA = """
done = function(summary, latency, requests)
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d}\\n',
    summary.requests, summary.duration, summary.bytes, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.status, summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.max))
end
"""

# Requests are pre-built in init() from a template file with the placeholder
# @VALUE@ and a file of values (one per line); each thread takes every
# nthreads-th value and cycles through its share, so request() is a table
# lookup. delay() spaces the requests of one connection (0 = back to back).
WRK_LINES_LUA = """
local counter = 0
setup = function(thread)
  thread:set("tid", counter)
  counter = counter + 1
end
init = function(args)
  local values, template_path, nthreads, delay_ms = args[1], args[2], tonumber(args[3]), tonumber(args[4])
  local f = assert(io.open(template_path, "rb"))
  local template = f:read("*a")
  f:close()
  reqs = {}
  local i = 0
  for line in io.lines(values) do
    if i % nthreads == tid then
      reqs[#reqs + 1] = template:gsub("@VALUE@", line)
    end
    i = i + 1
  end
  idx = 0
  pause = delay_ms or 0
end
request = function()
  idx = idx + 1
  if idx > #reqs then idx = 1 end
  return reqs[idx]
end
"""

# Requests pre-rendered by Python, one file per wrk thread (PREFIX.0,
# PREFIX.1, ...), each request ending with the blank line (bodiless GETs).
# wrk runs every thread's init() one after the other before it starts its
# clock, while the threads already created send requests: reading one file
# with a single read and splitting it keeps that head start to a fraction of
# a second even with a million requests.
WRK_REQUESTS_LUA = """
local counter = 0
setup = function(thread)
  thread:set("tid", counter)
  counter = counter + 1
end
init = function(args)
  local prefix, delay_ms = args[1], tonumber(args[2])
  local f = assert(io.open(prefix .. "." .. tid, "rb"))
  local data = f:read("*a")
  f:close()
  reqs = {}
  local pos = 1
  while true do
    local _, e = data:find("\\r\\n\\r\\n", pos, true)
    if not e then break end
    reqs[#reqs + 1] = data:sub(pos, e)
    pos = e + 1
  end
  idx = 0
  pause = delay_ms or 0
end
request = function()
  idx = idx + 1
  if idx > #reqs then idx = 1 end
  return reqs[idx]
end
"""

# wrk decides once, from the main script, whether delay() exists, so the
# paced variant is a separate script.
WRK_DELAY_LUA = """
delay = function()
  return pause
end
"""


def write_lua(tmp, name, text):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


class WrkRun:
    """One wrk process started in the background; finish() waits for it and returns its result."""

    def __init__(self, procs, proc, out_path, duration):
        self.procs = procs
        self.proc = proc
        self.out_path = out_path
        self.duration = duration

    def finish(self):
        try:
            self.proc.wait(self.duration + 60)
        except subprocess.TimeoutExpired:
            pass
        finally:
            self.procs.stop(self.proc)
        text = read_text(self.out_path)
        for line in text.splitlines():
            if line.startswith("BENCH_JSON "):
                return json.loads(line[len("BENCH_JSON "):])
        raise RuntimeError("wrk printed no result:\n" + text[-2000:])


def start_wrk(procs, pin, url, tmp, threads, connections, duration, script_args=None, script=None,
              timeout_s=10):
    """Starts wrk (pinned like the load generator) and returns a WrkRun."""
    lua = script or write_lua(tmp, "done.lua", WRK_DONE_LUA)
    cmd = pin.load(["wrk", "-t%d" % threads, "-c%d" % connections, "-d%ds" % duration, "--timeout",
                    "%ds" % timeout_s, "--latency", "-s", lua, url])
    if script_args:
        cmd += ["--"] + [str(a) for a in script_args]
    out_path = os.path.join(tmp, "wrk-%d.out" % len(procs.items))
    with open(out_path, "wb") as out:
        proc = procs.start("wrk", cmd, stdout=out, stderr=subprocess.STDOUT)
    return WrkRun(procs, proc, out_path, duration)


def run_wrk(procs, pin, url, tmp, threads, connections, duration, script_args=None, script=None,
            timeout_s=10):
    """Runs wrk to completion and returns the dict printed by done()."""
    return start_wrk(procs, pin, url, tmp, threads, connections, duration, script_args, script,
                     timeout_s).finish()


def lines_script(tmp, paced=False):
    if paced:
        return write_lua(tmp, "lines-paced.lua", WRK_LINES_LUA + WRK_DELAY_LUA + WRK_DONE_LUA)
    return write_lua(tmp, "lines.lua", WRK_LINES_LUA + WRK_DONE_LUA)


def requests_script(tmp, paced=False):
    if paced:
        return write_lua(tmp, "requests-paced.lua", WRK_REQUESTS_LUA + WRK_DELAY_LUA + WRK_DONE_LUA)
    return write_lua(tmp, "requests.lua", WRK_REQUESTS_LUA + WRK_DONE_LUA)


def write_request_files(prefix, requests, threads):
    """Deals `requests` (bytes, each ending in CRLF CRLF) round-robin into PREFIX.0 .. PREFIX.threads-1."""
    files = [open("%s.%d" % (prefix, t), "wb") for t in range(threads)]
    try:
        for i, req in enumerate(requests):
            files[i % threads].write(req)
    finally:
        for f in files:
            f.close()
    return prefix


# ---------------------------------------------------------------- driver main

def run_driver(name, args, tools, tmp_prefix, run, report):
    """The common body of a driver's main(): check `tools`, make the scratch directory (unless --tmp),
    run `run(tmp, procs, pin)`, stop every process it started, then write `report(result, pin)` to
    args.out and stdout. Returns run's result."""
    for tool in tools:
        if not shutil.which(tool):
            sys.exit("%s: %s not found (make deps-bench installs it)" % (name, tool))
    install_signal_exit()
    own_tmp = args.tmp is None
    tmp = tempfile.mkdtemp(prefix=tmp_prefix) if own_tmp else args.tmp
    procs = Procs(args.pid_file)
    pin = Pinning(not args.no_pin)
    args.load_before = load_average()
    try:
        result = run(tmp, procs, pin)
    finally:
        procs.stop_all()
        if own_tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    text = report(result, pin)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return result
