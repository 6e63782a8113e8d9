"""A visitor of the room: one client with its own cookie jar (like curl -b jar -c jar) that can
follow the waiting page's protocol. Every integration suite uses this one class.

    from visitor import BROWSER, Visitor
    v = Visitor(c, "v1")                     # a JSON API client of the Concert `c`
    status, headers, body = v.get("/page")   # its cookies sent, the answer's Set-Cookie kept
    v.admit("/page", time.time() + 30)       # waits in line like the waiting page until the origin answers
    run = v.admit_in_thread("/page", deadline)   # the same on a daemon thread (a Background)
    run.outcome(40)                          # what admit returned (or what it raised)

The target is a Concert (concert_harness) or anything with the same request(method, path,
headers=, body=, timeout=) and, for /queue/events, conn(timeout). It is given at construction
(Visitor(c)) or per call (host=...; a call's host wins), so one visitor can talk to several hosts
of a cluster. Answers are recorded per host under the host's `name` attribute (None without one).

The waiting page's protocol, which admit() follows:
  * a page request that is not admitted gets the waiting answer with the room_ticket cookie: 429 and
    JSON for an API client, the waiting page (200 text/html) for a browser;
  * the page opens GET /queue/events, a server-sent event stream (`event:` and `data:` lines with
    JSON data, a blank line ending each event): `position` events, then `ready` when the turn has
    come. Anything but a 200 text/event-stream means no stream;
  * without a usable stream it polls GET /queue/status, at most once a second per ticket: a 429
    there is that rate limit (it carries no new position), not an error;
  * once ready it asks for the page again with its cookies: the origin's answer is the admission.
"""
import contextlib
import http.client
import json
import threading
import time
from collections import Counter, namedtuple

# Background and in_thread live in concert_harness; imported here for the suites that take them from visitor.
from concert_harness import Background, header, in_thread, jar_update, set_cookies  # noqa: F401

JSON = {"Accept": "application/json"}  # an API client: waits with 429 and JSON
BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}  # a browser: gets the waiting page
EVENTS = {"Accept": "text/event-stream"}
POLL_EVERY = 1.05  # the waiting page's pace, just over /queue/status's one poll a second per ticket
TRANSPORT_ERRORS = (OSError, http.client.HTTPException)

# One answered GET /queue/status: when it was sent and answered, its status, its JSON when the status
# was 200 (None otherwise: 429 is the rate limit) and the name of the host that answered.
Poll = namedtuple("Poll", "sent answered status doc host")


def cookie_header(jar):
    """The Cookie header value that presents every cookie of a jar (dict name -> value)."""
    return "; ".join("%s=%s" % kv for kv in jar.items())


def host_name(host):
    return getattr(host, "name", None)


def is_admitted(status, body):
    """The origin answered the page: the fake origin answers every page path the suites ask for with
    200 "ok", which no answer of Concert's own (waiting page, 429, 503) is."""
    return status == 200 and body == b"ok"


def is_waiting_page(status, headers, body):
    """The browser's waiting page: 200 text/html that points at /queue/ and hands out a room_ticket."""
    return (status == 200 and (header(headers, "Content-Type") or "").startswith("text/html")
            and b"/queue/" in body and "room_ticket" in set_cookies(headers))


class NoStream(Exception):
    """GET /queue/events did not answer with a stream (status, Content-Type, body)."""


