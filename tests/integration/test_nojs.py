"""The waiting page without JavaScript, against the real binary: a visitor
that is nothing but the `curl` binary with a cookie jar, reloading whenever
the page's Refresh header says (the interval capped at about a second to keep
the test short), waits behind the others and is let in in its turn; its
reloads are what keeps its place. Also: `concert -t` names a -html template's
unknown placeholder and its line.
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from concert_harness import BIN, Concert, wait_for
from fake_origin import FakeOrigin
from room import fill

CURL = shutil.which("curl")
BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
NOSCRIPT_DE = "Diese Seite lädt sich alle paar Sekunden selbst neu."


class CurlBrowser:
    """A browser without JavaScript: curl with a cookie jar (-c/-b)."""

    def __init__(self, port, name, language=None):
        self.port = port
        self.name = name
        self.language = language
        self.dir = tempfile.mkdtemp(prefix="concert-nojs-")
        self.jar = os.path.join(self.dir, "jar")
        self.visits = []  # (status, {header: value}, body) for every load

    def load(self, path):
        body_path = os.path.join(self.dir, "body")
        cmd = [CURL, "-s", "-S", "--max-time", "20", "-c", self.jar, "-b", self.jar, "-D", "-", "-o", body_path,
               "-H", "Accept: " + BROWSER["Accept"]]
        if self.language:
            cmd += ["-H", "Accept-Language: " + self.language]
        cmd.append("http://127.0.0.1:%d%s" % (self.port, path))
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30, check=True)
        lines = out.stdout.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, _, v = line.partition(":")
                headers.setdefault(k.strip().lower(), v.strip())
        with open(body_path, "rb") as f:
            body = f.read().decode("utf-8")
        self.visits.append((status, headers, body))
        return status, headers, body

    def admitted(self):
        return any(body == "ok" for _, _, body in self.visits)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def position(body):
    m = re.search(r'id="position"[^>]*>(\d+)<', body)
    return int(m.group(1)) if m else None


@unittest.skipUnless(CURL, "curl not installed")
class NoJavaScriptTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()
        self.visitors = []

    def tearDown(self):
        self.origin.release()
        self.origin.release("first")
        self.origin.release("second")
        self.origin.stop()
        for v in self.visitors:
            v.close()

    def visitor(self, port, name, language=None):
        v = CurlBrowser(port, name, language)
        self.visitors.append(v)
        return v

    def reload_until_admitted(self, visitor, path, least, most, until, cap=1.0):
        """Follows the page's Refresh (capped at `cap` seconds) until the origin's "ok" or `until` passes."""
        while time.time() < until:
            status, headers, body = visitor.load(path)
            if body == "ok":
                return True
            self.assertEqual(status, 200, body[:200])
            self.assertIn("refresh", headers, headers)
            refresh = int(headers["refresh"])
            self.assertGreaterEqual(refresh, least)
            self.assertLessEqual(refresh, most)
            time.sleep(min(refresh, cap))
        return False

    def test_curl_reloads_into_its_turn_behind_others(self):
        with Concert(["-upstream", self.origin.url, "-cap", "1"], workers=2) as c:
            parked = fill(c, 1, "/slow", timeout=5)[0]

            first = self.visitor(c.port, "first")
            status, headers, body = first.load("/slow?gate=first")
            self.assertEqual((status, position(body)), (200, 1))
            second = self.visitor(c.port, "second", "de-AT,de;q=0.9,en;q=0.5")
            status, headers, body = second.load("/page?who=second")
            self.assertEqual((status, position(body)), (200, 2))
            self.assertIn('<html lang="de">', body)
            self.assertIn("<noscript>", body)
            self.assertIn(NOSCRIPT_DE, body)
            grace = 15  # -first-poll-grace, default
            self.assertGreaterEqual(int(headers["refresh"]), 5)
            self.assertLessEqual(int(headers["refresh"]), grace)

            # Both reload for a while: nobody moves, both keep their place.
            for _ in range(2):
                for v, path, pos in ((first, "/slow?gate=first", 1), (second, "/page?who=second", 2)):
                    status, headers, body = v.load(path)
                    self.assertEqual((status, position(body)), (200, pos))
            self.assertEqual(c.stats()["live_queue_depth"], 2)

            # The slot frees: the first visitor's reload takes it (and holds it).
            self.origin.release()
            parked.join(10)
            holder = threading.Thread(target=lambda: self.reload_until_admitted(
                first, "/slow?gate=first", 5, grace, time.time() + 30), daemon=True)
            holder.start()
            self.assertTrue(wait_for(lambda: self.origin.recorder.hits("/slow") == 2, timeout=15))

            # The second, still reloading, moves to the front but waits.
            deadline = time.time() + 3
            while time.time() < deadline:
                status, headers, body = second.load("/page?who=second")
                self.assertEqual((status, position(body)), (200, 1))
                time.sleep(min(int(headers["refresh"]), 1.0))
            self.assertEqual(self.origin.recorder.hits("/page"), 0)

            self.origin.release("first")
            holder.join(15)
            self.assertTrue(first.admitted())
            self.assertTrue(self.reload_until_admitted(second, "/page?who=second", 5, grace, time.time() + 20))
            self.assertEqual([r["path"] for r in self.origin.recorder.requests], ["/slow", "/slow", "/page"])
            self.assertEqual(self.origin.recorder.hits("/queue/status"), 0)
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=5))

    def test_reloads_keep_the_place_past_the_first_poll_grace(self):
        # -first-poll-grace 3s abandons a ticket never seen again after 3 s;
        # the Refresh interval stays below it, and each reload is a return.
        with Concert(["-upstream", self.origin.url, "-cap", "1", "-first-poll-grace", "3s"], workers=2) as c:
            parked = fill(c, 1, "/slow", timeout=5)[0]
            v = self.visitor(c.port, "patient")
            status, headers, body = v.load("/page")
            self.assertEqual((status, position(body)), (200, 1))
            refresh = int(headers["refresh"])
            self.assertGreaterEqual(refresh, 1)
            self.assertLess(refresh, 3)
            # Reload as told for more than twice the grace.
            started = time.time()
            while time.time() - started < 7:
                time.sleep(refresh)
                status, headers, body = v.load("/page")
                self.assertEqual((status, position(body)), (200, 1))
            self.assertEqual(c.stats()["live_queue_depth"], 1)
            self.origin.release()
            parked.join(10)
            self.assertTrue(self.reload_until_admitted(v, "/page", 1, 3, time.time() + 15))
            self.assertEqual(self.origin.recorder.hits("/page"), 1)


class TemplateCheckTest(unittest.TestCase):
    def test_t_names_an_unknown_placeholder_and_its_line(self):
        tmp = tempfile.mkdtemp(prefix="concert-html-")
        try:
            path = os.path.join(tmp, "room.html")
            with open(path, "w") as f:
                f.write("<html lang=\"{{.Lang}}\">\n<p>{{.Position}} {{.ETA}}</p>\n<p>{{.Postion}}</p>\n</html>\n")
            env = {k: v for k, v in os.environ.items() if not k.startswith("CONCERT_")}
            env["CONCERT_ADMIT_SECRET"] = "concert-test-secret-0123456789abcdef"
            p = subprocess.run([BIN, "-t", "-upstream", "http://127.0.0.1:9", "-html", path], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
            out = p.stdout.decode()
            self.assertNotEqual(p.returncode, 0, out)
            self.assertIn('"%s" line 3: unknown placeholder {{.Postion}}' % path, out)
            self.assertNotIn("configuration ok", out)

            with open(path, "w") as f:
                f.write("<html lang=\"{{.Lang}}\">\n<p>{{.Position}} {{.ETA}} {{.Text.Title}}</p>\n</html>\n")
            p = subprocess.run([BIN, "-t", "-upstream", "http://127.0.0.1:9", "-html", path], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
            self.assertEqual(p.returncode, 0, p.stdout.decode())
            self.assertIn("configuration ok", p.stdout.decode())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_a_reload_with_a_bad_template_keeps_the_running_page(self):
        tmp = tempfile.mkdtemp(prefix="concert-html-")
        origin = FakeOrigin()
        try:
            path = os.path.join(tmp, "room.html")
            with open(path, "w") as f:
                f.write("<p lang=\"{{.Lang}}\">good {{.Position}}</p>")
            with Concert(["-upstream", origin.url, "-cap", "1"], config_text="html: %s\n" % path) as c:
                parked = fill(c, 1, "/slow", timeout=5)[0]
                self.assertEqual(c.get("/a", BROWSER)[2], b'<p lang="en">good 1</p>')
                with open(path, "w") as f:
                    f.write("<p>bad {{.Position}}\n{{.Nope}}</p>")
                c.signal(signal.SIGHUP)
                self.assertTrue(wait_for(lambda: "reload refused" in c.log(), timeout=10), c.log())
                self.assertIn("line 2: unknown placeholder {{.Nope}}", c.log())
                self.assertEqual(c.get("/b", BROWSER)[2], b'<p lang="en">good 2</p>')
                origin.release()
                parked.join(10)
        finally:
            origin.release()
            origin.stop()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
