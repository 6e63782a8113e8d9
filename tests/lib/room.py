"""What every suite does to a running Concert besides plain requests: mint and
read admission passes, and hold page slots with requests the origin has not
finished.

    from room import mint_pass, park, fill
    fill(c, 2)                   # both page slots held by /slow until the origin lets go
    value = mint_pass()          # a fresh, valid concert_admit value for TEST_SECRET

A parked request runs in a daemon thread (a Parked, a concert_harness.Background)
that never raises: its `result` gets the (status, headers, body) of the answer,
or its `error` the exception that ended it; status() waits for it and gives the
status code, outcome() the answer (or raises what ended it).

A pass is 16 random bytes of id, an 8-byte big-endian expiry (Unix seconds)
and the first 16 bytes of HMAC-SHA256 over both, in unpadded URL-safe base64.
"""
import base64
import hashlib
import hmac
import os
import struct
import time

from concert_harness import TEST_SECRET, Background, request_from, wait_for

PASS_TTL = 590  # a fresh minted pass: just under the default 10-minute lifetime


def mint_pass(pass_id=None, expiry=None, secret=TEST_SECRET):
    """A concert_admit value: `pass_id` (16 bytes, random when None) valid until `expiry`
    (Unix seconds, PASS_TTL from now when None), signed with `secret`."""
    if pass_id is None:
        pass_id = os.urandom(16)
    if expiry is None:
        expiry = int(time.time()) + PASS_TTL
    raw = pass_id + struct.pack(">Q", expiry)
    mac = hmac.new(secret.encode(), raw, hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(raw + mac).rstrip(b"=").decode()


def decode_pass(value):
    """(pass id, expiry) of a concert_admit value; the signature is not checked."""
    raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    return raw[:16], struct.unpack(">Q", raw[16:24])[0]


def pass_id(value):
    """The 16-byte id of a concert_admit value."""
    return decode_pass(value)[0]


def with_pass(value, extra=None, cookies=None):
    """Request headers that present the pass `value` (plus `extra` headers).
    `cookies` ("session=keep"): other cookies, sent before the pass in the same Cookie header."""
    headers = {"Cookie": "concert_admit=" + value if cookies is None else "%s; concert_admit=%s" % (cookies, value)}
    headers.update(extra or {})
    return headers


class Parked(Background):
    """A request running in a daemon thread (a Background of the call that sends it); see park()."""

    def status(self, timeout=15):
        """The answer's status code once the request ended (within `timeout` seconds), else None."""
        self.join(timeout)
        return self.result[0] if self.result else None


def park(concert, path="/slow", headers=None, timeout=30, source=None):
    """A request the origin holds until it lets it go (a /slow or /assets/slow
    gate of the fake origin); a page request holds its slot meanwhile. Sent
    from the loopback address `source` when given. Returns the started Parked
    thread; it never raises."""
    if source is None:
        t = Parked(concert.get, path, headers, timeout=timeout)
    else:
        t = Parked(request_from, concert.port, source, path, headers, timeout)
    t.start()
    return t


def _origin_path(path):
    """What the fake origin records as the path of a request for `path`: no query."""
    return path.split("?", 1)[0]


def fill(concert, n=1, path="/slow", headers=None, timeout=10, source=None, origin=None):
    """Hold `n` more page slots with parked requests (see park) and wait until
    the room counts them and, with `origin` (a FakeOrigin), until the origin
    has received them too. Returns the threads; raises AssertionError if they
    never land."""
    before = concert.stats()["occupancy"]
    seen = origin.recorder.hits(_origin_path(path)) if origin is not None else 0
    threads = [park(concert, path, headers, source=source) for _ in range(n)]
    if not wait_for(lambda: concert.stats()["occupancy"] >= before + n, timeout=timeout):
        raise AssertionError("%d parked request(s) did not take a slot:\n%s" % (n, concert.log()[-4000:]))
    if origin is not None and not wait_for(lambda: origin.recorder.hits(_origin_path(path)) >= seen + n,
                                           timeout=timeout):
        raise AssertionError("%d parked request(s) never reached the origin:\n%s" % (n, concert.log()[-4000:]))
    return threads


def park_at_origin(concert, origin, path="/slow", headers=None, timeout=30, wait=10):
    """A parked request (see park) once `origin` (a FakeOrigin) has received it:
    it waits up to `wait` seconds for one more origin hit on the path, without
    reading the room's counters. Returns the thread; raises AssertionError if
    the request never arrives."""
    before = origin.recorder.hits(_origin_path(path))
    t = park(concert, path, headers, timeout)
    if not wait_for(lambda: origin.recorder.hits(_origin_path(path)) > before, timeout=wait):
        raise AssertionError("parked request never reached the origin:\n" + concert.log())
    return t
