"""Request smuggling and hostile HTTP/1 input against the real binary.

Concert (2 workers) runs in front of a RAW recording origin written here: a
socket server that keeps every byte it receives per connection, parses it
strictly (its own HTTP/1.1 framing, independent of Concert's), and answers
each complete request with a fixed `200 ok` framed by Content-Length.

Every case sends raw bytes on a fresh client connection and asserts:
  * the exact status Concert answers (400 malformed / both
    CL and TE / conflicting CL / obs-fold, 405 CONNECT, 414, 431, 505; 200 only
    for legitimate requests);
  * what the origin saw: for a request rejected on its head, zero bytes; for
    an accepted one, exactly one well-framed request (no second request
    hidden in a body, no CL+TE, no bare LF, body as the client meant it);
  * after a rejection, the connection is closed and a pipelined request
    behind it never reaches the origin.
A body error found after the head was accepted (bad chunk size) cannot be
undone for bytes already streamed: there the assertion is that the origin
never receives a complete request and the client gets 400 or a close.
"""
import os
import re
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from concert_harness import Concert  # noqa: E402

CASE_TIMEOUT = 5.0
QUIET = 0.3  # how long the origin must stay silent before "it received nothing" is believed
ORIGIN_REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


class Framing(Exception):
    """The origin received something it cannot frame unambiguously."""


class OriginConnection:
    def __init__(self):
        self.raw = b""
        self.requests = []   # (request_line, [(name, value)], body)
        self.problems = []   # framing problems, as text
        self.pending = b""


class RawOrigin:
    """Records every byte per connection; parses requests strictly; answers each one."""

    def __init__(self):
        self.lock = threading.Lock()
        self.connections = []
        self.all_requests = []  # every framed request, in the order the origin completed them
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            rec = OriginConnection()
            with self.lock:
                self.connections.append(rec)
            threading.Thread(target=self._serve, args=(conn, rec), daemon=True).start()

    def _serve(self, conn, rec):
        conn.settimeout(60)
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                with self.lock:
                    rec.raw += data
                    rec.pending += data
                    answers = self._parse(rec)
                for _ in range(answers):
                    conn.sendall(ORIGIN_REPLY)
        except OSError:
            return
        finally:
            conn.close()

    def _parse(self, rec):
        """Frames as many complete requests as `pending` holds; returns how many."""
        count = 0
        while rec.pending:
            try:
                parsed = parse_request(rec.pending)
            except Framing as e:
                rec.problems.append(str(e))
                rec.pending = b""
                return count
            if parsed is None:
                return count
            line, headers, body, used = parsed
            rec.requests.append((line, headers, body))
            self.all_requests.append((line, headers, body))
            rec.pending = rec.pending[used:]
            count += 1
        return count

    def snapshot(self):
        with self.lock:
            return (sum(len(c.raw) for c in self.connections), sum(len(c.requests) for c in self.connections),
                    sum(len(c.problems) for c in self.connections))

    def requests_since(self, mark):
        with self.lock:
            return self.all_requests[mark[1]:]

    def problems(self):
        with self.lock:
            return [p for c in self.connections for p in c.problems]

    def incomplete(self):
        with self.lock:
            return sum(len(c.pending) for c in self.connections)

    def stop(self):
        self.stopping = True
        self.sock.close()


