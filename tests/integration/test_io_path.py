"""-io-uring auto|on|off: which data path the workers run, against a real
binary and a fake origin.

  auto   each worker logs "data path: io_uring" and holds an io_uring
         descriptor, or (a kernel that refuses it) logs why it runs epoll;
  on     io_uring, or where the kernel refuses it a startup error naming
         the setting;
  off    each worker logs "data path: epoll (-io-uring off)" and holds no
         io_uring descriptor: every socket goes through epoll;
  and on every path a 1 MiB body comes back byte for byte, a request body
  goes through, and keep-alive connections on both sides carry many
  requests. On both paths accepted connections carry TCP_NODELAY and
  TCP keep-alive (handed down from the listening socket), a worker out of
  descriptors pauses accepting and later serves the connections that
  waited in the backlog, new connections reach every worker, and a stream
  of new connections, one request each, loses none across reloads: a draining worker stops accepting (on the
  ring: its accept is cancelled), and a connection the kernel
  accepted for it just before is still served.
"""
import ctypes
import http.client
import os
import re
import resource
import signal
import socket
import subprocess
import threading
import unittest

from concert_harness import BIN, Concert, TEST_SECRET, owner_pid, server_socket_inode, wait_for
from test_bounds import read_until_closed

SYS_PIDFD_GETFD = 438  # x86-64 and arm64


def worker_socket(concert, client_port):
    """A duplicate, in this process, of the worker's end of the connection from client_port."""
    pid = owner_pid(concert, client_port)
    target = "socket:[%s]" % server_socket_inode(concert.port, client_port)
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)) != target:
                continue
        except OSError:
            continue
        pidfd = os.pidfd_open(pid)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            dup = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(fd), 0)
            if dup < 0:
                raise OSError(ctypes.get_errno(), "pidfd_getfd")
            return socket.socket(fileno=dup)
        finally:
            os.close(pidfd)
    return None
from fake_origin import FakeOrigin, pattern


