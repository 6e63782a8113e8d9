#!/usr/bin/env python3
"""Takes the screenshots of the waiting page shown in README.md.

usage: python3 docs/screenshots/make.py [--concert build/concert]

Starts the real binary in front of the tests' fake origin with the room full
(-cap 1, one request parked on the origin, three visitors already in line),
and saves, with headless Chromium, the waiting page as the fourth in line in
English and German at desktop (1280x800) and phone (390x844) size:
docs/screenshots/waiting-{en,de}-{desktop,phone}.png. Animations are off
(prefers-reduced-motion) so that the pictures do not change from run to run.

Then the dashboard (GET /_room/, with an admin token the browser sends on
every request): a crowd of visitors goes through a room with -cap 3 in front
of an origin that takes 0.1 to 1.5 s a page, for about a minute, and the
dashboard is saved, 1280 wide and as tall as the page, as
docs/screenshots/dashboard.png. Traffic is
random, so this one differs from run to run.
"""
import argparse
import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, os.path.join(ROOT, "tests", "browser"))

SIZES = {"desktop": (1280, 800, False), "phone": (390, 844, True)}
LANGUAGES = {"en": "en-US,en;q=0.9", "de": "de-DE,de;q=0.9,en;q=0.5"}
AHEAD = 3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concert", default=os.path.join(ROOT, "build", "concert"), help="the binary to run")
    ap.add_argument("--out", default=HERE, help="where the PNGs go")
    ap.add_argument("--only", choices=["waiting", "dashboard"], help="take only these pictures")
    args = ap.parse_args()
    os.environ["CONCERT_BIN"] = os.path.abspath(args.concert)

    import concert_harness
    concert_harness.BIN = os.environ["CONCERT_BIN"]
    from fake_origin import FakeOrigin
    from test_waiting_page import CHROMIUM, Browser

    if not CHROMIUM:
        sys.exit("make.py: chromium is not installed (make deps-test)")
    origin = FakeOrigin()
    browser = Browser()
    try:
        browser.call("Emulation.setEmulatedMedia", {"features": [
            {"name": "prefers-reduced-motion", "value": "reduce"},
            {"name": "prefers-color-scheme", "value": "light"}]})
        if args.only != "dashboard":
            waiting_pages(browser, origin, args.out)
        if args.only != "waiting":
            dashboard(browser, origin, args.out)
    finally:
        browser.close()
        origin.release()
        origin.stop()


def waiting_pages(browser, origin, out):
    """docs/screenshots/waiting-*.png: the waiting page, fourth in line."""
    from concert_harness import Concert, wait_for

    # A long first-poll grace keeps the visitors ahead in line while the pictures are taken.
    with Concert(["-upstream", origin.url, "-cap", "1", "-first-poll-grace", "1h"], workers=1) as c:
        parked = threading.Thread(target=lambda: c.get("/slow", timeout=120), daemon=True)
        parked.start()
        if not wait_for(lambda: c.stats()["occupancy"] == 1, timeout=5):
            sys.exit("make.py: the slot did not fill")
        for i in range(AHEAD):
            c.get("/ahead?%d" % i, {"Accept": "text/html"})
        expected = str(AHEAD + 1)
        for lang, accept_language in LANGUAGES.items():
            browser.call("Network.setExtraHTTPHeaders", {"headers": {"Accept-Language": accept_language}})
            for size, (width, height, mobile) in SIZES.items():
                browser.call("Emulation.setDeviceMetricsOverride", {
                    "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
                browser.navigate("http://127.0.0.1:%d/" % c.port)
                # The page has heard from its event stream once the status names the place.
                shown = wait_for(lambda: browser.evaluate(
                    "document.documentElement.lang === '%s' && "
                    "document.getElementById('position').textContent === '%s' && "
                    "document.getElementById('status').textContent.indexOf('%s') >= 0"
                    % (lang, expected, expected)), timeout=15, interval=0.2)
                if not shown:
                    sys.exit("make.py: the %s page did not show position %s: %r" % (
                        lang, expected, browser.evaluate("document.body.innerText")))
                path = os.path.join(out, "waiting-%s-%s.png" % (lang, size))
                browser.screenshot(path)
                print(path)
        origin.release()
        parked.join(10)


def dashboard(browser, origin, out):
    """docs/screenshots/dashboard.png: the dashboard after a minute of traffic."""
    from concert_harness import Concert, wait_for
    from test_dashboard import TOKEN, charts_drawn, newest, open_dashboard, visitor

    with Concert(["-upstream", origin.url, "-cap", "3"], workers=2, admin_token=TOKEN) as c:
        browser.call("Emulation.setDeviceMetricsOverride", {
            "width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
        browser.call("Network.setExtraHTTPHeaders", {"headers": {}})
        open_dashboard(browser, c.port)
        if not wait_for(lambda: charts_drawn(browser), timeout=15, interval=0.2):
            sys.exit("make.py: the dashboard did not draw: %r" % browser.evaluate("document.body.innerText"))
        # Waves of visitors: arrivals faster than the room lets them in, then a lull.
        stop = threading.Event()
        rng = random.Random(7)
        threads = []
        started = time.time()
        while time.time() - started < 60:
            wave = time.time() - started
            if wave < 12 or 24 <= wave < 40:
                path = "/sleep?ms=%d" % rng.randint(100, 1500)
                t = threading.Thread(target=visitor, args=(c.port, path, stop, 90), daemon=True)
                t.start()
                threads.append(t)
            time.sleep(rng.uniform(0.05, 0.35))
        if not wait_for(lambda: newest(browser, "chart-queue") == 0, timeout=60, interval=0.5):
            print("make.py: the line did not empty; taking the picture anyway")
        time.sleep(3)
        stop.set()
        for t in threads:
            t.join(10)
        # The whole page: as tall as its content.
        height = browser.evaluate("document.documentElement.scrollHeight")
        browser.call("Emulation.setDeviceMetricsOverride", {
            "width": 1280, "height": height, "deviceScaleFactor": 1, "mobile": False})
        time.sleep(0.5)
        path = os.path.join(out, "dashboard.png")
        browser.screenshot(path)
        print(path)


if __name__ == "__main__":
    main()
