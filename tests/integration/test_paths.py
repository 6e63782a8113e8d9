"""Normalised paths against the real binary with two workers: dot-segments,
literal or percent-encoded, are removed before routing, the origin is sent the
path Concert routed, and a path that climbs above "/" is refused with 400."""
import json
import unittest

from concert_harness import Concert, header, headers_all, raw_exchange, wait_for
from fake_origin import FakeOrigin
from room import fill

BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}

# Every way of spelling "/static/../checkout" (a page) that starts with a public asset prefix.
CLIMBS_OUT_OF_STATIC = [
    "/static/../checkout",
    "/static/%2e%2e/checkout",
    "/static/%2E%2E/checkout",
    "/static/%2E%2e/checkout",
    "/static/.%2e/checkout",
    "/static/%2E./checkout",
    "/static/x/../../checkout",
    "/static/./../checkout",
]

ABOVE_ROOT = [
    "/..",
    "/../",
    "/../checkout",
    "/static/../../checkout",
    "/%2e%2e/x",
    "/%2E./x?y=1",
    "/static/.%2E/%2e%2e/etc/passwd",
    "/a/./../..",
]


def status_of(response):
    parts = response.split(b"\r\n", 1)[0].split(b" ")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def cookie_names(headers):
    return {line.split("=", 1)[0] for line in headers_all(headers, "Set-Cookie")}


class PathsTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()
        self.origin.recorder.page_prefixes = ["/static/"]

    def tearDown(self):
        self.origin.release()
        self.origin.stop()

    def concert(self, *args, **kw):
        return Concert(["-upstream", self.origin.url, "-asset-public", "/static/*", "-bypass", "/hooks/*",
                        "-cap", "1"] + list(args), workers=2, **kw)

    def targets(self):
        with self.origin.recorder.lock:
            return [r["target"] for r in self.origin.recorder.requests]

    def test_climbing_out_of_a_public_prefix_is_a_page_and_waits(self):
        with self.concert() as c:
            parked = fill(c, origin=self.origin)[0]
            for path in CLIMBS_OUT_OF_STATIC:
                status, headers, body = c.get(path)
                self.assertEqual(status, 429, path)
                self.assertTrue(json.loads(body)["queued"], path)
                self.assertIn("room_ticket", cookie_names(headers), path)
            status, headers, body = c.get("/static/%2e%2e/checkout", BROWSER)
            self.assertEqual(status, 200)
            self.assertEqual(header(headers, "Content-Type"), "text/html; charset=utf-8")
            self.assertIn(b"/queue/status", body)
            self.assertEqual(self.targets(), ["/slow"], "a climbing path reached the origin")
            self.origin.release()
            parked.join(10)

    def test_climbing_out_of_a_bypass_prefix_is_a_page_and_waits(self):
        with self.concert() as c:
            parked = fill(c, origin=self.origin)[0]
            for path in ("/hooks/../checkout", "/hooks/%2E%2e/checkout"):
                self.assertEqual(c.get(path)[0], 429, path)
            # ... and a path that climbs into the bypass prefix is a bypass.
            status, _, body = c.get("/checkout/../hooks/x")
            self.assertEqual((status, body), (200, b"ok"))
            self.assertEqual(self.targets(), ["/slow", "/hooks/x"])
            self.origin.release()
            parked.join(10)

    def test_admitted_page_reaches_the_origin_normalised(self):
        with self.concert() as c:
            for path in CLIMBS_OUT_OF_STATIC:
                status, headers, body = c.get(path + "?next=/a/../b&x=%2e%2e")
                self.assertEqual((status, body), (200, b"ok"), path)
                # Admitted through the room: a page, not a public asset.
                self.assertIn("concert_admit", cookie_names(headers), path)
            self.assertEqual(self.targets(), ["/checkout?next=/a/../b&x=%2e%2e"] * len(CLIMBS_OUT_OF_STATIC))
            self.assertEqual(c.stats()["asset_served_total"], 0)

    def test_dot_inside_a_public_prefix_is_a_public_asset(self):
        with self.concert() as c:
            parked = fill(c, origin=self.origin)[0]
            for path in ("/static/./x.css", "/static/%2e/x.css", "/static/%2E/x.css", "/static/a/../x.css",
                         "/checkout/../static/x.css"):
                status, headers, body = c.get(path)
                self.assertEqual((status, body), (200, b"ok"), path)
                self.assertNotIn("room_ticket", cookie_names(headers), path)
            self.assertEqual(self.targets(), ["/slow"] + ["/static/x.css"] * 5)
            self.assertEqual(c.stats()["asset_served_total"], 5)
            self.origin.release()
            parked.join(10)

    def test_above_root_is_400_and_never_reaches_the_origin(self):
        with self.concert() as c:
            for path in ABOVE_ROOT:
                out = raw_exchange(c.port, b"GET %s HTTP/1.1\r\nHost: h\r\n\r\n" % path.encode(), timeout=5)
                self.assertEqual(status_of(out), 400, "%s -> %r" % (path, out[:200]))
                self.assertIn(b"connection: close", out.partition(b"\r\n\r\n")[0].lower(), path)
            # Absolute-form too.
            out = raw_exchange(c.port, b"GET http://h/static/../../x HTTP/1.1\r\nHost: h\r\n\r\n", timeout=5)
            self.assertEqual(status_of(out), 400)
            self.assertEqual(self.targets(), [])
            self.assertEqual(c.stats()["occupancy"], 0)

    def test_above_root_ends_a_pipeline(self):
        with self.concert() as c:
            out = raw_exchange(c.port, b"GET /a/../b HTTP/1.1\r\nHost: h\r\n\r\n"
                                       b"GET /../c HTTP/1.1\r\nHost: h\r\n\r\n"
                                       b"GET /d HTTP/1.1\r\nHost: h\r\n\r\n", timeout=5)
            self.assertEqual(out.count(b"HTTP/1.1 200 "), 1)
            self.assertEqual(out.count(b"HTTP/1.1 400 "), 1)
            self.assertEqual(self.targets(), ["/b"])

    def test_empty_segments_are_kept(self):
        with self.concert() as c:
            status, _, _ = c.get("/a//b/./c")
            self.assertEqual(status, 200)
            status, _, _ = c.get("/a//../b")
            self.assertEqual(status, 200)
            self.assertEqual(self.targets(), ["/a//b/c", "/a/b"])

    def test_trailing_dot_segments_leave_a_slash(self):
        with self.concert() as c:
            for path in ("/a/b/..", "/a/b/../", "/a/.", "/a/%2e"):
                self.assertEqual(c.get(path)[0], 200, path)
            self.assertEqual(self.targets(), ["/a/", "/a/", "/a/", "/a/"])

    def test_reserved_paths_match_after_normalisation(self):
        with self.concert() as c:
            status, _, body = c.get("/x/../_room/stats")
            self.assertEqual(status, 200)
            self.assertIn("occupancy", json.loads(body))
            self.assertEqual(self.targets(), [])

    def test_encoded_slash_and_nul_are_forwarded_as_sent(self):
        with self.concert() as c:
            parked = fill(c, origin=self.origin)[0]
            # %2F is a '/' for routing, as before: a public asset even while the room is full ...
            status, _, body = c.get("/static%2Fx.css")
            self.assertEqual((status, body), (200, b"ok"))
            # ... and sent to the origin as it came, never turned into a separator.
            self.origin.release()
            parked.join(10)
            self.assertEqual(c.get("/a%2Fb/./c%2f")[0], 200)
            self.assertEqual(c.get("/x%00y")[0], 200)
            self.assertEqual(self.targets(), ["/slow", "/static%2Fx.css", "/a%2Fb/c%2f", "/x%00y"])

    def test_dot_segment_made_by_an_encoded_slash_is_400(self):
        with self.concert() as c:
            for path in ("/static%2F..%2Fcheckout", "/static/..%2Fcheckout", "/static%2F%2E%2E%2Fcheckout"):
                out = raw_exchange(c.port, b"GET %s HTTP/1.1\r\nHost: h\r\n\r\n" % path.encode(), timeout=5)
                self.assertEqual(status_of(out), 400, path)
            self.assertEqual(self.targets(), [])

    def test_access_log_keeps_the_request_line_as_sent(self):
        with self.concert(access_log=True) as c:
            self.assertEqual(c.get("/static/%2e%2e/checkout?q=1")[0], 200)

            def log():
                try:
                    with open(c.access_path) as f:
                        return f.read()
                except OSError:
                    return ""

            self.assertTrue(wait_for(lambda: "checkout" in log(), timeout=5))
            self.assertIn('"GET /static/%2e%2e/checkout?q=1 HTTP/1.1" 200 ', log())
            self.assertEqual(self.targets(), ["/checkout?q=1"])


if __name__ == "__main__":
    unittest.main()
