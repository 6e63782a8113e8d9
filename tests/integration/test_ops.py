"""Ops endpoints against the real binary: /_room/healthz, /_room/stats, POST /_room/cap."""
import json
import time
import unittest

from concert_harness import Concert, header, wait_for
from fake_origin import FakeOrigin
from room import park

ERA_A_KEYS = {
    "upstream", "cap", "occupancy", "queue_depth", "live_queue_depth", "max_queue_depth", "utilization",
    "token_ttl", "queued_total", "evicted_total", "timeouts_total", "promoted_total", "asset_cap",
    "asset_in_flight", "asset_users", "asset_user_cap_h1", "asset_user_cap_h2", "asset_served_total",
    "asset_denied_total", "asset_user_throttled_total", "asset_global_throttled_total",
}
CONTRACT_KEYS = {"workers", "generation", "reloads_total", "worker_restarts_total", "slots_reclaimed_total"}


class OpsTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def test_healthz_ungated_when_full(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2) as c:
            t = park(c)
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 1, timeout=5))
            for _ in range(4):  # both workers
                status, headers, body = c.get("/_room/healthz")
                self.assertEqual(status, 200)
                self.assertEqual(body, b"ok")
                self.assertEqual(header(headers, "Content-Type"), "text/plain; charset=utf-8")
            self.assertEqual(self.origin.recorder.hits("/_room/healthz"), 0)
            self.origin.release()
            t.join(10)

    def test_stats(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2) as c:
            t = park(c)
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 1, timeout=5))
            status, headers, body = c.get("/_room/stats")
            self.assertEqual(status, 200)
            self.assertEqual(header(headers, "Content-Type"), "application/json; charset=utf-8")
            stats = json.loads(body)
            self.assertTrue(ERA_A_KEYS <= set(stats), ERA_A_KEYS - set(stats))
            self.assertTrue(CONTRACT_KEYS <= set(stats), CONTRACT_KEYS - set(stats))
            keys = list(json.loads(body, object_pairs_hook=lambda pairs: [k for k, _ in pairs]))
            self.assertEqual(keys, sorted(keys))
            self.assertEqual(stats["cap"], 1)
            self.assertEqual(stats["occupancy"], 1)
            self.assertEqual(stats["token_ttl"], "5m0s")
            self.assertEqual(stats["upstream"], self.origin.url)
            self.assertEqual(stats["workers"], 2)
            # Every worker answers the same (all from shared memory).
            seen = set()
            for _ in range(6):
                s = c.stats()
                seen.add((s["cap"], s["occupancy"], s["queued_total"]))
            self.assertEqual(seen, {(1, 1, 0)})
            self.origin.release()
            t.join(10)
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=5))

    def test_cap_disabled_without_token(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=1) as c:
            status, _, body = c.request("POST", "/_room/cap", {"Authorization": "Bearer x"}, b'{"cap":3}')
            self.assertEqual(status, 404)
            self.assertEqual(body, b"")
            self.assertEqual(self.origin.recorder.hits(), 0)

    def test_cap_auth_and_update(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2, admin_token="tok-123") as c:
            status, _, body = c.request("POST", "/_room/cap", {}, b'{"cap":3}')
            self.assertEqual((status, body), (401, b""))
            status, _, _ = c.request("POST", "/_room/cap", {"Authorization": "Bearer wrong"}, b'{"cap":3}')
            self.assertEqual(status, 401)
            status, headers, body = c.request("POST", "/_room/cap", {"Authorization": "Bearer tok-123"},
                                              b"not json")
            self.assertEqual(status, 400)
            self.assertIn("error", json.loads(body))
            status, _, body = c.request("POST", "/_room/cap", {"Authorization": "tok-123"}, b"{}")
            self.assertEqual(status, 400)
            self.assertEqual(json.loads(body), {"error": "room: invalid capacity 0: must be >= 1"})
            status, _, body = c.request("POST", "/_room/cap", {"Authorization": "Bearer tok-123"},
                                        b'{"cap":3000000000}')
            self.assertEqual(status, 400)
            status, _, body = c.request("POST", "/_room/cap", {"Authorization": "Bearer tok-123"}, b'{"cap":3}')
            self.assertEqual(status, 200)
            self.assertEqual(json.loads(body), {"cap": 3, "occupancy": 0})
            for _ in range(4):
                self.assertEqual(c.stats()["cap"], 3)
            self.assertIn("page cap set to 3 via /_room/cap", c.log())
            self.assertEqual(self.origin.recorder.hits(), 0)

    def test_cap_growth_admits_waiters(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2, admin_token="tok") as c:
            t = park(c)
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 1, timeout=5))
            status, headers, _ = c.get("/page")
            self.assertEqual(status, 429)
            ticket = [v for k, v in headers if k.lower() == "set-cookie" and v.startswith("room_ticket=")]
            self.assertEqual(len(ticket), 1)
            cookie = ticket[0].split(";")[0]
            status, _, _ = c.request("POST", "/_room/cap", {"Authorization": "tok"}, b'{"cap":2}')
            self.assertEqual(status, 200)
            status, _, body = c.get("/page", {"Cookie": cookie})
            self.assertEqual((status, body), (200, b"ok"))
            self.origin.release()
            t.join(10)


if __name__ == "__main__":
    unittest.main()
