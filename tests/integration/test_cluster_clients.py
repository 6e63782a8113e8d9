"""Per-client rules across hosts sharing a line; the real binary, a real redis-server and one fake origin.
Clients are told apart by their source address (127.0.0.x):

  test_a_ban_takes_the_clients_tickets_out_on_every_host   two clients wait in line on B; the first is
                                                           banned on A: its ticket leaves the shared
                                                           line, and the second moves up to position 1
  test_the_ticket_limit_counts_every_hosts_tickets         -max-tickets-per-client 1: a client holding a
                                                           ticket from A is refused another on B (429),
                                                           and gets one again once its first has left

Each test starts its own redis-server and hosts; cross-host effects are waited for (the hosts sync with
the engine about every 100 ms), never timed. Traffic goes to 127.0.0.1 only; only processes started
here are signalled, by pid.
"""
import json
import time
import unittest

from concert_harness import request_from, set_cookies, wait_for
from test_cluster_hosts import ClusterHostsBase
from visitor import in_thread

FORGED_PASS = "v1.0.0.forged"
HTML = {"Accept": "text/html"}


def position(host, source, cookie):
    """The ticket's position in /queue/status on `host` (None: no position to show)."""
    for _ in range(5):
        status, _, body = request_from(host.port, source, "/queue/status", {"Cookie": cookie})
        if status == 200:
            return json.loads(body).get("position")
        time.sleep(1.05)  # one poll a second per ticket
    return None


class ClusterClientsTest(ClusterHostsBase):
    def hold_the_slot(self, host):
        """One request holds the only page slot (cap 1) until the test ends."""
        t = in_thread(request_from, host.port, "127.0.0.9", "/slow?gate=g&timeout=60", timeout=70)
        self.assertTrue(wait_for(lambda: self.origin.recorder.hits("/slow") == 1, timeout=10), "the slot is not held")
        return t

    def ticket(self, host, source):
        status, headers, _ = request_from(host.port, source, "/page", HTML)
        self.assertEqual(status, 200, "%s got no waiting page on %s" % (source, host.name))
        return "room_ticket=" + set_cookies(headers)["room_ticket"]

    def test_a_ban_takes_the_clients_tickets_out_on_every_host(self):
        args = ["-cap", "1", "-abuse-threshold", "5", "-abuse-ban", "30s", "-claim-window", "30s"]
        a, b = self.host("A", args, claim_window=None), self.host("B", args, claim_window=None)
        self.wait_hosts([a, b], 2)
        self.hold_the_slot(a)
        first = self.ticket(b, "127.0.0.2")
        self.assertTrue(wait_for(lambda: position(b, "127.0.0.2", first) == 1, timeout=15, interval=0.2))
        second = self.ticket(b, "127.0.0.3")
        self.assertTrue(wait_for(lambda: position(b, "127.0.0.3", second) == 2, timeout=15, interval=0.2))
        # 127.0.0.2 forges a pass on A: banned there, and its place in the shared line is gone.
        forged = {"Cookie": "concert_admit=%s; %s" % (FORGED_PASS, first), "Accept": "text/html"}
        self.assertEqual(request_from(a.port, "127.0.0.2", "/page", forged)[0], 403)
        self.assertTrue(wait_for(lambda: position(b, "127.0.0.3", second) == 1, timeout=15, interval=0.2),
                        "the banned client's ticket still holds the line on B")
        self.assertIn("tickets of newly banned clients taken out of the line", a.log())

    def test_the_ticket_limit_counts_every_hosts_tickets(self):
        args = ["-cap", "1", "-max-tickets-per-client", "1", "-claim-window", "30s"]
        a, b = self.host("A", args, claim_window=None), self.host("B", args, claim_window=None)
        self.wait_hosts([a, b], 2)
        self.hold_the_slot(a)
        mine = self.ticket(a, "127.0.0.2")
        self.assertTrue(wait_for(lambda: position(a, "127.0.0.2", mine) == 1, timeout=15, interval=0.2))
        # Another ticket for the same client on B: refused once B learns the room's count.
        self.assertTrue(wait_for(lambda: request_from(b.port, "127.0.0.2", "/page", HTML)[0] == 429, timeout=15,
                                 interval=0.2),
                        "B issued a second ticket to a client holding one from A")
        self.assertEqual(request_from(a.port, "127.0.0.2", "/page", HTML)[0], 429)
        # Another client is not limited.
        other = self.ticket(b, "127.0.0.3")
        self.assertTrue(wait_for(lambda: position(b, "127.0.0.3", other) == 2, timeout=15, interval=0.2))
        # The slot frees: the first ticket is admitted and leaves the line; the client may queue again.
        self.origin.release("g")
        self.assertTrue(wait_for(lambda: request_from(a.port, "127.0.0.2", "/page", dict(HTML, Cookie=mine))[0] == 200
                                 and self.origin.recorder.hits("/page") >= 1, timeout=20, interval=0.3),
                        "the first ticket was not admitted")
        self.assertTrue(wait_for(lambda: request_from(b.port, "127.0.0.2", "/other", HTML)[0] != 429, timeout=15,
                                 interval=0.3),
                        "the client is still refused after its ticket left")


if __name__ == "__main__":
    unittest.main()