class Visitor:
    """One client: a cookie jar, an Accept profile (JSON for an API client, BROWSER for a browser), an
    optional User-Agent, and what it saw (below) for the tests to check.

    `cancelled` (a threading.Event, its own unless one is shared) stops the waiting loops early."""

    def __init__(self, target=None, name="", accept=JSON, agent=None, cancelled=None):
        self.target = target
        self.name = name
        self.accept = dict(accept)
        self.agent = agent
        self.jar = {}
        self.cancelled = cancelled if cancelled is not None else threading.Event()
        self.last_poll = 0.0  # when the last /queue/status poll was sent
        self.answers = []  # (host, path, status) of every answer, in order
        self.bad = []  # (host, path, status, body[:200]) of every 5xx answer
        self.errors = []  # repr of the transport errors the waiting loops rode over
        self.polls = []  # a Poll per answered /queue/status
        self.positions = []  # (ticket, position, host) of accepted polls and `position` events
        self.ready_on = []  # host of every poll answer or event that said ready
        self.events_used = False  # a /queue/events stream was open at least once
        self.stream_type = None  # Content-Type of the last /queue/events answer
        self.queued = False  # admit() got a waiting answer at least once, not straight in
        self.arrived_at = None  # when admit() sent its first page request
        self.admitted_sent = None  # when the page request that got in was sent
        self.admitted_at = None  # when its answer came back
        self.admitted_on = None  # the host that answered it

    def __repr__(self):
        return "Visitor(%r)" % self.name

    @property
    def ticket(self):
        return self.jar.get("room_ticket")

    # -- requests

    def _host(self, host):
        host = self.target if host is None else host
        if host is None:
            raise ValueError("%r has no target: give one at construction or host= per call" % self)
        return host

    def headers(self, extra=None, accept=None):
        """Request headers: the Accept profile (or `accept`), User-Agent, the jar's cookies, then `extra`."""
        h = dict(self.accept if accept is None else accept)
        if self.agent:
            h["User-Agent"] = self.agent
        if self.jar:
            h["Cookie"] = cookie_header(self.jar)
        h.update(extra or {})
        return h

    def _answered(self, host, path, status, body):
        self.answers.append((host_name(host), path, status))
        if status >= 500:
            self.bad.append((host_name(host), path, status, body[:200]))

    def request(self, method, path, headers=None, body=None, timeout=30, host=None, accept=None):
        """One request with the jar's cookies; the answer's Set-Cookie headers update the jar (a cookie
        set to "" or with Max-Age=0 leaves it). (status, headers, body)."""
        host = self._host(host)
        status, hdrs, data = host.request(method, path, headers=self.headers(headers, accept), body=body,
                                          timeout=timeout)
        jar_update(self.jar, hdrs)
        self._answered(host, path, status, data)
        return status, hdrs, data

    def get(self, path, headers=None, timeout=30, host=None, accept=None):
        return self.request("GET", path, headers, None, timeout, host, accept)

    # -- /queue/status

    def _saw(self, doc, host):
        if doc.get("ready"):
            self.ready_on.append(host_name(host))
        elif doc.get("position") is not None:
            self.positions.append((self.ticket, doc["position"], host_name(host)))

    def poll(self, host=None, wait=True, timeout=10):
        """One GET /queue/status. With `wait`, sent no sooner than POLL_EVERY after the last one (the
        page's pace); without, at once (the server may then answer 429). The JSON of a 200 answer, or
        None for any other (429 is the rate limit and carries no new position)."""
        if wait:
            pause = self.last_poll + POLL_EVERY - time.time()
            if pause > 0:
                time.sleep(pause)
        host = self._host(host)
        sent = self.last_poll = time.time()
        status, _, body = self.get("/queue/status", timeout=timeout, host=host)
        doc = json.loads(body) if status == 200 else None
        self.polls.append(Poll(sent, time.time(), status, doc, host_name(host)))
        if doc is not None:
            self._saw(doc, host)
        return doc

    def status(self, host=None, tries=5):
        """The /queue/status JSON once a poll gets through the rate limit (polls at the page's pace, at
        most `tries` times; AssertionError if none is answered 200)."""
        for _ in range(tries):
            doc = self.poll(host)
            if doc is not None:
                return doc
        raise AssertionError("%r: /queue/status answered no 200 in %d polls: %s" % (self, tries, self.polls[-tries:]))

    def position(self, host=None):
        """Its place in line; None once its turn has come (or when it holds no place)."""
        doc = self.status(host)
        return None if doc.get("ready") else doc.get("position")

    # -- /queue/events

    def event_stream(self, deadline, host=None):
        """Iterates over GET /queue/events: (event name, JSON data or None) of every event until the
        stream ends or `deadline` passes. Raises NoStream when the answer is not 200 text/event-stream
        (a ticket whose turn came, or none, gets /queue/status's JSON instead)."""
        host = self._host(host)
        conn = host.conn(max(0.5, deadline - time.time()))
        try:
            conn.request("GET", "/queue/events", headers=self.headers(EVENTS))
            resp = conn.getresponse()
            jar_update(self.jar, resp.getheaders())
            self.stream_type = resp.getheader("Content-Type") or ""
            if resp.status != 200 or not self.stream_type.startswith("text/event-stream"):
                body = resp.read()
                self._answered(host, "/queue/events", resp.status, body)
                raise NoStream(resp.status, self.stream_type, body[:200])
            self._answered(host, "/queue/events", resp.status, b"")
            self.events_used = True
            event, data = None, b""
            while time.time() < deadline:
                line = resp.readline()
                if not line:
                    return
                line = line.rstrip(b"\r\n")
                if line.startswith(b"event:"):
                    event = line[6:].strip()
                elif line.startswith(b"data:"):
                    data += line[5:].strip()
                elif line == b"":
                    if event or data:
                        name = (event or b"message").decode()
                        doc = json.loads(data) if data else None
                        if name == "ready":
                            self.ready_on.append(host_name(host))
                        elif name == "position" and doc:
                            self._saw(doc, host)
                        yield name, doc
                    event, data = None, b""
        finally:
            conn.close()

    def events(self, deadline, host=None):
        """Waits on GET /queue/events for `event: ready`. True when it came; None when there is no
        usable stream (not 200 text/event-stream, broken, ended, or the deadline passed): the page then
        falls back to polling."""
        try:
            with contextlib.closing(self.event_stream(deadline, host)) as stream:
                for name, _ in stream:
                    if name == "ready":
                        return True
        except (NoStream, ValueError) + TRANSPORT_ERRORS:
            return None
        return None

    def first_event(self, timeout=5, host=None):
        """(name, JSON data) of the first event on GET /queue/events. AssertionError when the answer is
        not a 200 with Content-Type text/event-stream, or when no event comes within `timeout`."""
        try:
            with contextlib.closing(self.event_stream(time.time() + timeout, host)) as stream:
                for item in stream:
                    if self.stream_type != "text/event-stream":
                        raise AssertionError("/queue/events Content-Type %r" % self.stream_type)
                    return item
        except NoStream as e:
            raise AssertionError("/queue/events answered %s %r, not a stream: %r" % e.args)
        raise AssertionError("no event on /queue/events within %s s" % timeout)

    # -- waiting in line

    def wait_turn(self, deadline, use_events=True, pick=None, first_poll_after=0.0, give_up_after=None):
        """Waits as the waiting page does until its turn has come: the event stream (with `use_events`),
        else polls at the page's pace, the first no sooner than `first_poll_after` s from now. `pick()`
        chooses the host of each (the target without it). True: ready; None: the ticket holds no place
        any more (ask for the page again); False: the deadline passed, the visitor was cancelled, or it
        walked away after `give_up_after` polls."""
        if use_events and self.events(deadline, pick() if pick else None):
            return True
        if first_poll_after:
            self.last_poll = max(self.last_poll, time.time() + first_poll_after - POLL_EVERY)
        polls = 0
        while time.time() < deadline and not self.cancelled.is_set():
            if give_up_after is not None and polls >= give_up_after:
                return False
            try:
                doc = self.poll(pick() if pick else None)
            except (ValueError,) + TRANSPORT_ERRORS as e:
                self.errors.append(repr(e))
                time.sleep(0.2)
                continue
            polls += 1
            if doc is None:
                continue
            if doc.get("ready"):
                return True
            if doc.get("position") is None and "starts_in" not in doc:
                return None  # no place in line (no ticket, or it is gone): the page reloads
        return False

    def admit(self, path, deadline, use_events=True, pick=None, page_pick=None, page_timeout=None,
              first_poll_after=0.0, give_up_after=None):
        """Asks for `path` until the origin answers it, waiting its turn (wait_turn) whenever the
        answer is the waiting one. `page_pick()` chooses the host of each page request (`pick`, else
        the target, without it); a page request waits at most `page_timeout` s (up to the deadline
        without it). Transport errors are noted in `errors` and ridden over. Returns the time of
        admission (also in admitted_at), or None when the deadline passed, the visitor was cancelled
        or it walked away first."""
        page_pick = page_pick or pick
        while time.time() < deadline and not self.cancelled.is_set():
            host = self._host(page_pick() if page_pick else None)
            remaining = deadline - time.time()
            timeout = max(1, remaining if page_timeout is None else min(page_timeout, remaining))
            sent = time.time()
            if self.arrived_at is None:
                self.arrived_at = sent
            try:
                status, _, body = self.get(path, timeout=timeout, host=host)
            except TRANSPORT_ERRORS as e:
                self.errors.append(repr(e))
                time.sleep(0.2)
                continue
            if is_admitted(status, body):
                self.admitted_sent, self.admitted_at, self.admitted_on = sent, time.time(), host_name(host)
                return self.admitted_at
            self.queued = True
            if status not in (200, 429) or "room_ticket" not in self.jar:
                time.sleep(0.5)  # not the waiting answer (503: the room is refusing for now): ask again
                continue
            if self.wait_turn(deadline, use_events, pick, first_poll_after, give_up_after) is False:
                return None
        return None

    def admit_in_thread(self, path, deadline, **kw):
        """admit(path, deadline, **kw) on a daemon thread: a started Background."""
        return in_thread(self.admit, path, deadline, **kw)

    # -- what it saw

    def places(self):
        """Every position it was shown, in order (whichever ticket)."""
        return [p for _, p, _ in self.positions]

    def increases(self):
        """Where a ticket's position grew over its previous one: (ticket, (before, host), (after, host))."""
        out, last = [], {}
        for ticket, pos, host in self.positions:
            if ticket in last and pos > last[ticket][0]:
                out.append((ticket, last[ticket], (pos, host)))
            last[ticket] = (pos, host)
        return out

    def page_statuses(self):
        """The status of every answer to a page (not /queue/) request, in order."""
        return [status for _, path, status in self.answers if not path.startswith("/queue/")]

    def tally(self):
        """Counter of (kind, status) over every answer: kind "queue" for /queue/ paths, else "page"."""
        return Counter(("queue" if path.startswith("/queue/") else "page", status) for _, path, status in self.answers)
