"""A fake origin for the integration tests (Python standard library only).

Records every request (method, path, headers, body) and the maximum number of
requests in flight at once, overall and for page paths. Behaviour by path:
  /slow...            block until release() (or ?timeout=S passes), then "ok";
                      with ?gate=NAME, until release(NAME) instead
  /assets/slow...     same, for asset tests
  /sleep?ms=N         sleep N ms then "ok"
  /sse                one event "data: hello\\n\\n" then hold the stream open until release()
                      (or ?timeout=S passes; 30 s by default)
  /stall?n=BYTES      Content-Length BYTES, half of them, then block until release() (or
                      ?gate=NAME / ?timeout=S), then the rest
  /ws                 with Upgrade: 101 Switching Protocols, then echo bytes until EOF
  /echo               echo the request body (Content-Type preserved)
  /big?n=BYTES        BYTES of deterministic data, Content-Length framed (over 1 MiB: streamed
                      as fast as it is taken, counted in flight until its last byte)
  /chunked?n=BYTES    BYTES of deterministic data, chunked
  /status?code=N      answer with that status
  /cookies            two Set-Cookie headers
  /headers            JSON of the received headers
  /end-session        "session ended", ending the visitor's session: Concert-Session: end (or
                      ?value=V), plus the origin's own Set-Cookie order=done
  /priority           "priority granted" with Concert-Priority: staff; ttl=3600 (or ?value=V)
  anything else       "ok"
"""
import json
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def pattern(n):
    block = bytes(range(256)) * 64
    out = bytearray()
    while len(out) < n:
        out += block
    return bytes(out[:n])


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.page_in_flight = 0
        self.max_page_in_flight = 0
        # Page requests in flight by the value of their `via` query parameter
        # (a test names the proxy that sent each request there).
        self.page_in_flight_by = {}
        self.max_page_in_flight_by = {}
        self.gate = threading.Event()
        self.gates = {}  # name -> Event, for /slow?gate=NAME
        self.page_prefixes = None  # None: every path counts as a page

    def is_page(self, path):
        if self.page_prefixes is None:
            return True
        return not any(path.startswith(p) for p in self.page_prefixes)

    def named_gate(self, name):
        with self.lock:
            return self.gates.setdefault(name, threading.Event())

    def hits(self, path=None):
        with self.lock:
            return len([r for r in self.requests if path is None or r["path"] == path])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        # Headers and body go out in two writes: with Nagle on, the body waits
        # for the proxy's delayed ACK (about 40 ms a response).
        self.disable_nagle_algorithm = getattr(self.server, "nodelay", False)
        super().setup()

    def log_message(self, *args):
        pass

    def _handle(self):
        rec = self.server.recorder
        parsed = urllib.parse.urlsplit(self.path)
        path = parsed.path
        qs = urllib.parse.parse_qs(parsed.query)
        body = b""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        elif self.headers.get("Content-Length"):
            body = self.rfile.read(int(self.headers["Content-Length"]))
        page = rec.is_page(path)
        via = qs.get("via", [None])[0]
        record = {"method": self.command, "path": path, "target": self.path,
                  "headers": list(self.headers.items()), "body": body,
                  "host": self.headers.get("Host"), "cookie": self.headers.get("Cookie"),
                  "xff": self.headers.get("X-Forwarded-For"), "time": time.time(), "done": None, "via": via}
        with rec.lock:
            rec.requests.append(record)
            rec.in_flight += 1
            rec.max_in_flight = max(rec.max_in_flight, rec.in_flight)
            if page:
                rec.page_in_flight += 1
                rec.max_page_in_flight = max(rec.max_page_in_flight, rec.page_in_flight)
                if via is not None:
                    n = rec.page_in_flight_by[via] = rec.page_in_flight_by.get(via, 0) + 1
                    rec.max_page_in_flight_by[via] = max(rec.max_page_in_flight_by.get(via, 0), n)
        self._record = record
        self._counted_page = page
        self._counted = True
        try:
            self._respond(path, qs, body)
        finally:
            self._finished_work()

    def _finished_work(self):
        """The request stops counting as in flight: its work is done. A whole
        response (_send) is done before its first byte is written, as a PHP
        worker is free once it has handed its output over; the proxy cannot
        see the end of a response before that write, so a request that
        arrives after it is never counted as overlapping. Streamed responses
        count until their last byte. A client that went away changes nothing:
        the work still runs to its end first."""
        if not getattr(self, "_counted", False):
            return
        self._counted = False
        rec = self.server.recorder
        with rec.lock:
            rec.in_flight -= 1
            self._record["done"] = time.time()
            if self._counted_page:
                rec.page_in_flight -= 1
                via = self._record["via"]
                if via is not None:
                    rec.page_in_flight_by[via] -= 1

    def _send(self, code, body, ctype="text/plain; charset=utf-8", extra=()):
        self._finished_work()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        for k, v in extra:
            self.send_header(k, v)
        if code not in (204, 304):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and code not in (204, 304):
            self.wfile.write(body)

    def _respond(self, path, qs, body):
        rec = self.server.recorder
        if path.startswith("/slow") or path.startswith("/assets/slow"):
            gate = rec.named_gate(qs["gate"][0]) if "gate" in qs else rec.gate
            gate.wait(float(qs.get("timeout", ["30"])[0]))
            return self._send(200, b"ok")
        if path == "/sleep":
            time.sleep(int(qs.get("ms", ["10"])[0]) / 1000.0)
            return self._send(200, b"ok")
        if path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            self.wfile.write(b"data: hello\n\n")
            self.wfile.flush()
            rec.gate.wait(float(qs.get("timeout", ["30"])[0]))
            self.close_connection = True
            return
        if path == "/stall":
            n = int(qs.get("n", ["100000"])[0])
            data = pattern(n)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            try:
                self.wfile.write(data[:n // 2])
                self.wfile.flush()
                gate = rec.named_gate(qs["gate"][0]) if "gate" in qs else rec.gate
                gate.wait(float(qs.get("timeout", ["30"])[0]))
                self.wfile.write(data[n // 2:])
            except OSError:
                pass
            self.close_connection = True
            return
        if path == "/ws" and "upgrade" in self.headers.get("Connection", "").lower():
            self.send_response(101)
            self.send_header("Upgrade", self.headers.get("Upgrade", "websocket"))
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            self.wfile.flush()
            self.close_connection = True
            try:
                while True:
                    data = self.connection.recv(65536)
                    if not data:
                        return
                    self.connection.sendall(data)
            except OSError:
                return
        if path == "/echo":
            return self._send(200, body, self.headers.get("Content-Type", "application/octet-stream"))
        if path == "/big":
            n = int(qs.get("n", ["1048576"])[0])
            if n <= 1 << 20:
                return self._send(200, pattern(n), "application/octet-stream")
            # Larger: streamed a block at a time (the pattern repeats every 16 KiB), as fast as it is taken.
            block = pattern(16384)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            sent = 0
            try:
                while sent < n:
                    k = min(len(block), n - sent)
                    self.wfile.write(block[:k])
                    sent += k
            except OSError:
                pass
            return None
        if path == "/chunked":
            n = int(qs.get("n", ["100000"])[0])
            data = pattern(n)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, n, 7777):
                piece = data[i:i + 7777]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            return
        if path == "/status":
            return self._send(int(qs.get("code", ["200"])[0]), b"status")
        if path == "/cookies":
            return self._send(200, b"ok", extra=[("Set-Cookie", "a=1; Path=/"), ("Set-Cookie", "b=2; Path=/")])
        if path == "/end-session":
            return self._send(200, b"session ended", extra=[("Concert-Session", qs.get("value", ["end"])[0]),
                                                            ("Set-Cookie", "order=done; Path=/")])
        if path == "/priority":
            return self._send(200, b"priority granted",
                              extra=[("Concert-Priority", qs.get("value", ["staff; ttl=3600"])[0])])
        if path == "/headers":
            return self._send(200, json.dumps(list(self.headers.items())).encode(), "application/json")
        return self._send(200, b"ok")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _handle


class FakeOrigin:
    def __init__(self, host="127.0.0.1", nodelay=False):
        """nodelay: set TCP_NODELAY on accepted connections, for tests that send thousands of requests."""
        self.recorder = Recorder()
        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.server.nodelay = nodelay
        self.server.recorder = self.recorder
        self.port = self.server.server_address[1]
        self.url = "http://%s:%d" % (host, self.port)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def release(self, name=None):
        """Open the default gate, or only the named one (/slow?gate=NAME)."""
        (self.recorder.named_gate(name) if name is not None else self.recorder.gate).set()

    def hold(self):
        self.recorder.gate.clear()

    def stop(self):
        self.recorder.gate.set()
        with self.recorder.lock:
            for gate in self.recorder.gates.values():
                gate.set()
        self.server.shutdown()
        self.server.server_close()


def closed_port():
    """A loopback port nothing listens on."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
