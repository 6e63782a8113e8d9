"""The worker data path against a real binary (2 workers) and fake origins:
byte-exact bodies both ways, header rewriting, keep-alive on both sides,
pipelining, HTTP/1.0, bodiless responses, streaming, Upgrade tunnels, 502/504,
exact path forwarding, reserved paths and the access log.
"""
import http.client
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest

from concert_harness import Concert, header, headers_all, in_thread, raw_exchange, wait_for
from http.server import ThreadingHTTPServer

from fake_origin import FakeOrigin, Handler, Recorder, closed_port, pattern


# ---------------------------------------------------------------- raw helpers

def read_response(conn, method="GET", timeout=10):
    """Reads one HTTP/1.x response from a Sock: (status, headers, body, raw_head).
    Understands Content-Length, chunked and close-delimited bodies."""
    sock = conn.s
    sock.settimeout(timeout)
    buf = conn.pending
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError("closed before a response head: %r" % buf)
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = []
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers.append((k.strip(), v.strip()))
    te = (header(headers, "Transfer-Encoding") or "").lower()
    cl = header(headers, "Content-Length")
    body = b""
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        conn.pending = rest
        return status, headers, b"", head
    if te == "chunked":
        data = rest
        while True:
            while b"\r\n" not in data:
                more = sock.recv(65536)
                if not more:
                    raise EOFError("closed inside a chunk size")
                data += more
            size_line, _, data = data.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(data) < size + 2:
                more = sock.recv(65536)
                if not more:
                    raise EOFError("closed inside a chunk")
                data += more
            if size == 0:
                # no trailers from Concert: the terminating CRLF follows
                conn.pending = data[2:]
                return status, headers, body, head
            body += data[:size]
            data = data[size + 2:]
    if cl is not None:
        n = int(cl)
        data = rest
        while len(data) < n:
            more = sock.recv(65536)
            if not more:
                raise EOFError("closed inside a body")
            data += more
        conn.pending = data[n:]
        return status, headers, data[:n], head
    data = rest
    while True:
        more = sock.recv(65536)
        if not more:
            break
        data += more
    conn.pending = b""
    return status, headers, data, head


class Sock:
    """A client socket that remembers bytes read past a response."""

    def __init__(self, port, timeout=10):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.pending = b""

    def send(self, data):
        self.s.sendall(data)

    def response(self, method="GET", timeout=10):
        return read_response(self, method, timeout)

    def closed(self, timeout=5):
        """True when the server closed the connection (EOF) within `timeout`."""
        self.s.settimeout(timeout)
        try:
            if self.pending:
                return False
            return self.s.recv(1) == b""
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True

    def close(self):
        self.s.close()


class RawOrigin:
    """A tiny origin on raw sockets. `handler(conn, request_head, body)` answers
    one request and returns True to keep the connection for the next one.
    Counts accepted connections."""

    def __init__(self, handler):
        self.handler = handler
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.accepted = 0
        self.requests = []
        self.lock = threading.Lock()
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        conn.settimeout(30)
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                text = head.decode("latin-1")
                cl = 0
                for line in text.split("\r\n")[1:]:
                    k, _, v = line.partition(":")
                    if k.strip().lower() == "content-length":
                        cl = int(v.strip())
                while len(buf) < cl:
                    buf += conn.recv(65536)
                body, buf = buf[:cl], buf[cl:]
                with self.lock:
                    self.requests.append(text)
                if not self.handler(conn, text, body):
                    return
        except OSError:
            return
        finally:
            conn.close()

    def stop(self):
        self.stopping = True
        self.sock.close()


def ok_handler(conn, head, body):
    path = head.split(" ")[1].encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n%s" % (len(path), path))
    return True


def origin_header(record, name):
    for k, v in record["headers"]:
        if k.lower() == name.lower():
            return v
    return None


# ---------------------------------------------------------------- tests

class ProxyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.origin = FakeOrigin()
        cls.concert = Concert(["-upstream", cls.origin.url, "-cap", "50", "-bypass", "/favicon.ico,/bypass/*"],
                              workers=2, access_log=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.concert.stop()
        cls.concert.__exit__(None, None, None)
        cls.origin.stop()

    def setUp(self):
        self.origin.release()
        self.origin.hold()

    def last(self, path):
        with self.origin.recorder.lock:
            for r in reversed(self.origin.recorder.requests):
                if r["path"] == path:
                    return r
        return None

    # -- bodies
    def test_large_content_length_response_is_byte_exact(self):
        n = 5 * 1024 * 1024 + 123
        status, headers, body = self.concert.get("/big?n=%d" % n, timeout=30)
        self.assertEqual(status, 200)
        self.assertEqual(header(headers, "Content-Length"), str(n))
        self.assertEqual(body, pattern(n))

    def test_chunked_response_is_byte_exact_and_rechunked(self):
        n = 3 * 1024 * 1024 + 7
        status, headers, body = self.concert.get("/chunked?n=%d" % n, timeout=30)
        self.assertEqual(status, 200)
        self.assertEqual((header(headers, "Transfer-Encoding") or "").lower(), "chunked")
        self.assertIsNone(header(headers, "Content-Length"))
        self.assertEqual(body, pattern(n))

    def test_large_post_body_is_byte_exact(self):
        data = os.urandom(4 * 1024 * 1024 + 5)
        status, _, body = self.concert.request("POST", "/echo", {"Content-Type": "application/x-test"}, data,
                                               timeout=60)
        self.assertEqual(status, 200)
        self.assertEqual(body, data)
        rec = self.last("/echo")
        self.assertEqual(origin_header(rec, "Content-Length"), str(len(data)))

    def test_chunked_upload_is_forwarded_chunked(self):
        data = os.urandom(3 * 1024 * 1024 + 11)

        def gen():
            for i in range(0, len(data), 65536 + 3):
                yield data[i:i + 65536 + 3]

        c = self.concert.conn(timeout=60)
        try:
            c.request("PUT", "/echo", body=gen(), headers={"Content-Type": "application/x-test"}, encode_chunked=True)
            r = c.getresponse()
            body = r.read()
        finally:
            c.close()
        self.assertEqual(r.status, 200)
        self.assertEqual(body, data)
        rec = self.last("/echo")
        self.assertEqual((origin_header(rec, "Transfer-Encoding") or "").lower(), "chunked")
        self.assertIsNone(origin_header(rec, "Content-Length"))

    # -- request rewriting
    def test_forwarding_headers_and_hop_by_hop(self):
        s = Sock(self.concert.port)
        try:
            s.send(b"GET /headers?x=1 HTTP/1.1\r\nHost: concert.example\r\nUser-Agent: t\r\n"
                   b"Connection: keep-alive, X-Hop\r\nX-Hop: secret\r\nKeep-Alive: timeout=5\r\n"
                   b"Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nTE: trailers\r\n"
                   b"Trailer: X-T\r\nUpgrade: h2c\r\nForwarded: for=6.6.6.6\r\nX-Forwarded-For: 6.6.6.6\r\n"
                   b"X-Forwarded-Host: evil.example\r\nX-Forwarded-Proto: https\r\nX-Kept: yes\r\n\r\n")
            status, _, _, _ = s.response()
        finally:
            s.close()
        self.assertEqual(status, 200)
        rec = self.last("/headers")
        self.assertEqual(rec["target"], "/headers?x=1")
        self.assertEqual(rec["host"], "concert.example")
        self.assertEqual(origin_header(rec, "X-Forwarded-For"), "127.0.0.1")
        self.assertEqual(origin_header(rec, "X-Forwarded-Host"), "concert.example")
        self.assertEqual(origin_header(rec, "X-Forwarded-Proto"), "http")
        self.assertEqual(origin_header(rec, "X-Kept"), "yes")
        self.assertEqual(origin_header(rec, "User-Agent"), "t")
        self.assertEqual(origin_header(rec, "TE"), "trailers")
        # The client's Forwarded is replaced by Concert's own, saying the same as the X- headers.
        self.assertEqual(origin_header(rec, "Forwarded"), "for=127.0.0.1;host=concert.example;proto=http")
        self.assertEqual(len([1 for k, _ in rec["headers"] if k.lower() == "forwarded"]), 1)
        for gone in ("X-Hop", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Trailer", "Upgrade"):
            self.assertIsNone(origin_header(rec, gone), gone)
        self.assertEqual(len([1 for k, _ in rec["headers"] if k.lower() == "x-forwarded-for"]), 1)

    def test_no_user_agent_is_added(self):
        s = Sock(self.concert.port)
        try:
            s.send(b"GET /noua HTTP/1.1\r\nHost: h\r\n\r\n")
            self.assertEqual(s.response()[0], 200)
        finally:
            s.close()
        self.assertIsNone(origin_header(self.last("/noua"), "User-Agent"))

    def test_cookie_stripping(self):
        status, _, _ = self.concert.get("/cookie-strip", {
            "Cookie": "room_ticket=a; session=keep; room_pass=b; room_probe=1; concert_admit=z; theme=dark"})
        self.assertEqual(status, 200)
        self.assertEqual(self.last("/cookie-strip")["cookie"], "session=keep; theme=dark")

    def test_no_cookie_is_invented(self):
        self.concert.get("/cookie-none")
        self.assertIsNone(self.last("/cookie-none")["cookie"])
        self.concert.get("/cookie-only-ours", {"Cookie": "room_probe=1; concert_admit=z"})
        self.assertIsNone(self.last("/cookie-only-ours")["cookie"])

    def test_multiple_set_cookie_preserved(self):
        status, headers, _ = self.concert.get("/cookies")
        self.assertEqual(status, 200)
        cookies = headers_all(headers, "Set-Cookie")
        self.assertIn("a=1; Path=/", cookies)
        self.assertIn("b=2; Path=/", cookies)

    def test_exact_paths_forwarded(self):
        for path in ("/foo/", "/_room/stats/", "/a%20b/c"):
            status, _, body = self.concert.get(path)
            self.assertEqual(status, 200, path)
            self.assertEqual(body, b"ok")
        with self.origin.recorder.lock:
            targets = [r["target"] for r in self.origin.recorder.requests]
        self.assertIn("/foo/", targets)
        self.assertIn("/_room/stats/", targets)
        self.assertIn("/a%20b/c", targets)

    # -- client side keep-alive, pipelining, versions
    def test_client_keep_alive_many_requests(self):
        s = Sock(self.concert.port)
        try:
            for i in range(8):
                s.send(b"GET /ka%d HTTP/1.1\r\nHost: h\r\n\r\n" % i)
                status, headers, body, _ = s.response()
                self.assertEqual(status, 200)
                self.assertEqual(body, b"ok")
                self.assertIsNone(header(headers, "Connection"))
        finally:
            s.close()

    def test_pipelined_requests_answered_in_order(self):
        s = Sock(self.concert.port)
        try:
            s.send(b"GET /status?code=201 HTTP/1.1\r\nHost: h\r\n\r\n"
                   b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
                   b"GET /status?code=202 HTTP/1.1\r\nHost: h\r\n\r\n"
                   b"GET /_room/healthz HTTP/1.1\r\nHost: h\r\n\r\n"
                   b"GET /status?code=203 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
            results = [s.response() for _ in range(5)]
            self.assertEqual([r[0] for r in results], [201, 200, 202, 200, 203])
            self.assertEqual(results[1][2], b"hello")
            self.assertEqual(results[3][2], b"ok")
            self.assertTrue(s.closed())
        finally:
            s.close()

    def test_http10_close_delimited(self):
        out = raw_exchange(self.concert.port, b"GET /chunked?n=50000 HTTP/1.0\r\n\r\n", timeout=10)
        head, _, body = out.partition(b"\r\n\r\n")
        self.assertIn(b" 200 ", head.split(b"\r\n")[0])
        self.assertNotIn(b"transfer-encoding", head.lower())
        self.assertIn(b"connection: close", head.lower())
        self.assertEqual(body, pattern(50000))

    def test_http10_keep_alive_when_asked(self):
        s = Sock(self.concert.port)
        try:
            s.send(b"GET /h10 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            status, headers, body, _ = s.response()
            self.assertEqual((status, body), (200, b"ok"))
            self.assertEqual((header(headers, "Connection") or "").lower(), "keep-alive")
            s.send(b"GET /h10b HTTP/1.0\r\n\r\n")
            status, headers, body, _ = s.response()
            self.assertEqual((status, body), (200, b"ok"))
            self.assertTrue(s.closed())
        finally:
            s.close()

    def test_head_204_304_have_no_body_and_keep_framing(self):
        s = Sock(self.concert.port)
        try:
            s.send(b"HEAD /big?n=1000 HTTP/1.1\r\nHost: h\r\n\r\n")
            status, headers, body, _ = s.response("HEAD")
            self.assertEqual(status, 200)
            self.assertEqual(header(headers, "Content-Length"), "1000")
            for code in (204, 304):
                s.send(b"GET /status?code=%d HTTP/1.1\r\nHost: h\r\n\r\n" % code)
                status, headers, body, _ = s.response()
                self.assertEqual(status, code)
                self.assertIsNone(header(headers, "Transfer-Encoding"))
            s.send(b"GET /after HTTP/1.1\r\nHost: h\r\n\r\n")
            status, _, body, _ = s.response()
            self.assertEqual((status, body), (200, b"ok"))
            self.assertEqual(s.pending, b"")
        finally:
            s.close()

    def test_expect_continue_after_admission(self):
        s = Sock(self.concert.port)
        try:
            s.send(b"PUT /echo HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
            status, _, _, _ = s.response()
            self.assertEqual(status, 100)
            s.send(b"hello")
            status, _, body, _ = s.response()
            self.assertEqual((status, body), (200, b"hello"))
        finally:
            s.close()
        self.assertIsNone(origin_header(self.last("/echo"), "Expect"))

    # -- streaming
    def test_sse_first_event_arrives_while_stream_open(self):
        s = Sock(self.concert.port)
        try:
            s.send(b"GET /sse HTTP/1.1\r\nHost: h\r\nAccept: text/event-stream\r\n\r\n")
            s.s.settimeout(5)
            buf = b""
            deadline = time.time() + 5
            while b"data: hello" not in buf and time.time() < deadline:
                chunk = s.s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            self.assertIn(b"data: hello", buf)
            self.assertIn(b"text/event-stream", buf)
        finally:
            self.origin.release()
            s.close()

    # -- errors and reserved paths
    def test_healthz_and_405(self):
        self.assertEqual(self.concert.get("/_room/healthz")[::2], (200, b"ok"))
        before = self.origin.recorder.hits()
        status, headers, _ = self.concert.request("POST", "/_room/stats", body=b"x")
        self.assertEqual(status, 405)
        self.assertEqual(header(headers, "Allow"), "GET, HEAD")
        status, headers, _ = self.concert.request("DELETE", "/queue/status")
        self.assertEqual(status, 405)
        self.assertEqual(header(headers, "Allow"), "GET, HEAD, OPTIONS")
        self.assertEqual(self.origin.recorder.hits(), before)

    def test_access_log_lines(self):
        self.concert.get("/logged?q=1", {"User-Agent": "logtest", "Referer": "http://ref/"})
        self.concert.get("/bypass/x", {"User-Agent": "logtest"})
        self.concert.get("/_room/healthz", {"User-Agent": "logtest-healthz"})
        self.concert.request("POST", "/_room/stats", {"User-Agent": "logtest"})

        def lines():
            try:
                with open(self.concert.access_path) as f:
                    return [l for l in f.read().splitlines() if "logtest" in l]
            except OSError:
                return []

        found = wait_for(lambda: len(lines()) >= 3 and lines(), timeout=5)
        self.assertTrue(found)
        pat = re.compile(r'^127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] "(\S+) (\S+) HTTP/1\.1" '
                         r'(\d{3}) (\d+) "([^"]*)" "([^"]*)" (\d+\.\d{3}) (\w+)$')
        parsed = {}
        for line in found:
            m = pat.match(line)
            self.assertIsNotNone(m, line)
            parsed[m.group(2)] = m
        self.assertEqual(parsed["/logged?q=1"].group(3), "200")
        self.assertEqual(parsed["/logged?q=1"].group(5), "http://ref/")
        self.assertEqual(parsed["/logged?q=1"].group(8), "admitted")
        self.assertEqual(parsed["/bypass/x"].group(8), "bypass")
        self.assertEqual(parsed["/_room/stats"].group(3), "405")
        self.assertEqual(parsed["/_room/stats"].group(8), "local")
        self.assertNotIn("/_room/healthz", parsed)


class OriginFailureTest(unittest.TestCase):
    def test_502_on_closed_port(self):
        with Concert(["-upstream", "http://127.0.0.1:%d" % closed_port()], workers=2) as c:
            status, headers, body = c.get("/down")
            self.assertEqual(status, 502)
            self.assertEqual(body, b"upstream unavailable\n")
            self.assertEqual(header(headers, "Content-Type"), "text/plain; charset=utf-8")
            self.assertTrue(wait_for(lambda: "upstream error GET /down:" in c.log(), timeout=5))
            self.assertEqual(c.stats()["occupancy"], 0)

    def test_504_on_response_head_timeout(self):
        origin = FakeOrigin()
        origin.hold()
        try:
            with Concert(["-upstream", origin.url, "-upstream-timeout", "1s"], workers=2) as c:
                status, _, body = c.get("/slow?timeout=20", timeout=15)
                self.assertEqual(status, 504)
                self.assertEqual(body, b"upstream timed out\n")
                # The origin is still working on the request: its slot stays
                # taken until the origin's response has ended.
                self.assertEqual(c.stats()["occupancy"], 1)
                origin.release()
                self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=10))
                self.assertEqual(c.get("/after")[0], 200)
        finally:
            origin.stop()

    def test_preserve_host_off_rewrites_host(self):
        origin = FakeOrigin()
        try:
            with Concert(["-upstream", origin.url, "-preserve-host=false"], workers=2) as c:
                c.get("/host", {"Host": "concert.example"})
                with origin.recorder.lock:
                    rec = [r for r in origin.recorder.requests if r["path"] == "/host"][-1]
                self.assertEqual(rec["host"], "127.0.0.1:%d" % origin.port)
                self.assertEqual(origin_header(rec, "X-Forwarded-Host"), "concert.example")
        finally:
            origin.stop()

    def test_upstream_base_path_and_query_are_joined(self):
        origin = FakeOrigin()
        try:
            with Concert(["-upstream", origin.url + "/base?k=v"], workers=1) as c:
                c.get("/p/q?a=1")
                with origin.recorder.lock:
                    targets = [r["target"] for r in origin.recorder.requests]
                self.assertIn("/base/p/q?k=v&a=1", targets)
        finally:
            origin.stop()


class ParkingTest(unittest.TestCase):
    """Requests the guard parks (per-pass asset limit) are woken when the slot
    frees and answered by the guard when their wait runs out."""

    def admit_cookie(self, c):
        status, headers, _ = c.get("/page")
        self.assertEqual(status, 200)
        for v in headers_all(headers, "Set-Cookie"):
            if v.startswith("concert_admit="):
                return v.split(";", 1)[0]
        self.fail("no concert_admit cookie")

    def test_parked_request_is_admitted_when_the_slot_frees(self):
        origin = FakeOrigin()
        origin.hold()
        try:
            with Concert(["-upstream", origin.url, "-assets", "/assets/*", "-asset-user-cap-h1", "1",
                          "-asset-user-wait", "20s"], workers=2) as c:
                cookie = self.admit_cookie(c)
                t1 = in_thread(c.get, "/assets/slow1", {"Cookie": cookie}, 30)
                self.assertTrue(wait_for(lambda: origin.recorder.hits("/assets/slow1") == 1, timeout=5))
                t2 = in_thread(c.get, "/assets/slow2", {"Cookie": cookie}, 30)
                time.sleep(0.5)  # let the second one park (no assertion on time)
                self.assertEqual(origin.recorder.hits("/assets/slow2"), 0)
                origin.release()
                first, second = t1.outcome(20), t2.outcome(20)
                self.assertEqual(first[0], 200)
                self.assertEqual(second[0], 200)
                self.assertEqual(origin.recorder.hits("/assets/slow2"), 1)
        finally:
            origin.stop()

    def test_parked_request_times_out_with_the_guards_answer(self):
        origin = FakeOrigin()
        origin.hold()
        try:
            with Concert(["-upstream", origin.url, "-assets", "/assets/*", "-asset-user-cap-h1", "1",
                          "-asset-user-wait", "300ms"], workers=1) as c:
                cookie = self.admit_cookie(c)
                t1 = in_thread(c.get, "/assets/slow1", {"Cookie": cookie}, 30)
                self.assertTrue(wait_for(lambda: origin.recorder.hits("/assets/slow1") == 1, timeout=5))
                status, headers, _ = c.get("/assets/slow2", {"Cookie": cookie}, timeout=10)
                self.assertEqual(status, 429)
                self.assertEqual(header(headers, "Retry-After"), "1")
                origin.release()
                self.assertEqual(t1.outcome(20)[0], 200)
        finally:
            origin.stop()

    def test_parked_client_that_leaves_releases_nothing_it_did_not_take(self):
        origin = FakeOrigin()
        origin.hold()
        try:
            with Concert(["-upstream", origin.url, "-assets", "/assets/*", "-asset-user-cap-h1", "1",
                          "-asset-user-wait", "20s"], workers=1) as c:
                cookie = self.admit_cookie(c)
                t1 = in_thread(c.get, "/assets/slow1", {"Cookie": cookie}, 30)
                self.assertTrue(wait_for(lambda: origin.recorder.hits("/assets/slow1") == 1, timeout=5))
                s = socket.create_connection(("127.0.0.1", c.port))
                s.sendall(b"GET /assets/slow2 HTTP/1.1\r\nHost: h\r\nCookie: " + cookie.encode() + b"\r\n\r\n")
                time.sleep(0.3)
                s.close()
                origin.release()
                self.assertEqual(t1.outcome(20)[0], 200)
                self.assertEqual(origin.recorder.hits("/assets/slow2"), 0)
                self.assertTrue(wait_for(lambda: c.stats()["asset_in_flight"] == 0, timeout=5))
                self.assertEqual(c.get("/assets/again", {"Cookie": cookie})[0], 200)
        finally:
            origin.stop()


@unittest.skipIf(shutil.which("openssl") is None, "needs the openssl command")
class HttpsOriginTest(unittest.TestCase):
    """An HTTPS origin with a throw-away certificate. OpenSSL's default verify
    paths honour SSL_CERT_FILE, which lets the test trust that certificate."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="concert-tls-")
        cls.cert = os.path.join(cls.tmp, "cert.pem")
        key = os.path.join(cls.tmp, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cls.cert,
                        "-days", "2", "-subj", "/CN=localhost", "-addext",
                        "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True, timeout=60)
        cls.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        cls.server.daemon_threads = True
        cls.server.recorder = Recorder()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cls.cert, key)
        cls.server.socket = ctx.wrap_socket(cls.server.socket, server_side=True)
        cls.port = cls.server.server_address[1]
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_verified_origin_by_ip_and_by_name(self):
        for host in ("127.0.0.1", "localhost"):
            with Concert(["-upstream", "https://%s:%d" % (host, self.port)], workers=1,
                         env={"SSL_CERT_FILE": self.cert}) as c:
                status, _, body = c.get("/big?n=300000", timeout=20)
                self.assertEqual(status, 200, c.log())
                self.assertEqual(body, pattern(300000))
                status, _, body = c.request("POST", "/echo", body=b"z" * 100000, timeout=20)
                self.assertEqual((status, body), (200, b"z" * 100000))

    def test_untrusted_certificate_is_502(self):
        with Concert(["-upstream", "https://127.0.0.1:%d" % self.port], workers=1,
                     env={"SSL_CERT_FILE": os.path.join(self.tmp, "missing.pem")}) as c:
            status, _, body = c.get("/tls")
            self.assertEqual((status, body), (502, b"upstream unavailable\n"))
            self.assertTrue(wait_for(lambda: "upstream error GET /tls:" in c.log(), timeout=5))


class RawOriginTest(unittest.TestCase):
    def test_origin_connections_are_reused(self):
        origin = RawOrigin(ok_handler)
        try:
            with Concert(["-upstream", origin.url], workers=2) as c:
                base = origin.accepted
                n = 20
                for i in range(n):
                    status, _, body = c.get("/reuse%d" % i)
                    self.assertEqual((status, body), (200, b"/reuse%d" % i))
                used = origin.accepted - base
                self.assertGreaterEqual(used, 1)
                self.assertLess(used, n)
        finally:
            origin.stop()

    def test_closed_idle_origin_connection_is_retried(self):
        def once(conn, head, body):
            ok_handler(conn, head, body)
            return False  # close after every response, without saying so

        origin = RawOrigin(once)
        try:
            with Concert(["-upstream", origin.url], workers=1) as c:
                for i in range(5):
                    status, _, body = c.get("/once%d" % i)
                    self.assertEqual((status, body), (200, b"/once%d" % i))
        finally:
            origin.stop()

    def test_close_delimited_origin_response_is_rechunked(self):
        data = pattern(200000)

        def old(conn, head, body):
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n" + data)
            return False

        origin = RawOrigin(old)
        try:
            with Concert(["-upstream", origin.url], workers=1) as c:
                s = Sock(c.port)
                try:
                    s.send(b"GET /old HTTP/1.1\r\nHost: h\r\n\r\n")
                    status, headers, body, _ = s.response()
                    self.assertEqual(status, 200)
                    self.assertEqual((header(headers, "Transfer-Encoding") or "").lower(), "chunked")
                    self.assertEqual(body, data)
                    s.send(b"GET /old HTTP/1.1\r\nHost: h\r\n\r\n")
                    self.assertEqual(s.response()[2], data)
                finally:
                    s.close()
        finally:
            origin.stop()

    def test_interim_responses_are_skipped(self):
        def early(conn, head, body):
            conn.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
                         b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            return True

        origin = RawOrigin(early)
        try:
            with Concert(["-upstream", origin.url], workers=1) as c:
                self.assertEqual(c.get("/early")[::2], (200, b"ok"))
        finally:
            origin.stop()

    def test_broken_origin_after_head_closes_client(self):
        def liar(conn, head, body):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000)
            return False

        origin = RawOrigin(liar)
        try:
            with Concert(["-upstream", origin.url], workers=1) as c:
                out = raw_exchange(c.port, b"GET /liar HTTP/1.1\r\nHost: h\r\n\r\n", timeout=10)
                head, _, body = out.partition(b"\r\n\r\n")
                self.assertIn(b"Content-Length: 100000", head)
                self.assertLess(len(body), 100000)  # truncated and closed, never padded
                self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=5))
        finally:
            origin.stop()

    def test_websocket_upgrade_tunnel_echoes(self):
        def ws(conn, head, body):
            if "upgrade: websocket" not in head.lower():
                ok_handler(conn, head, body)
                return True
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Accept: test\r\n\r\n")
            while True:
                data = conn.recv(65536)
                if not data:
                    return False
                conn.sendall(data)

        origin = RawOrigin(ws)
        try:
            with Concert(["-upstream", origin.url, "-cap", "5"], workers=2) as c:
                s = Sock(c.port)
                try:
                    s.send(b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                           b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
                    status, headers, _, _ = s.response()
                    self.assertEqual(status, 101)
                    self.assertEqual((header(headers, "Upgrade") or "").lower(), "websocket")
                    self.assertEqual(header(headers, "Sec-WebSocket-Accept"), "test")
                    self.assertIn("websocket", origin.requests[-1].lower())
                    for msg in (b"ping", b"x" * 300000):
                        s.send(msg)
                        got = s.pending
                        s.pending = b""
                        s.s.settimeout(10)
                        while len(got) < len(msg):
                            chunk = s.s.recv(65536)
                            if not chunk:
                                break
                            got += chunk
                        self.assertEqual(got, msg)
                    self.assertEqual(c.stats()["occupancy"], 1)  # the tunnel holds its page slot
                finally:
                    s.close()
                self.assertTrue(wait_for(lambda: c.stats()["occupancy"] == 0, timeout=5))
        finally:
            origin.stop()


if __name__ == "__main__":
    unittest.main()
