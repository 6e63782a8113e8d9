"""Priority classes from the origin against the real binary.

The fake origin's /priority answers with `Concert-Priority: staff; ttl=3600` (or ?value=V). The client never sees
that header; when the class is one of -priority-classes the response sets a concert_priority cookie, checked here
with an independent HMAC: bound to the visitor's concert_admit pass (the one presented, or the one the same
response sets), the configured class, expiry now + ttl. An unknown class, a malformed header or no
-priority-classes set nothing; `none` expires the cookie; the origin never sees the cookie; a forged one counts a
strike like a forged pass; a reload changes the classes.
"""
import base64
import hashlib
import hmac
import signal
import struct
import time
import unittest
import urllib.parse

from concert_harness import TEST_SECRET, Concert, header, headers_all, set_cookies, wait_for
from fake_origin import FakeOrigin
from room import pass_id

LABEL = b"concert_priority/v1\x00"


def b64decode(value):
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


def b64encode(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def mint_priority(pass_id, expiry, name, secret=TEST_SECRET):
    payload = pass_id + struct.pack(">Q", expiry) + name.encode()
    return b64encode(payload + hmac.new(secret.encode(), LABEL + payload, hashlib.sha256).digest()[:16])


def check_priority(value):
    """(pass id, expiry, class) of a genuine cookie; AssertionError for anything else."""
    raw = b64decode(value)
    payload, mac = raw[:-16], raw[-16:]
    assert hmac.compare_digest(mac, hmac.new(TEST_SECRET.encode(), LABEL + payload, hashlib.sha256).digest()[:16])
    return payload[:16], struct.unpack(">Q", payload[16:24])[0], payload[24:].decode()


def priority_lines(headers):
    return [v for v in headers_all(headers, "Set-Cookie") if v.startswith("concert_priority=")]


class PriorityTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def concert(self, *extra, **kw):
        return Concert(["-upstream", self.origin.url, "-cap", "4"] + list(extra), workers=2, **kw)

    def admitted(self, c):
        status, headers, _ = c.get("/", {"Accept": "text/html"})
        self.assertEqual(status, 200)
        value = set_cookies(headers).get("concert_admit")
        self.assertTrue(value)
        return value

    def grant(self, c, value=None, cookie=None):
        path = "/priority" if value is None else "/priority?value=" + urllib.parse.quote(value)
        headers = {"Accept": "text/html"}
        if cookie:
            headers["Cookie"] = cookie
        status, headers, body = c.get(path, headers)
        self.assertEqual((status, body), (200, b"priority granted"))
        self.assertIsNone(header(headers, "Concert-Priority"))
        return headers

    def test_a_granted_class_sets_a_cookie_bound_to_the_presented_pass(self):
        with self.concert("-priority-classes", "staff,checkout") as c:
            admit = self.admitted(c)
            before = int(time.time())
            headers = self.grant(c, cookie="theme=dark; concert_admit=" + admit)
            after = int(time.time())
            lines = priority_lines(headers)
            self.assertEqual(len(lines), 1, headers)
            value, _, attributes = lines[0][len("concert_priority="):].partition("; ")
            self.assertEqual(attributes, "Path=/; Max-Age=3600; HttpOnly; SameSite=Lax")
            bound, expiry, name = check_priority(value)
            self.assertEqual((bound, name), (pass_id(admit), "staff"))
            self.assertTrue(before + 3600 <= expiry <= after + 3600)

            # The class as the configuration spells it; ttl defaults to -admit-ttl (10m).
            value = set_cookies(self.grant(c, " Checkout ", cookie="concert_admit=" + admit))["concert_priority"]
            bound, expiry, name = check_priority(value)
            self.assertEqual((bound, name), (pass_id(admit), "checkout"))
            self.assertTrue(before + 600 <= expiry <= int(time.time()) + 600)

            # The origin never sees Concert's cookies.
            status, _, _ = c.get("/headers", {"Cookie": "theme=dark; concert_admit=%s; concert_priority=%s"
                                              % (admit, value)})
            self.assertEqual(status, 200)
            seen = [r for r in self.origin.recorder.requests if r["path"] == "/headers"]
            self.assertEqual(seen[-1]["cookie"], "theme=dark")

    def test_a_first_visit_binds_to_the_pass_set_in_the_same_response(self):
        with self.concert("-priority-classes", "staff") as c:
            headers = self.grant(c)
            cookies = set_cookies(headers)
            self.assertIn("concert_admit", cookies)
            bound, _, name = check_priority(cookies["concert_priority"])
            self.assertEqual((bound, name), (pass_id(cookies["concert_admit"]), "staff"))

    def test_unknown_malformed_or_unconfigured_sets_nothing(self):
        with self.concert("-priority-classes", "staff,checkout") as c:
            admit = self.admitted(c)
            for value in ("vip", "staff; ttl=soon", "staff checkout", "staff; ttl=0"):
                headers = self.grant(c, value, cookie="concert_admit=" + admit)
                self.assertEqual(priority_lines(headers), [], value)
            # A forged pass binds nothing: the page guard gives the request a new pass, and the grant follows it.
            headers = self.grant(c, cookie="concert_admit=forged")
            cookies = set_cookies(headers)
            self.assertEqual(check_priority(cookies["concert_priority"])[0], pass_id(cookies["concert_admit"]))
        with self.concert() as c:
            admit = self.admitted(c)
            headers = self.grant(c, cookie="concert_admit=" + admit)
            self.assertEqual(priority_lines(headers), [])

    def test_none_expires_the_cookie(self):
        with self.concert("-priority-classes", "staff") as c:
            admit = self.admitted(c)
            headers = self.grant(c, "none", cookie="concert_admit=" + admit)
            self.assertEqual(priority_lines(headers), ["concert_priority=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"])

    def test_a_forged_priority_cookie_is_a_strike_a_foreign_one_is_not(self):
        with self.concert("-priority-classes", "staff", "-abuse-threshold", "100") as c:
            admit = self.admitted(c)
            other_pass = bytes(range(16))
            foreign = mint_priority(other_pass, int(time.time()) + 600, "staff")
            expired = mint_priority(pass_id(admit), int(time.time()) - 5, "staff")
            for value in (foreign, expired):
                status, _, _ = c.get("/", {"Cookie": "concert_admit=%s; concert_priority=%s" % (admit, value)})
                self.assertEqual(status, 200)
            self.assertEqual(c.stats()["abuse_strikes_total"], 0)
            # Signed with another key, or the pass itself presented as a priority cookie: forgeries.
            for value in (mint_priority(pass_id(admit), int(time.time()) + 600, "staff", secret="another-key"), admit):
                c.get("/", {"Cookie": "concert_admit=%s; concert_priority=%s" % (admit, value)})
            self.assertEqual(c.stats()["abuse_strikes_total"], 10)

    def test_a_reload_changes_the_classes(self):
        base = "upstream: %s\ncap: 4\n" % self.origin.url
        with Concert([], workers=1, config_text=base + "priority-classes: staff\n") as c:
            admit = self.admitted(c)
            self.assertEqual(len(priority_lines(self.grant(c, "checkout", cookie="concert_admit=" + admit))), 0)
            old_workers = set(c.worker_pids())
            with open(c.config_path, "w") as f:
                f.write(base + "priority-classes: checkout\n")
            c.signal(signal.SIGHUP)
            self.assertTrue(wait_for(lambda: "reload accepted: generation 2" in c.log(), timeout=10), c.log())
            # The old generation may still answer a request or two while it drains: ask the new one.
            self.assertTrue(wait_for(lambda: not old_workers & set(c.worker_pids()), timeout=15), c.log())
            lines = wait_for(lambda: priority_lines(self.grant(c, "checkout", cookie="concert_admit=" + admit)),
                             timeout=10)
            self.assertTrue(lines)
            self.assertEqual(priority_lines(self.grant(c, "staff", cookie="concert_admit=" + admit)), [])
            # A list the loader refuses: the reload is refused, the classes stay.
            with open(c.config_path, "w") as f:
                f.write(base + "priority-classes: a,a\n")
            c.signal(signal.SIGHUP)
            self.assertTrue(wait_for(lambda: "reload refused" in c.log(), timeout=10), c.log())
            self.assertIn("priority-classes", c.log())
            self.assertTrue(priority_lines(self.grant(c, "checkout", cookie="concert_admit=" + admit)))


if __name__ == "__main__":
    unittest.main()
