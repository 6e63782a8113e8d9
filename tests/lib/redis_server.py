"""A throw-away redis-server for the cluster tests (Python standard library only).

    with RedisServer() as redis:
        concert_args = ["-cluster", redis.url]
        redis.command("PING")            # -> "PONG"
        redis.pause(); redis.resume()    # SIGSTOP / SIGCONT
        redis.restart_empty()            # SIGKILL, then a new empty server on the same port

The server listens on 127.0.0.1 only, on a free port, with no persistence
(`--save "" --appendonly no`) and its working directory in a temporary
directory. Only the process started here is ever signalled, by pid.

There is no Python redis module on the test machines, so `command()` speaks
RESP2 itself over a fresh socket: enough for PING, FLUSHALL, DBSIZE, KEYS, GET,
HGETALL, ZRANGE and the like. Replies come back as str (simple strings and
bulk strings, decoded as UTF-8 with replacement), int, None (nil) or lists;
an error reply raises RedisError.
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

REDIS_BIN = os.environ.get("REDIS_SERVER_BIN", "/usr/bin/redis-server")


class RedisError(Exception):
    """An error reply (`-ERR ...`) from the server."""


def redis_available():
    """(True, "") when redis-server can be run, else (False, why)."""
    if not os.path.isfile(REDIS_BIN) or not os.access(REDIS_BIN, os.X_OK):
        return False, ("%s is missing: the cluster tests need Debian's redis-server "
                       "(`make deps-test` or `apt-get install -y redis-server` installs it)" % REDIS_BIN)
    return True, ""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def encode_command(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, bytes):
            data = a
        else:
            data = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class _Reader:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("redis closed the connection")
        self.buf += chunk

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def exactly(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode("utf-8", "replace")
        if kind == b"-":
            raise RedisError(rest.decode("utf-8", "replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            return self.exactly(n).decode("utf-8", "replace")
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self.reply() for _ in range(n)]
        raise RedisError("unexpected reply %r" % line[:80])


class RedisServer:
    def __init__(self, port=None, start=True):
        ok, why = redis_available()
        if not ok:
            raise RuntimeError(why)
        self.port = port or free_port()
        self.tmp = tempfile.mkdtemp(prefix="concert-redis-")
        self.log_path = os.path.join(self.tmp, "redis.log")
        self.proc = None
        self.paused = False
        self._log = None
        if start:
            self.start()

    @property
    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    # -- lifecycle
    PROGRAM = "redis-server"

    def command_line(self):
        return [REDIS_BIN, "--port", str(self.port), "--bind", "127.0.0.1", "--daemonize", "no",
                "--save", "", "--appendonly", "no", "--dir", self.tmp, "--protected-mode", "yes",
                "--logfile", ""]

    def start(self, timeout=10):
        if self._log:
            self._log.close()
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command_line(), stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, cwd=self.tmp)
        self.paused = False
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %s:\n%s" % (self.PROGRAM, self.proc.returncode, self.log()))
            try:
                if self.command("PING", timeout=1) == "PONG":
                    return self
            except (OSError, RedisError) as e:
                last = e
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("%s on port %d did not answer PING (%s):\n%s" % (self.PROGRAM, self.port, last, self.log()))

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def pause(self):
        """SIGSTOP: the port still accepts connections (the kernel does), nothing answers."""
        if self.running():
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self):
        if self.running():
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def kill(self):
        """SIGKILL, and reap it."""
        if self.running():
            self.proc.kill()
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.paused = False
        if self._log:
            self._log.close()
            self._log = None

    def stop(self, timeout=10):
        """SIGTERM (after SIGCONT if paused); SIGKILL if it does not go."""
        if self.running():
            if self.paused:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def restart_empty(self, timeout=10):
        """SIGKILL the server and start a new, empty one on the same port."""
        self.kill()
        deadline = time.time() + timeout
        while True:
            try:
                return self.start(timeout=max(1, deadline - time.time()))
            except RuntimeError:
                # The port may take a moment to be free again.
                if time.time() >= deadline:
                    raise
                time.sleep(0.1)

    def close(self):
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        if not self.running():
            self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    # -- RESP
    def command(self, *args, timeout=5):
        """One command on a fresh connection; its decoded reply."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            s.sendall(encode_command(args))
            return _Reader(s).reply()
        finally:
            s.close()

    def pipeline(self, commands, timeout=5):
        """Several commands on one connection; their replies (errors as RedisError objects)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            s.sendall(b"".join(encode_command(c) for c in commands))
            reader = _Reader(s)
            out = []
            for _ in commands:
                try:
                    out.append(reader.reply())
                except RedisError as e:
                    out.append(e)
            return out
        finally:
            s.close()

    def keys(self, pattern="*"):
        return sorted(self.command("KEYS", pattern))

    def dbsize(self):
        return self.command("DBSIZE")
