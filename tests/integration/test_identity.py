"""Client identity behind a proxy against the real binary and the fake
origin's /headers. Only a peer in -trusted-proxies speaks for the client:
its X-Forwarded-For (or Forwarded) chain is walked from the right and the
first address that is not a trusted proxy is the client; its
X-Forwarded-Proto and X-Forwarded-Host are kept, and https makes the room's
cookies Secure. From any other peer those headers are replaced: the peer is
the client, on http. The access log names that client, and -bypass-cidrs
lets that client skip a full room when its address is in a listed network.

Every test client connects over loopback; a client "from" 127.0.0.2 or
127.0.0.3 binds that source address (Linux routes all of 127/8 to lo)."""
import json
import unittest

from concert_harness import Concert, header, headers_all, request_from, wait_for
from fake_origin import FakeOrigin
from room import fill

SPOOF = {"X-Forwarded-For": "6.6.6.6", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example",
         "Forwarded": "for=1.1.1.1;proto=https"}


def origin_headers(body):
    """{lower-case name: [values]} from the fake origin's /headers JSON."""
    out = {}
    for name, value in json.loads(body):
        out.setdefault(name.lower(), []).append(value)
    return out


def set_cookie_lines(headers):
    """{cookie name: full Set-Cookie line}."""
    return {line.partition("=")[0]: line for line in headers_all(headers, "Set-Cookie")}


def access_lines(concert, needle):
    try:
        with open(concert.access_path) as f:
            return [l for l in f.read().splitlines() if needle in l]
    except OSError:
        return []


class IdentityTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def concert(self, *args, **kw):
        return Concert(["-upstream", self.origin.url] + list(args), workers=2, **kw)

    # -- without -trusted-proxies
    def test_untrusted_peer_forwarding_headers_are_replaced(self):
        for args in ([], ["-trusted-proxies", "10.0.0.0/8,::1"]):
            with self.subTest(args=args), self.concert(*args, access_log=True) as c:
                status, headers, body = c.get("/headers", dict(SPOOF, Host="shop.example", **{"User-Agent": "id-untrusted"}))
                self.assertEqual(status, 200)
                seen = origin_headers(body)
                self.assertEqual(seen["x-forwarded-for"], ["127.0.0.1"])
                self.assertEqual(seen["x-forwarded-proto"], ["http"])
                self.assertEqual(seen["x-forwarded-host"], ["shop.example"])
                self.assertEqual(seen["forwarded"], ["for=127.0.0.1;host=shop.example;proto=http"])
                admit = set_cookie_lines(headers)["concert_admit"]
                self.assertNotIn("Secure", admit)
                lines = wait_for(lambda: access_lines(c, "id-untrusted"), timeout=5)
                self.assertTrue(lines)
                self.assertTrue(lines[0].startswith("127.0.0.1 - - ["), lines[0])

    # -- with -trusted-proxies
    def test_trusted_proxy_names_the_client(self):
        with self.concert("-trusted-proxies", "127.0.0.1/32", access_log=True) as c:
            status, headers, body = c.get("/headers", {"X-Forwarded-For": "6.6.6.6, 203.0.113.7",
                                                        "X-Forwarded-Proto": "https",
                                                        "X-Forwarded-Host": "shop.example",
                                                        "Host": "127.0.0.1:8080",
                                                        "User-Agent": "id-trusted"})
            self.assertEqual(status, 200)
            seen = origin_headers(body)
            self.assertEqual(seen["x-forwarded-for"], ["6.6.6.6, 203.0.113.7, 127.0.0.1"])
            self.assertEqual(seen["x-forwarded-proto"], ["https"])
            self.assertEqual(seen["x-forwarded-host"], ["shop.example"])
            self.assertEqual(seen["forwarded"],
                             ["for=6.6.6.6;host=shop.example;proto=https, for=203.0.113.7, for=127.0.0.1"])
            self.assertEqual(seen["host"], ["127.0.0.1:8080"])
            self.assertIn("; Secure", set_cookie_lines(headers)["concert_admit"])

            # Forwarded alone (RFC 7239, quoted IPv6 with a port) works the same way.
            _, _, body = c.get("/headers", {"Forwarded": 'for="[2001:db8::7]:4711";proto=https',
                                            "User-Agent": "id-forwarded"})
            self.assertEqual(origin_headers(body)["x-forwarded-for"], ["2001:db8::7, 127.0.0.1"])

            # No forwarding headers from the trusted peer: the peer is the client, on http.
            _, headers, body = c.get("/headers", {"User-Agent": "id-direct"})
            seen = origin_headers(body)
            self.assertEqual(seen["x-forwarded-for"], ["127.0.0.1"])
            self.assertEqual(seen["x-forwarded-proto"], ["http"])
            self.assertNotIn("Secure", set_cookie_lines(headers)["concert_admit"])

            found = wait_for(lambda: all(access_lines(c, ua) for ua in ("id-trusted", "id-forwarded", "id-direct")),
                             timeout=5)
            self.assertTrue(found)
            self.assertTrue(access_lines(c, "id-trusted")[0].startswith("203.0.113.7 - - ["))
            self.assertTrue(access_lines(c, "id-forwarded")[0].startswith("2001:db8::7 - - ["))
            self.assertTrue(access_lines(c, "id-direct")[0].startswith("127.0.0.1 - - ["))

    def test_room_cookies_secure_behind_trusted_https(self):
        with self.concert("-cap", "1", "-trusted-proxies", "127.0.0.1/32") as c:
            holder = fill(c, source="127.0.0.2")[0]
            status, headers, _ = c.get("/page", {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https"})
            self.assertEqual(status, 429)
            cookies = set_cookie_lines(headers)
            self.assertIn("; Secure", cookies["room_ticket"])
            self.assertIn("; Secure", cookies["room_probe"])
            # Plain http through the same proxy: not Secure.
            status, headers, _ = c.get("/page", {"X-Forwarded-For": "203.0.113.8", "X-Forwarded-Proto": "http"})
            self.assertEqual(status, 429)
            self.assertNotIn("Secure", set_cookie_lines(headers)["room_ticket"])
            # The same claim from a peer that is not trusted: not Secure.
            status, headers, _ = request_from(c.port, "127.0.0.3", "/page", {"X-Forwarded-Proto": "https"})
            self.assertEqual(status, 429)
            self.assertNotIn("Secure", set_cookie_lines(headers)["room_ticket"])
            self.origin.release()
            holder.join(10)

    # -- -bypass-cidrs
    def test_bypass_cidrs_skip_a_full_room(self):
        with self.concert("-cap", "1", "-bypass-cidrs", "127.0.0.1/32", access_log=True) as c:
            holder = fill(c, source="127.0.0.2")[0]
            status, _, body = c.get("/page", {"User-Agent": "id-bypass"})
            self.assertEqual((status, body), (200, b"ok"))
            self.assertEqual(self.origin.recorder.hits("/page"), 1)
            status, _, _ = request_from(c.port, "127.0.0.3", "/other", {"User-Agent": "id-queued"})
            self.assertEqual(status, 429)
            self.assertEqual(self.origin.recorder.hits("/other"), 0)
            # Concert's own paths are still Concert's.
            status, _, body = c.get("/_room/healthz")
            self.assertEqual(status, 200)
            self.assertEqual(self.origin.recorder.hits("/_room/healthz"), 0)
            lines = wait_for(lambda: access_lines(c, "id-bypass") and access_lines(c, "id-queued"), timeout=5)
            self.assertTrue(lines)
            self.assertTrue(access_lines(c, "id-bypass")[0].endswith(" bypass"), access_lines(c, "id-bypass"))
            self.assertTrue(access_lines(c, "id-queued")[0].startswith("127.0.0.3 - - ["))
            self.assertTrue(access_lines(c, "id-queued")[0].endswith(" queued"))
            self.origin.release()
            holder.join(10)

    def test_bypass_cidrs_outside_the_list_queue(self):
        with self.concert("-cap", "1", "-bypass-cidrs", "10.0.0.0/8") as c:
            holder = fill(c, source="127.0.0.2")[0]
            status, _, _ = c.get("/page")
            self.assertEqual(status, 429)
            self.assertEqual(self.origin.recorder.hits("/page"), 0)
            self.origin.release()
            holder.join(10)

    def test_bypass_cidrs_use_the_client_behind_a_trusted_proxy(self):
        with self.concert("-cap", "1", "-trusted-proxies", "127.0.0.1/32", "-bypass-cidrs", "192.0.2.0/24") as c:
            holder = fill(c, source="127.0.0.2")[0]
            status, _, body = c.get("/monitor", {"X-Forwarded-For": "192.0.2.5"})
            self.assertEqual((status, body), (200, b"ok"))
            # A client cannot claim a bypass address through the proxy by
            # putting it left of its own.
            status, _, _ = c.get("/page", {"X-Forwarded-For": "192.0.2.5, 203.0.113.7"})
            self.assertEqual(status, 429)
            # Nor from an untrusted peer.
            status, _, _ = request_from(c.port, "127.0.0.3", "/page", {"X-Forwarded-For": "192.0.2.5"})
            self.assertEqual(status, 429)
            self.assertEqual(self.origin.recorder.hits("/page"), 0)
            self.origin.release()
            holder.join(10)


if __name__ == "__main__":
    unittest.main()
