"""GET /_room/metrics and GET /_room/report against the real binary: exact
counter values after a scripted run, histogram counts equal to the events,
gauges equal to /_room/stats, `promtool check metrics` on the body, and the
report's gate, keys and types."""
import json
import shutil
import subprocess
import unittest

from concert_harness import BIN, Concert, header, set_cookies, wait_for
from fake_origin import FakeOrigin, closed_port
from room import park

TOKEN = "metrics-test-token"
CRAWLER = {"User-Agent": "Mozilla/5.0 (compatible; Googlebot/2.1)"}

# Stats counters exported under a family and label instead of their own key.
LABELLED = {
    "queued_total": ("concert_tickets_issued_total", ()),
    "long_lived_refused_total": ("concert_rejected_total", (("reason", "long_lived"),)),
    "ghost_evicted_total": ("concert_tickets_evicted_total", (("reason", "ghost"),)),
    "missed_turns_total": ("concert_tickets_evicted_total", (("reason", "missed"),)),
    "evicted_ttl_total": ("concert_tickets_evicted_total", (("reason", "ttl"),)),
    "evicted_banned_total": ("concert_tickets_evicted_total", (("reason", "banned"),)),
    "evicted_removed_total": ("concert_tickets_evicted_total", (("reason", "removed"),)),
}
for via in ("direct", "line", "held", "session", "priority"):
    LABELLED["admissions_%s_total" % via] = ("concert_admissions_total", (("via", via),))
for reason in ("full", "client_limit", "banned", "busy", "maintenance"):
    LABELLED["rejected_%s_total" % reason] = ("concert_rejected_total", (("reason", reason),))
for cls in ("1xx", "2xx", "3xx", "4xx", "5xx"):
    LABELLED["upstream_responses_%s_total" % cls] = ("concert_upstream_responses_total", (("code_class", cls),))
for kind in ("connect", "timeout", "reset"):
    LABELLED["upstream_errors_%s_total" % kind] = ("concert_upstream_errors_total", (("kind", kind),))
for phase in ("client_header", "client_body", "send", "keepalive", "upstream_read", "tunnel", "queue_hold"):
    LABELLED["timeouts_%s_total" % phase] = ("concert_timeouts_total", (("phase", phase),))
# Sums of a family above.
COVERED = {"evicted_total", "timeouts_total"}
GAUGES = {"occupancy": "concert_page_slots_in_use", "cap": "concert_page_slots_limit",
          "live_queue_depth": "concert_queue_waiting", "queue_depth": "concert_queue_depth",
          "max_queue_depth": "concert_max_queue_depth", "workers": "concert_workers",
          "generation": "concert_generation", "asset_cap": "concert_asset_cap",
          "long_lived_cap": "concert_long_lived_cap", "banned_clients": "concert_banned_clients"}


