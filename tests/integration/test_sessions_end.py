"""The origin ends a session against the real binary with two workers: a response carrying
`Concert-Session: end` (in any case) revokes the visitor's concert_admit pass on every worker and
neither slides that pass nor issues a new one; any other value of the header ends nothing.

The fake origin's /end-session answers with `Concert-Session: end`. The response reaching the client has no
Concert-Session header and expires concert_admit; the old pass is then refused on a private asset path by
every worker (each request below is sent on a fresh connection whose accepting worker is found in /proc),
while another visitor's pass still works.
"""
import os
import socket
import time
import unittest

from concert_harness import Concert, header, headers_all, owner_pid, set_cookies, wait_for
from fake_origin import FakeOrigin
from room import mint_pass, pass_id, with_pass


class Connection:
    """A fresh raw connection to Concert that knows which worker accepted it."""

    def __init__(self, concert):
        self.sock = socket.create_connection(("127.0.0.1", concert.port), timeout=10)
        client_port = self.sock.getsockname()[1]
        self.worker = wait_for(lambda: owner_pid(concert, client_port), timeout=5)
        self.buffer = b""

    def get(self, path, cookie):
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: shop.example\r\nCookie: %s\r\n\r\n" % (path, cookie)).encode())
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OSError("connection closed before a response head")
            self.buffer += chunk
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:]]
        length = int(header(headers, "Content-Length") or 0)
        while len(self.buffer) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buffer += chunk
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body

    def close(self):
        self.sock.close()


class SessionsEndTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()
        self.origin.recorder.page_prefixes = ["/assets/"]

    def tearDown(self):
        self.origin.stop()

    def concert(self):
        return Concert(["-upstream", self.origin.url, "-cap", "4", "-assets", "/assets/*"], workers=2)

    def admitted(self, c):
        """A visitor let in on a page: the concert_admit pass it was given."""
        status, headers, _ = c.get("/", {"Accept": "text/html"})
        self.assertEqual(status, 200)
        value = set_cookies(headers).get("concert_admit")
        self.assertTrue(value)
        return value

    def assert_ends_session(self, headers):
        """No Concert-Session for the client, one Set-Cookie expiring the pass, the origin's own kept."""
        self.assertIsNone(header(headers, "Concert-Session"))
        admit = [v for v in headers_all(headers, "Set-Cookie") if v.startswith("concert_admit=")]
        self.assertEqual(admit, ["concert_admit=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"])
        self.assertIn("order=done; Path=/", headers_all(headers, "Set-Cookie"))

    def test_ended_pass_is_refused_on_every_worker(self):
        with self.concert() as c:
            mine, theirs = self.admitted(c), self.admitted(c)
            self.assertNotEqual(pass_id(mine), pass_id(theirs))
            for value in (mine, theirs):
                status, _, _ = c.get("/assets/app.js", with_pass(value))
                self.assertEqual(status, 200)

            status, headers, body = c.get("/end-session", with_pass(mine, cookies="theme=dark"))
            self.assertEqual((status, body), (200, b"session ended"))
            self.assert_ends_session(headers)
            # The origin got the request as usual (Concert's cookies stripped).
            ended = [r for r in self.origin.recorder.requests if r["path"] == "/end-session"]
            self.assertEqual(len(ended), 1)
            self.assertEqual(ended[0]["cookie"], "theme=dark")

            # Replaying the old cookie: 403 on every worker; the other visitor goes on.
            denied, served = {}, {}
            for _ in range(200):
                conn = Connection(c)
                try:
                    self.assertIsNotNone(conn.worker)
                    status, headers, body = conn.get("/assets/app.js", "concert_admit=" + mine)
                    self.assertEqual((status, body), (403, b""))
                    self.assertEqual(headers_all(headers, "Set-Cookie"), [])
                    denied[conn.worker] = denied.get(conn.worker, 0) + 1
                    status, _, _ = conn.get("/assets/app.js", "concert_admit=" + theirs)
                    self.assertEqual(status, 200)
                    served[conn.worker] = served.get(conn.worker, 0) + 1
                finally:
                    conn.close()
                if len(denied) == 2 and min(denied.values()) >= 3:
                    break
            self.assertEqual(len(denied), 2, "both workers: %r" % denied)
            self.assertGreaterEqual(min(denied.values()), 3)
            self.assertEqual(set(served), set(denied))
            self.assertGreaterEqual(c.stats()["asset_denied_total"], sum(denied.values()))
            self.assertEqual(self.origin.recorder.hits("/assets/app.js"), 2 + sum(served.values()))

    def test_no_slid_or_new_pass_on_the_ending_response(self):
        with self.concert() as c:
            # A pass past half its life would be slid (same id, later expiry) on this response ...
            old = mint_pass(os.urandom(16), int(time.time()) + 100)
            status, headers, _ = c.get("/", with_pass(old))
            self.assertEqual(status, 200)
            self.assertIn("concert_admit", set_cookies(headers))  # the guard slides it here
            status, headers, _ = c.get("/end-session", with_pass(old))
            self.assertEqual(status, 200)
            self.assert_ends_session(headers)
            for _ in range(4):
                status, _, _ = c.get("/assets/app.js", with_pass(old))
                self.assertEqual(status, 403)
            # ... and a visitor without one would be given a new one: neither is sent. Any case.
            status, headers, _ = c.get("/end-session?value=END")
            self.assertEqual(status, 200)
            self.assert_ends_session(headers)

    def test_other_values_pass_nothing_and_end_nothing(self):
        with self.concert() as c:
            mine = self.admitted(c)
            status, headers, _ = c.get("/end-session?value=keep", with_pass(mine))
            self.assertEqual(status, 200)
            self.assertIsNone(header(headers, "Concert-Session"))
            self.assertNotIn("concert_admit", set_cookies(headers))
            for _ in range(4):
                status, _, _ = c.get("/assets/app.js", with_pass(mine))
                self.assertEqual(status, 200)


if __name__ == "__main__":
    unittest.main()
