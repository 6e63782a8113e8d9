"""The asset tier against the real binary with two workers."""
import os
import time
import unittest

from concert_harness import Concert, header, headers_all, wait_for
from fake_origin import FakeOrigin
from room import mint_pass, park, pass_id, with_pass

# Sent with every pass: the origin must get this cookie and never the pass.
SESSION = "session=keep"


def wait_origin(origin, path, n):
    return wait_for(lambda: origin.recorder.hits(path) >= n, timeout=5)


class AssetsTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()
        self.origin.recorder.page_prefixes = ["/assets/", "/public/"]

    def tearDown(self):
        self.origin.release()
        self.origin.stop()

    def concert(self, *args, workers=2):
        return Concert(["-upstream", self.origin.url, "-assets", "/assets/*", "-asset-public", "/public/*"]
                       + list(args), workers=workers)

    def test_denied_without_pass(self):
        with self.concert("-cap", "3", "-asset-user-cap-h2", "16") as c:
            for h in ({}, {"Cookie": "concert_admit=forged"},
                      with_pass(mint_pass(os.urandom(16), int(time.time()) - 1), cookies=SESSION),
                      with_pass(mint_pass(os.urandom(16), secret="some-other-secret-of-32-bytes-or-more"),
                                cookies=SESSION)):
                status, headers, body = c.get("/assets/app.js", h)
                self.assertEqual((status, body), (403, b""))
                self.assertEqual(headers_all(headers, "Set-Cookie"), [])
            self.assertEqual(self.origin.recorder.hits(), 0)
            self.assertEqual(c.stats()["asset_denied_total"], 4)

    def test_served_with_pass_and_stats(self):
        with self.concert("-cap", "3", "-asset-user-cap-h2", "16") as c:
            status, _, _ = c.get("/assets/app.js")
            self.assertEqual(status, 403)
            p = mint_pass()
            status, headers, body = c.get("/assets/app.js", with_pass(p, cookies=SESSION))
            self.assertEqual((status, body), (200, b"ok"))
            self.assertEqual(self.origin.recorder.requests[-1]["cookie"], SESSION)
            self.assertEqual(headers_all(headers, "Set-Cookie"), [])
            stats = c.stats()
            self.assertEqual(stats["asset_cap"], 48)
            self.assertEqual(stats["asset_users"], 1)
            self.assertEqual(stats["asset_denied_total"], 1)
            self.assertEqual(stats["asset_served_total"], 1)
            self.assertEqual(stats["asset_in_flight"], 0)

    def test_pass_earned_on_a_page_opens_assets(self):
        with self.concert("-cap", "3") as c:
            status, headers, _ = c.get("/index.html")
            self.assertEqual(status, 200)
            line = [v for v in headers_all(headers, "Set-Cookie") if v.startswith("concert_admit=")][0]
            value = line.split(";")[0].split("=", 1)[1]
            status, _, _ = c.get("/assets/site.css", with_pass(value, cookies=SESSION))
            self.assertEqual(status, 200)

    def test_served_while_room_is_full(self):
        with self.concert("-cap", "1") as c:
            page = park(c)
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 1, timeout=5))
            self.assertEqual(c.get("/other")[0], 429)
            status, _, _ = c.get("/assets/app.js", with_pass(mint_pass(), cookies=SESSION))
            self.assertEqual(status, 200)
            self.origin.release()
            self.assertEqual(page.status(), 200)

    def test_public_needs_no_pass(self):
        with self.concert("-cap", "1") as c:
            status, _, body = c.get("/public/logo.png")
            self.assertEqual((status, body), (200, b"ok"))

    def test_slid_pass_on_asset(self):
        with self.concert("-cap", "3") as c:
            pid = os.urandom(16)
            status, headers, _ = c.get("/assets/a.js",
                                       with_pass(mint_pass(pid, int(time.time()) + 100), cookies=SESSION))
            self.assertEqual(status, 200)
            lines = headers_all(headers, "Set-Cookie")
            self.assertEqual(len(lines), 1)
            value = lines[0].split(";")[0].split("=", 1)[1]
            self.assertEqual(pass_id(value), pid)

    def test_per_user_limit_http1_across_connections(self):
        with self.concert("-asset-user-cap-h1", "1", "-asset-user-wait", "50ms") as c:
            p = mint_pass()
            parked = park(c, "/assets/slow", with_pass(p, cookies=SESSION))
            self.assertTrue(wait_origin(self.origin, "/assets/slow", 1))
            # new connections each time: with two workers they land on either
            for _ in range(4):
                status, headers, body = c.get("/assets/app.js", with_pass(p, cookies=SESSION))
                self.assertEqual(status, 429)
                self.assertEqual(header(headers, "Retry-After"), "1")
                self.assertEqual(body, b"")
            status, _, _ = c.get("/assets/app.js", with_pass(mint_pass(), cookies=SESSION))
            self.assertEqual(status, 200)
            self.assertEqual(c.stats()["asset_user_throttled_total"], 4)
            self.origin.release()
            self.assertEqual(parked.status(), 200)

    def test_per_user_limit_http2_via_header(self):
        with self.concert("-client-proto-header", "X-Client-Proto", "-asset-user-cap-h2", "2",
                          "-asset-user-cap-h1", "8", "-asset-user-wait", "50ms") as c:
            p = mint_pass()
            h2 = with_pass(p, {"X-Client-Proto": "HTTP/2.0"}, cookies=SESSION)
            parked = [park(c, "/assets/slow", h2) for _ in range(2)]
            self.assertTrue(wait_origin(self.origin, "/assets/slow", 2))
            status, _, _ = c.get("/assets/app.js", h2)
            self.assertEqual(status, 429)
            status, _, _ = c.get("/assets/app.js", with_pass(p, {"X-Client-Proto": "HTTP/1.1"}, cookies=SESSION))
            self.assertEqual(status, 200)
            self.origin.release()
            self.assertEqual([x.status() for x in parked], [200, 200])

    def test_per_user_wait_succeeds_when_slot_frees(self):
        with self.concert("-asset-user-cap-h1", "1", "-asset-user-wait", "10s") as c:
            p = mint_pass()
            parked = park(c, "/assets/slow?timeout=1", with_pass(p, cookies=SESSION))
            self.assertTrue(wait_origin(self.origin, "/assets/slow", 1))
            status, _, body = c.get("/assets/app.js", with_pass(p, cookies=SESSION), timeout=15)
            self.assertEqual((status, body), (200, b"ok"))
            self.assertEqual(parked.status(), 200)
            self.assertEqual(c.stats()["asset_user_throttled_total"], 0)

    def test_global_limit(self):
        with self.concert("-asset-cap", "1", "-asset-wait", "50ms") as c:
            parked = park(c, "/assets/slow", with_pass(mint_pass(), cookies=SESSION))
            self.assertTrue(wait_origin(self.origin, "/assets/slow", 1))
            status, headers, body = c.get("/assets/app.js", with_pass(mint_pass(), cookies=SESSION))
            self.assertEqual((status, body), (503, b""))
            self.assertEqual(header(headers, "Retry-After"), "1")
            status, _, _ = c.get("/public/x.css")
            self.assertEqual(status, 503)
            self.assertEqual(c.stats()["asset_global_throttled_total"], 2)
            self.assertEqual(c.stats()["asset_in_flight"], 1)
            self.origin.release()
            self.assertEqual(parked.status(), 200)
            self.assertTrue(wait_for(lambda: c.stats()["asset_in_flight"] == 0, timeout=5))

    def test_global_wait_succeeds_when_slot_frees(self):
        with self.concert("-asset-cap", "1", "-asset-wait", "10s") as c:
            parked = park(c, "/assets/slow?timeout=1", with_pass(mint_pass(), cookies=SESSION))
            self.assertTrue(wait_origin(self.origin, "/assets/slow", 1))
            status, _, _ = c.get("/public/x.css", timeout=15)
            self.assertEqual(status, 200)
            self.assertEqual(parked.status(), 200)


if __name__ == "__main__":
    unittest.main()
