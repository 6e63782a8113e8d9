"""The skip-the-line demo of `make run`: demo/origin.py's fake payment page and Concert together.

A visitor waits (the room is paused, so nobody's turn comes), follows the waiting page's skip link to
the demo's payment page, "pays", is redirected to Concert's signed /queue/promote link with the secret
both share, and is then admitted ahead of the line, while the line itself still stands. Also: the demo's
/staff page grants the `staff` priority class. Everything runs on 127.0.0.1 and stops by itself.
"""
import os
import re
import socket
import subprocess
import sys
import time
import unittest
import urllib.parse

from concert_harness import Concert, header, headers_all, wait_for
from redis_server import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECRET = "demo-promote-secret-0123456789abcdef-xyz"
BROWSER = {"Accept": "text/html"}


class DemoPaymentTest(unittest.TestCase):
    def setUp(self):
        self.port = free_port()
        env = dict(os.environ, CONCERT_PROMOTE_SECRET=SECRET)
        self.origin = subprocess.Popen([sys.executable, os.path.join(ROOT, "demo", "origin.py"), "--port",
                                        str(self.port)], env=env, stdin=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)

        def up():
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return True
            except OSError:
                return False

        self.assertTrue(wait_for(up, timeout=10))

    def tearDown(self):
        self.origin.terminate()
        self.origin.wait(10)

    def test_pay_on_the_demo_page_and_go_in_ahead_of_the_line(self):
        args = ["-upstream", "http://127.0.0.1:%d" % self.port, "-cap", "1", "-mode", "pause", "-rate", "0.05",
                "-skip-url", "/pay?ticket={{.Ticket}}", "-bypass", "/favicon.ico,/pay",
                "-priority-classes", "staff,checkout", "-first-poll-grace", "60s"]
        with Concert(args, workers=2, env={"CONCERT_PROMOTE_SECRET": SECRET}) as c:
            jar = {}

            def get(path, method="GET", body=None, extra=None):
                headers = dict(BROWSER)
                if jar:
                    headers["Cookie"] = "; ".join("%s=%s" % kv for kv in jar.items())
                if extra:
                    headers.update(extra)
                status, hdrs, data = c.request(method, path, headers=headers, body=body, timeout=30)
                for line in headers_all(hdrs, "Set-Cookie"):
                    name, _, rest = line.partition("=")
                    jar[name] = rest.split(";")[0]
                return status, hdrs, data

            other = c.get("/", headers={"Accept": "application/json"})  # someone ahead, who stays in line
            self.assertEqual(other[0], 429)
            status, _, page = get("/")
            self.assertEqual(status, 200)
            link = re.search(rb'SKIP_URL = "(/pay\?ticket=[A-Za-z0-9_-]+)"', page)
            self.assertIsNotNone(link, "the waiting page has no skip link")
            status, _, form = get(link.group(1).decode())
            self.assertEqual(status, 200)
            ref = re.search(rb'name="ticket" value="([A-Za-z0-9_-]+)"', form).group(1).decode()
            status, hdrs, _ = get("/pay", "POST", urllib.parse.urlencode({"ticket": ref}).encode(),
                                  {"Content-Type": "application/x-www-form-urlencoded"})
            self.assertEqual(status, 303)
            promote = header(hdrs, "Location")
            self.assertTrue(promote.startswith("/queue/promote?"), promote)
            status, hdrs, _ = get(promote)
            self.assertEqual(status, 303)
            self.assertIn("room_pass", jar)
            status, _, shop = get("/")
            self.assertEqual(status, 200)
            self.assertIn(b"</html>", shop.lower())
            self.assertNotIn(b'id="position"', shop)
            stats = c.stats()
            self.assertEqual((stats["promoted_total"], stats["live_queue_depth"]), (1, 1))
            # The demo's staff page grants the staff class.
            status, hdrs, _ = get("/staff")
            self.assertEqual(status, 200)
            self.assertIn("concert_priority", jar)
            self.assertIsNone(header(hdrs, "Concert-Priority"))


if __name__ == "__main__":
    unittest.main()
