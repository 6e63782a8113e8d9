"""The shared pass table when it is full, against the real binary with two workers.

-asset-users-max 4 makes a table of four entries. A new pass in a full table
takes the entry of the least recently used idle pass (pass_evicted_total);
only when every pass in it has a request in flight is the answer 503
(pass_table_full_total). An evicted pass comes back with a fresh entry.
"""
import unittest

from concert_harness import Concert, header, headers_all, wait_for
from fake_origin import FakeOrigin
from room import mint_pass, park, with_pass

TABLE = 4


class PassTableTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()
        self.origin.recorder.page_prefixes = ["/assets/"]

    def tearDown(self):
        self.origin.release()
        self.origin.stop()

    def concert(self, *args):
        return Concert(["-upstream", self.origin.url, "-cap", "50", "-assets", "/assets/*",
                        "-asset-users-max", str(TABLE)] + list(args), workers=2)

    def admit(self, c):
        """A visitor admitted through a page: the concert_admit pass it was given."""
        status, headers, _ = c.get("/index.html")
        self.assertEqual(status, 200)
        lines = [v for v in headers_all(headers, "Set-Cookie") if v.startswith("concert_admit=")]
        self.assertEqual(len(lines), 1)
        return lines[0].split(";")[0].split("=", 1)[1]

    def test_more_visitors_than_entries_all_get_their_assets(self):
        with self.concert() as c:
            visitors = [self.admit(c) for _ in range(3 * TABLE)]
            self.assertEqual(len(set(visitors)), 3 * TABLE)
            # Each visitor loads its assets, then the next one comes; then all
            # come back once more, each evicting the least recently used.
            for _ in range(2):
                for v in visitors:
                    for path in ("/assets/app.js", "/assets/site.css"):
                        status, _, body = c.get(path, with_pass(v))
                        self.assertEqual((status, body), (200, b"ok"), path)
            stats = c.stats()
            self.assertEqual(stats["pass_table_full_total"], 0)
            self.assertEqual(stats["asset_served_total"], 2 * 2 * 3 * TABLE)
            # The first TABLE passes found free entries; every later first
            # request of a pass (all of the second round's) evicted one.
            self.assertEqual(stats["pass_evicted_total"], 3 * TABLE - TABLE + 3 * TABLE)
            self.assertEqual(stats["asset_users"], TABLE)
            self.assertEqual(stats["asset_in_flight"], 0)

    def test_busy_passes_keep_their_entries_and_503_only_when_all_are_busy(self):
        with self.concert("-asset-user-cap-h1", "1", "-asset-user-wait", "50ms") as c:
            # Three visitors each hold a request at the origin: their entries are busy.
            busy = [mint_pass() for _ in range(TABLE - 1)]
            parked = [park(c, "/assets/slow", with_pass(p)) for p in busy]
            self.assertTrue(wait_for(lambda: self.origin.recorder.hits("/assets/slow") == TABLE - 1, timeout=5))
            # New visitors one after another share the one entry left.
            for _ in range(5):
                status, _, _ = c.get("/assets/app.js", with_pass(mint_pass()))
                self.assertEqual(status, 200)
            stats = c.stats()
            self.assertEqual(stats["pass_evicted_total"], 4)
            self.assertEqual(stats["pass_table_full_total"], 0)
            # The busy visitors were never evicted: still at their cap of one.
            for p in busy:
                status, headers, _ = c.get("/assets/app.js", with_pass(p))
                self.assertEqual(status, 429)
                self.assertEqual(header(headers, "Retry-After"), "1")
            # A fourth held request makes every entry busy: the next new pass gets 503.
            last = mint_pass()
            parked.append(park(c, "/assets/slow", with_pass(last)))
            self.assertTrue(wait_for(lambda: self.origin.recorder.hits("/assets/slow") == TABLE, timeout=5))
            status, headers, body = c.get("/assets/app.js", with_pass(mint_pass()))
            self.assertEqual((status, body), (503, b""))
            self.assertEqual(header(headers, "Retry-After"), "1")
            stats = c.stats()
            self.assertEqual(stats["pass_table_full_total"], 1)
            self.assertEqual(stats["pass_evicted_total"], 5)
            # The held requests end: entries are idle again, and a new pass gets one.
            self.origin.release()
            self.assertEqual([p.status() for p in parked], [200] * TABLE)
            self.assertTrue(wait_for(lambda: c.stats()["asset_in_flight"] == 0, timeout=5))
            status, _, _ = c.get("/assets/app.js", with_pass(mint_pass()))
            self.assertEqual(status, 200)
            stats = c.stats()
            self.assertEqual(stats["pass_evicted_total"], 6)
            self.assertEqual(stats["pass_table_full_total"], 1)


if __name__ == "__main__":
    unittest.main()
