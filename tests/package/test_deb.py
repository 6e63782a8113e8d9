#!/usr/bin/env python3
"""The Debian package on this machine: built, linted, installed, upgraded under a running Concert, purged.

  build     `make deb` twice: the version of debian/changelog, and the same with a higher version (the
            upgrade); both are kept in BUILD/deb
  lintian   no error and no warning on either package
  install   `apt-get install ./concert_*.deb`: the binary in /usr/sbin, the man page, the configuration
            as a conffile, the waiting pages, the systemd unit, the logrotate file
  serve     Concert started from the unit's own command line (ExecStart) with the packaged
            configuration, in front of the demo origin; the room paused (POST /_room/mode) so that
            nobody's place moves by itself; 200 visitors queue, each polls once
  upgrade   `apt-get install` of the higher version while clients keep asking: the package's postinst
            re-executes the running master in place (SIGUSR2) instead of stopping it. Same master pid,
            the next generation, every visitor's position as before, no request failed
  purge     Concert stopped, `apt-get purge`: nothing of the package is left (binary, configuration,
            unit and its enablement links, state dir, logs)

The machine is left as it was found: it refuses to start when a concert package is installed, and
purges the package and stops what it started, by pid, whatever happens. Traffic goes to 127.0.0.1
only. It ends with the line `N passed, N failed`, as `make test` does.
"""
import argparse
import glob
import http.client
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNIT = "/usr/lib/systemd/system/concert.service"
ADMIN_TOKEN = "package-test-admin-token"
VISITORS = 200
UPGRADE_VERSION_SUFFIX = "+upgrade1"

# What the package installs, and what a purge must remove with it.
INSTALLED = ["/usr/sbin/concert", "/etc/concert/concert.yaml", "/usr/share/man/man8/concert.8.gz",
             "/usr/share/concert/html/waiting_room.html", UNIT, "/etc/logrotate.d/concert",
             "/usr/share/doc/concert/copyright", "/usr/share/doc/concert/examples/concert.socket"]
LEFT_BY_RUNNING = ["/run/concert", "/var/log/concert"]
ENABLEMENT = ["/etc/systemd/system/multi-user.target.wants/concert.service",
              "/var/lib/systemd/deb-systemd-helper-enabled/concert.service.dsh-also",
              "/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/concert.service"]


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print("ok   %s" % what, flush=True)
        else:
            self.failed += 1
            print("FAIL %s%s" % (what, (": " + str(detail)) if detail else ""), flush=True)
        return ok


