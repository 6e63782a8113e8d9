"""The dashboard (GET /_room/) in headless Chromium, driven over the DevTools
protocol by the shared driver in tests/lib/chromium.py.

Concert runs with an admin token; the browser sends `Authorization: Bearer`
on every request through Network.setExtraHTTPHeaders, as a header-adding
proxy or browser setting would for an operator. Checked:
1. The page draws five Chart.js charts (canvases present, a Chart instance
   on each, each with data), from the compiled-in /_room/chart.js; the page
   asks nothing of any other origin.
2. It updates itself: the number of samples grows over a few seconds,
   arriving on /_room/history/events (no reload, no polling of the history).
3. It shows the room filling: visitors go through a room with cap 2 in front
   of a slow origin; the page's queue depth and occupancy rise, and
   admissions and waits appear. (The origin's response time is drawn from
   whatever the workers observe; nothing here depends on it.)
4. Without the header the page does not load (401).
5. axe-core finds no violation, in light and dark colour schemes.
Waits are bounded; nothing is timed.
"""
import http.client
import os
import threading
import time
import unittest

from chromium import AXE, CHROMIUM, Browser, axe_source, axe_summary, run_axe
from concert_harness import Concert, set_cookies, wait_for
from fake_origin import FakeOrigin

TOKEN = "dashboard-test-token"
CHARTS = ["chart-queue", "chart-occupancy", "chart-admissions", "chart-wait", "chart-origin"]


def visitor(port, path, stop, timeout=60):
    """One browser-like visitor: asks for `path` as a page; while it is
    given a place in line, polls /queue/status with its cookies until it is
    ready and asks again. Returns the final status (0 if it gave up)."""
    jar = {}
    deadline = time.time() + timeout
    while time.time() < deadline and not stop.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            cookie = "; ".join("%s=%s" % kv for kv in jar.items())
            conn.request("GET", path, headers={"Accept": "text/html", "Cookie": cookie})
            r = conn.getresponse()
            body = r.read()
            jar.update(set_cookies(r.getheaders()))
            if "room_ticket" not in jar or b"ok" == body.strip():
                return r.status
            # In line: poll until it is this visitor's turn.
            while time.time() < deadline and not stop.is_set():
                time.sleep(0.25)
                cookie = "; ".join("%s=%s" % kv for kv in jar.items())
                conn.request("GET", "/queue/status", headers={"Cookie": cookie})
                s = conn.getresponse()
                status_body = s.read()
                jar.update(set_cookies(s.getheaders()))
                if b'"ready":true' in status_body:
                    break
        except OSError:
            time.sleep(0.1)
        finally:
            conn.close()
    return 0


class Crowd:
    """`n` visitors arriving `spacing` seconds apart, each asking for `path`."""

    def __init__(self, port, n, path, spacing=0.05):
        self.stop = threading.Event()
        self.threads = []

        def arrive():
            for _ in range(n):
                if self.stop.is_set():
                    return
                t = threading.Thread(target=visitor, args=(port, path, self.stop), daemon=True)
                t.start()
                self.threads.append(t)
                time.sleep(spacing)

        self.arrivals = threading.Thread(target=arrive, daemon=True)
        self.arrivals.start()

    def end(self):
        self.stop.set()
        self.arrivals.join(10)
        for t in self.threads:
            t.join(10)


def open_dashboard(browser, port):
    browser.call("Network.setExtraHTTPHeaders", {"headers": {"Authorization": "Bearer " + TOKEN}})
    browser.navigate("http://127.0.0.1:%d/_room/" % port)


def charts_drawn(browser):
    return browser.evaluate(
        "typeof Chart === 'function' && Object.values(Chart.instances).length === 5 && "
        "Object.values(Chart.instances).every(function (c) { return c.data.datasets[0].data.length > 0; })")


def sample_count(browser):
    return browser.evaluate("Chart.getChart('chart-queue').data.datasets[0].data.length")


def newest(browser, chart, dataset=0):
    """The newest point's y of a dataset of a chart (None when empty or null)."""
    return browser.evaluate(
        "(function () { var d = Chart.getChart('%s').data.datasets[%d].data; "
        "return d.length ? d[d.length - 1].y : null; })()" % (chart, dataset))


def largest(browser, chart, dataset=0):
    return browser.evaluate(
        "Chart.getChart('%s').data.datasets[%d].data.reduce(function (m, p) { "
        "return p.y !== null && p.y > m ? p.y : m; }, 0)" % (chart, dataset))


