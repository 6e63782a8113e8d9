"""Soak (`make soak` only): the chaos load without worker kills for
SOAK_SECONDS (default 600), sampling every 10 s the RSS and open descriptors
of the master and of every worker, and /_room/stats. Reloads (SIGHUP) replace
the workers during the run, so the flatness check is on totals: after a
warm-up (the first fifth of the samples), the mean of the last third must not
exceed the mean of the middle third by more than a tolerance. The numbers
are printed for docs/reliability.md. Also holds 10,000 idle keep-alive
connections while Concert keeps serving.
"""
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import test_chaos  # noqa: E402

RSS_TOLERANCE = 1.25       # last third may be at most 25 % above the middle third ...
RSS_SLACK_KB = 8 * 1024    # ... plus 8 MB of allocator noise
FD_SLACK = 16


def fd_count(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return 0


class Sampler:
    def __init__(self):
        self.samples = []

    def __call__(self, concert):
        pids = [concert.proc.pid] + concert.worker_pids()
        stats = test_chaos.stats_or_none(concert) or {}
        self.samples.append({
            "master_rss_kb": test_chaos.rss_kb(concert.proc.pid),
            "workers_rss_kb": sum(test_chaos.rss_kb(p) for p in pids[1:]),
            "workers": len(pids) - 1,
            "fds": sum(fd_count(p) for p in pids),
            "occupancy": stats.get("occupancy"),
            "live_queue_depth": stats.get("live_queue_depth"),
            "asset_users": stats.get("asset_users"),
        })


def mean(values):
    return sum(values) / float(len(values)) if values else 0.0


class SoakTest(unittest.TestCase):
    def test_soak_resources_flat(self):
        duration = float(os.environ.get("SOAK_SECONDS", "600"))
        sampler = Sampler()
        summary = test_chaos.run_chaos(self, duration, kills=False, sample=sampler, sample_every=10.0)
        samples = sampler.samples
        print("soak samples: " + json.dumps(samples))
        print("soak summary: requests=%d max_page_in_flight=%d reloads=%d cap_changes=%d origin_flips=%d" % (
            summary["requests"], summary["max_page_in_flight"], summary["reloads"], summary["cap_changes"],
            summary["origin_flips"]))
        if len(samples) < 6:
            self.skipTest("too few samples (%d) for a trend; raise SOAK_SECONDS" % len(samples))
        steady = samples[len(samples) // 5:]
        third = len(steady) // 3
        middle, last = steady[third:2 * third], steady[2 * third:]
        # Workers are replaced by reloads, so compare per-worker averages.
        per_worker = lambda s: s["workers_rss_kb"] / max(1, s["workers"])  # noqa: E731
        for name, key in (("master RSS", lambda s: s["master_rss_kb"]), ("worker RSS", per_worker)):
            m, l_ = mean([key(s) for s in middle]), mean([key(s) for s in last])
            self.assertLessEqual(l_, m * RSS_TOLERANCE + RSS_SLACK_KB, "%s grew: %.0f kB -> %.0f kB" % (name, m, l_))
        fd_per_proc = lambda s: s["fds"] / float(1 + s["workers"])  # noqa: E731
        m, l_ = mean([fd_per_proc(s) for s in middle]), mean([fd_per_proc(s) for s in last])
        self.assertLessEqual(l_, m + FD_SLACK, "descriptors grew: %.1f -> %.1f per process" % (m, l_))

    def test_10000_idle_keepalive_connections(self):
        opened = test_chaos.idle_keepalive_check(self, 10000)
        print("idle keep-alive connections held: %d" % opened)


if __name__ == "__main__":
    unittest.main()
