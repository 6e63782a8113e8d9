"""Who goes first, against the real binary and a fake origin.

  * skip the line end to end: the 40th visitor in line pays on a fake payment page that redirects to
    the signed /queue/promote link; it is admitted next, ahead of the 39, and nobody's place grows;
    a forged, expired or reused link gets 403;
  * POST /_room/promote: 401 with a wrong token, 404 for a ticket not in line, 400 for a bad body;
    the promoted visitor's next poll carries its room_pass;
  * order under a saturated cap: room pass, then the priority classes in -priority-classes order, then
    sessions (a forged priority cookie is only a session), then the line; the origin never sees more
    than cap;
  * invitations (`concert -invite`): alone on stdout, admit once at the head of the line across
    workers; a reused, forged or expired one is ignored and counted as a strike.

The origin counts a request in flight until its work is done. Waits are bounded; nothing asserts a
duration. Traffic goes to 127.0.0.1 only.
"""
import hashlib
import hmac
import json
import os
import re
import subprocess
import threading
import time
import unittest

from concert_harness import BIN, TEST_SECRET, Concert, header, wait_for
from fake_origin import FakeOrigin
from visitor import BROWSER, JSON, Background, Visitor

PROMOTE_SECRET = "promote-secret-for-tests-0123456789abcdef"
TOKEN = "admin-token-for-skip-tests"


def sign(ref, exp, secret=PROMOTE_SECRET):
    return hmac.new(secret.encode(), ("%s.%d" % (ref, exp)).encode(), hashlib.sha256).hexdigest()


def skip_ref(body):
    """The {{.Ticket}} reference in the waiting page's skip link (-skip-url /pay?t={{.Ticket}})."""
    m = re.search(rb'SKIP_URL = "/pay\?t=([A-Za-z0-9_-]+)"', body)
    return m.group(1).decode() if m else None


class SkipTheLineTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def room(self, extra=(), workers=2):
        args = ["-upstream", self.origin.url, "-cap", "1", "-rate", "1", "-skip-url", "/pay?t={{.Ticket}}",
                "-session-hold", "30s", "-first-poll-grace", "120s"] + list(extra)
        return Concert(args, workers=workers, admin_token=TOKEN, env={"CONCERT_PROMOTE_SECRET": PROMOTE_SECRET})

    def fill(self, c, n):
        """Someone holds the only slot; n visitors queue behind it (browsers: they see the skip link)."""
        holder = Background(lambda: c.get("/slow?gate=holder", headers=JSON, timeout=60))
        holder.start()
        self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 1, timeout=10))
        line = []
        for i in range(n):
            v = Visitor(c, accept=BROWSER)
            status, _, body = v.get("/shop")
            self.assertEqual(status, 200)
            self.assertIn(b'id="position"', body)
            v.waiting_page = body
            line.append(v)
        self.assertEqual(c.stats()["live_queue_depth"], n)
        return holder, line

    def test_paid_visitor_at_40_is_admitted_next(self):
        with self.room() as c:
            holder, line = self.fill(c, 41)
            payer = line[39]
            self.assertEqual(payer.position(), 40)
            ref = skip_ref(payer.waiting_page)
            self.assertIsNotNone(ref, "no {{.Ticket}} reference in the skip link")
            self.assertNotIn(payer.jar["room_ticket"], ref)  # a reference, not the cookie
            # The fake payment page: paid, it redirects the visitor to the signed link.
            exp = int(time.time()) + 300
            link = "/queue/promote?ticket=%s&exp=%d&sig=%s" % (ref, exp, sign(ref, exp))
            # Forged, expired and malformed links first: 403, nothing changes.
            for bad in ["/queue/promote?ticket=%s&exp=%d&sig=%s" % (ref, exp, sign(ref, exp, "x" * 40)),
                        "/queue/promote?ticket=%s&exp=%d&sig=%s" % (ref, exp + 1, sign(ref, exp)),
                        "/queue/promote?ticket=%s&exp=%d&sig=%s" % (ref, exp - 400, sign(ref, exp - 400)),
                        "/queue/promote?ticket=%s&exp=%d" % (ref, exp), "/queue/promote"]:
                self.assertEqual(Visitor(c).get(bad)[0], 403, bad)
            self.assertEqual(c.stats()["promoted_total"], 0)
            status, headers, _ = payer.get(link)
            self.assertEqual(status, 303)
            self.assertEqual(header(headers, "Location"), "/")
            self.assertIn("room_pass", payer.jar)
            # Used once: the same link again is refused, from anyone.
            self.assertEqual(Visitor(c).get(link)[0], 403)
            self.assertEqual(c.stats()["promoted_total"], 1)
            self.assertEqual(c.stats()["live_queue_depth"], 40)
            # Nobody's place grew; the one behind the payer moved up by one.
            self.assertEqual(line[0].position(), 1)
            self.assertEqual(line[38].position(), 39)
            self.assertEqual(line[40].position(), 40)
            # The payer's page is held ahead of everyone; the line's ready visitor polls meanwhile.
            paid = Background(lambda: payer.get("/checkout", accept=JSON))
            paid.start()
            time.sleep(0.5)
            self.assertIsNone(paid.result)
            self.origin.release("holder")
            paid.join(30)
            self.assertEqual(paid.result[0], 200, paid.result)
            self.assertEqual(paid.result[2], b"ok")
            holder.join(10)
            # The first of the 39 comes next, in ticket order.
            self.assertTrue(wait_for(lambda: line[0].position() is None, timeout=10))
            self.assertEqual(line[0].get("/shop", accept=JSON)[0], 200)
            # Its request done, the slot is free again: the next one's turn, the rest one place closer.
            self.assertTrue(wait_for(lambda: line[1].position() is None, timeout=10))
            self.assertEqual(line[2].position(), 2)
            self.assertEqual(c.stats()["admissions_priority_total"], 1)
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)
            self.assertEqual(c.fifo_inversions(), 0)

    def test_admin_promote(self):
        with self.room(["-pass", "0"]) as c:
            holder, line = self.fill(c, 3)
            auth = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"}
            ref = skip_ref(line[2].waiting_page)
            body = json.dumps({"ticket": ref}).encode()
            wrong = dict(auth, Authorization="Bearer nope")
            self.assertEqual(c.request("POST", "/_room/promote", headers=wrong, body=body)[0], 401)
            self.assertEqual(c.request("POST", "/_room/promote", headers=auth, body=b"{}")[0], 400)
            self.assertEqual(c.request("POST", "/_room/promote", headers=auth, body=b'{"ticket": "zz"}')[0], 400)
            self.assertEqual(c.request("GET", "/_room/promote", headers=auth)[0], 405)
            # A reference whose MAC does not match the ticket's nonce names no ticket.
            forged = ref[:-2] + ("AA" if ref[-2:] != "AA" else "BA")
            self.assertEqual(c.request("POST", "/_room/promote", headers=auth,
                                       body=json.dumps({"ticket": forged}).encode())[0], 404)
            status, _, answer = c.request("POST", "/_room/promote", headers=auth, body=body)
            self.assertEqual(status, 200, answer)
            # Gone from the line: promoting it again is a 404.
            self.assertEqual(c.request("POST", "/_room/promote", headers=auth, body=body)[0], 404)
            self.assertEqual(c.stats()["live_queue_depth"], 2)
            self.assertEqual((line[0].position(), line[1].position()), (1, 2))
            # Its next poll says ready and hands over the room pass.
            status, headers, poll = line[2].get("/queue/status")
            self.assertTrue(json.loads(poll)["ready"])
            self.assertIn("room_pass", line[2].jar)
            paid = Background(lambda: line[2].get("/next", accept=JSON))
            paid.start()
            time.sleep(0.5)
            self.origin.release("holder")
            paid.join(30)
            self.assertEqual(paid.result[0], 200)
            holder.join(10)
            # Then the line, from its head: the first one's turn has come, the second still waits.
            self.assertTrue(wait_for(lambda: line[0].position() is None, timeout=10))
            self.assertEqual(line[1].position(), 2)
            self.assertEqual(c.stats()["promoted_total"], 1)
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)

    def test_room_pass_then_classes_then_sessions_then_line_under_a_saturated_cap(self):
        with self.room(["-newcomer-share", "0", "-priority-classes", "staff,checkout"]) as c:
            session = Visitor(c)
            self.assertEqual(session.get("/home")[0], 200)  # admitted: a session from now on
            # The origin grants classes; a forged priority cookie is only a session (and a strike).
            staff, checkout, forged = Visitor(c), Visitor(c), Visitor(c)
            self.assertEqual(staff.get("/priority?value=staff")[0], 200)
            self.assertEqual(checkout.get("/priority?value=checkout")[0], 200)
            self.assertEqual(forged.get("/priority?value=checkout")[0], 200)
            self.assertIn("concert_priority", staff.jar)
            value = forged.jar["concert_priority"]
            forged.jar["concert_priority"] = value[:-3] + ("AAA" if value[-3:] != "AAA" else "BAA")
            holder, line = self.fill(c, 2)
            auth = {"Authorization": "Bearer " + TOKEN}
            vip = line[1]
            self.assertEqual(c.request("POST", "/_room/promote", headers=auth,
                                       body=json.dumps({"ticket": skip_ref(vip.waiting_page)}).encode())[0], 200)
            vip.get("/queue/status")
            self.assertIn("room_pass", vip.jar)
            # Each admitted request takes 300 ms at the origin, one at a time (cap 1): completion order is
            # admission order. The line visitor polls like the waiting page and comes in when its turn
            # comes; the session and the room pass are held on their connections ahead of it.
            order = []
            lock = threading.Lock()

            def go(name, visitor):
                status, _, _ = visitor.get("/sleep?ms=300&who=" + name, accept=JSON, timeout=60)
                with lock:
                    order.append((name, status))

            def wait_in_line(visitor):
                if visitor.wait_turn(time.time() + 60, use_events=False):
                    return go("line", visitor)

            threads = [Background(lambda: wait_in_line(line[0]))]
            threads[0].start()
            for name, v in (("session", session), ("forged", forged), ("checkout", checkout), ("staff", staff),
                            ("vip", vip)):
                t = Background(lambda n=name, v=v: go(n, v))
                t.start()
                threads.append(t)
                time.sleep(0.2)
            time.sleep(1.0)
            self.assertEqual(order, [])
            self.origin.release("holder")
            for t in threads:
                t.join(60)
            holder.join(10)
            self.assertEqual(order[:3], [("vip", 200), ("staff", 200), ("checkout", 200)])
            self.assertEqual(sorted(order[3:5]), [("forged", 200), ("session", 200)])  # one rank: either order
            self.assertEqual(order[5:], [("line", 200)])
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)
            self.assertEqual(c.stats()["occupancy"], 0)


class InvitationTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.stop()

    def invite(self, duration, secret=TEST_SECRET):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONCERT_")}
        if secret:
            env["CONCERT_ADMIT_SECRET"] = secret
        return subprocess.run([BIN, "-invite", duration], env=env, capture_output=True, text=True, timeout=10)

    def test_invite_prints_one_token_and_needs_the_secret(self):
        done = self.invite("48h")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertRegex(done.stdout, r"^[A-Za-z0-9_-]{43}\n$")
        self.assertNotEqual(done.stdout, self.invite("48h").stdout)
        unsigned = self.invite("48h", secret=None)
        self.assertNotEqual(unsigned.returncode, 0)
        self.assertIn("CONCERT_ADMIT_SECRET", unsigned.stderr)
        self.assertEqual(unsigned.stdout, "")
        bad = self.invite("soon")
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("-invite", bad.stderr)

    def test_invitation_admits_once_at_the_head_across_workers(self):
        token = self.invite("1h").stdout.strip()
        expired = self.invite("1s").stdout.strip()
        forged = token[:-3] + ("AAA" if token[-3:] != "AAA" else "BAA")
        with Concert(["-upstream", self.origin.url, "-cap", "1", "-session-hold", "30s", "-abuse-threshold", "50"],
                     workers=2) as c:
            holder = Background(lambda: c.get("/slow?gate=holder", headers=JSON, timeout=60))
            holder.start()
            self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 1, timeout=10))
            line = [Visitor(c) for _ in range(5)]
            for v in line:
                self.assertEqual(v.get("/shop")[0], 429)
            guest = Visitor(c)
            invited = Background(lambda: guest.get("/party?concert_invite=" + token))
            invited.start()
            time.sleep(0.5)
            self.assertIsNone(invited.result)  # held ahead of the line, not queued
            self.origin.release("holder")
            invited.join(30)
            self.assertEqual(invited.result[0], 200)
            self.assertIn("concert_admit", guest.jar)  # and a session from now on
            holder.join(10)
            self.assertEqual(c.stats()["invitations_used_total"], 1)
            self.assertEqual(line[0].position(), None)  # the line moves on: its turn came
            # Used, forged or expired: treated as none (queued like anyone) and struck.
            time.sleep(1.2)  # let the one-second-old invitation expire
            strikes = c.stats()["abuse_strikes_total"]
            for t in [token, token, token, forged, expired]:
                status, _, body = Visitor(c).get("/party?concert_invite=" + t)
                self.assertIn(status, (200, 429))
                if status == 429:
                    self.assertTrue(json.loads(body)["queued"])
            self.assertEqual(c.stats()["abuse_strikes_total"], strikes + 5)
            self.assertEqual(c.stats()["invitations_used_total"], 1)
            # One fresh invitation sent by eight clients at once, over both workers: honoured once.
            shared = self.invite("1h").stdout.strip()
            go = threading.Barrier(8)

            def use():
                go.wait(10)
                return Visitor(c).get("/party?concert_invite=" + shared)

            racers = [Background(use) for _ in range(8)]
            for r in racers:
                r.start()
            for r in racers:
                r.join(30)
            self.assertEqual(c.stats()["invitations_used_total"], 2)
            self.assertEqual(c.stats()["abuse_strikes_total"], strikes + 5 + 7)
            self.assertLessEqual(self.origin.recorder.max_page_in_flight, 1)


if __name__ == "__main__":
    unittest.main()
