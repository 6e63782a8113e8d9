"""Starts the real concert binary for integration tests and talks to it.

    with Concert(["-upstream", origin.url, "-cap", "2"], workers=2) as c:
        status, headers, body = c.get("/hello")

The binary listens on 127.0.0.1:0; the harness reads the bound port from the
master's log line `listening on 127.0.0.1:PORT`. Only processes started here
are signalled, by pid.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("CONCERT_BIN", os.path.join(ROOT, "build", "concert"))
TEST_SECRET = "concert-test-secret-0123456789abcdef"
LISTEN_RE = re.compile(r"listening on ([0-9.]+|\[[0-9a-f:]+\]):(\d+)")
ADMIN_LISTEN_RE = re.compile(r"admin endpoints on ([0-9.]+|\[[0-9a-f:]+\]):(\d+)")


class Concert:
    def __init__(self, args, workers=2, env=None, admin_token=None, secret=TEST_SECRET, access_log=False,
                 wait=True, config_text=None, proxy_preface=None, wrapper=None):
        self.args = list(args)
        # A command the binary runs under (e.g. ["unshare", "--pid", "--fork"]).
        self.wrapper = list(wrapper or [])
        # With -proxy-protocol every connection must open with a PROXY
        # header: the harness's own requests (stats, get) send this one.
        self.proxy_preface = proxy_preface
        self.workers = workers
        self.env = dict(os.environ)
        # CONCERT_IO_URING passes through: a whole suite runs on the data
        # path it names (tests/run_all.py reruns some with it set to off).
        for k in list(self.env):
            if k.startswith("CONCERT_") and k != "CONCERT_IO_URING":
                del self.env[k]
        if secret is not None:
            self.env["CONCERT_ADMIT_SECRET"] = secret
        if admin_token is not None:
            self.env["CONCERT_ADMIN_TOKEN"] = admin_token
        self.env.update(env or {})
        self.access_log = access_log
        self.tmp = tempfile.mkdtemp(prefix="concert-test-")
        self.config_path = None
        if config_text is not None:
            self.config_path = os.path.join(self.tmp, "concert.yaml")
            with open(self.config_path, "w") as f:
                f.write(config_text)
        self.log_path = os.path.join(self.tmp, "error.log")
        self.access_path = os.path.join(self.tmp, "access.log")
        self.proc = None
        self.port = None
        self.admin_port = None  # with -admin-listen: where /_room/ is served
        self._wait = wait

    # -- lifecycle
    def start(self):
        cmd = self.wrapper + [BIN]
        if self.config_path:
            cmd += ["-c", self.config_path]
        cmd += ["-listen", "127.0.0.1:0", "-workers", str(self.workers), "-access-log=%s" % (
            "true" if self.access_log else "false"), "-access-log-file", self.access_path] + self.args
        self.stderr = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=self.stderr)
        if self._wait:
            self.wait_listening()
            self.wait_workers(self.workers)
        return self

    def wait_listening(self, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = LISTEN_RE.search(self.log())
            admin = ADMIN_LISTEN_RE.search(self.log())
            if m and (admin or "-admin-listen" not in self.args):
                self.port = int(m.group(2))
                self.admin_port = int(admin.group(2)) if admin else None
                return
            if self.proc.poll() is not None:
                raise RuntimeError("concert exited with %s:\n%s" % (self.proc.returncode, self.log()))
            time.sleep(0.02)
        raise RuntimeError("concert did not report its port:\n" + self.log())

    def wait_workers(self, n, timeout=10):
        """Wait until `n` workers of the current generation answer (healthz reaches every worker)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if self.stats().get("workers", 0) >= n:
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("workers did not start:\n" + self.log())

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=15):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill_all()
        return self.proc.returncode if self.proc else None

    def kill_all(self):
        for pid in self.worker_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def worker_pids(self):
        """Pids of the master's children (the workers), from /proc."""
        if not self.proc:
            return []
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % entry) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == self.proc.pid and fields[0] != "Z":
                    pids.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
        return sorted(pids)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        if self.stderr:
            self.stderr.close()

    # -- HTTP helpers
    def conn(self, timeout=10):
        if self.proxy_preface is None:
            return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        return PrefacedConnection(self.proxy_preface, "127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, headers=None, body=None, timeout=10):
        return exchange(self.conn(timeout), method, path, headers, body)

    def get(self, path, headers=None, timeout=10):
        return self.request("GET", path, headers, None, timeout)

    def admin(self, method, path, headers=None, body=None, timeout=10):
        """A request to the admin listener (-admin-listen), else to the public one."""
        if self.admin_port is None:
            return self.request(method, path, headers, body, timeout)
        return exchange(http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=timeout), method, path,
                        headers, body)

    def stats(self):
        status, _, body = self.admin("GET", "/_room/stats", timeout=5)
        if status != 200:
            raise OSError("stats answered %d" % status)
        return json.loads(body)

    def fifo_inversions(self):
        """fifo_inversions_total: admissions from the line that passed over a
        whole cap of waiting tickets. Every FIFO test ends asserting it is 0."""
        return self.stats()["fifo_inversions_total"]

    def metrics(self):
        """GET /_room/metrics: (body text, {(name, ((label, value), ...)): value})."""
        status, _, body = self.get("/_room/metrics", timeout=5)
        if status != 200:
            raise OSError("metrics answered %d" % status)
        text = body.decode()
        return text, parse_metrics(text)