def series(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


class MetricsTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def assert_matches_stats(self, concert):
        """Every stats counter and gauge has its metric, with the same value
        (read while nothing moves)."""
        stats = concert.stats()
        _, samples = concert.metrics()
        for key, value in stats.items():
            if key in COVERED or not isinstance(value, int):
                continue
            if key in LABELLED:
                name, labels = LABELLED[key]
            elif key in GAUGES:
                name, labels = GAUGES[key], ()
            else:
                name, labels = "concert_" + key, ()
            self.assertEqual(samples.get((name, labels)), value, key)
        return stats, samples

    def test_scripted_run_exact_counts(self):
        args = ["-upstream", self.origin.url, "-cap", "1", "-max-queue", "1", "-upstream-timeout", "300ms",
                "-upstream-read-timeout", "30s"]
        with Concert(args, workers=2) as c:
            # Nothing happened yet: every counter 0, both histograms empty.
            _, samples = c.metrics()
            self.assertEqual(series(samples, "concert_admissions_total", via="direct"), 0)
            self.assertEqual(series(samples, "concert_queue_wait_seconds_count"), 0)
            self.assertEqual(series(samples, "concert_upstream_response_seconds_count"), 0)

            # 3 straight in (2xx), then one 500, one 503, one 404 and one 302 from the origin.
            for _ in range(3):
                self.assertEqual(c.get("/page")[0], 200)
            for code in (500, 503, 404, 302):
                self.assertEqual(c.get("/status?code=%d" % code)[0], code)

            # The origin sends no head within -upstream-timeout: 504. It still
            # has the request, so the slot stays taken until it answers.
            self.assertEqual(c.get("/slow")[0], 504)
            self.assertEqual(c.stats()["occupancy"], 1)
            # One visitor queues (a ticket), two more meet the breaker
            # (-max-queue 1), a crawler is not queued.
            status, headers, _ = c.get("/queued")
            self.assertEqual(status, 429)
            ticket = set_cookies(headers)["room_ticket"]
            for _ in range(2):
                self.assertEqual(c.get("/turned-away")[0], 503)
            self.assertEqual(c.get("/crawled", CRAWLER)[0], 503)
            stats, _ = self.assert_matches_stats(c)
            self.assertEqual((stats["occupancy"], stats["live_queue_depth"]), (1, 1))

            # The origin answers at last (the detached exchange reads and
            # drops it) and the slot frees; the visitor comes back: its turn.
            self.origin.release()
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=10))
            self.assertEqual(c.get("/queued", {"Cookie": "room_ticket=" + ticket})[0], 200)

            stats, samples = self.assert_matches_stats(c)
            self.assertEqual(series(samples, "concert_admissions_total", via="direct"), 3 + 4 + 1)
            self.assertEqual(series(samples, "concert_admissions_total", via="line"), 1)
            self.assertEqual(series(samples, "concert_admissions_total", via="held"), 0)
            self.assertEqual(series(samples, "concert_admissions_total", via="session"), 0)
            self.assertEqual(series(samples, "concert_admissions_total", via="priority"), 0)
            self.assertEqual(series(samples, "concert_tickets_issued_total"), 1)
            self.assertEqual(series(samples, "concert_rejected_total", reason="full"), 2)
            self.assertEqual(series(samples, "concert_rejected_total", reason="busy"), 1)
            self.assertEqual(series(samples, "concert_rejected_total", reason="client_limit"), 0)
            self.assertEqual(series(samples, "concert_rejected_total", reason="banned"), 0)
            # 3 pages, the late answer to the 504's request, the line admission.
            self.assertEqual(series(samples, "concert_upstream_responses_total", code_class="2xx"), 5)
            self.assertEqual(series(samples, "concert_upstream_responses_total", code_class="3xx"), 1)
            self.assertEqual(series(samples, "concert_upstream_responses_total", code_class="4xx"), 1)
            self.assertEqual(series(samples, "concert_upstream_responses_total", code_class="5xx"), 2)
            self.assertEqual(series(samples, "concert_upstream_responses_total", code_class="1xx"), 0)
            self.assertEqual(series(samples, "concert_upstream_errors_total", kind="timeout"), 1)
            self.assertEqual(series(samples, "concert_upstream_errors_total", kind="connect"), 0)
            self.assertEqual(series(samples, "concert_upstream_errors_total", kind="reset"), 0)
            self.assertEqual(series(samples, "concert_fifo_inversions_total"), 0)
            # One observation per origin response head, one per line admission.
            self.assertEqual(series(samples, "concert_upstream_response_seconds_count"), 9)
            self.assertEqual(series(samples, "concert_upstream_response_seconds_bucket", le="+Inf"), 9)
            self.assertEqual(series(samples, "concert_queue_wait_seconds_count"), 1)
            self.assertEqual(series(samples, "concert_queue_wait_seconds_bucket", le="+Inf"), 1)
            self.assertGreater(series(samples, "concert_upstream_response_seconds_sum"), 0)
            version = subprocess.run([BIN, "-version"], capture_output=True, text=True).stdout.split()[1]
            self.assertEqual(series(samples, "concert_build_info", version=version), 1)

    def test_dead_origin_counts_connect_errors(self):
        with Concert(["-upstream", "http://127.0.0.1:%d" % closed_port(), "-cap", "2"], workers=2) as c:
            for _ in range(3):
                self.assertEqual(c.get("/page")[0], 502)
            _, samples = self.assert_matches_stats(c)
            self.assertEqual(series(samples, "concert_upstream_errors_total", kind="connect"), 3)
            self.assertEqual(series(samples, "concert_upstream_errors_total", kind="reset"), 0)
            self.assertEqual(series(samples, "concert_upstream_errors_total", kind="timeout"), 0)
            self.assertEqual(series(samples, "concert_admissions_total", via="direct"), 3)
            self.assertEqual(series(samples, "concert_upstream_response_seconds_count"), 0)
            for cls in ("1xx", "2xx", "3xx", "4xx", "5xx"):
                self.assertEqual(series(samples, "concert_upstream_responses_total", code_class=cls), 0)

    def test_head_and_method(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=1) as c:
            status, headers, body = c.request("HEAD", "/_room/metrics")
            self.assertEqual(status, 200)
            self.assertEqual(header(headers, "Content-Type"), "text/plain; version=0.0.4; charset=utf-8")
            self.assertEqual(body, b"")
            status, headers, _ = c.request("POST", "/_room/metrics", body=b"")
            self.assertEqual(status, 405)
            self.assertEqual(header(headers, "Allow"), "GET, HEAD")
            status, headers, _ = c.get("/_room/metrics")
            self.assertEqual(status, 200)
            self.assertEqual(header(headers, "Content-Type"), "text/plain; version=0.0.4; charset=utf-8")
            self.assertEqual(self.origin.recorder.hits(), 0)

    @unittest.skipUnless(shutil.which("promtool"), "promtool not installed (make deps-test)")
    def test_promtool_accepts_the_body(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2) as c:
            self.assertEqual(c.get("/page")[0], 200)
            text, _ = c.metrics()
            check = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True,
                                   timeout=30)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
            self.assertEqual((check.stdout + check.stderr).strip(), b"")

    def test_report_gate(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=1) as c:
            self.assertEqual(c.get("/_room/report")[0], 404)
            self.assertEqual(c.get("/_room/report", {"Authorization": "Bearer " + TOKEN})[0], 404)
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=1, admin_token=TOKEN) as c:
            self.assertEqual(c.get("/_room/report")[0], 401)
            self.assertEqual(c.get("/_room/report", {"Authorization": "Bearer wrong"})[0], 401)
            self.assertEqual(self.origin.recorder.hits(), 0)

    def test_report_keys_and_clients(self):
        args = ["-upstream", self.origin.url, "-cap", "1", "-max-tickets-per-client", "2",
                "-trusted-proxies", "127.0.0.1/32"]
        with Concert(args, workers=2, admin_token=TOKEN) as c:
            holder = park(c)
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 1, timeout=5))
            for client, n in (("198.51.100.7", 2), ("198.51.100.8", 1), ("2001:db8:5:6::1", 1)):
                for _ in range(n):
                    self.assertEqual(c.get("/q", {"X-Forwarded-For": client})[0], 429)
            # A third place for the same client: the per-client limit.
            self.assertEqual(c.get("/q", {"X-Forwarded-For": "198.51.100.7"})[0], 429)

            status, headers, body = c.get("/_room/report", {"Authorization": "Bearer " + TOKEN})
            self.assertEqual(status, 200)
            self.assertEqual(header(headers, "Content-Type"), "application/json; charset=utf-8")
            report = json.loads(body)
            self.assertEqual(list(report),
                             ["fifo_inversions", "ghost_share", "tickets_per_client", "wait_seconds", "capacity"])
            self.assertEqual(report["fifo_inversions"], 0)
            self.assertIsInstance(report["fifo_inversions"], int)
            self.assertEqual(report["ghost_share"], 0)
            self.assertIsInstance(report["ghost_share"], float)
            self.assertEqual(report["tickets_per_client"], [
                {"client": "198.51.100.7", "tickets": 2},
                {"client": "198.51.100.8", "tickets": 1},
                {"client": "2001:db8:5:6::/64", "tickets": 1},
            ])
            self.assertEqual(sorted(report["wait_seconds"]), ["p50", "p90", "p99"])
            for v in report["wait_seconds"].values():
                self.assertIsInstance(v, float)
                self.assertEqual(v, 0)  # nobody admitted from the line yet
            # The capacity advisor has seen nothing yet; -adaptive is off.
            self.assertEqual(report["capacity"], {
                "cap": 1, "recommended_cap": None, "unqueued_first_byte_seconds": 0.0, "peak_pages_per_second": 0.0,
                "recommended_by": None, "origin_status": None,
                "adaptive": {"configured": False, "active": False, "cap_min": 1, "cap_max": 4,
                             "unqueued_first_byte_seconds": 0.0, "origin_queue": 0.0}})
            _, samples = self.assert_matches_stats(c)
            self.assertEqual(series(samples, "concert_rejected_total", reason="client_limit"), 1)
            self.assertEqual(series(samples, "concert_tickets_issued_total"), 4)
            self.origin.release()
            holder.join(10)


if __name__ == "__main__":
    unittest.main()
