#!/usr/bin/env python3
"""`make run`: the demo origin on 127.0.0.1:3000 and Concert in front of it on 127.0.0.1:8080.

Both children run in their own process groups, so a Ctrl-C in the terminal reaches
only this script, which forwards one SIGTERM to each (Concert drains in-flight
requests; a second Ctrl-C is forwarded too and stops Concert at once) and waits for
both. If either child fails to start or exits on its own, the other is stopped and
this script exits non-zero with the reason.
"""
import argparse
import errno
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LISTENING = "listening on "


def port_free(port):
    s = socket.socket()
    # As servers do: connections of an earlier run still in TIME_WAIT must not count as "in use".
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            return False
        raise
    finally:
        s.close()


def wait_port(port, proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class Relay:
    """Copies a child's stderr to ours line by line and notes when Concert reports its port."""

    def __init__(self, stream):
        self.stream = stream
        self.listening = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        for raw in iter(self.stream.readline, b""):
            line = raw.decode("utf-8", "replace")
            if LISTENING in line:
                self.listening.set()
            sys.stderr.write(line)
            sys.stderr.flush()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concert", required=True, help="path to the concert binary")
    p.add_argument("--config", default="conf/concert.yaml", help="YAML configuration given to concert -c")
    p.add_argument("--port", type=int, default=8080, help="where Concert listens")
    p.add_argument("--origin-port", type=int, default=3000, help="where the demo origin listens")
    args = p.parse_args()

    if not os.access(args.concert, os.X_OK):
        # meson may leave the binary in the build directory's src/ rather than at its top.
        nested = os.path.join(os.path.dirname(args.concert), "src", os.path.basename(args.concert))
        if os.access(nested, os.X_OK):
            args.concert = nested
    if not os.access(args.concert, os.X_OK):
        sys.exit("demo: %s is not an executable (run `make` first)" % args.concert)
    if not os.path.isfile(args.config):
        sys.exit("demo: configuration file %s not found" % args.config)
    for port, who in ((args.origin_port, "the demo origin"), (args.port, "Concert")):
        if not port_free(port):
            sys.exit("demo: port %d on 127.0.0.1 is already in use, so %s cannot start there. Stop whatever "
                     "listens on it (`ss -ltnp 'sport = :%d'`) or pick another port with --%s."
                     % (port, who, port, "origin-port" if who == "the demo origin" else "port"))

    stop_requests = []

    def on_signal(signum, _frame):
        stop_requests.append(signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    children = []

    def stop_children(grace):
        for _, proc in children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.time() + grace
        forwarded = len(stop_requests)
        for name, proc in children:
            while proc.poll() is None and time.time() < deadline:
                if len(stop_requests) > forwarded:
                    # Another Ctrl-C while draining: pass it on, Concert then stops at once.
                    forwarded = len(stop_requests)
                    for _, other in children:
                        if other.poll() is None:
                            other.send_signal(signal.SIGTERM)
                time.sleep(0.05)
            if proc.poll() is None:
                sys.stderr.write("demo: %s did not stop within %ds; killing pid %d\n" % (name, grace, proc.pid))
                proc.kill()
                proc.wait()

    # The fake payment page signs /queue/promote links with the secret Concert checks them with.
    env = dict(os.environ)
    env.setdefault("CONCERT_PROMOTE_SECRET", secrets.token_hex(32))
    origin = subprocess.Popen([sys.executable, os.path.join(HERE, "origin.py"), "--port", str(args.origin_port)],
                              stdin=subprocess.DEVNULL, process_group=0, env=env)
    children.append(("demo origin", origin))
    if not wait_port(args.origin_port, origin, 10):
        stop_children(5)
        sys.exit("demo: the demo origin did not start on 127.0.0.1:%d (exit status %s)"
                 % (args.origin_port, origin.returncode))

    # The demo's line lives as long as the process: no state dir.
    cmd = [args.concert, "-c", args.config, "-state-dir", "", "-upstream", "http://127.0.0.1:%d" % args.origin_port,
           "-listen", "127.0.0.1:%d" % args.port, "-assets", "/assets/*",
           # Skip the line: the waiting page links to the origin's fake payment page, reachable while queued.
           "-rate", "0.05", "-skip-url", "/pay?ticket={{.Ticket}}", "-bypass", "/favicon.ico,/pay",
           "-priority-classes", "staff,checkout"]
    concert = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, process_group=0, env=env)
    children.append(("concert", concert))
    relay = Relay(concert.stderr)
    deadline = time.time() + 15
    while not relay.listening.is_set() and concert.poll() is None and time.time() < deadline and not stop_requests:
        time.sleep(0.05)
    if not relay.listening.is_set():
        stop_children(5)
        relay.thread.join(1)
        if stop_requests:
            return 130
        sys.exit("demo: Concert did not start (exit status %s); see its messages above.\n  command: %s"
                 % (concert.returncode, " ".join(cmd)))

    url = "http://127.0.0.1:%d/" % args.port
    print("\nConcert is running: open %s — try `ab -c 50 -n 500 %s` in another terminal to see the waiting "
          "room; Ctrl-C stops both\n" % (url, url), flush=True)

    status = 0
    while not stop_requests:
        for name, proc in children:
            if proc.poll() is not None:
                sys.stderr.write("demo: %s exited unexpectedly (status %s); stopping the rest\n"
                                 % (name, proc.returncode))
                status = 1
                break
        if status:
            break
        time.sleep(0.2)

    if stop_requests:
        print("\ndemo: stopping (Concert lets in-flight requests finish; Ctrl-C again to stop at once)",
              flush=True)
    stop_children(40)
    relay.thread.join(2)
    if status == 0:
        for name, proc in children:
            # A child stopped by our SIGTERM may report -15; anything else is a failure worth surfacing.
            if proc.returncode not in (0, -signal.SIGTERM):
                sys.stderr.write("demo: %s exited with status %s\n" % (name, proc.returncode))
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
