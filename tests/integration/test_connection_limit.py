"""-max-connections against the real binary: 11,000 idle connections against -max-connections 10000
-workers 1. The worker accepts up to its limit, stops accepting until one closes, and keeps serving
the connections it has. Traffic goes to 127.0.0.1 only, and the only processes signalled are the ones
this test started."""
import json
import resource
import select
import socket
import time
import unittest

from concert_harness import Concert, wait_for
from fake_origin import FakeOrigin
from test_bounds import connect, read_head

SERIAL = "opens 11,000 connections"


class MaxConnectionsTest(unittest.TestCase):
    def test_11000_idle_connections_against_a_limit_of_10000(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        need = 11000 + 512
        if soft < need:
            if hard != resource.RLIM_INFINITY and hard < need:
                self.skipTest("open-file hard limit %d is below %d" % (hard, need))
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        origin = FakeOrigin()
        clients = []
        try:
            with Concert(["-upstream", origin.url, "-max-connections", "10000", "-client-header-timeout", "60s"],
                         workers=1) as c:
                # Opened first, so it is held: a new connection while the worker is full waits or is refused.
                control = connect(c.port)
                clients.append(control)

                def stats():
                    control.sendall(b"GET /_room/stats HTTP/1.1\r\nHost: h\r\n\r\n")
                    head, rest = read_head(control)
                    length = int([l for l in head.split("\r\n") if l.lower().startswith("content-length:")][0]
                                 .split(":")[1])
                    while len(rest) < length:
                        rest += control.recv(65536)
                    return json.loads(rest)

                self.assertEqual(stats()["connections_refused_total"], 0)
                for _ in range(11000):
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    s.setblocking(False)
                    try:
                        s.connect(("127.0.0.1", c.port))
                    except BlockingIOError:
                        pass
                    clients.append(s)
                # While full, what waits in the backlog is refused (accepted and closed) once a second.
                st = wait_for(lambda: (lambda s: s if s["connections_refused_total"] >= 1000 else None)(stats()),
                              timeout=20, interval=0.5)
                self.assertIsNotNone(st, "the connections over the limit were not refused")
                self.assertTrue(wait_for(lambda: "-max-connections 10000" in c.log(), timeout=5))

                poller = select.poll()
                by_fd = {}
                for s in clients[1:]:
                    poller.register(s, select.POLLIN | select.POLLHUP | select.POLLERR)
                    by_fd[s.fileno()] = s

                def closed_clients():
                    closed = []
                    for fd, _ in poller.poll(0):
                        s = by_fd[fd]
                        try:
                            if s.recv(1) == b"":
                                closed.append(s)
                        except OSError:
                            closed.append(s)
                    for s in closed:
                        poller.unregister(s)
                    return closed

                # Every client is either held by the worker (10,000 with the control one) or was refused.
                refused = set()
                deadline = time.time() + 20
                while time.time() < deadline and len(refused) < st["connections_refused_total"]:
                    refused.update(closed_clients())
                    time.sleep(0.2)
                self.assertEqual(len(refused), stats()["connections_refused_total"])
                self.assertEqual(len(clients) - len(refused), 10000)
                # A held idle connection is served while the worker is full.
                held = [s for s in clients[1:] if s not in refused]
                held[0].setblocking(True)
                held[0].settimeout(10)
                held[0].sendall(b"GET /_room/healthz HTTP/1.1\r\nHost: h\r\n\r\n")
                self.assertTrue(held[0].recv(100).startswith(b"HTTP/1.1 200"))
                # Under the limit again, the worker accepts new connections.
                for s in held[:500]:
                    s.close()
                for s in refused:
                    s.close()
                clients = [control] + held[500:]
                self.assertTrue(wait_for(lambda: c.get("/_room/healthz")[0] == 200, timeout=15))
                self.assertEqual(origin.recorder.hits(), 0)
        finally:
            for s in clients:
                s.close()
            origin.stop()


if __name__ == "__main__":
    unittest.main()
