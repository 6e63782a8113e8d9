"""Headless Chromium for the browser suites: one driver, stdlib only.

    from chromium import CHROMIUM, Browser, dump_dom

    with Browser() as b:                      # or b = Browser() ... b.close()
        b.navigate("http://127.0.0.1:%d/" % port)
        b.evaluate("document.title")
        b.body_text()

    html = dump_dom("http://127.0.0.1:%d/" % port, timeout=10)

`Browser` starts `chromium --headless` with a temporary profile of its own
and --remote-debugging-port=0, reads the port Chromium chose from the
profile's DevToolsActivePort file, opens a fresh page target and talks the
Chrome DevTools Protocol (CDP) to it over a minimal RFC 6455 websocket
client. Every CDP event that arrives while a call waits for its answer is
kept, in order, in `Browser.events`.

`dump_dom` is the one-shot form: `chromium --headless --dump-dom
--timeout=MS URL` prints the document once it has loaded, or once MS have
passed. It deliberately does not pass --virtual-time-budget: a virtual-time
budget never runs out while the page holds a stream open (such as the
waiting page's /queue/events), so Chromium would never print anything.

Only processes started here are signalled, by pid (and by the process
group that Chromium was started as the leader of, for the renderer and
helper processes it forks); this happens on close(), on every failure to
start, and at interpreter exit for a browser nobody closed. The temporary
profile is removed each time.

Also here: CHROMIUM (the binary, None when not installed), and the axe-core
helpers AXE (the path of axe.min.js in the build directory), axe_source(),
AXE_RUN, run_axe() and axe_summary().
"""
import atexit
import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request


def find_chromium():
    """The Chromium binary: $CHROMIUM if set, else `chromium` or
    `chromium-browser` on PATH; None when there is none."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return shutil.which(explicit)
    return shutil.which("chromium") or shutil.which("chromium-browser")


CHROMIUM = find_chromium()

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CONCERT_BUILD", os.path.join(ROOT, "build"))
AXE = os.path.join(BUILD, "axe", "node_modules", "axe-core", "axe.min.js")

# The flags every Chromium started here gets: headless, no sandbox (tests may
# run as root in a container), no GPU, no QUIC, and nothing that talks to
# Google or updates itself in the background.
COMMON_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--no-default-browser-check", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-extensions",
                "--disable-default-apps", "--mute-audio", "--password-store=basic", "--use-mock-keychain"]


class ChromiumError(RuntimeError):
    """Chromium would not start, or a CDP call failed or timed out."""


# -- processes --------------------------------------------------------------

def _live_members(pgid):
    """Pids of the processes in group `pgid` that have not died (zombies do
    not count), from /proc; [] where /proc cannot tell."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            found.append(int(name))
    return found


class _Process:
    """A Chromium process started in a session of its own (so that it leads
    a process group holding the helpers it forks), with its stderr in a file
    and a temporary directory that holds its profile."""

    def __init__(self, args, stdout=subprocess.DEVNULL, prefix="concert-chromium-"):
        if not CHROMIUM:
            raise ChromiumError("chromium is not installed")
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.profile = os.path.join(self.tmp, "profile")
        os.mkdir(self.profile)
        self.log_path = os.path.join(self.tmp, "chromium.log")
        self.proc = None
        self.last_log = ""  # the log's tail, kept by stop() when it removes the directory
        log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen([CHROMIUM] + COMMON_FLAGS + ["--user-data-dir=" + self.profile] + args,
                                         stdin=subprocess.DEVNULL, stdout=stdout, stderr=log,
                                         start_new_session=True)
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        finally:
            log.close()

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def exited(self):
        """Whether the process has exited, without reaping it: as long as it
        is not reaped, its pid (and so its process group id) cannot be
        taken by another process."""
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # already reaped
            return True

    def log_tail(self, n=2000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, grace=5):
        """SIGTERM, then SIGKILL after `grace` seconds; then SIGKILL whatever
        is left of its process group; then reap it and remove the profile."""
        if self.proc is None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        pid = self.proc.pid
        try:
            if self.proc.returncode is None:
                if not self.exited():
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
                    deadline = time.monotonic() + grace
                    while not self.exited() and time.monotonic() < deadline:
                        time.sleep(0.05)
                    if not self.exited():
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                # The leader is not reaped yet: its pid, the group id, is still ours.
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
                # Give the killed helpers a moment to die (their zombies are init's to reap).
                deadline = time.monotonic() + 2
                while _live_members(pid) and time.monotonic() < deadline:
                    time.sleep(0.02)
        finally:
            self.last_log = self.log_tail()
            shutil.rmtree(self.tmp, ignore_errors=True)