@unittest.skipUnless(CHROMIUM, "chromium not installed")
class DashboardTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()
        self.browser = Browser()

    def tearDown(self):
        self.browser.close()
        self.origin.release()
        self.origin.stop()

    def test_charts_render_update_and_show_the_room_filling(self):
        with Concert(["-upstream", self.origin.url, "-cap", "2"], workers=2, admin_token=TOKEN) as c:
            open_dashboard(self.browser, c.port)
            self.assertTrue(wait_for(lambda: charts_drawn(self.browser), timeout=15, interval=0.2),
                            self.browser.body_text())
            self.assertEqual(self.browser.evaluate(
                "Array.prototype.map.call(document.querySelectorAll('canvas'), function (e) { return e.id; })"),
                CHARTS)
            for chart in CHARTS:
                self.assertTrue(self.browser.evaluate(
                    "Chart.getChart('%s') !== undefined && document.getElementById('%s').width > 0"
                    % (chart, chart)), chart)
            self.assertEqual(newest(self.browser, "chart-occupancy", 1), 2)  # the cap line
            self.assertTrue(wait_for(lambda: "Live" in self.browser.evaluate(
                "document.getElementById('status').textContent"), timeout=5, interval=0.2))

            # It updates itself from the stream.
            first = sample_count(self.browser)
            self.assertTrue(wait_for(lambda: sample_count(self.browser) >= first + 3, timeout=10, interval=0.3))
            urls = self.browser.requested_urls()
            self.assertEqual([u for u in urls if not u.startswith("http://127.0.0.1:%d/" % c.port)], [])
            self.assertTrue(any("/_room/history/events" in u for u in urls), urls)
            self.assertEqual(len([u for u in urls if u.endswith("/_room/history")]), 1, urls)
            # The capacity advisor's line: nothing known before the origin was ever queued.
            self.assertTrue(any(u.endswith("/_room/report") for u in urls), urls)
            self.assertTrue(wait_for(lambda: self.browser.evaluate(
                "document.getElementById('now-advice').textContent") == "not known yet", timeout=10, interval=0.3))

            # Fill the room: 24 visitors through cap 2, 0.6 s at the origin each.
            self.assertEqual(newest(self.browser, "chart-queue"), 0)
            crowd = Crowd(c.port, 24, "/sleep?ms=600")
            try:
                self.assertTrue(wait_for(lambda: (newest(self.browser, "chart-queue") or 0) >= 5,
                                         timeout=20, interval=0.3), newest(self.browser, "chart-queue"))
                self.assertTrue(wait_for(lambda: largest(self.browser, "chart-occupancy") == 2,
                                         timeout=10, interval=0.3))
                self.assertTrue(wait_for(lambda: largest(self.browser, "chart-admissions") >= 1,
                                         timeout=20, interval=0.3))
                self.assertTrue(wait_for(lambda: largest(self.browser, "chart-wait", 1) > 0,
                                         timeout=20, interval=0.3))
                self.assertNotEqual(self.browser.evaluate("document.getElementById('now-queue').textContent"), "–")
            finally:
                crowd.end()
            self.assertEqual(self.browser.evaluate(
                "document.getElementById('status').className"), "status ok")

    def test_without_the_token_the_page_is_refused(self):
        with Concert(["-upstream", self.origin.url, "-cap", "2"], workers=1, admin_token=TOKEN) as c:
            self.browser.navigate("http://127.0.0.1:%d/_room/" % c.port)
            self.assertTrue(wait_for(lambda: self.browser.evaluate("document.readyState") == "complete",
                                     timeout=10))
            time.sleep(0.5)
            self.assertFalse(self.browser.evaluate("typeof Chart === 'function'"))
            statuses = [e["params"]["response"]["status"] for e in self.browser.events
                        if e["method"] == "Network.responseReceived" and "/_room/" in e["params"]["response"]["url"]]
            self.assertIn(401, statuses)

    @unittest.skipUnless(os.path.exists(AXE), "axe-core not installed (make deps-test)")
    def test_accessibility(self):
        with Concert(["-upstream", self.origin.url, "-cap", "2"], workers=1, admin_token=TOKEN) as c:
            open_dashboard(self.browser, c.port)
            self.assertTrue(wait_for(lambda: charts_drawn(self.browser), timeout=15, interval=0.2))
            # The page's CSP allows no script but its own: axe is added through CDP, which it does not govern.
            self.browser.call("Page.setBypassCSP", {"enabled": True})
            self.browser.evaluate(axe_source())
            for scheme in ("light", "dark"):
                self.browser.call("Emulation.setEmulatedMedia",
                                  {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
                # The charts take the scheme's colours when it changes.
                result = run_axe(self.browser)
                print("axe: dashboard, %s scheme: %d rules passed, %d violations" % (
                    scheme, result["passes"], len(result["violations"])))
                self.assertEqual(result["violations"], [], axe_summary(result["violations"]))
            self.browser.call("Emulation.setEmulatedMedia", {"features": []})


if __name__ == "__main__":
    unittest.main()