def run(cmd, **kw):
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def installed_version():
    p = subprocess.run(["dpkg-query", "-W", "-f=${Status} ${Version}", "concert"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    if p.returncode != 0 or "installed" not in p.stdout.split(" ")[:3] or "not-installed" in p.stdout:
        return None
    return p.stdout.rsplit(" ", 1)[1]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def request(port, method, path, headers=None, body=None, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.getheaders(), r.read()
    finally:
        conn.close()


def ticket_cookie(headers):
    for name, value in headers:
        if name.lower() == "set-cookie" and value.startswith("room_ticket="):
            return value.split(";", 1)[0].split("=", 1)[1]
    return None


def position(port, cookie):
    """The ticket's place from /queue/status (None: no place or not answered)."""
    for _ in range(5):
        status, _, body = request(port, "GET", "/queue/status", {"Cookie": "room_ticket=" + cookie,
                                                                 "Accept": "application/json"})
        if status == 200:
            doc = json.loads(body)
            return "ready" if doc.get("ready") else doc.get("position")
        time.sleep(1.1)  # the poll rate limit: once a second per ticket
    return None


def build_debs(build, checks):
    """Both packages: the tree's version, then a higher one; their paths."""
    debs = []
    changelog = open(os.path.join(ROOT, "debian", "changelog")).readline()
    version = re.match(r"concert \(([^)]+)\)", changelog).group(1)
    for v in (None, version + UPGRADE_VERSION_SUFFIX):
        cmd = ["make", "-C", ROOT, "deb", "BUILD=" + build] + (["DEB_VERSION=" + v] if v else [])
        p = run(cmd)
        want = v or version
        found = glob.glob(os.path.join(build, "deb", "concert_%s_*.deb" % want))
        if not checks.check(p.returncode == 0 and len(found) == 1, "make deb builds concert %s" % want,
                            p.stdout[-3000:]):
            return None
        kept = os.path.join(build, os.path.basename(found[0]))
        os.replace(found[0], kept)
        debs.append(kept)
    return debs


def lint(debs, checks):
    for deb in debs:
        p = run(["lintian", "--no-tag-display-limit", deb])
        tags = [line for line in p.stdout.splitlines() if re.match(r"^[EW]: ", line)]
        checks.check(not tags, "lintian: no error, no warning on %s" % os.path.basename(deb), "\n".join(tags))
        others = [line for line in p.stdout.splitlines() if re.match(r"^[IPX]: ", line)]
        if others:
            print("     lintian's other findings (informational):\n       " + "\n       ".join(others))


def unit_command():
    with open(UNIT) as f:
        for line in f:
            if line.startswith("ExecStart="):
                return shlex.split(line.split("=", 1)[1])
    return None


class Load(threading.Thread):
    """Clients asking for the page and polling with their tickets until stopped: every answer must
    be an HTTP answer below 500."""

    def __init__(self, port, cookies):
        super().__init__(daemon=True)
        self.port, self.cookies = port, cookies
        self.stop = threading.Event()
        self.answers = 0
        self.failures = []

    def run(self):
        i = 0
        while not self.stop.is_set():
            i += 1
            try:
                status, _, _ = request(self.port, "GET", "/", {"Accept": "application/json"})
                if status >= 500:
                    self.failures.append("page: %d" % status)
                self.answers += 1
            except OSError as e:
                self.failures.append("page: %r" % e)
            time.sleep(0.02)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    checks = Checks()

    if installed_version() is not None:
        print("a concert package is installed on this machine already; this test installs and purges its "
              "own: remove it first")
        print("0 passed, 1 failed")
        return 1

    debs = build_debs(build, checks)
    if not debs:
        print("%d passed, %d failed" % (checks.passed, checks.failed))
        return 1
    lint(debs, checks)

    origin = concert = None
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCERT_")}
    try:
        p = run(["apt-get", "install", "-y", "-q", debs[0]], env=dict(env, DEBIAN_FRONTEND="noninteractive"))
        checks.check(p.returncode == 0 and installed_version() is not None, "apt-get install " + debs[0],
                     p.stdout[-2000:])
        missing = [f for f in INSTALLED if not os.path.exists(f)]
        checks.check(not missing, "the package's files are installed", missing)
        conffiles = run(["dpkg-query", "-W", "-f=${Conffiles}", "concert"]).stdout
        checks.check("/etc/concert/concert.yaml" in conffiles, "/etc/concert/concert.yaml is a conffile", conffiles)
        man = run(["man", "-w", "concert"]) if os.path.exists("/usr/bin/man") else None
        if man is not None:
            checks.check(man.stdout.strip().endswith("concert.8.gz"), "man finds concert(8)", man.stdout)

        # The demo origin, and Concert as its unit starts it, with the packaged configuration.
        origin_port, port = free_port(), free_port()
        origin = subprocess.Popen([sys.executable, os.path.join(ROOT, "demo", "origin.py"), "--port",
                                   str(origin_port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        checks.check(wait_port(origin_port, 10), "the demo origin listens")
        command = unit_command()
        checks.check(command and command[0] == "/usr/sbin/concert", "the unit starts /usr/sbin/concert", command)
        log_path = os.path.join(build, "deb", "concert-test.log")
        log = open(log_path, "wb")
        run_env = dict(env, CONCERT_LISTEN="127.0.0.1:%d" % port, CONCERT_UPSTREAM="http://127.0.0.1:%d" % origin_port,
                       CONCERT_ADMIN_TOKEN=ADMIN_TOKEN)
        concert = subprocess.Popen(command, env=run_env, stdout=subprocess.DEVNULL, stderr=log)
        if not checks.check(wait_port(port, 15), "Concert serves from the unit's command line",
                            open(log_path).read()[-2000:]):
            raise RuntimeError("Concert did not start")
        checks.check(os.path.exists("/run/concert/segment"), "the line lives in the state dir /run/concert")

        # Paused: nobody is admitted, so nobody's place moves by itself.
        admin = {"Authorization": "Bearer " + ADMIN_TOKEN, "Content-Type": "application/json"}
        status, _, body = request(port, "POST", "/_room/mode", admin, json.dumps({"mode": "pause"}))
        checks.check(status == 200, "the room is paused", body[:200])
        cookies = []
        for _ in range(VISITORS):
            status, headers, _ = request(port, "GET", "/", {"Accept": "application/json"})
            cookies.append(ticket_cookie(headers))
        checks.check(all(cookies), "%d visitors hold a ticket" % VISITORS, sum(1 for c in cookies if not c))
        before = {c: position(port, c) for c in cookies}
        checks.check(sorted(before.values()) == list(range(1, VISITORS + 1)),
                     "they wait at places 1 to %d" % VISITORS, sorted(map(str, before.values()))[:5])
        generation = json.loads(request(port, "GET", "/_room/stats")[2])["generation"]

        load = Load(port, cookies)
        load.start()
        p = run(["apt-get", "install", "-y", "-q", debs[1]], env=dict(env, DEBIAN_FRONTEND="noninteractive"))
        checks.check(p.returncode == 0 and installed_version().endswith(UPGRADE_VERSION_SUFFIX),
                     "apt-get install of the higher version upgrades the package", p.stdout[-2000:])
        checks.check("re-executing the running master (pid %d)" % concert.pid in p.stdout,
                     "the postinst re-executes the running master", p.stdout[-1500:])
        deadline = time.time() + 30

        def upgraded():
            try:
                return json.loads(request(port, "GET", "/_room/stats")[2])["generation"] == generation + 1
            except (OSError, ValueError):
                return False
        while time.time() < deadline and not upgraded():
            time.sleep(0.1)
        checks.check(upgraded(), "the master runs the next generation", open(log_path).read()[-2000:])
        time.sleep(1)
        load.stop.set()
        load.join(15)
        checks.check(concert.poll() is None, "the master kept its pid (%d)" % concert.pid)
        exe = os.readlink("/proc/%d/exe" % concert.pid) if concert.poll() is None else ""
        checks.check(exe == "/usr/sbin/concert", "it runs the new /usr/sbin/concert", exe)
        text = open(log_path).read()
        checks.check("binary upgrade: executing /usr/sbin/concert" in text, "the log shows the binary upgrade")
        after = {c: position(port, c) for c in cookies}
        moved = {before[c]: after[c] for c in cookies if after[c] != before[c]}
        checks.check(not moved, "every visitor keeps its place across the upgrade", list(moved.items())[:10])
        checks.check(not load.failures and load.answers > 0,
                     "no request failed during the upgrade (%d answered)" % load.answers, load.failures[:5])
    except Exception as e:  # noqa: BLE001 - reported as a failure, then the machine is restored
        checks.check(False, "the package test ran through", repr(e))
    finally:
        if concert is not None and concert.poll() is None:
            concert.send_signal(signal.SIGTERM)
            try:
                concert.wait(30)
            except subprocess.TimeoutExpired:
                concert.kill()
                concert.wait(5)
        if origin is not None:
            origin.terminate()
            origin.wait(10)
        if installed_version() is not None:
            p = run(["apt-get", "purge", "-y", "-q", "concert"], env=dict(env, DEBIAN_FRONTEND="noninteractive"))
            checks.check(p.returncode == 0, "apt-get purge concert", p.stdout[-2000:])
    checks.check(installed_version() is None, "the package is gone")
    left = [f for f in INSTALLED + LEFT_BY_RUNNING + ENABLEMENT + ["/etc/concert"] if os.path.lexists(f)]
    checks.check(not left, "the purge leaves nothing behind", left)
    print("%d passed, %d failed" % (checks.passed, checks.failed))
    return 0 if checks.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