# -- websocket --------------------------------------------------------------

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _mask(data, key):
    """`data` XOR the repeated 4-byte `key` (RFC 6455 masking)."""
    n = len(data)
    if not n:
        return b""
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(k, "big")).to_bytes(n, "big")


class WebSocket:
    """Just enough RFC 6455 for CDP: the client handshake, masked text
    frames out, (possibly fragmented) text frames in; pings are answered,
    a close frame ends the connection."""

    def __init__(self, url, timeout=10):
        if not url.startswith("ws://"):
            raise ValueError("not a ws:// URL: %r" % url)
        hostport, _, path = url[5:].partition("/")
        host, _, port = hostport.rpartition(":")
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        self.buffer = b""
        self.closed = False
        try:
            key = base64.b64encode(os.urandom(16))
            self.sock.sendall(b"GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                              b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
                              % (path.encode(), hostport.encode(), key))
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = self.sock.recv(4096)
                if not chunk:
                    raise OSError("websocket handshake: connection closed")
                head += chunk
                if len(head) > 65536:
                    raise OSError("websocket handshake: response head too large")
            head, _, self.buffer = head.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            if b" 101 " not in lines[0] + b" ":
                raise OSError("websocket handshake refused: %r" % head[:200])
            accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
            headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(b":") for l in lines[1:])}
            if headers.get(b"sec-websocket-accept") != accept:
                raise OSError("websocket handshake: wrong Sec-WebSocket-Accept")
        except BaseException:
            self.closed = True  # no websocket yet: no close frame
            self.close()
            raise

    def settimeout(self, seconds):
        self.sock.settimeout(seconds)

    def _read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buffer)))
            if not chunk:
                self.closed = True
                raise OSError("websocket closed")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def _send_frame(self, opcode, data):
        header = bytearray([0x80 | opcode])
        n = len(data)
        if n < 126:
            header.append(0x80 | n)
        elif n < 65536:
            header.append(0x80 | 126)
            header += struct.pack(">H", n)
        else:
            header.append(0x80 | 127)
            header += struct.pack(">Q", n)
        key = os.urandom(4)
        self.sock.sendall(bytes(header) + key + _mask(data, key))

    def send(self, text):
        self._send_frame(0x1, text.encode())

    def recv(self):
        """The next whole text (or binary) message, as str. A timeout of the
        socket leaves the stream unusable (a frame may be half read)."""
        message = b""
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            key = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if key:
                payload = _mask(payload, key)
            if opcode == 0x8:
                self.closed = True
                raise OSError("websocket closed by peer")
            if opcode == 0x9:
                self._send_frame(0xA, payload)
                continue
            if opcode == 0xA:
                continue
            message += payload
            if b0 & 0x80:
                return message.decode("utf-8", "replace")

    def close(self):
        if not self.closed:
            self.closed = True
            try:
                self._send_frame(0x8, struct.pack(">H", 1000))
            except OSError:
                pass
        try:
            self.sock.close()
        except OSError:
            pass


# -- the browser --------------------------------------------------------------

_live = set()
_live_lock = threading.Lock()


