#!/usr/bin/env python3
"""Origin for the churn benchmark (bench/churn.py): every response is delayed.

Each request is answered after a delay drawn uniformly from [--min-ms, --max-ms]
(a page that takes 1–20 ms to render), with a --body-bytes HTML body, over
HTTP/1.1 keep-alive. One asyncio event loop, raw protocol callbacks (no
streams), requests on one connection answered in order.

What it records, per request: the service time, from the moment the request
head has been read to the moment the whole response has been handed to the
kernel. The measured delay is therefore the nominal one plus this loop's own
timer and scheduling lag, and the benchmark uses the measured mean, never the
nominal 10.5 ms.

GET /__origin_stats answers at once, without a delay and without being
counted, with a JSON snapshot (all times on this process's monotonic clock):

  now            seconds
  started        requests whose head was read
  completed      responses written
  service_sum    sum of the completed requests' service times, seconds
  service_min/max
  in_flight      requests read but not yet answered
  max_in_flight  the most requests this origin ever had in flight at once
  busy_area      integral of in_flight over time (request-seconds): divided
                 by a window's length it is the mean concurrency the origin saw
  connections    connections accepted (a proxy that reuses its origin
                 connections opens a few and keeps them)

Two snapshots bracket a measured window: (completed2 - completed1) / (now2 - now1)
is the rate the origin served; (service_sum2 - service_sum1) / (completed2 -
completed1) is the mean service time in that window.

Prints "listening on 127.0.0.1:PORT" on stdout once bound; stops on SIGTERM/SIGINT.
"""
import argparse
import asyncio
import json
import random
import signal
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

STATS_PATH = b"/__origin_stats"


class Stats:
    def __init__(self):
        self.started = 0
        self.completed = 0
        self.service_sum = 0.0
        self.service_min = None
        self.service_max = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self.busy_area = 0.0
        self.connections = 0
        self.last_change = time.monotonic()

    def _advance(self, now):
        self.busy_area += self.in_flight * (now - self.last_change)
        self.last_change = now

    def begin(self, now):
        self._advance(now)
        self.started += 1
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight

    def end(self, began, now):
        self._advance(now)
        self.in_flight -= 1
        self.completed += 1
        service = now - began
        self.service_sum += service
        if self.service_min is None or service < self.service_min:
            self.service_min = service
        if service > self.service_max:
            self.service_max = service

    def snapshot(self):
        now = time.monotonic()
        self._advance(now)
        return {"now": now, "started": self.started, "completed": self.completed,
                "service_sum": self.service_sum, "service_min": self.service_min or 0.0,
                "service_max": self.service_max, "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight, "busy_area": self.busy_area,
                "connections": self.connections}


class OriginProtocol(asyncio.Protocol):
    def __init__(self, loop, stats, response, lo, hi):
        self.loop = loop
        self.stats = stats
        self.response = response
        self.lo = lo
        self.hi = hi
        self.buf = b""
        self.busy = False  # a delayed response is pending on this connection
        self.closed = False
        self.transport = None
        self.timer = None

    def connection_made(self, transport):
        self.transport = transport
        self.stats.connections += 1

    def connection_lost(self, exc):
        self.closed = True
        if self.timer is not None:
            # The peer went away mid-request: the request is over, unanswered.
            self.timer.cancel()
            self.timer = None
            self.stats._advance(time.monotonic())
            self.stats.in_flight -= 1

    def data_received(self, data):
        self.buf += data
        if not self.busy:
            self._next()

    def _next(self):
        while not self.busy and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > 65536:
                    self.transport.close()
                return
            head = self.buf[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip() or b"0")
            total = end + 4 + length
            if len(self.buf) < total:
                return
            self.buf = self.buf[total:]
            target = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
            if target == STATS_PATH:
                body = json.dumps(self.stats.snapshot()).encode()
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     b"Cache-Control: no-store\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                continue
            now = time.monotonic()
            self.stats.begin(now)
            self.busy = True
            self.timer = self.loop.call_later(random.uniform(self.lo, self.hi), self._respond, now)

    def _respond(self, began):
        self.timer = None
        self.transport.write(self.response)
        self.stats.end(began, time.monotonic())
        self.busy = False
        self._next()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--min-ms", type=float, default=1.0)
    p.add_argument("--max-ms", type=float, default=20.0)
    p.add_argument("--body-bytes", type=int, default=1024)
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args()
    random.seed(args.seed)
    body = (b"<!doctype html><title>churn</title>" + b"x" * args.body_bytes)[:args.body_bytes]
    response = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: no-store\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body)) + body

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    stats = Stats()
    server = loop.run_until_complete(loop.create_server(
        lambda: OriginProtocol(loop, stats, response, args.min_ms / 1000.0, args.max_ms / 1000.0),
        "127.0.0.1", args.port, backlog=4096, reuse_address=True))
    port = server.sockets[0].getsockname()[1]
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    print("listening on 127.0.0.1:%d" % port, flush=True)
    try:
        loop.run_until_complete(stop)
    finally:
        server.close()
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
