"""Master process: prefork supervision, crash recovery, reloads, graceful stop,
daemon mode, signals, the man page and the systemd unit.

Every test starts the real binary on 127.0.0.1 with an ephemeral port against
the fake origin, waits only for events (bounded), and signals only processes
it started, by pid.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from concert_harness import BIN, ROOT, TEST_SECRET, Concert, header, headers_all, wait_for
from fake_origin import FakeOrigin
from room import park_at_origin

ADMIN = "master-test-admin-token"
GEN_RE = re.compile(r"reload accepted: generation (\d+)")


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCERT_")}
    env["CONCERT_ADMIT_SECRET"] = TEST_SECRET
    env.update(extra or {})
    return env


def pid_alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def socket_inodes(pid):
    inodes = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def origin_connection_owner(worker_pids, origin_port):
    """The worker holding a TCP connection to the origin (the one proxying a parked request)."""
    inodes = {}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            remote_port = int(fields[2].split(":")[1], 16)
            if remote_port == origin_port and fields[3] == "01":  # ESTABLISHED
                inodes[fields[9]] = True
    for pid in worker_pids:
        if socket_inodes(pid) & set(inodes):
            return pid
    return None


def wait_log(concert, pattern, timeout=10):
    rx = re.compile(pattern)
    return wait_for(lambda: rx.search(concert.log()), timeout=timeout)


def reload_and_wait(concert, generation, timeout=10):
    concert.signal(signal.SIGHUP)
    found = wait_for(lambda: str(generation) in GEN_RE.findall(concert.log()), timeout=timeout)
    if not found:
        raise AssertionError("generation %d not reached:\n%s" % (generation, concert.log()))


def stats_value(concert, key):
    try:
        return concert.stats().get(key)
    except (OSError, ValueError):
        return None


class MasterTestCase(unittest.TestCase):
    def setUp(self):
        self.origin = FakeOrigin()
        # A worker killed mid-response leaves the origin writing to a closed
        # socket; that is expected here, so keep socketserver's traceback quiet.
        self.origin.server.handle_error = lambda request, client_address: None
        self.tmp = tempfile.mkdtemp(prefix="concert-master-")
        self.started = []

    def tearDown(self):
        self.origin.release()
        for c in self.started:
            try:
                c.stop(timeout=10)
            except Exception:
                c.kill_all()
            if getattr(c, "stderr", None):
                c.stderr.close()
        self.origin.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def concert(self, args, **kw):
        c = Concert(["-upstream", self.origin.url] + list(args), **kw)
        self.started.append(c)
        return c.start()


class TestWorkers(MasterTestCase):
    def test_exact_worker_count_and_startup_log(self):
        c = self.concert([], workers=3)
        self.assertEqual(len(c.worker_pids()), 3)
        self.assertTrue(wait_for(lambda: stats_value(c, "workers") == 3))
        log = c.log()
        self.assertRegex(log, r"concert 127\.0\.0\.1:0 -> %s \(cap=500, max-queue=10000, token-ttl=5m0s, "
                              r"asset-cap=64000 \(derived\), asset-user-cap=H1 8 / H2 128\)" % re.escape(
                                  self.origin.url))
        self.assertIn("listening on 127.0.0.1:%d" % c.port, log)
        for slot in range(3):
            self.assertRegex(log, r"worker %d started pid \d+" % slot)
        self.assertEqual(stats_value(c, "generation"), 1)

    def test_sigkilled_worker_is_reclaimed_and_replaced(self):
        # The killed worker's page slot stays in quarantine for -upstream-timeout (the origin may
        # still be serving its request), then comes back.
        c = self.concert(["-cap", "1", "-upstream-timeout", "3s"], workers=2)
        thread = park_at_origin(c, self.origin)
        self.assertTrue(wait_for(lambda: stats_value(c, "occupancy") == 1))
        before = c.stats()
        old = c.worker_pids()
        victim = wait_for(lambda: origin_connection_owner(old, self.origin.port), timeout=5)
        self.assertIsNotNone(victim, "no worker holds the origin connection")
        os.kill(victim, signal.SIGKILL)

        def replaced():
            pids = c.worker_pids()
            return len(pids) == 2 and victim not in pids and all(p in pids for p in old if p != victim)
        self.assertTrue(wait_for(replaced, timeout=10), "no replacement worker:\n" + c.log())
        self.assertTrue(wait_for(lambda: stats_value(c, "occupancy") == 0, timeout=15), c.log())
        after = c.stats()
        self.assertEqual(after["workers"], 2)
        self.assertGreaterEqual(after["worker_restarts_total"], before["worker_restarts_total"] + 1)
        self.assertGreaterEqual(after["slots_reclaimed_total"], before["slots_reclaimed_total"] + 1)
        self.assertRegex(c.log(), r"worker \d+ \(pid %d\) killed by signal 9.*; reclaimed 1 page slots \(1 in "
                                  r"quarantine for 3s: [^)]*\), 0 tickets, 0 asset slots, 0 pass holds" % victim)
        self.assertIn("1 page slots of ended requests back in use", c.log())
        # The reclaimed capacity is usable: cap is 1 and a new request gets through.
        status, _, body = c.get("/hello")
        self.assertEqual((status, body), (200, b"ok"))
        thread.join(10)
        self.assertIsNotNone(thread.error, thread.result)  # the parked client lost its connection with the worker

    def test_worker_dying_at_start_is_respawned_with_back_off(self):
        c = self.concert([], workers=1)
        victims = []
        for _ in range(3):
            current = wait_for(lambda: [p for p in c.worker_pids() if p not in victims], timeout=10)
            self.assertTrue(current, "no replacement worker:\n" + c.log())
            victims.append(current[0])
            os.kill(current[0], signal.SIGKILL)
        self.assertTrue(wait_for(lambda: [p for p in c.worker_pids() if p not in victims], timeout=10), c.log())
        log = c.log()
        # The second and third deaths came right after a start: the delay doubles.
        self.assertRegex(log, r"worker 0 died \d+ ms after start; next start in 100 ms")
        self.assertRegex(log, r"worker 0 died \d+ ms after start; next start in 200 ms")
        self.assertTrue(wait_for(lambda: stats_value(c, "worker_restarts_total") == 3), c.log())

    def test_all_addresses_listen_is_dual_stack(self):
        c = self.concert(["-listen", ":0"], workers=1)  # the later -listen wins over the harness's
        self.assertRegex(c.log(), r"listening on (\[::\]|0\.0\.0\.0):%d" % c.port)
        self.assertEqual(c.get("/_room/healthz")[0], 200)  # reached over IPv4

    @unittest.skipUnless(os.geteuid() == 0, "needs root")
    def test_user_drops_worker_privileges(self):
        c = self.concert(["-user", "nobody"], workers=2)
        uids = {}
        for pid in c.worker_pids() + [c.proc.pid]:
            with open("/proc/%d/status" % pid) as f:
                uids[pid] = int(re.search(r"(?m)^Uid:\s+(\d+)", f.read()).group(1))
        nobody = __import__("pwd").getpwnam("nobody").pw_uid
        self.assertEqual(uids.pop(c.proc.pid), 0)  # the master keeps root, like nginx
        self.assertEqual(set(uids.values()), {nobody})
        self.assertEqual(c.get("/hello")[0], 200)
        # The parent-death signal survives the user switch.
        pids = c.worker_pids()
        c.proc.kill()
        c.proc.wait(5)
        self.assertTrue(wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=10))

    def test_master_killed_workers_exit(self):
        c = self.concert([], workers=2)
        pids = c.worker_pids()
        self.assertEqual(len(pids), 2)
        c.proc.kill()
        c.proc.wait(5)
        gone = wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=10)
        if not gone:
            for p in pids:
                if pid_alive(p):
                    os.kill(p, signal.SIGKILL)
        self.assertTrue(gone, "workers outlived the master")


class TestReload(MasterTestCase):
    def test_reloads_under_load_drop_nothing(self):
        c = self.concert(["-cap", "50"], workers=2)
        stop = threading.Event()
        counts = {"ok": 0, "failed": [], "keepalive_retries": 0}

        def keepalive_client():
            conn = None
            while not stop.is_set():
                fresh = conn is None
                if conn is None:
                    conn = c.conn(10)
                try:
                    conn.request("GET", "/ka")
                    r = conn.getresponse()
                    body = r.read()
                    if r.status != 200 or body != b"ok":
                        counts["failed"].append("keep-alive %d %r" % (r.status, body[:80]))
                    else:
                        counts["ok"] += 1
                    if r.getheader("Connection", "").lower() == "close":
                        conn.close()
                        conn = None
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                    conn.close()
                    conn = None
                    # An idle kept-alive connection closed by a draining worker
                    # just as the next request went out: HTTP lets a client
                    # retry an idempotent request then (RFC 9112 9.3.1), and
                    # browsers do. A failure on a fresh connection counts.
                    if fresh:
                        counts["failed"].append("keep-alive fresh: %r" % e)
                    else:
                        counts["keepalive_retries"] += 1
                except Exception as e:
                    counts["failed"].append("keep-alive: %r" % e)
                    conn.close()
                    conn = None
            if conn is not None:
                conn.close()

        def fresh_client():
            while not stop.is_set():
                try:
                    status, _, body = c.get("/fresh", timeout=10)
                    if status != 200 or body != b"ok":
                        counts["failed"].append("fresh %d %r" % (status, body[:80]))
                    else:
                        counts["ok"] += 1
                except Exception as e:
                    counts["failed"].append("fresh: %r" % e)

        threads = [threading.Thread(target=keepalive_client, daemon=True),
                   threading.Thread(target=fresh_client, daemon=True)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: counts["ok"] > 20, timeout=10)
            for generation in range(2, 7):
                reload_and_wait(c, generation)
                base = counts["ok"]
                wait_for(lambda: counts["ok"] > base + 10, timeout=10)
        finally:
            stop.set()
            for t in threads:
                t.join(15)
        self.assertEqual(counts["failed"], [], c.log())
        self.assertGreater(counts["ok"], 50)
        self.assertTrue(wait_for(lambda: stats_value(c, "generation") == 6), c.log())
        stats = c.stats()
        self.assertEqual(stats["reloads_total"], 5)
        self.assertTrue(wait_for(lambda: len(c.worker_pids()) == 2, timeout=15), c.log())
        self.assertRegex(c.log(), r"generation 5 drained")

    def test_successive_reloads_with_request_in_flight(self):
        c = self.concert(["-cap", "2"], workers=2)
        thread = park_at_origin(c, self.origin)
        for generation in range(2, 6):
            reload_and_wait(c, generation)
            self.assertEqual(c.get("/hello")[:3:2], (200, b"ok"))
        self.assertTrue(wait_for(lambda: stats_value(c, "occupancy") == 1))
        self.origin.release()
        self.assertEqual(thread.status(15), 200, thread.error)
        self.assertTrue(wait_for(lambda: len(c.worker_pids()) == 2, timeout=15), c.log())
        self.assertTrue(wait_for(lambda: stats_value(c, "workers") == 2, timeout=5), c.log())
        self.assertEqual(c.stats()["occupancy"], 0)

    def test_queued_ticket_keeps_its_place_across_reload(self):
        c = self.concert(["-cap", "1"], workers=2)
        park_at_origin(c, self.origin)
        status, headers, body = c.get("/page", headers={"Accept": "application/json"})
        self.assertEqual(status, 429, body)
        ticket = None
        for value in headers_all(headers, "Set-Cookie"):
            m = re.match(r"room_ticket=([0-9a-f]+)", value)
            if m:
                ticket = m.group(1)
        self.assertIsNotNone(ticket, headers)
        reload_and_wait(c, 2)
        self.assertTrue(wait_for(lambda: stats_value(c, "generation") == 2))
        time.sleep(1.1)  # /queue/status rate-limits polls of one ticket to one a second
        status, _, body = c.get("/queue/status", headers={"Cookie": "room_ticket=" + ticket})
        self.assertEqual(status, 200, body)
        doc = json.loads(body)
        self.assertFalse(doc["ready"], doc)
        self.assertGreaterEqual(doc.get("position", 0), 1, doc)

    def test_runtime_cap_survives_reload_unless_file_changes_cap(self):
        c = self.concert([], workers=2, config_text="cap: 2\n", admin_token=ADMIN)
        status, _, body = c.request("POST", "/_room/cap", {"Authorization": "Bearer " + ADMIN},
                                    json.dumps({"cap": 5}))
        self.assertEqual(status, 200, body)
        self.assertEqual(c.stats()["cap"], 5)
        reload_and_wait(c, 2)
        self.assertTrue(wait_for(lambda: stats_value(c, "generation") == 2))
        self.assertEqual(c.stats()["cap"], 5)
        with open(c.config_path, "w") as f:
            f.write("cap: 3\n")
        reload_and_wait(c, 3)
        self.assertTrue(wait_for(lambda: stats_value(c, "cap") == 3), c.log())

    def test_invalid_config_is_refused(self):
        c = self.concert([], workers=2, config_text="cap: 2\n")
        pids = c.worker_pids()
        with open(c.config_path, "w") as f:
            f.write("cap: 0\n")
        c.signal(signal.SIGHUP)
        self.assertTrue(wait_log(c, r"reload refused: .*cap"), c.log())
        stats = c.stats()
        self.assertEqual((stats["generation"], stats["cap"], stats["reloads_total"]), (1, 2, 0))
        self.assertEqual(c.get("/hello")[0], 200)
        self.assertEqual(c.worker_pids(), pids)

    def test_restart_only_setting_is_kept(self):
        c = self.concert([], workers=2, config_text="asset-users-max: 100\n")
        with open(c.config_path, "w") as f:
            f.write("asset-users-max: 200\ncap: 7\n")
        reload_and_wait(c, 2)
        self.assertRegex(c.log(), r"reload: asset-users-max changed; restart required, keeping 100")
        self.assertTrue(wait_for(lambda: stats_value(c, "cap") == 7))
        self.assertEqual(c.get("/hello")[0], 200)


class TestStop(MasterTestCase):
    def test_sigterm_lets_in_flight_request_finish(self):
        c = self.concert(["-cap", "2"], workers=2)
        thread = park_at_origin(c, self.origin)
        c.signal(signal.SIGTERM)
        self.assertTrue(wait_log(c, r"draining\.\.\."), c.log())
        self.origin.release()
        self.assertEqual(thread.status(15), 200, thread.error)
        self.assertEqual(c.proc.wait(15), 0, c.log())
        self.assertIn("stopped", c.log())

    def test_busy_poll_workers_serve_reload_and_stop(self):
        # -busy-poll runs the loop itself instead of event_base_dispatch: it
        # must serve, hand over on a reload and stop on SIGTERM like the other.
        c = self.concert(["-cap", "2", "-busy-poll", "5ms"], workers=2)
        for i in range(20):
            status, _, body = c.get("/bp-%d" % i)
            self.assertEqual(status, 200, body)
        thread = park_at_origin(c, self.origin)
        reload_and_wait(c, 2)
        for i in range(5):
            self.assertEqual(c.get("/after-reload-%d" % i)[0], 200)
        c.signal(signal.SIGTERM)
        self.assertTrue(wait_log(c, r"draining\.\.\."), c.log())
        self.origin.release()
        self.assertEqual(thread.status(15), 200, thread.error)
        self.assertEqual(c.proc.wait(15), 0, c.log())
        self.assertIn("stopped", c.log())

    def test_grace_exceeded_exits_non_zero(self):
        c = self.concert(["-cap", "2", "-shutdown-grace", "1s"], workers=1)
        park_at_origin(c, self.origin)
        c.signal(signal.SIGTERM)
        rc = c.proc.wait(20)
        self.assertNotEqual(rc, 0, c.log())
        self.assertIn("shutdown: context deadline exceeded", c.log())

    def test_second_signal_stops_at_once(self):
        c = self.concert(["-cap", "2", "-shutdown-grace", "60s"], workers=2)
        park_at_origin(c, self.origin)
        c.signal(signal.SIGTERM)
        self.assertTrue(wait_log(c, r"draining\.\.\."), c.log())
        c.signal(signal.SIGINT)
        rc = c.proc.wait(10)
        self.assertNotEqual(rc, 0, c.log())


class TestProcess(MasterTestCase):
    def run_bin(self, args, timeout=15):
        return subprocess.run([BIN] + args, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout)

    def test_listen_on_busy_port_fails(self):
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        try:
            port = busy.getsockname()[1]
            p = self.run_bin(["-upstream", self.origin.url, "-listen", "127.0.0.1:%d" % port, "-workers", "1"])
        finally:
            busy.close()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"listen", p.stderr)

    def test_unwritable_access_log_fails_at_start(self):
        p = self.run_bin(["-upstream", self.origin.url, "-listen", "127.0.0.1:0", "-workers", "1",
                          "-access-log-file", os.path.join(self.tmp, "missing", "access.log")])
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"-access-log-file", p.stderr)

    def test_test_config(self):
        p = self.run_bin(["-t", "-upstream", self.origin.url])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"configuration ok", p.stdout)

    def test_daemon_pid_file_round_trip(self):
        pid_file = os.path.join(self.tmp, "concert.pid")
        log_file = os.path.join(self.tmp, "error.log")
        args = ["-upstream", self.origin.url, "-listen", "127.0.0.1:0", "-workers", "1", "-access-log=false",
                "-daemon", "-pid-file", pid_file, "-error-log", log_file]
        p = self.run_bin(args)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(pid_file) as f:
            pid = int(f.read().strip())
        try:
            self.assertTrue(pid_alive(pid))
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                self.assertIn(b"-daemon", f.read())
            with open(log_file) as f:
                m = re.search(r"listening on 127\.0\.0\.1:(\d+)", f.read())
            self.assertIsNotNone(m)
            conn = http.client.HTTPConnection("127.0.0.1", int(m.group(1)), timeout=5)
            conn.request("GET", "/_room/healthz")
            self.assertEqual(conn.getresponse().status, 200)
            conn.close()
            # A second instance with the same pid file refuses to start.
            again = self.run_bin(args)
            self.assertNotEqual(again.returncode, 0)
            self.assertIn(str(pid).encode(), again.stderr)
            with open(pid_file) as f:
                self.assertEqual(int(f.read().strip()), pid)
        finally:
            if pid_alive(pid):
                os.kill(pid, signal.SIGTERM)
        self.assertTrue(wait_for(lambda: not pid_alive(pid), timeout=15))
        self.assertTrue(wait_for(lambda: not os.path.exists(pid_file), timeout=5))

    def test_daemon_reloads_with_relative_paths(self):
        with open(os.path.join(self.tmp, "concert.yaml"), "w") as f:
            f.write("cap: 2\n")
        args = ["-c", "concert.yaml", "-upstream", self.origin.url, "-listen", "127.0.0.1:0", "-workers", "1",
                "-access-log=false", "-daemon", "-pid-file", "concert.pid", "-error-log", "error.log"]
        p = subprocess.run([BIN] + args, env=clean_env(), cwd=self.tmp, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=15)
        self.assertEqual(p.returncode, 0, p.stderr)
        pid_file = os.path.join(self.tmp, "concert.pid")
        log_file = os.path.join(self.tmp, "error.log")
        with open(pid_file) as f:
            pid = int(f.read().strip())

        def log():
            with open(log_file) as f:
                return f.read()
        try:
            with open(os.path.join(self.tmp, "concert.yaml"), "w") as f:
                f.write("cap: 4\n")
            os.kill(pid, signal.SIGHUP)
            self.assertTrue(wait_for(lambda: "reload accepted: generation 2" in log(), timeout=10), log())
            os.rename(log_file, log_file + ".1")
            os.kill(pid, signal.SIGUSR1)
            self.assertTrue(wait_for(lambda: os.path.exists(log_file), timeout=5))
        finally:
            os.kill(pid, signal.SIGTERM)
        self.assertTrue(wait_for(lambda: not pid_alive(pid), timeout=15))
        self.assertTrue(wait_for(lambda: not os.path.exists(pid_file), timeout=5))
        self.assertIn("stopped", log())

    def test_sigusr1_reopens_error_log(self):
        log_file = os.path.join(self.tmp, "error.log")
        c = Concert(["-upstream", self.origin.url, "-error-log", log_file], workers=1, wait=False, access_log=True)
        self.started.append(c)
        c.start()

        def port():
            try:
                with open(log_file) as f:
                    m = re.search(r"listening on 127\.0\.0\.1:(\d+)", f.read())
                return m and int(m.group(1))
            except OSError:
                return None
        c.port = wait_for(port, timeout=10)
        self.assertTrue(c.port, c.log())
        self.assertTrue(wait_for(lambda: c.get("/before")[0] == 200 and os.path.exists(c.access_path)))
        rotated = log_file + ".1"
        os.rename(log_file, rotated)
        os.rename(c.access_path, c.access_path + ".1")
        c.signal(signal.SIGUSR1)
        self.assertTrue(wait_for(lambda: os.path.exists(log_file), timeout=5))

        def read(path):
            with open(path) as f:
                return f.read()
        self.assertTrue(wait_for(lambda: "reopened log files" in read(log_file), timeout=5), read(rotated))
        self.assertNotIn("listening on", read(log_file))
        self.assertIn("listening on", read(rotated))
        # The workers got the signal too: their access log starts a new file.
        self.assertEqual(c.get("/after")[0], 200)
        self.assertTrue(wait_for(lambda: os.path.exists(c.access_path) and "/after" in read(c.access_path),
                                 timeout=10))
        self.assertNotIn("/after", read(c.access_path + ".1"))


class TestDocs(unittest.TestCase):
    def test_man_page_lists_every_flag(self):
        with open(os.path.join(ROOT, "man", "concert.8")) as f:
            man = f.read()
        p = subprocess.run([BIN, "--help"], env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=10)
        self.assertEqual(p.returncode, 0)
        flags = set(re.findall(r"(?m)^\s+--?([a-z][a-z0-9-]+)", p.stdout.decode()))
        self.assertGreater(len(flags), 30, p.stdout)
        documented = set(re.findall(r"(?m)^\.It Fl ([a-z0-9-]+)", man))
        self.assertEqual(sorted(flags - documented - {"h", "help", "c", "config", "t", "test-config",
                                                      "version"}), [])
        for env in ("CONCERT_ADMIT_SECRET", "CONCERT_ADMIN_TOKEN"):
            self.assertIn(env, man)
        for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "ENVIRONMENT", "SIGNALS", "FILES",
                        "EXIT STATUS", "EXAMPLES", "SEE ALSO"):
            self.assertIn(".Sh " + section, man)

    @unittest.skipUnless(shutil.which("mandoc"), "mandoc not installed")
    def test_man_page_lints_clean(self):
        p = subprocess.run(["mandoc", "-T", "lint", "-W", "warning", os.path.join(ROOT, "man", "concert.8")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10)
        problems = [line for line in p.stdout.decode().splitlines() if "mandoc.db" not in line]
        self.assertEqual(problems, [])

    def test_systemd_unit(self):
        with open(os.path.join(ROOT, "conf", "concert.service")) as f:
            unit = f.read()
        for line in ("ExecStart=/usr/local/sbin/concert -c /etc/concert/concert.yaml",
                     "ExecReload=/bin/kill -HUP $MAINPID", "KillMode=mixed", "NoNewPrivileges=yes",
                     "ProtectSystem=strict", "PrivateTmp=yes", "Type=notify", "-state-dir /run/concert",
                     "RuntimeDirectory=concert", "RuntimeDirectoryPreserve=restart"):
            self.assertIn(line, unit)

    @unittest.skipUnless(shutil.which("systemd-analyze"), "systemd-analyze is not installed")
    def test_systemd_units_verify(self):
        """The service and socket units pass systemd-analyze verify (the binary at the built path)."""
        d = tempfile.mkdtemp(prefix="concert-units-")
        self.addCleanup(shutil.rmtree, d, True)
        for name in ("concert.service", "concert.socket"):
            with open(os.path.join(ROOT, "conf", name)) as f:
                text = f.read().replace("/usr/local/sbin/concert", os.path.abspath(BIN))
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        p = subprocess.run(["systemd-analyze", "verify", "--man=no", os.path.join(d, "concert.service"),
                            os.path.join(d, "concert.socket")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=60)
        self.assertEqual((p.returncode, p.stdout.decode()), (0, ""))


if __name__ == "__main__":
    unittest.main()
