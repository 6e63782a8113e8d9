"""Client identity at the listener and abuse resistance against the real
binary. With -proxy-protocol a trusted peer opens every connection with a
PROXY v1 or v2 header whose source is the client (UNKNOWN or LOCAL: the peer
itself); a missing or malformed header, or one from an untrusted peer,
closes the connection without an answer. All addresses of one IPv6 /64 are
one client. -max-tickets-per-client caps the tickets one client holds, so a
flood of cookie-less requests keeps at most that many in line and a real
visitor still gets through. Strikes (a forged pass, though not an expired
genuine one; a bad request; a wrong admin token) from every worker add up
to a ban of the client at -abuse-threshold: its tickets leave the line and,
until -abuse-ban has passed, all its requests but the health check are
refused. A client in -abuse-allow is never struck or limited.

A client "from" 127.0.0.2 or 127.0.0.3 binds that source address (Linux
routes all of 127/8 to lo). The flood figures are printed for the record
(requests sent, tickets issued, the real visitor's wait); nothing here
asserts on time."""
import http.client
import ipaddress
import json
import socket
import struct
import threading
import time
import unittest

from concert_harness import Concert, header, raw_exchange, request_from, set_cookies, wait_for
from fake_origin import FakeOrigin
from room import fill, mint_pass, with_pass

V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"
FORGED_PASS = "A" * 54  # the right length and alphabet, a MAC that is not ours


def proxy_v1(src, dst="127.0.0.1", sport=40000, dport=80):
    fam = "TCP6" if ":" in src else "TCP4"
    return ("PROXY %s %s %s %d %d\r\n" % (fam, src, dst, sport, dport)).encode()


def proxy_v2(src=None, dst="127.0.0.1", sport=40000, dport=80, command=1, tlv=b""):
    if src is None:  # LOCAL: the balancer's own connection
        return V2_SIG + bytes([0x20, 0x00]) + struct.pack("!H", len(tlv)) + tlv
    if ":" in src:
        body = socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, dst)
        fam = 0x21
    else:
        body = socket.inet_aton(src) + socket.inet_aton(dst)
        fam = 0x11
    body += struct.pack("!HH", sport, dport) + tlv
    return V2_SIG + bytes([0x20 | command, fam]) + struct.pack("!H", len(body)) + body


def get_bytes(path="/headers", agent="abuse-test", extra=""):
    return ("GET %s HTTP/1.1\r\nHost: shop.example\r\nUser-Agent: %s\r\nConnection: close\r\n%s\r\n" %
            (path, agent, extra)).encode()


def exchange_from(port, source, data, timeout=5):
    """Raw bytes from the loopback address `source`; everything until close."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


def forwarded_for(response):
    """The X-Forwarded-For the fake origin's /headers saw, from a raw response."""
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    seen = {}
    for name, value in json.loads(body):
        seen.setdefault(name.lower(), []).append(value)
    return seen["x-forwarded-for"]


def access_lines(concert, needle):
    try:
        with open(concert.access_path) as f:
            return [l for l in f.read().splitlines() if needle in l]
    except OSError:
        return []


