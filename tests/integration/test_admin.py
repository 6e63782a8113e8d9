"""The admin side of the room: -admin-listen, and the line seen and steered
through GET /_room/queue and DELETE /_room/queue/<ticket>."""
import json
import time
import unittest

from concert_harness import Concert, set_cookies, wait_for
from fake_origin import FakeOrigin
from room import park

TOKEN = "admin-token-for-tests"
AUTH = {"Authorization": "Bearer " + TOKEN}


def ticket_cookie(headers):
    value = set_cookies(headers).get("room_ticket")
    return "room_ticket=" + value if value else None


class AdminListenTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def test_admin_endpoints_only_on_the_admin_listener(self):
        args = ["-upstream", self.origin.url, "-cap", "1", "-admin-listen", "127.0.0.1:0"]
        with Concert(args, workers=2, admin_token=TOKEN) as c:
            self.assertIsNotNone(c.admin_port)
            self.assertNotEqual(c.admin_port, c.port)
            # Public listener: /_room/ is gone but healthz; pages are served.
            for method, path in [("GET", "/_room/stats"), ("POST", "/_room/cap"), ("GET", "/_room/queue"),
                                 ("DELETE", "/_room/queue/1"), ("GET", "/_room/"), ("GET", "/_room/anything"),
                                 ("GET", "/_room/metrics"), ("GET", "/_room/report"), ("GET", "/_room/history"),
                                 ("GET", "/_room/chart.js")]:
                status, _, _ = c.request(method, path, AUTH, b'{"cap":2}' if method == "POST" else None)
                self.assertEqual(status, 404, (method, path))
            self.assertEqual(c.get("/_room/healthz")[0], 200)
            self.assertEqual(c.get("/page")[0], 200)
            # Admin listener: no token needed; nothing but /_room/.
            status, _, body = c.admin("GET", "/_room/stats")
            self.assertEqual(status, 200)
            self.assertEqual(json.loads(body)["cap"], 1)
            status, _, body = c.admin("POST", "/_room/cap", {}, b'{"cap":3}')
            self.assertEqual(status, 200, body)
            self.assertEqual(c.stats()["cap"], 3)
            for path in ("/_room/queue", "/_room/healthz", "/_room/metrics", "/_room/report", "/_room/",
                         "/_room/history", "/_room/chart.js"):
                self.assertEqual(c.admin("GET", path)[0], 200, path)
            self.assertEqual(c.admin("GET", "/page")[0], 404)
            # Nothing of the above reached the origin but the one page.
            self.assertEqual(self.origin.recorder.hits(), 1)

    def test_admin_listener_speaks_plain_http_behind_a_proxy_protocol_listener(self):
        args = ["-upstream", self.origin.url, "-cap", "1", "-admin-listen", "127.0.0.1:0",
                "-proxy-protocol", "-trusted-proxies", "127.0.0.1/32"]
        preface = b"PROXY TCP4 203.0.113.7 127.0.0.1 4000 80\r\n"
        with Concert(args, workers=1, admin_token=TOKEN, proxy_preface=preface) as c:
            self.assertEqual(c.admin("GET", "/_room/stats")[0], 200)  # no PROXY header here
            self.assertEqual(c.get("/page")[0], 200)  # the public listener still wants one
            self.assertEqual(self.origin.recorder.hits("/page"), 1)

    def test_without_admin_listen_the_token_gates_the_line_endpoints(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=1) as c:
            self.assertEqual(c.get("/_room/queue")[0], 404)  # no token configured
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=1, admin_token=TOKEN) as c:
            self.assertEqual(c.get("/_room/queue")[0], 401)
            self.assertEqual(c.get("/_room/queue", {"Authorization": "Bearer wrong"})[0], 401)
            self.assertEqual(c.request("DELETE", "/_room/queue/1")[0], 401)
            self.assertEqual(c.get("/_room/queue", AUTH)[0], 200)
            self.assertEqual(c.get("/_room/stats")[0], 200)  # stats stays open
            self.assertEqual(self.origin.recorder.hits(), 0)


class LineAdminTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def test_list_the_head_of_the_line_and_remove_one(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2, admin_token=TOKEN) as c:
            holder = park(c)
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 1, timeout=5))
            cookies = []
            for i in range(5):
                status, headers, _ = c.get("/page", {"Accept": "text/html"})
                self.assertEqual(status, 200)
                cookies.append(ticket_cookie(headers))
                time.sleep(0.05)
            self.assertTrue(all(cookies))
            status, _, body = c.get("/_room/queue", AUTH)
            self.assertEqual(status, 200)
            line = json.loads(body)
            self.assertEqual(len(line), 5)
            tickets = [e["ticket"] for e in line]
            self.assertEqual(tickets, sorted(tickets))
            for e in line:
                self.assertEqual(set(e), {"ticket", "age_seconds", "client", "last_seen_seconds", "returned"})
                self.assertEqual(e["client"], "127.0.0.1")
                self.assertGreaterEqual(e["age_seconds"], 0)
                self.assertGreaterEqual(e["last_seen_seconds"], 0)
                self.assertFalse(e["returned"])
            # Oldest first: the first issued is the oldest.
            self.assertGreaterEqual(line[0]["age_seconds"], line[-1]["age_seconds"])
            status, _, body = c.get("/_room/queue?limit=2", AUTH)
            self.assertEqual([e["ticket"] for e in json.loads(body)], tickets[:2])
            for bad in ("0", "x", "1001", ""):
                self.assertEqual(c.get("/_room/queue?limit=" + bad, AUTH)[0], 400, bad)

            # The third visitor is removed: everyone behind moves up one place.
            def position(cookie):
                status, _, body = c.get("/queue/status", {"Cookie": cookie})
                return json.loads(body).get("position")

            self.assertEqual(position(cookies[4]), 5)
            status, _, body = c.request("DELETE", "/_room/queue/%d" % tickets[2], AUTH)
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body), {"removed": tickets[2]})
            self.assertEqual(c.request("DELETE", "/_room/queue/%d" % tickets[2], AUTH)[0], 404)
            self.assertEqual(c.request("DELETE", "/_room/queue/999999", AUTH)[0], 404)
            self.assertEqual(c.request("DELETE", "/_room/queue/abc", AUTH)[0], 400)
            self.assertEqual(c.request("GET", "/_room/queue/1", AUTH)[0], 405)
            time.sleep(1.1)  # the status poll is limited to one a second per ticket
            self.assertEqual(position(cookies[4]), 4)
            self.assertEqual([e["ticket"] for e in json.loads(c.get("/_room/queue", AUTH)[2])],
                             tickets[:2] + tickets[3:])
            stats = c.stats()
            self.assertEqual(stats["evicted_removed_total"], 1)
            self.assertEqual(stats["live_queue_depth"], 4)
            # The removed visitor comes back: no place, a new ticket at the back.
            status, headers, _ = c.get("/page", {"Cookie": cookies[2], "Accept": "text/html"})
            self.assertEqual(status, 200)
            fresh = ticket_cookie(headers)
            self.assertIsNotNone(fresh)
            self.assertNotEqual(fresh, cookies[2])
            line = json.loads(c.get("/_room/queue", AUTH)[2])
            self.assertEqual(len(line), 5)
            self.assertGreater(line[-1]["ticket"], tickets[-1])
            self.origin.release()
            holder.join(10)
            self.assertEqual(self.origin.recorder.hits("/page"), 0)


if __name__ == "__main__":
    unittest.main()