METRIC_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Samples of a Prometheus text exposition: {(name, sorted label pairs): float}."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_RE.match(line)
        if not m:
            raise ValueError("not a sample line: %r" % line)
        labels = tuple(sorted(LABEL_RE.findall(m.group(2) or "")))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples


class PrefacedConnection(http.client.HTTPConnection):
    """An HTTP connection that sends `preface` (a PROXY protocol header) first."""

    def __init__(self, preface, *args, **kw):
        super().__init__(*args, **kw)
        self.preface = preface

    def connect(self):
        super().connect()
        self.sock.sendall(self.preface)


def header(headers, name):
    """First value of a header in an http.client header list (case-insensitive)."""
    for k, v in headers:
        if k.lower() == name.lower():
            return v
    return None


def headers_all(headers, name):
    return [v for k, v in headers if k.lower() == name.lower()]


def set_cookies(headers):
    """{name: value} of the Set-Cookie headers in an http.client header list."""
    out = {}
    for line in headers_all(headers, "Set-Cookie"):
        name, _, rest = line.partition("=")
        out[name] = rest.split(";")[0]
    return out


def jar_update(jar, headers):
    """A cookie jar (dict name -> value) after a response's Set-Cookie headers:
    a cookie set to "" or with Max-Age=0 leaves the jar."""
    for line in headers_all(headers, "Set-Cookie"):
        name, _, rest = line.partition("=")
        value = rest.split(";")[0]
        if "Max-Age=0" in line or value == "":
            jar.pop(name, None)
        else:
            jar[name] = value


def request_from(port, source, path, headers=None, timeout=10, method="GET", body=None):
    """One request to 127.0.0.1:`port` on a connection bound to the loopback
    address `source` (Linux routes all of 127/8 to lo), so Concert sees that
    client address: (status, headers, body)."""
    return exchange(http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0)),
                    method, path, headers, body)


def exchange(conn, method, path, headers=None, body=None):
    """One request on the unopened connection `conn`, which is closed after:
    (status, headers, body)."""
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.getheaders(), r.read()
    finally:
        conn.close()


def raw_exchange(port, data, timeout=5, read_until_close=True):
    """Send raw bytes, return everything received until close or timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
            if not read_until_close and b"\r\n\r\n" in out:
                break
        return out
    finally:
        s.close()


def server_socket_inode(concert_port, client_port):
    """The inode of Concert's side of the loopback connection from client_port, or None while it has
    none (0: still in the listen queue, not accepted by a worker yet)."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].split(":")[1], 16)
            remote_port = int(fields[2].split(":")[1], 16)
            if local_port == concert_port and remote_port == client_port and fields[9] != "0":
                return fields[9]
    return None


def owner_pid(concert, client_port):
    """The pid of the worker that accepted the connection from client_port, or None."""
    inode = server_socket_inode(concert.port, client_port)
    if inode is None:
        return None
    target = "socket:[%s]" % inode
    for pid in concert.worker_pids():
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink("/proc/%d/fd/%s" % (pid, fd)) == target:
                    return pid
            except OSError:
                continue
    return None


def wait_for(predicate, timeout=5, interval=0.02):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = predicate()
        if v:
            return v
        time.sleep(interval)
    return predicate()


class Background(threading.Thread):
    """fn(*args, **kwargs) on a daemon thread. `result` is what it returned, `error` what it raised,
    `done_at` (time.monotonic()) when it ended; all None while it runs. Not started: start() it, or
    use in_thread()."""

    def __init__(self, fn, *args, **kwargs):
        super().__init__(daemon=True)
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.result = self.error = self.done_at = None

    def run(self):
        try:
            self.result = self.fn(*self.args, **self.kwargs)
        except Exception as e:  # kept for the test to report
            self.error = e
        finally:
            self.done_at = time.monotonic()

    def outcome(self, timeout=None):
        """Waits up to `timeout` s for the end: what fn returned; raises what it raised, or
        AssertionError when it is still running."""
        self.join(timeout)
        if self.is_alive():
            raise AssertionError("%s still running after %s s" % (getattr(self.fn, "__name__", "call"), timeout))
        if self.error is not None:
            raise self.error
        return self.result


def in_thread(fn, *args, **kwargs):
    """A started Background running fn(*args, **kwargs)."""
    t = Background(fn, *args, **kwargs)
    t.start()
    return t