@atexit.register
def _close_forgotten():
    with _live_lock:
        browsers = list(_live)
    for b in browsers:
        b.close()


class Browser:
    """One headless Chromium and one page in it, driven over CDP.

    Page and Network events are on, the HTTP cache is off. Every
    event read while waiting for an answer is appended to `events` (dicts
    with "method" and "params"); `drain()` reads those already sent.
    """

    def __init__(self, window_size=(1000, 760), args=(), start_timeout=20):
        self.ws = None
        self.events = []
        self.next_id = 0
        self.closed = False
        self.process = _Process(["--remote-debugging-port=0", "--window-size=%d,%d" % tuple(window_size)]
                                + list(args) + ["about:blank"])
        with _live_lock:
            _live.add(self)
        try:
            self.port = self._devtools_port(start_timeout)
            req = urllib.request.Request("http://127.0.0.1:%d/json/new?about:blank" % self.port, method="PUT")
            with urllib.request.urlopen(req, timeout=10) as r:
                target = json.loads(r.read())
            self.target_id = target["id"]
            self.ws = WebSocket(target["webSocketDebuggerUrl"])
            self.call("Page.enable")
            self.call("Network.enable")
            self.call("Network.setCacheDisabled", {"cacheDisabled": True})
        except BaseException as e:
            tail = self.process.log_tail()
            self.close()
            if isinstance(e, Exception) and not isinstance(e, ChromiumError):
                raise ChromiumError("chromium did not start: %s\n%s" % (e, tail)) from e
            raise

    @property
    def pid(self):
        return self.process.pid

    @property
    def profile(self):
        return self.process.profile

    def _devtools_port(self, timeout):
        """The port from DevToolsActivePort: its first line, once the
        second (the browser target's path) is written too."""
        port_file = os.path.join(self.process.profile, "DevToolsActivePort")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.exited():
                raise ChromiumError("chromium exited at start:\n%s" % self.process.log_tail())
            try:
                with open(port_file) as f:
                    lines = f.read().split("\n")
                if len(lines) >= 2 and lines[0].strip().isdigit():
                    return int(lines[0])
            except OSError:
                pass
            time.sleep(0.05)
        raise ChromiumError("chromium wrote no DevToolsActivePort within %ds:\n%s" % (timeout, self.process.log_tail()))

    # -- CDP
    def call(self, method, params=None, timeout=15):
        """Send one CDP command and return its result; raise ChromiumError on a
        protocol error or when no answer comes within `timeout` seconds."""
        if self.closed or self.ws is None:
            raise ChromiumError("%s: the browser is closed" % method)
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChromiumError("%s: no answer within %ss" % (method, timeout))
            self.ws.settimeout(left)
            try:
                msg = json.loads(self.ws.recv())
            except socket.timeout:
                raise ChromiumError("%s: no answer within %ss" % (method, timeout)) from None
            except OSError as e:
                raise ChromiumError("%s: %s (chromium %s)" % (
                    method, e, "exited" if self.process.exited() else "running")) from e
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise ChromiumError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def drain(self):
        """Collect the events Chromium has sent so far into `events`."""
        self.evaluate("1")

    def navigate(self, url):
        """Start loading `url` in the page (Page.navigate); does not wait for
        the load. Returns CDP's answer (frameId, loaderId, errorText...)."""
        return self.call("Page.navigate", {"url": url})

    def evaluate(self, expression, timeout=15):
        """The value of `expression` in the page (JSON-able values only). An
        expression that throws yields None. Raises ChromiumError while a
        navigation replaces the document ("Inspected target navigated")."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                           timeout=timeout)
        return result.get("result", {}).get("value")

    def evaluate_async(self, expression, timeout=60):
        """The value a promise-returning expression resolves to; raises
        ChromiumError when it throws or rejects."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in result:
            raise ChromiumError("evaluate: %s" % json.dumps(result["exceptionDetails"])[:2000])
        return result.get("result", {}).get("value")

    def body_text(self):
        """The page's text; "" while a navigation replaces the document (the
        evaluation is then refused with "Inspected target navigated")."""
        try:
            return self.evaluate("document.body ? document.body.innerText : ''")
        except ChromiumError as e:
            if "navigated" in str(e):
                return ""
            raise

    def requested_urls(self):
        """Every URL the page has asked for so far, in order."""
        self.drain()
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def document_loads(self, url):
        """How often the browser asked for `url` as a document."""
        self.drain()
        return len([e for e in self.events if e["method"] == "Network.requestWillBeSent"
                    and e["params"].get("type") == "Document" and e["params"]["request"]["url"] == url])

    def screenshot(self, path):
        """Save a PNG of the viewport to `path`."""
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        """Close the websocket, stop Chromium (by pid and its own process
        group) and remove its profile. Safe to call more than once."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.ws is not None:
                self.ws.close()
        finally:
            self.process.stop()
            with _live_lock:
                _live.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def dump_dom(url, timeout=10, args=()):
    """The serialized DOM of `url` as a headless Chromium of its own sees it
    once the page has loaded, or after `timeout` seconds (--timeout), with its
    scripts run. A page that cannot be fetched gives Chromium's error page.
    Raises ChromiumError when Chromium fails or overruns `timeout` by 30 s."""
    process = _Process(["--dump-dom", "--timeout=%d" % int(timeout * 1000)] + list(args) + [url],
                       stdout=subprocess.PIPE, prefix="concert-chromium-dump-")
    chunks = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: process.proc.stdout.read(65536), b"")),
                              daemon=True)
    reader.start()
    try:
        limit = timeout + 30  # --timeout bounds the wait for the load; this bounds Chromium
        deadline = time.monotonic() + limit
        while not process.exited() and time.monotonic() < deadline:
            time.sleep(0.05)
        overran = not process.exited()
    finally:
        process.stop()  # stragglers of its group too, so the pipe reaches its end
        reader.join(10)
        process.proc.stdout.close()
    if overran:
        raise ChromiumError("chromium --dump-dom %s: still running after %ds" % (url, limit))
    if process.proc.returncode != 0:
        raise ChromiumError("chromium --dump-dom %s: exit status %s:\n%s" % (
            url, process.proc.returncode, process.last_log))
    return b"".join(chunks).decode("utf-8", "replace")


Browser.dump_dom = staticmethod(dump_dom)


# -- axe-core -----------------------------------------------------------------

# Runs axe-core over the whole document; resolves to the violations and the
# number of rules that passed.
AXE_RUN = ("axe.run(document, {resultTypes: ['violations']}).then(function (r) {"
           " return {violations: r.violations, passes: r.passes.length}; })")

_axe_source = None


def axe_source():
    """The text of axe.min.js (AXE); raises AssertionError naming the
    missing file when `make deps-test` has not installed it."""
    global _axe_source
    if _axe_source is None:
        if not os.path.exists(AXE):
            raise AssertionError("axe-core is missing at %s: `make deps-test` installs it" % AXE)
        with open(AXE, encoding="utf-8") as f:
            _axe_source = f.read()
    return _axe_source


def run_axe(browser, timeout=60):
    """axe-core's verdict on the browser's page: {"violations": [...],
    "passes": N}. Loads axe into the page first when it is not there."""
    if not browser.evaluate("typeof axe === 'object'"):
        browser.evaluate(axe_source())
    return browser.evaluate_async(AXE_RUN, timeout=timeout)


def axe_summary(violations):
    """axe violations as readable lines: rule, impact, help, and up to five
    offending nodes each."""
    lines = []
    for v in violations:
        lines.append("%s (%s): %s" % (v["id"], v.get("impact"), v["help"]))
        for node in v["nodes"][:5]:
            lines.append("    %s: %s" % (node["target"], (node.get("failureSummary") or "").replace("\n", " ")))
    return "\n".join(lines)
