"""The waiting page in a real browser: headless Chromium driven over the
Chrome DevTools Protocol by the shared driver in tests/lib/chromium.py.

1. Room full (cap 1, one parked /slow request): the browser loads / and gets
   the waiting page with its position; the test frees the slot; the page's
   event stream (/queue/events) says `ready`, the page reloads at once, and the
   browser ends on the origin's "ok". The page never polls.
   With -token-ttl 30s the stream ends after 10 s for a cookie refresh and
   the page reconnects to it rather than fall back to polling.
2. The same without EventSource (taken away before the page's script runs):
   the page's polling of /queue/status notices and reloads.
3. Cookies refused (Concert sets them for a domain that is not the page's):
   the page says cookies are required and neither polls /queue/status nor
   opens /queue/events.
4. JavaScript off: the <noscript> text shows, and the Refresh header alone
   brings the browser into its turn. With JavaScript the page calls that
   reload off and waits for its event stream.
5. Languages: Accept-Language de gives the German page, its script's words
   German too; the script puts eta_seconds (from a stubbed /queue/status)
   into words in the page's language.
6. axe-core (installed by `make deps-test` into BUILD/axe) finds no
   violation on the waiting page (with the skip-the-line card showing), the
   "room is full" page and the "busy" page, in English and German, in light
   and dark colour schemes.

A screenshot of the waiting page is saved to /tmp/concert-waiting.png.
"""
import base64
import json
import time
import unittest

from chromium import CHROMIUM, Browser, axe_source, axe_summary, run_axe
from concert_harness import Concert, wait_for
from fake_origin import FakeOrigin
from room import fill

SCREENSHOT = "/tmp/concert-waiting.png"