def io_uring_fds(pid):
    """How many io_uring instances the process holds open."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)) == "anon_inode:[io_uring]":
                n += 1
        except OSError:
            pass
    return n


class IoPathTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.origin = FakeOrigin()
        cls.origin.release()

    @classmethod
    def tearDownClass(cls):
        cls.origin.stop()

    def concert(self, mode):
        # The flag and the variable agree, so that a suite run with
        # CONCERT_IO_URING set looks at the mode asked for here.
        return Concert(["-upstream", self.origin.url, "-cap", "50", "-io-uring", mode],
                       env={"CONCERT_IO_URING": mode})

    def traffic(self, c):
        conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=10)
        for _ in range(20):
            conn.request("GET", "/big?n=1048576")
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            self.assertEqual(resp.read(), pattern(1048576))
        body = pattern(300000)
        conn.request("POST", "/echo", body=body, headers={"Content-Type": "application/octet-stream"})
        resp = conn.getresponse()
        self.assertEqual((resp.status, resp.read()), (200, body))
        conn.close()

    def ring_available(self):
        with self.concert("auto") as c:
            return "data path: io_uring" in c.log()

    def each_path(self, check):
        """check("off"), then check("on") where the kernel allows io_uring."""
        with self.subTest(io_uring="off"):
            check("off")
        if self.ring_available():
            with self.subTest(io_uring="on"):
                check("on")

    def test_off_runs_epoll(self):
        with self.concert("off") as c:
            self.traffic(c)
            self.assertEqual(c.log().count("data path: epoll (-io-uring off)"), 2, c.log())
            self.assertNotIn("data path: io_uring", c.log())
            for pid in c.worker_pids():
                self.assertEqual(io_uring_fds(pid), 0)

    def test_auto_runs_io_uring_where_the_kernel_allows_it(self):
        with self.concert("auto") as c:
            self.traffic(c)
            log = c.log()
            if "data path: io_uring" in log:
                self.assertEqual(log.count("data path: io_uring"), 2, log)
                for pid in c.worker_pids():
                    self.assertEqual(io_uring_fds(pid), 1)
            else:
                self.assertEqual(log.count("data path: epoll (io_uring unavailable:"), 2, log)

    def test_on_runs_io_uring_or_refuses_to_start(self):
        if self.ring_available():
            with self.concert("on") as c:
                self.traffic(c)
                self.assertEqual(c.log().count("data path: io_uring"), 2, c.log())
                for pid in c.worker_pids():
                    self.assertEqual(io_uring_fds(pid), 1)
        else:
            env = dict(os.environ, CONCERT_ADMIT_SECRET=TEST_SECRET, CONCERT_IO_URING="on")
            proc = subprocess.run([BIN, "-listen", "127.0.0.1:0", "-upstream", self.origin.url],
                                  env=env, capture_output=True, timeout=30)
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn(b"-io-uring on:", proc.stderr)

    def accepted_connections_carry_their_options(self, mode):
        with Concert(["-upstream", self.origin.url, "-cap", "50", "-io-uring", mode],
                     env={"CONCERT_IO_URING": mode}) as c:
            for _ in range(4):
                with socket.create_connection(("127.0.0.1", c.port), timeout=10) as client:
                    port = client.getsockname()[1]
                    self.assertTrue(wait_for(lambda: owner_pid(c, port), timeout=5))
                    theirs = worker_socket(c, port)
                    self.assertIsNotNone(theirs)
                    with theirs:
                        self.assertEqual(theirs.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), 1)
                        self.assertEqual(theirs.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE), 1)
                        self.assertEqual(theirs.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE), 60)
                        self.assertEqual(theirs.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL), 10)
                        self.assertEqual(theirs.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT), 5)

    def test_accepted_connections_carry_their_options(self):
        self.each_path(self.accepted_connections_carry_their_options)

    def out_of_descriptors_loses_nothing(self, mode):
        with Concert(["-upstream", self.origin.url, "-cap", "50", "-io-uring", mode], workers=1,
                     env={"CONCERT_IO_URING": mode}) as c:
            worker = c.worker_pids()[0]
            c.get("/warm")  # the origin connection exists before the limit
            open_now = len(os.listdir("/proc/%d/fd" % worker))
            room = 6
            soft, hard = resource.prlimit(worker, resource.RLIMIT_NOFILE)
            resource.prlimit(worker, resource.RLIMIT_NOFILE, (open_now + room, hard))
            c.get("/rearm")  # an accept on the ring takes the limit when it is submitted
            clients = [socket.create_connection(("127.0.0.1", c.port), timeout=10) for _ in range(room + 6)]
            try:
                self.assertTrue(wait_for(lambda: "pausing accepts" in c.log(), timeout=10), c.log())
                # Room again: every client, accepted or waiting in the backlog, gets its answer.
                resource.prlimit(worker, resource.RLIMIT_NOFILE, (soft, hard))
                for s in clients:
                    s.sendall(b"GET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                for s in clients:
                    reply = read_until_closed(s, 10)
                    self.assertTrue(reply and reply.startswith(b"HTTP/1.1 200"), reply and reply[:200])
            finally:
                for s in clients:
                    s.close()
            self.assertEqual(c.worker_pids(), [worker])

    def test_out_of_descriptors_loses_nothing(self):
        self.each_path(self.out_of_descriptors_loses_nothing)

    def connections_reach_every_worker(self, mode):
        with Concert(["-upstream", self.origin.url, "-cap", "50", "-io-uring", mode, "-workers", "2"],
                     env={"CONCERT_IO_URING": mode}) as c:
            workers = set(c.worker_pids())
            self.assertEqual(len(workers), 2)
            took = {}
            for _ in range(60):
                # One at a time, each served before the next: whoever waits
                # in accept gets it, nothing else spreads them.
                with socket.create_connection(("127.0.0.1", c.port), timeout=10) as s:
                    pid = wait_for(lambda: owner_pid(c, s.getsockname()[1]), timeout=5)
                    self.assertIn(pid, workers)
                    took[pid] = took.get(pid, 0) + 1
                    s.sendall(b"GET /spread HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    reply = read_until_closed(s, 10)
                    self.assertTrue(reply and reply.startswith(b"HTTP/1.1 200"), reply and reply[:200])
            self.assertEqual(set(took), workers, took)
            self.assertGreaterEqual(min(took.values()), 10, took)

    def test_connections_reach_every_worker(self):
        self.each_path(self.connections_reach_every_worker)

    def reloads_lose_no_new_connection(self, mode):
        c = Concert(["-upstream", self.origin.url, "-cap", "50", "-io-uring", mode, "-workers", "2"],
                    env={"CONCERT_IO_URING": mode})
        with c:
            stop = threading.Event()
            counts = {"ok": 0, "failed": []}

            def client():
                while not stop.is_set():
                    try:
                        status, _, body = c.get("/fresh", headers={"Connection": "close"}, timeout=10)
                        if status == 200 and body == b"ok":
                            counts["ok"] += 1
                        else:
                            counts["failed"].append("%d %r" % (status, body[:80]))
                    except Exception as e:  # a connection closed or reset without its response
                        counts["failed"].append(repr(e))

            threads = [threading.Thread(target=client, daemon=True) for _ in range(4)]
            for t in threads:
                t.start()
            try:
                self.assertTrue(wait_for(lambda: counts["ok"] > 50, timeout=10))
                for generation in range(2, 7):
                    c.signal(signal.SIGHUP)
                    self.assertTrue(wait_for(
                        lambda: "reload accepted: generation %d" % generation in c.log(), timeout=10), c.log())
                    base = counts["ok"]
                    self.assertTrue(wait_for(lambda: counts["ok"] > base + 50, timeout=10))
            finally:
                stop.set()
                for t in threads:
                    t.join(15)
            self.assertEqual(counts["failed"], [], c.log())
            self.assertTrue(wait_for(lambda: re.search(r"generation 5 drained", c.log()), timeout=15), c.log())

    def test_reloads_lose_no_new_connection(self):
        self.each_path(self.reloads_lose_no_new_connection)

    def test_a_bad_value_names_the_setting(self):
        env = dict(os.environ, CONCERT_ADMIT_SECRET=TEST_SECRET)
        env.pop("CONCERT_IO_URING", None)
        proc = subprocess.run([BIN, "-listen", "127.0.0.1:0", "-io-uring", "maybe"], env=env, capture_output=True,
                              timeout=30)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(b"-io-uring", proc.stderr)
        self.assertIn(b"auto, on or off", proc.stderr)


if __name__ == "__main__":
    unittest.main()