class AbuseTest(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()

    def tearDown(self):
        self.origin.release()
        self.origin.stop()

    def concert(self, *args, **kw):
        return Concert(["-upstream", self.origin.url] + list(args), workers=kw.pop("workers", 2), **kw)

    # -- PROXY protocol
    def test_proxy_v1_and_v2_source_stands_for_the_peer(self):
        with self.concert("-proxy-protocol", "-trusted-proxies", "127.0.0.1/32", access_log=True,
                          proxy_preface=b"PROXY UNKNOWN\r\n") as c:
            cases = [
                ("v1 tcp4", proxy_v1("203.0.113.9"), "203.0.113.9"),
                ("v1 tcp6", proxy_v1("2001:db8::7", dst="2001:db8::1"), "2001:db8::7"),
                ("v2 inet", proxy_v2("198.51.100.4"), "198.51.100.4"),
                ("v2 inet6 + tlv", proxy_v2("2001:db8:5::9", dst="2001:db8::1", tlv=b"\x04\x00\x03abc"),
                 "2001:db8:5::9"),
                ("v1 unknown", b"PROXY UNKNOWN\r\n", "127.0.0.1"),
                ("v2 local", proxy_v2(None), "127.0.0.1"),
            ]
            for name, preface, client in cases:
                with self.subTest(name):
                    agent = "pp-" + name.replace(" ", "-")
                    out = raw_exchange(c.port, preface + get_bytes(agent=agent))
                    self.assertEqual(forwarded_for(out), [client])
                    lines = wait_for(lambda: access_lines(c, agent), timeout=5)
                    self.assertTrue(lines, "no access log line for " + agent)
                    self.assertEqual(lines[0].split(" ")[0], client)
            # The header may arrive in pieces.
            s = socket.create_connection(("127.0.0.1", c.port), timeout=5)
            try:
                data = proxy_v2("192.0.2.77") + get_bytes(agent="pp-split")
                for i in range(0, len(data), 7):
                    s.sendall(data[i:i + 7])
                    time.sleep(0.005)
                out = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    out += chunk
            finally:
                s.close()
            self.assertEqual(forwarded_for(out), ["192.0.2.77"])
            self.assertEqual(c.stats()["proxy_protocol_rejected_total"], 0)

    def test_proxy_protocol_bad_headers_close_without_an_answer(self):
        with self.concert("-proxy-protocol", "-trusted-proxies", "127.0.0.1/32", "-client-header-timeout", "1s",
                          proxy_preface=proxy_v2(None)) as c:
            bad = [
                ("missing", get_bytes()),
                ("v1 garbled address", b"PROXY TCP4 203.0.113.300 127.0.0.1 1 2\r\n" + get_bytes()),
                ("v1 family mismatch", b"PROXY TCP4 2001:db8::1 127.0.0.1 1 2\r\n" + get_bytes()),
                ("v1 no CRLF", b"PROXY TCP4 203.0.113.9 127.0.0.1 1 2\n" + get_bytes()),
                ("v2 bad version", b"\r\n\r\n\x00\r\nQUIT\n\x11\x11\x00\x0c" + bytes(12) + get_bytes()),
                ("v2 length too short", V2_SIG + b"\x21\x11\x00\x04" + bytes(4) + get_bytes()),
            ]
            for name, data in bad:
                with self.subTest(name):
                    self.assertEqual(raw_exchange(c.port, data), b"")
            # Truncated: part of a header, then nothing: closed at the head
            # timeout, still without an answer.
            for name, data in [("v1 truncated", proxy_v1("203.0.113.9")[:20]), ("v2 truncated", proxy_v2("203.0.113.9")[:20])]:
                with self.subTest(name):
                    self.assertEqual(raw_exchange(c.port, data, timeout=10), b"")
            self.assertGreaterEqual(c.stats()["proxy_protocol_rejected_total"], 6)
            self.assertEqual(self.origin.recorder.hits("/headers"), 0)
            # A peer that is not trusted is closed even with a valid header.
            before = c.stats()["proxy_protocol_rejected_total"]
            self.assertEqual(exchange_from(c.port, "127.0.0.2", proxy_v1("203.0.113.9") + get_bytes()), b"")
            self.assertEqual(c.stats()["proxy_protocol_rejected_total"], before + 1)
            self.assertEqual(self.origin.recorder.hits("/headers"), 0)

    def test_proxy_source_is_the_client_for_trusted_chains_and_limits(self):
        # The PROXY source stands for the peer: it is the last X-Forwarded-For
        # entry and, being no trusted proxy, the client whatever XFF says.
        with self.concert("-proxy-protocol", "-trusted-proxies", "127.0.0.1/32",
                          proxy_preface=b"PROXY UNKNOWN\r\n") as c:
            out = raw_exchange(c.port, proxy_v1("203.0.113.9") + get_bytes(extra="X-Forwarded-For: 6.6.6.6\r\n"))
            self.assertEqual(forwarded_for(out), ["203.0.113.9"])

    # -- IPv6 /64
    def test_ipv6_addresses_of_one_64_are_one_client(self):
        with self.concert("-cap", "1", "-trusted-proxies", "127.0.0.1/32", "-max-tickets-per-client", "2") as c:
            fill(c, source="127.0.0.1")

            def arrive(xff):
                status, headers, _ = c.get("/page", {"Accept": "text/html", "X-Forwarded-For": xff})
                return status, headers

            self.assertEqual(arrive("2001:db8:1:2::1")[0], 200)
            self.assertEqual(arrive("2001:db8:1:2:aaaa::5")[0], 200)
            status, headers = arrive("2001:db8:1:2:ffff:ffff:ffff:ffff")
            self.assertEqual(status, 429)
            self.assertIsNotNone(header(headers, "Retry-After"))
            self.assertNotIn("room_ticket", set_cookies(headers))
            # The next /64 is someone else.
            self.assertEqual(arrive("2001:db8:1:3::1")[0], 200)
            # IPv4 clients are whole addresses.
            self.assertEqual(arrive("192.0.2.1")[0], 200)
            self.assertEqual(arrive("192.0.2.2")[0], 200)
            self.assertEqual(c.stats()["queue_depth"], 5)

    # -- the flood
    def test_cookieless_flood_holds_at_most_its_limit_and_a_real_visitor_gets_through(self):
        total = 20000
        with self.concert("-cap", "1", "-max-tickets-per-client", "5", "-first-poll-grace", "5s",
                          "-claim-window", "2s", workers=2) as c:
            fill(c, source="127.0.0.1")
            statuses = {}
            lock = threading.Lock()
            max_depth = [0]
            stop = threading.Event()

            def sample():
                while not stop.is_set():
                    max_depth[0] = max(max_depth[0], c.stats()["queue_depth"])
                    time.sleep(0.05)

            def flood(n):
                conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=30, source_address=("127.0.0.2", 0))
                local = {}
                for _ in range(n):
                    try:
                        conn.request("GET", "/page", headers={"Accept": "text/html"})
                        r = conn.getresponse()
                        r.read()
                        local[r.status] = local.get(r.status, 0) + 1
                        if r.will_close:
                            conn.close()
                    except (ConnectionError, http.client.HTTPException):
                        conn.close()
                        local["error"] = local.get("error", 0) + 1
                conn.close()
                with lock:
                    for k, v in local.items():
                        statuses[k] = statuses.get(k, 0) + v

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            started = time.time()
            threads = [threading.Thread(target=flood, args=(total // 4,)) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            flood_seconds = time.time() - started
            stop.set()
            sampler.join()
            s = c.stats()
            self.assertEqual(sum(statuses.values()), total, statuses)
            self.assertLessEqual(max_depth[0], 5)
            self.assertLessEqual(s["queue_depth"], 5)
            self.assertGreater(statuses.get(429, 0), total - 200, statuses)
            issued = s["queued_total"]

            # A real visitor from another address arrives after the flood: it
            # gets a ticket and is admitted in its turn once the slot frees.
            jar = {}
            arrived = time.time()
            status, headers, _ = request_from(c.port, "127.0.0.3", "/page", {"Accept": "text/html"})
            self.assertEqual(status, 200)
            jar.update(set_cookies(headers))
            self.assertIn("room_ticket", jar)
            self.origin.release()

            def admitted():
                cookie = "; ".join("%s=%s" % kv for kv in jar.items())
                st, hs, body = request_from(c.port, "127.0.0.3", "/queue/status", {"Cookie": cookie})
                jar.update(set_cookies(hs))
                if json.loads(body).get("ready"):
                    st, hs, body = request_from(c.port, "127.0.0.3", "/page", {"Accept": "text/html", "Cookie": cookie})
                    return st == 200 and body == b"ok"
                return False

            self.assertTrue(wait_for(admitted, timeout=30, interval=1.0), "the real visitor was never admitted")
            waited = time.time() - arrived
            print("\nflood: %d requests from one client in %.1f s: %s; tickets issued %d (max %d waiting at once); "
                  "the real visitor from another address waited %.1f s" %
                  (total, flood_seconds, dict(sorted(statuses.items(), key=str)), issued, max_depth[0], waited))

    # -- strikes and bans
    def test_forged_passes_ban_one_client_across_workers_and_the_ban_lifts(self):
        with self.concert("-abuse-threshold", "10", "-abuse-ban", "2s", "-cap", "1", workers=2) as c:
            forged = {"Cookie": "concert_admit=" + FORGED_PASS, "Accept": "text/html"}
            # Two forged passes (5 each), each on its own connection.
            for _ in range(2):
                status, _, _ = request_from(c.port, "127.0.0.2", "/page", forged)
            self.assertEqual(status, 403)
            s = c.stats()
            self.assertEqual(s["abuse_strikes_total"], 10)
            self.assertEqual(s["abuse_bans_total"], 1)
            self.assertEqual(s["banned_clients"], 1)
            # Every connection from it, on whichever worker, is refused; its
            # health check is not.
            for path in ["/page", "/", "/queue/status", "/assets/x.css", "/_room/stats"]:
                for _ in range(3):
                    self.assertEqual(request_from(c.port, "127.0.0.2", path)[0], 403, path)
            self.assertEqual(request_from(c.port, "127.0.0.2", "/_room/healthz")[0], 200)
            # Another client is untouched.
            self.assertEqual(request_from(c.port, "127.0.0.3", "/page")[0], 200)
            # The ban lifts after its time.
            self.assertTrue(wait_for(lambda: request_from(c.port, "127.0.0.2", "/page")[0] == 200, timeout=15, interval=0.2))
            self.assertEqual(c.stats()["banned_clients"], 0)

    def test_strikes_from_every_worker_add_up(self):
        # Bad requests (400) are one strike each: ten of them on ten
        # connections, spread over four workers, make one ban.
        with self.concert("-abuse-threshold", "10", "-abuse-ban", "30s", workers=4) as c:
            for i in range(9):
                out = exchange_from(c.port, "127.0.0.2", b"GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
                self.assertTrue(out.startswith(b"HTTP/1.1 400"), out[:40])
            self.assertEqual(c.stats()["abuse_strikes_total"], 9)
            self.assertEqual(request_from(c.port, "127.0.0.2", "/page")[0], 200)
            out = exchange_from(c.port, "127.0.0.2", b"GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
            self.assertTrue(out.startswith(b"HTTP/1.1 400"), out[:40])
            s = c.stats()
            self.assertEqual((s["abuse_strikes_total"], s["abuse_bans_total"], s["banned_clients"]), (10, 1, 1))
            for _ in range(8):
                self.assertEqual(request_from(c.port, "127.0.0.2", "/page")[0], 403)
            self.assertEqual(request_from(c.port, "127.0.0.3", "/page")[0], 200)

    def test_wrong_admin_tokens_ban(self):
        with self.concert("-abuse-threshold", "10", "-abuse-ban", "30s", admin_token="right-token") as c:
            for _ in range(2):
                status, _, _ = request_from(c.port, "127.0.0.2", "/_room/cap", {"Authorization": "Bearer wrong"},
                                            method="POST", body=b'{"cap": 7}')
                self.assertEqual(status, 401)
            self.assertEqual(request_from(c.port, "127.0.0.2", "/page")[0], 403)
            # The operator with the right token is not touched.
            status, _, _ = request_from(c.port, "127.0.0.3", "/_room/cap", {"Authorization": "Bearer right-token"},
                                        method="POST", body=b'{"cap": 7}')
            self.assertEqual(status, 200)

    def test_a_banned_clients_tickets_leave_the_line(self):
        with self.concert("-abuse-threshold", "5", "-abuse-ban", "30s", "-cap", "1") as c:
            fill(c, source="127.0.0.1")
            html = {"Accept": "text/html"}
            status, h2, _ = request_from(c.port, "127.0.0.2", "/page", html)
            self.assertEqual(status, 200)
            status, h3, _ = request_from(c.port, "127.0.0.3", "/page", html)
            self.assertEqual(status, 200)
            cookie3 = "room_ticket=" + set_cookies(h3)["room_ticket"]
            body = request_from(c.port, "127.0.0.3", "/queue/status", {"Cookie": cookie3})[2]
            self.assertEqual(json.loads(body)["position"], 2)
            self.assertEqual(c.stats()["queue_depth"], 2)
            # 127.0.0.2 forges a pass once: banned, and its place is gone.
            forged = {"Cookie": "concert_admit=%s; room_ticket=%s" % (FORGED_PASS, set_cookies(h2)["room_ticket"])}
            self.assertEqual(request_from(c.port, "127.0.0.2", "/page", forged)[0], 403)
            self.assertEqual(c.stats()["queue_depth"], 1)
            time.sleep(1.1)  # /queue/status answers one poll a second per ticket
            body = request_from(c.port, "127.0.0.3", "/queue/status", {"Cookie": cookie3})[2]
            self.assertEqual(json.loads(body)["position"], 1)

    def test_abuse_allow_is_never_banned_or_limited(self):
        with self.concert("-abuse-threshold", "5", "-abuse-allow", "127.0.0.2/32", "-cap", "1",
                          "-max-tickets-per-client", "1") as c:
            fill(c, source="127.0.0.1")
            forged = {"Cookie": "concert_admit=" + FORGED_PASS, "Accept": "text/html"}
            for _ in range(3):
                self.assertEqual(request_from(c.port, "127.0.0.2", "/page", forged)[0], 200)
            self.assertEqual(c.stats()["abuse_strikes_total"], 0)
            self.assertEqual(c.stats()["queue_depth"], 3)
            # Without the allow list the same client is limited and struck.
            status, _, _ = request_from(c.port, "127.0.0.3", "/page", {"Accept": "text/html"})
            self.assertEqual(status, 200)
            status, _, _ = request_from(c.port, "127.0.0.3", "/page", {"Accept": "text/html"})
            self.assertEqual(status, 429)
            self.assertEqual(c.stats()["abuse_strikes_total"], 1)

    def test_an_expired_genuine_pass_is_no_strike(self):
        expired = mint_pass(bytes(16), int(time.time()) - 10)
        with self.concert("-abuse-threshold", "5") as c:
            for _ in range(3):
                self.assertEqual(request_from(c.port, "127.0.0.2", "/page", with_pass(expired))[0], 200)
            self.assertEqual(c.stats()["abuse_strikes_total"], 0)


if __name__ == "__main__":
    unittest.main()
