"""Throw-away Redis Sentinels for the cluster tests (Python standard library only).

    master = RedisServer()
    replica = RedisServer()
    replicate(replica, master)             # REPLICAOF 127.0.0.1 <master port>; waits for the sync
    sentinels = [RedisSentinel("mymaster", master.port) for _ in range(3)]
    wait_sentinels_ready(sentinels, replicas=1)
    concert_args = ["-cluster", sentinel_url(sentinels, "mymaster")]
    sentinels[0].master_addr()             # -> ("127.0.0.1", port)

Each sentinel listens on 127.0.0.1 only, on a free port, and monitors the
master as `name` with quorum 2, down-after-milliseconds 1000 and
failover-timeout 3000 (so a failover takes a few seconds), hostnames not
resolved. Its configuration file (which a sentinel rewrites as it learns)
and its log are in a temporary directory. Only the process started here is
ever signalled, by pid. REDIS_SENTINEL_BIN overrides /usr/bin/redis-sentinel.

FakeSentinel stands in for a sentinel that names whatever the test says (a replica, a port
nothing listens on). Commands go over RESP2 as in redis_server.py (its encoder and reader).
"""
import os
import socket
import tempfile
import threading
import time

from redis_server import RedisError, RedisServer, _Reader, encode_command, free_port

SENTINEL_BIN = os.environ.get("REDIS_SENTINEL_BIN", "/usr/bin/redis-sentinel")


def sentinel_available():
    """(True, "") when redis-sentinel can be run, else (False, why)."""
    if not os.path.isfile(SENTINEL_BIN) or not os.access(SENTINEL_BIN, os.X_OK):
        return False, ("%s is missing: the Sentinel tests need Debian's redis-sentinel "
                       "(`make deps-test` or `apt-get install -y redis-sentinel` installs it)" % SENTINEL_BIN)
    return True, ""


def command_at(port, *args, timeout=5):
    """One command to 127.0.0.1:port on a fresh connection; its decoded reply."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(encode_command(args))
        return _Reader(s).reply()
    finally:
        s.close()


def pairs(reply):
    """A flat [field, value, field, value, ...] reply as a dict."""
    return dict(zip(reply[0::2], reply[1::2])) if isinstance(reply, list) else {}


def info(port, section, timeout=5):
    """INFO <section> of the server at 127.0.0.1:port as a dict of its "key:value" lines."""
    out = {}
    for line in command_at(port, "INFO", section, timeout=timeout).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key] = value
    return out


def replicate(replica, master, timeout=15):
    """Makes `replica` (a RedisServer) a replica of `master` and waits until its link is up (the
    master sends its data at once, not after the default 5 s wait for more replicas)."""
    master.command("CONFIG", "SET", "repl-diskless-sync-delay", "0")
    replica.command("REPLICAOF", "127.0.0.1", master.port)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if info(replica.port, "replication").get("master_link_status") == "up":
                return
        except (OSError, RedisError):
            pass
        time.sleep(0.05)
    raise RuntimeError("the replica on port %d did not sync with %d:\n%s" % (replica.port, master.port,
                                                                          replica.log()))


class RedisSentinel(RedisServer):
    """A redis-sentinel process: started, stopped, killed and logged as a RedisServer is."""

    PROGRAM = "redis-sentinel"

    def __init__(self, name, master_port, quorum=2, down_after_ms=1000, failover_timeout_ms=3000, start=True):
        ok, why = sentinel_available()
        if not ok:
            raise RuntimeError(why)
        self.name = name
        self.port = free_port()
        self.tmp = tempfile.mkdtemp(prefix="concert-sentinel-")
        self.conf_path = os.path.join(self.tmp, "sentinel.conf")
        self.log_path = os.path.join(self.tmp, "sentinel.log")
        with open(self.conf_path, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile \"\"\n"
                    "sentinel resolve-hostnames no\n"
                    "sentinel monitor %s 127.0.0.1 %d %d\n"
                    "sentinel down-after-milliseconds %s %d\n"
                    "sentinel failover-timeout %s %d\n"
                    "sentinel parallel-syncs %s 1\n" % (self.port, self.tmp, name, master_port, quorum, name,
                                                       down_after_ms, name, failover_timeout_ms, name))
        self.proc = None
        self.paused = False
        self._log = None
        if start:
            self.start()

    def command_line(self):
        return [SENTINEL_BIN, self.conf_path]

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def command(self, *args, timeout=5):
        return command_at(self.port, *args, timeout=timeout)

    def master_addr(self):
        """(host, port) the sentinel names for the master now, or None."""
        reply = self.command("SENTINEL", "get-master-addr-by-name", self.name)
        return (reply[0], int(reply[1])) if reply else None

    def master_state(self):
        """SENTINEL MASTER <name> as a dict (num-slaves, num-other-sentinels, flags, ...)."""
        return pairs(self.command("SENTINEL", "MASTER", self.name))


def sentinel_url(sentinels, name):
    """-cluster's redis+sentinel:// URL for these sentinels and master name."""
    return "redis+sentinel://%s/%s" % (",".join(s.address for s in sentinels), name)


def wait_sentinels_ready(sentinels, replicas, timeout=20):
    """Waits until every sentinel knows the others and `replicas` replicas of its master (what a
    failover needs); raises RuntimeError with what they know otherwise."""
    deadline = time.time() + timeout
    states = []
    while time.time() < deadline:
        try:
            states = [s.master_state() for s in sentinels]
            if all(int(st.get("num-other-sentinels", 0)) == len(sentinels) - 1 and
                   int(st.get("num-slaves", 0)) == replicas for st in states):
                return
        except (OSError, RedisError, ValueError):
            pass
        time.sleep(0.1)
    raise RuntimeError("the sentinels did not find each other and the replicas: %r" % [
        {k: st.get(k) for k in ("num-other-sentinels", "num-slaves", "flags")} for st in states])


class FakeSentinel:
    """A stand-in sentinel on 127.0.0.1 (a thread of the test) that answers
    `SENTINEL get-master-addr-by-name NAME` with `answer`, (host, port) or None (it does not know
    the name), and anything else with an error; `asked` counts the questions.

        fake = FakeSentinel(("127.0.0.1", replica.port))
        fake.answer = ("127.0.0.1", master.port)
    """

    def __init__(self, answer=None):
        self.answer = answer
        self.asked = 0
        self.lock = threading.Lock()
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port = self.server.getsockname()[1]
        self.closed = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def _serve(self):
        while not self.closed:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn):
        reader = _Reader(conn)
        try:
            while True:
                args = reader.reply()
                conn.sendall(self._answer(args if isinstance(args, list) else [args]))
        except (OSError, ConnectionError, RedisError, ValueError):
            pass
        finally:
            conn.close()

    def _answer(self, args):
        words = [str(a).lower() for a in args[:2]]
        if words != ["sentinel", "get-master-addr-by-name"] or len(args) != 3:
            return b"-ERR unknown command\r\n"
        with self.lock:
            self.asked += 1
            answer = self.answer
        if answer is None:
            return b"*-1\r\n"
        return encode_command([answer[0], str(answer[1])])

    def close(self):
        self.closed = True
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        except OSError:
            pass
        self.server.close()