@unittest.skipUnless(CHROMIUM, "chromium not installed")
class WaitingPageTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()
        self.browser = Browser()

    def tearDown(self):
        self.browser.close()
        self.origin.release()
        self.origin.stop()

    def test_waiting_page_is_told_its_turn_by_push(self):
        self.told_its_turn_by_push([])

    def test_waiting_page_served_with_503_still_moves_through_the_line(self):
        self.told_its_turn_by_push(["-queue-status", "503"])

    def told_its_turn_by_push(self, extra):
        with Concert(["-upstream", self.origin.url, "-cap", "1"] + extra, workers=2) as c:
            parked = fill(c, 1, timeout=5)[0]
            self.browser.call("Page.navigate", {"url": "http://127.0.0.1:%d/" % c.port})
            position = wait_for(lambda: self.browser.evaluate(
                "document.getElementById('position') && document.getElementById('position').textContent"),
                timeout=10)
            self.assertEqual(position, "1")
            self.assertTrue(wait_for(lambda: any(u.endswith("/queue/events") for u in self.browser.requested_urls()),
                                     timeout=8, interval=0.2))
            # Longer than one poll interval (3 s + up to 0.5 s): the stream is open, nobody polls.
            time.sleep(4)
            self.assertEqual(self.browser.evaluate("document.getElementById('status').className"), "status")
            self.assertEqual(self.origin.recorder.hits("/"), 0)

            released = time.time()
            self.origin.release()
            parked.join(10)
            body = wait_for(lambda: self.browser.body_text() == "ok",
                            timeout=15, interval=0.1)
            self.assertTrue(body, "browser did not reach the origin page")
            self.assertLess(time.time() - released, 10)
            self.assertEqual(self.origin.recorder.hits("/"), 1)
            self.assertEqual([u for u in self.browser.requested_urls() if "/queue/status" in u], [])
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=5))

    def test_a_promoted_visitor_goes_in_ahead_of_the_line(self):
        """The operator promotes the browser's ticket: its event stream ends, the page reloads into the
        room pass and goes in at the next free slot, ahead of the visitor in front of it."""
        token = "browser-test-admin-token"
        with Concert(["-upstream", self.origin.url, "-cap", "1", "-session-hold", "30s"], workers=2,
                     admin_token=token) as c:
            parked = fill(c, 1, timeout=5)[0]
            ahead = c.get("/", headers={"Accept": "application/json"})  # waits in line, never comes back
            self.assertEqual(ahead[0], 429)
            self.browser.call("Page.navigate", {"url": "http://127.0.0.1:%d/" % c.port})
            position = wait_for(lambda: self.browser.evaluate(
                "document.getElementById('position') && document.getElementById('position').textContent"),
                timeout=10)
            self.assertEqual(position, "2")
            self.assertTrue(wait_for(lambda: any(u.endswith("/queue/events") for u in self.browser.requested_urls()),
                                     timeout=8, interval=0.2))
            status, _, line = c.request("GET", "/_room/queue", headers={"Authorization": "Bearer " + token})
            self.assertEqual(status, 200)
            mine = json.loads(line)[1]["ticket"]
            status, _, body = c.request("POST", "/_room/promote", body=json.dumps({"ticket": mine}).encode(),
                                        headers={"Authorization": "Bearer " + token})
            self.assertEqual(status, 200, body)
            # The page notices and reloads; its request waits for the slot ahead of everyone. (Without
            # the promotion the visitor ahead would be the one whose turn comes: the browser never would.)
            self.assertEqual(c.stats()["live_queue_depth"], 1)
            time.sleep(1.5)
            self.origin.release()
            parked.join(10)
            self.assertTrue(wait_for(lambda: self.browser.body_text() == "ok", timeout=15, interval=0.1),
                            "the promoted browser did not reach the origin")
            stats = c.stats()
            self.assertEqual((stats["promoted_total"], stats["admissions_priority_total"]), (1, 1))
            self.assertEqual(stats["live_queue_depth"], 1)  # the visitor ahead still holds its place
            self.assertEqual(self.origin.recorder.hits("/"), 1)

    def test_a_renewed_stream_reconnects_instead_of_polling(self):
        # -token-ttl 30s: the stream ends after 10 s so that its reconnection
        # fetches a fresh room_ticket cookie; the page keeps listening.
        with Concert(["-upstream", self.origin.url, "-cap", "1", "-token-ttl", "30s"], workers=2) as c:
            parked = fill(c, 1, timeout=5)[0]
            self.browser.call("Page.navigate", {"url": "http://127.0.0.1:%d/" % c.port})
            streams = lambda: [u for u in self.browser.requested_urls() if u.endswith("/queue/events")]
            self.assertTrue(wait_for(lambda: len(streams()) >= 2, timeout=25, interval=0.5), streams())
            self.assertEqual([u for u in self.browser.requested_urls() if "/queue/status" in u], [])
            # Refresh: 5 on a page open for more than 10 s: the script called the reload off.
            self.assertEqual(self.browser.document_loads("http://127.0.0.1:%d/" % c.port), 1)
            self.origin.release()
            parked.join(10)
            self.assertTrue(wait_for(lambda: self.browser.evaluate(
                "document.body ? document.body.innerText : ''") == "ok", timeout=15, interval=0.1))
            self.assertEqual(self.origin.recorder.hits("/"), 1)

    def test_waiting_page_polls_without_event_source(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2) as c:
            parked = fill(c, 1, timeout=5)[0]
            self.browser.call("Page.addScriptToEvaluateOnNewDocument", {"source": "delete window.EventSource;"})
            self.browser.call("Page.navigate", {"url": "http://127.0.0.1:%d/" % c.port})
            position = wait_for(lambda: self.browser.evaluate(
                "document.getElementById('position') && document.getElementById('position').textContent"),
                timeout=10)
            self.assertEqual(position, "1")
            self.assertIn("in line", self.browser.evaluate("document.title"))
            self.assertTrue(self.browser.evaluate("document.cookie.indexOf('room_probe=1') >= 0"))
            self.assertEqual(self.origin.recorder.hits("/"), 0)
            # let at least one poll happen while still waiting, then look at the page
            self.assertTrue(wait_for(lambda: any(u.endswith("/queue/status") for u in self.browser.requested_urls()),
                                     timeout=8, interval=0.2))
            self.browser.screenshot(SCREENSHOT)
            self.assertEqual(self.browser.evaluate("document.getElementById('status').className"), "status")

            self.origin.release()
            parked.join(10)
            body = wait_for(lambda: self.browser.body_text() == "ok",
                            timeout=15, interval=0.2)
            self.assertTrue(body, "browser did not reach the origin page")
            self.assertEqual(self.origin.recorder.hits("/"), 1)
            self.assertEqual([u for u in self.browser.requested_urls() if "/queue/events" in u], [])
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=5))

    def test_cookies_blocked_stops_polling(self):
        # Cookies scoped to another domain are refused by the browser for 127.0.0.1.
        with Concert(["-upstream", self.origin.url, "-cap", "1", "-cookie-domain", "example.com"],
                     workers=2) as c:
            parked = fill(c, 1, timeout=5)[0]
            self.browser.call("Page.navigate", {"url": "http://127.0.0.1:%d/" % c.port})
            message = wait_for(lambda: self.browser.evaluate(
                "document.getElementById('status') && document.getElementById('status').textContent"),
                timeout=10)
            self.assertTrue(wait_for(lambda: "allow cookies" in (self.browser.evaluate(
                "document.getElementById('status').textContent") or ""), timeout=5), message)
            self.assertEqual(self.browser.evaluate("document.getElementById('title').textContent"),
                             "Cookies are required")
            self.assertEqual(self.browser.evaluate("document.cookie"), "")
            # Longer than one poll interval (3 s + up to 0.5 s): no poll may happen.
            time.sleep(4.5)
            polls = [u for u in self.browser.requested_urls() if "/queue/status" in u]
            self.assertEqual(polls, [])
            self.assertEqual([u for u in self.browser.requested_urls() if "/queue/events" in u], [])
            self.assertEqual(self.origin.recorder.hits("/"), 0)
            self.origin.release()
            parked.join(10)

    def test_without_javascript_the_refresh_header_brings_the_turn(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2) as c:
            parked = fill(c, 1, timeout=5)[0]
            self.browser.call("Emulation.setScriptExecutionDisabled", {"value": True})
            url = "http://127.0.0.1:%d/" % c.port
            self.browser.navigate(url)
            self.assertTrue(wait_for(lambda: "refreshes itself" in (self.browser.evaluate(
                "document.body ? document.body.innerText : ''") or ""), timeout=10))
            self.assertEqual(self.browser.evaluate("document.getElementById('position').textContent"), "1")
            self.assertEqual(self.browser.evaluate("document.documentElement.lang"), "en")
            self.origin.release()
            parked.join(10)
            # The next reload (Refresh: 5) is the visitor's turn.
            self.assertTrue(wait_for(lambda: self.browser.evaluate(
                "document.body ? document.body.innerText : ''") == "ok", timeout=20, interval=0.2))
            self.assertGreaterEqual(self.browser.document_loads(url), 2)
            self.assertEqual([u for u in self.browser.requested_urls() if "/queue/" in u], [])
            self.assertEqual(self.origin.recorder.hits("/"), 1)

    def test_the_page_in_german(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2) as c:
            parked = fill(c, 1, timeout=5)[0]
            self.browser.call("Network.setExtraHTTPHeaders", {"headers": {"Accept-Language": "de-DE,de;q=0.9,en;q=0.4"}})
            self.browser.navigate("http://127.0.0.1:%d/" % c.port)
            self.assertTrue(wait_for(lambda: self.browser.evaluate(
                "document.getElementById('status') && document.getElementById('status').textContent") ==
                "Gleich geschafft – Sie sind als Nächstes dran…", timeout=10), self.browser.evaluate(
                "document.body ? document.body.innerText : ''"))
            self.assertEqual(self.browser.evaluate("document.documentElement.lang"), "de")
            self.assertEqual(self.browser.evaluate("document.title"), "Sie sind in der Warteschlange")
            self.origin.release()
            parked.join(10)

    def test_the_estimated_wait_in_words(self):
        # The room does not send eta_seconds yet: the test answers the page's
        # polls itself (CDP Fetch) with the figures the page must put in words.
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2) as c:
            parked = fill(c, 1, timeout=5)[0]
            self.browser.call("Page.addScriptToEvaluateOnNewDocument", {"source": "delete window.EventSource;"})
            self.browser.call("Fetch.enable", {"patterns": [{"urlPattern": "*/queue/status*"}]})
            eta_text = "document.getElementById('eta').textContent"
            line_shown = "!document.getElementById('eta-line').hidden && " \
                         "getComputedStyle(document.getElementById('eta-line')).display !== 'none'"
            answered = set()

            def answer_polls(eta):
                self.browser.evaluate("1")  # drain pending events
                for e in self.browser.events:
                    if e["method"] != "Fetch.requestPaused" or e["params"]["requestId"] in answered:
                        continue
                    answered.add(e["params"]["requestId"])
                    body = json.dumps({"ready": False, "position": 2, "eta_seconds": eta}).encode()
                    self.browser.call("Fetch.fulfillRequest", {
                        "requestId": e["params"]["requestId"], "responseCode": 200,
                        "responseHeaders": [{"name": "Content-Type", "value": "application/json"}],
                        "body": base64.b64encode(body).decode()})

            for accept_language, eta, words in (("en", 250, "about 4 minutes"), ("de", 250, "ungefähr 4 Minuten"),
                                                ("pt-BR", 30, "menos de um minuto"), ("fr", 7200, "environ 2 heures")):
                self.browser.call("Network.setExtraHTTPHeaders", {"headers": {"Accept-Language": accept_language}})
                self.browser.navigate("http://127.0.0.1:%d/" % c.port)
                self.assertTrue(wait_for(lambda: self.browser.evaluate("document.readyState") == "complete",
                                         timeout=10))
                self.assertFalse(self.browser.evaluate(line_shown))  # not known yet: no line
                self.assertTrue(wait_for(lambda: answer_polls(eta) or self.browser.evaluate(eta_text) == words,
                                         timeout=15, interval=0.3), self.browser.evaluate(eta_text))
                self.assertTrue(self.browser.evaluate(line_shown))
            # The room cannot say any more: the line goes away.
            self.assertTrue(wait_for(lambda: answer_polls(None) or not self.browser.evaluate(line_shown),
                                     timeout=15, interval=0.3))
            self.browser.call("Fetch.disable")
            self.origin.release()
            parked.join(10)