def parse_request(buf):
    """Strict HTTP/1.1 request framing. None: need more bytes. Raises Framing on anything ambiguous."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if re.search(rb"(?<!\r)\n", buf):
            raise Framing("bare LF in head")
        return None
    head = buf[:end].decode("latin-1")
    if re.search(r"(?<!\r)\n", head):
        raise Framing("bare LF in head")
    lines = head.split("\r\n")
    line = lines[0]
    if not re.fullmatch(r"[A-Z]+ /\S* HTTP/1\.1", line):
        raise Framing("request line not origin-form HTTP/1.1: %r" % line)
    headers = []
    for h in lines[1:]:
        if not re.fullmatch(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[ \t]*[^\x00-\x08\x0a-\x1f\x7f]*", h):
            raise Framing("bad header line %r" % h)
        name, value = h.split(":", 1)
        headers.append((name, value.strip(" \t")))
    names = [n.lower() for n, _ in headers]
    if names.count("host") != 1:
        raise Framing("Host count %d" % names.count("host"))
    cls = [v for n, v in headers if n.lower() == "content-length"]
    tes = [v for n, v in headers if n.lower() == "transfer-encoding"]
    if cls and tes:
        raise Framing("both Content-Length and Transfer-Encoding")
    if len(cls) > 1:
        raise Framing("several Content-Length")
    if len(tes) > 1 or (tes and tes[0].lower() != "chunked"):
        raise Framing("Transfer-Encoding other than one 'chunked': %r" % tes)
    pos = end + 4
    if tes:
        body = b""
        while True:
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                return None
            size_text = buf[pos:nl].split(b";")[0]
            if not re.fullmatch(rb"[0-9a-fA-F]{1,15}", size_text):
                raise Framing("bad chunk size %r" % size_text)
            size = int(size_text, 16)
            pos = nl + 2
            if size == 0:
                # no trailers expected from Concert
                if len(buf) < pos + 2:
                    return None
                if buf[pos:pos + 2] != b"\r\n":
                    raise Framing("trailers or junk after last chunk")
                return line, headers, body, pos + 2
            if len(buf) < pos + size + 2:
                return None
            body += buf[pos:pos + size]
            if buf[pos + size:pos + size + 2] != b"\r\n":
                raise Framing("chunk not followed by CRLF")
            pos += size + 2
    if cls:
        if not re.fullmatch(r"[0-9]+", cls[0]):
            raise Framing("bad Content-Length %r" % cls[0])
        n = int(cls[0])
        if len(buf) < pos + n:
            return None
        return line, headers, buf[pos:pos + n], pos + n
    return line, headers, b"", pos


def read_responses(sock, timeout=CASE_TIMEOUT):
    """Reads until the peer closes or goes quiet; returns (statuses, closed, raw)."""
    sock.settimeout(timeout)
    raw = b""
    closed = False
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        raw += chunk
        statuses, complete = split_responses(raw)
        if complete and statuses:
            # everything received is framed; give a pipelined reply or the close a moment
            sock.settimeout(QUIET)
    statuses, _ = split_responses(raw)
    return statuses, closed, raw


def split_responses(raw):
    """Status codes of the complete responses in `raw` and whether nothing partial is left."""
    statuses = []
    pos = 0
    while pos < len(raw):
        end = raw.find(b"\r\n\r\n", pos)
        if end < 0:
            return statuses, False
        head = raw[pos:end].decode("latin-1")
        m = re.match(r"HTTP/1\.[01] (\d{3})", head)
        if not m:
            return statuses, False
        status = int(m.group(1))
        cl = re.search(r"(?im)^content-length:\s*(\d+)", head)
        chunked = re.search(r"(?im)^transfer-encoding:\s*chunked", head)
        pos = end + 4
        if chunked:
            while True:
                nl = raw.find(b"\r\n", pos)
                if nl < 0:
                    return statuses, False
                size = int(raw[pos:nl].split(b";")[0], 16)
                pos = nl + 2 + size + 2
                if size == 0:
                    break
            if pos > len(raw):
                return statuses, False
        elif cl:
            pos += int(cl.group(1))
            if pos > len(raw):
                return statuses, False
        statuses.append(status)
    return statuses, True


class SmugglingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.origin = RawOrigin()
        cls.concert = Concert(["-upstream", cls.origin.url, "-cap", "50", "-upstream-timeout", "5s"], workers=2)
        cls.concert.start()

    @classmethod
    def tearDownClass(cls):
        cls.concert.stop()
        cls.origin.stop()
        log = cls.concert.log()
        for bad in ("killed by signal", "AddressSanitizer", "runtime error"):
            assert bad not in log, "concert log mentions %r:\n%s" % (bad, log[-4000:])

    # -- helpers
    def exchange(self, data):
        """Sends raw bytes on a new connection; returns (statuses, closed, raw reply)."""
        s = socket.create_connection(("127.0.0.1", self.concert.port), timeout=CASE_TIMEOUT)
        try:
            s.sendall(data)
            return read_responses(s)
        finally:
            s.close()

    def settle(self):
        """Waits until the origin has been quiet for QUIET seconds (bounded)."""
        deadline = time.time() + CASE_TIMEOUT
        last = self.origin.snapshot()
        quiet_since = time.time()
        while time.time() < deadline:
            time.sleep(0.05)
            now = self.origin.snapshot()
            if now != last:
                last, quiet_since = now, time.time()
            elif time.time() - quiet_since >= QUIET:
                break
        return last

    def assertRejected(self, data, status, head_level=True):
        before = self.settle()
        statuses, closed, raw = self.exchange(data)
        after = self.settle()
        self.assertEqual(statuses[:1], [status], "reply: %r" % raw[:300])
        self.assertEqual(len(statuses), 1, "a rejected request must be the last answer: %r" % raw[:500])
        self.assertTrue(closed, "connection must be closed after a %d" % status)
        if head_level:
            self.assertEqual(after[0], before[0], "origin received bytes for a rejected request")
        self.assertEqual(after[1], before[1], "origin received a complete request for a rejected one")
        self.assertEqual(after[2], before[2], "origin saw ambiguous framing: %s" % self.origin.problems())

    def assertAccepted(self, data, expect_line, expect_body=b"", responses=1):
        before = self.settle()
        statuses, _, raw = self.exchange(data)
        after = self.settle()
        self.assertEqual(statuses, [200] * responses, "reply: %r" % raw[:500])
        self.assertEqual(after[2], before[2], "origin saw ambiguous framing: %s" % self.origin.problems())
        got = self.origin.requests_since(before)
        self.assertEqual(len(got), responses, "origin requests: %r" % got)
        line, headers, body = got[0]
        self.assertEqual(line, expect_line)
        self.assertEqual(body, expect_body)
        return got

    # -- Content-Length / Transfer-Encoding
    def test_cl_and_te(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n", 400)

    def test_te_cl_order(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
                            b"0\r\n\r\n", 400)

    def test_te_chunked_identity(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 400)

    def test_te_identity_chunked(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n", 400)

    def test_te_xchunked(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 400)

    def test_te_duplicate_header(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400)

    def test_te_space_before_colon(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400)

    def test_te_on_http10(self):
        self.assertRejected(b"POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400)

    # Optional whitespace around a field value is allowed and a transfer
    # coding's name is case-insensitive: these are one well-framed chunked request.
    def test_te_trailing_space_is_chunked(self):
        self.assertAccepted(b"POST /t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked \r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                            "POST /t HTTP/1.1", b"abc")

    def test_te_leading_space_is_chunked(self):
        self.assertAccepted(b"POST /t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:  chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                            "POST /t HTTP/1.1", b"abc")

    def test_te_leading_tab_is_chunked(self):
        self.assertAccepted(b"POST /t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                            "POST /t HTTP/1.1", b"abc")

    # llhttp does not take a trailing HTAB as optional whitespace after
    # "chunked"; refusing is the safe side (the origin never sees it).
    def test_te_trailing_tab(self):
        self.assertRejected(b"POST /t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\t\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                            400)

    def test_te_case_is_chunked(self):
        self.assertAccepted(b"POST /t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                            "POST /t HTTP/1.1", b"abc")

    def test_chunked_with_extension_and_trailer(self):
        self.assertAccepted(b"POST /t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"3;name=value\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n",
                            "POST /t HTTP/1.1", b"abcde")

    def test_cl_duplicate_same_value(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 400)

    def test_cl_duplicate_different_values(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 8\r\n\r\nabcGET / H", 400)

    def test_cl_list(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc", 400)

    def test_cl_negative(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400)

    def test_cl_plus_sign(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello", 400)

    def test_cl_overflow(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", 400)

    def test_cl_hex(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\nhello", 400)

    def test_cl_body_is_not_a_request(self):
        body = b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
        self.assertAccepted(b"POST /t HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
                            "POST /t HTTP/1.1", body)

    # -- chunk framing errors (found after the head was accepted)
    def test_chunk_size_overflow(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"ffffffffffffffffff1\r\nx\r\n0\r\n\r\n", 400, head_level=False)

    def test_chunk_size_not_hex(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"zz\r\nx\r\n0\r\n\r\n", 400, head_level=False)

    def test_chunk_bad_extension(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"1;a\x00b\r\nx\r\n0\r\n\r\n", 400, head_level=False)

    def test_chunk_bare_lf(self):
        self.assertRejected(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"1\nx\n0\n\n", 400, head_level=False)

    # -- line endings, control bytes, header syntax
    def test_bare_lf_head(self):
        self.assertRejected(b"GET / HTTP/1.1\nHost: a\n\n", 400)

    def test_bare_lf_in_one_header(self):
        self.assertRejected(b"GET / HTTP/1.1\r\nHost: a\nX-A: b\r\n\r\n", 400)

    def test_bare_cr(self):
        self.assertRejected(b"GET / HTTP/1.1\r\nHost: a\rX-A: b\r\n\r\n", 400)

    def test_obs_fold(self):
        self.assertRejected(b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", 400)

    def test_nul_in_header_value(self):
        self.assertRejected(b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x00c\r\n\r\n", 400)

    def test_control_in_header_value(self):
        self.assertRejected(b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x01c\r\n\r\n", 400)

    def test_nul_in_header_name(self):
        self.assertRejected(b"GET / HTTP/1.1\r\nHost: a\r\nX\x00A: b\r\n\r\n", 400)

    def test_control_in_header_name(self):
        self.assertRejected(b"GET / HTTP/1.1\r\nHost: a\r\nX\x7fA: b\r\n\r\n", 400)

    def test_missing_host(self):
        self.assertRejected(b"GET / HTTP/1.1\r\nX-A: b\r\n\r\n", 400)

    def test_two_hosts(self):
        self.assertRejected(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400)

    def test_uri_too_long(self):
        self.assertRejected(b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: a\r\n\r\n", 414)

    def test_headers_too_large(self):
        self.assertRejected(b"GET / HTTP/1.1\r\nHost: a\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 1000)
                                                                         for i in range(40)) + b"\r\n", 431)

    # -- request targets and versions
    def test_absolute_form_is_normalised(self):
        got = self.assertAccepted(b"GET http://example.com/abs?x=1 HTTP/1.1\r\nHost: example.com\r\n\r\n",
                                  "GET /abs?x=1 HTTP/1.1")
        hosts = [v for n, v in got[0][1] if n.lower() == "host"]
        self.assertEqual(hosts, ["example.com"])

    def test_asterisk_form(self):
        self.assertRejected(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", 400)

    def test_connect(self):
        self.assertRejected(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 405)

    def test_http09_with_blank_line(self):
        self.assertRejected(b"GET /\r\n\r\n", 505)

    def test_http09_bare(self):
        # "GET /\r\n" alone is an unfinished head to an HTTP/1 parser: no answer
        # is possible an HTTP/0.9 client could read, so Concert says nothing
        # and closes at the 10 s head timeout. The origin never hears of it.
        before = self.settle()
        s = socket.create_connection(("127.0.0.1", self.concert.port), timeout=15)
        try:
            s.sendall(b"GET /\r\n")
            statuses, closed, raw = read_responses(s, timeout=15)
        finally:
            s.close()
        after = self.settle()
        self.assertTrue(closed, "Concert must close the unfinished head")
        self.assertIn(statuses, ([], [400], [408], [505]), raw[:200])
        self.assertEqual(after[0], before[0])

    def test_http2_preface(self):
        # Prior-knowledge HTTP/2 on the HTTP/1 port: refused as a bad request
        # (as nginx does), never forwarded.
        self.assertRejected(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400)

    def test_http2_version(self):
        self.assertRejected(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505)

    def test_http12_version(self):
        self.assertRejected(b"GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505)

    def test_fragment_in_target(self):
        self.assertRejected(b"GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n", 400)

    def test_bad_percent_encoding(self):
        self.assertRejected(b"GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n", 400)

    # -- pipelining and connection handling
    def test_pipelined_after_rejected(self):
        self.assertRejected(b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx"
                            b"GET /after-rejected HTTP/1.1\r\nHost: a\r\n\r\n", 400)

    def test_pipelined_legitimate(self):
        got = self.assertAccepted(b"GET /p1 HTTP/1.1\r\nHost: a\r\n\r\nPOST /p2 HTTP/1.1\r\nHost: a\r\n"
                                  b"Content-Length: 3\r\n\r\nabcGET /p3 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                                  "GET /p1 HTTP/1.1", responses=3)
        self.assertEqual([g[0] for g in got], ["GET /p1 HTTP/1.1", "POST /p2 HTTP/1.1", "GET /p3 HTTP/1.1"])
        self.assertEqual(got[1][2], b"abc")

    def test_body_with_connection_close(self):
        before = self.settle()
        statuses, closed, raw = self.exchange(b"POST /c HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
                                              b"Content-Length: 3\r\n\r\nabcGET /ignored HTTP/1.1\r\nHost: a\r\n\r\n")
        self.settle()
        self.assertEqual(statuses, [200], "reply: %r" % raw[:300])
        self.assertTrue(closed)
        got = self.origin.requests_since(before)
        self.assertEqual([(g[0], g[2]) for g in got], [("POST /c HTTP/1.1", b"abc")])

    def test_chunked_body_with_connection_close(self):
        before = self.settle()
        statuses, closed, raw = self.exchange(b"POST /cc HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
                                              b"Transfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
                                              b"GET /ignored HTTP/1.1\r\nHost: a\r\n\r\n")
        self.settle()
        self.assertEqual(statuses, [200], "reply: %r" % raw[:300])
        self.assertTrue(closed)
        got = self.origin.requests_since(before)
        self.assertEqual([(g[0], g[2]) for g in got], [("POST /cc HTTP/1.1", b"hi")])

    def test_origin_never_saw_ambiguity(self):
        # Runs last alphabetically among the checks above is not guaranteed;
        # every case already checks its own delta, this one checks the total.
        self.settle()
        self.assertEqual(self.origin.problems(), [])


if __name__ == "__main__":
    unittest.main()
