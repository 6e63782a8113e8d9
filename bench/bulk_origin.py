#!/usr/bin/env python3
"""Origin for the slow-readers benchmark (bench/slow_readers.py): every request
gets a large body, sent only as fast as the peer takes it.

One selectors (epoll) loop, non-blocking sockets, no thread per connection, so
it holds 10,000 connections in one process. Every request other than the two
below is answered with `--body-bytes` bytes (Content-Length framing): the head,
then the body sent from one shared 1 MiB pattern, each connection keeping only
its offset. A connection whose socket is full waits for EPOLLOUT; nothing is
buffered in this process beyond what the kernel accepted. At most 1 MiB goes to
one connection per loop turn, so a peer that reads fast cannot hold the loop.
--sndbuf sets SO_SNDBUF on accepted sockets (default: the kernel's autotuning).

  GET /__origin_stats      JSON at once: connections accepted and open,
                           responses started and completed, body bytes sent
                           (in all; on the connections still sending, in all,
                           least and most) and seconds since any body byte
                           was last sent
  GET /__origin_close_all  closes every other connection (a FIN after what its
                           socket already holds) and answers with how many

Prints "listening on 127.0.0.1:PORT" on stdout once bound; stops on SIGTERM/SIGINT.
"""
import argparse
import json
import selectors
import signal
import socket
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

PATTERN = bytes(range(256)) * 4096  # 1 MiB
STATS_PATH = b"/__origin_stats"
CLOSE_ALL_PATH = b"/__origin_close_all"
MAX_WRITE = 1 << 20  # per connection and loop turn, so that one fast reader cannot hold the loop


class Conn:
    __slots__ = ("sock", "inbuf", "out", "remaining", "sent", "started", "closed")

    def __init__(self, sock):
        self.sock = sock
        self.inbuf = b""
        self.out = b""        # response head (or a whole small answer) still to send
        self.remaining = 0    # body bytes still to send
        self.sent = 0         # body bytes of the current response the kernel took
        self.started = False  # a bulk response began on this connection
        self.closed = False


class Origin:
    def __init__(self, port, body_bytes, sndbuf):
        self.body_bytes = body_bytes
        self.sndbuf = sndbuf
        self.sel = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(16384)
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        self.port = self.listener.getsockname()[1]
        self.conns = {}
        self.accepted = 0
        self.responses = 0
        self.completed = 0
        self.body_sent = 0
        self.last_progress = time.monotonic()
        self.stop = False

    def run(self):
        mv = memoryview(PATTERN)
        while not self.stop:
            for key, events in self.sel.select(0.5):
                if key.data is None:
                    self.accept()
                    continue
                c = key.data
                if c.closed:  # closed earlier in this turn (close_all)
                    continue
                if events & selectors.EVENT_READ and not self.read(c):
                    continue
                if events & selectors.EVENT_WRITE:
                    self.write(c, mv)

    def accept(self):
        for _ in range(256):
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            if self.sndbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
            c = Conn(sock)
            self.conns[sock.fileno()] = c
            self.accepted += 1
            self.sel.register(sock, selectors.EVENT_READ, c)

    def close(self, c):
        c.closed = True
        self.conns.pop(c.sock.fileno(), None)
        self.sel.unregister(c.sock)
        c.sock.close()

    def read(self, c):
        try:
            data = c.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            data = b""
        if not data:
            self.close(c)
            return False
        c.inbuf += data
        if c.started or b"\r\n\r\n" not in c.inbuf:
            if len(c.inbuf) > 65536:
                self.close(c)
                return False
            return True
        head, _, c.inbuf = c.inbuf.partition(b"\r\n\r\n")
        target = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
        if target == STATS_PATH:
            self.answer(c, self.stats())
        elif target == CLOSE_ALL_PATH:
            others = [o for o in self.conns.values() if o is not c]
            for o in others:
                self.close(o)
            self.answer(c, {"closed": len(others)})
        else:
            c.started = True
            c.remaining = self.body_bytes
            c.sent = 0
            self.responses += 1
            c.out = (b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                     b"Content-Length: %d\r\n\r\n" % self.body_bytes)
        self.sel.modify(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
        return True

    def answer(self, c, obj):
        body = json.dumps(obj).encode()
        c.out = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    def write(self, c, mv):
        try:
            while c.out:
                n = c.sock.send(c.out)
                c.out = c.out[n:]
            budget = MAX_WRITE
            while c.remaining and budget > 0:
                at = c.sent % len(PATTERN)
                n = c.sock.send(mv[at:at + min(c.remaining, len(PATTERN) - at, budget)])
                c.sent += n
                c.remaining -= n
                budget -= n
                self.body_sent += n
                self.last_progress = time.monotonic()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close(c)
            return
        if c.remaining:
            return  # more on the next turn
        if c.started:
            self.completed += 1
            c.started = False
        self.sel.modify(c.sock, selectors.EVENT_READ, c)

    def stats(self):
        bulk = [c.sent for c in self.conns.values() if c.started]
        return {"accepted": self.accepted, "open": len(self.conns), "responses": self.responses,
                "completed": self.completed, "body_sent": self.body_sent, "open_body_sent": sum(bulk),
                "sending": len(bulk), "least_sent": min(bulk) if bulk else 0, "most_sent": max(bulk) if bulk else 0,
                "idle_seconds": time.monotonic() - self.last_progress}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--body-bytes", type=int, default=8 * 1024 * 1024)
    p.add_argument("--sndbuf", type=int, default=0, help="SO_SNDBUF of accepted sockets (0: the kernel's autotuning)")
    args = p.parse_args()
    origin = Origin(args.port, args.body_bytes, args.sndbuf)

    def stop(*_):
        origin.stop = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("listening on 127.0.0.1:%d" % origin.port, flush=True)
    origin.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