@unittest.skipUnless(CHROMIUM, "chromium not installed")
class AccessibilityTest(unittest.TestCase):
    """axe-core in Chromium: no violation on any page the room shows people."""

    @classmethod
    def setUpClass(cls):
        axe_source()  # fails the class, naming the file, when axe-core is missing

    def setUp(self):
        self.origin = FakeOrigin()
        self.browser = Browser()

    def tearDown(self):
        self.browser.close()
        self.origin.release()
        self.origin.stop()

    def check(self, what, ready_expression):
        """Waits for the page, then runs axe-core in light and dark colour schemes."""
        self.assertTrue(wait_for(lambda: self.browser.evaluate(ready_expression), timeout=15, interval=0.2),
                        "%s did not show: %r" % (what, self.browser.evaluate(
                            "document.body ? document.body.innerText : ''")))
        for scheme in ("light", "dark"):
            self.browser.call("Emulation.setEmulatedMedia",
                              {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
            result = run_axe(self.browser)  # loads axe-core into the page the first time
            violations = result["violations"]
            print("axe: %s, %s scheme: %d rules passed, %d violations" % (
                what, scheme, result["passes"], len(violations)))
            self.assertEqual(violations, [], "%s (%s):\n%s" % (what, scheme, axe_summary(violations)))
        self.browser.call("Emulation.setEmulatedMedia", {"features": []})

    def language(self, accept_language):
        self.browser.call("Network.setExtraHTTPHeaders", {"headers": {"Accept-Language": accept_language}})

    def test_waiting_page_with_skip_card(self):
        for accept_language, lang in (("en-US,en;q=0.9", "en"), ("de-DE,de;q=0.9", "de")):
            with self.subTest(lang=lang), Concert(["-upstream", self.origin.url, "-cap", "1", "-rate", "0.5",
                                                   "-skip-url", "https://pay.example/skip"], workers=2) as c:
                self.origin.hold()
                parked = fill(c, 1, timeout=5)[0]
                c.get("/ahead", {"Accept": "text/html"})  # someone else is first in line
                self.language(accept_language)
                self.browser.navigate("http://127.0.0.1:%d/" % c.port)
                self.check("waiting page (%s)" % lang,
                           "document.documentElement.lang === '%s' && document.getElementById('position')"
                           ".textContent === '2' && !document.getElementById('skip').hidden" % lang)
                # The skip link is reachable from the keyboard and shows where focus is.
                self.browser.evaluate("document.getElementById('skip-link').focus()")
                self.assertEqual(self.browser.evaluate("document.activeElement.id"), "skip-link")
                self.origin.release()
                parked.join(10)

    def test_room_full_page(self):
        for accept_language, lang in (("en", "en"), ("fr-CA,de;q=0.5", "fr"), ("de", "de")):
            with self.subTest(lang=lang), Concert(["-upstream", self.origin.url, "-cap", "1", "-max-queue", "1"],
                                                  workers=2) as c:
                self.origin.hold()
                parked = fill(c, 1, timeout=5)[0]
                c.get("/ahead", {"Accept": "text/html"})  # fills the line
                self.language(accept_language)
                self.browser.navigate("http://127.0.0.1:%d/" % c.port)
                self.check("room-full page (%s)" % lang,
                           "document.documentElement.lang === '%s' && !!document.querySelector('main h1')" % lang)
                self.origin.release()
                parked.join(10)

    def test_busy_page(self):
        # A crawler is never queued: it gets the "busy" page.
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2) as c:
            parked = fill(c, 1, timeout=5)[0]
            self.browser.call("Network.setUserAgentOverride", {
                "userAgent": "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
                "acceptLanguage": "it-IT,it;q=0.9"})
            self.browser.navigate("http://127.0.0.1:%d/" % c.port)
            self.check("busy page (it)", "document.documentElement.lang === 'it' && !!document.querySelector('main h1')")
            self.origin.release()
            parked.join(10)


if __name__ == "__main__":
    unittest.main()
