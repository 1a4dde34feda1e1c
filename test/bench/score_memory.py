#!/usr/bin/env python3
"""What a peer holds in memory for a dataset whose every sample its trainers
have scored, builds side by side in one run.

    test/bench/score_memory.py [--samples 1000000] [--bins "bin"] [--rounds 1]

For each directory of --bins (each holding a shade-peer) in turn, --rounds
times: one local peer (deploy/local/mesh.sh, the default policy) serves a
dataset of --samples files (test/bench/order_wait.py's, built once under
.data/) with nothing of it cached; a trainer asks the order of epoch 0 (the
policy learns each sample's place in it) and reports a loss for every
sample, 65,536 a report. Once the job has scored every sample and the
policy's memory has stopped growing, it reads the peer's live Go heap after
a collection (/debug/pprof/heap?gc=1), its anonymous memory (RssAnon: the
Go heap and runtime, not the cache's shared memory) and the policy's
memory outside the Go heap (SHADE.STATS policy_bytes), and prints each and
its bytes a sample.
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shade  # noqa: E402
from order_wait import dataset  # noqa: E402


def wait_for(what, check, timeout=300.0):
    """Polls check every 0.2 s until it is true; fails after timeout s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            sys.exit("gave up waiting for " + what)
        time.sleep(0.2)


def live_heap(admin):
    """The peer's HeapAlloc after a forced collection, in bytes."""
    url = "http://%s/debug/pprof/heap?gc=1&debug=1" % admin
    text = urllib.request.urlopen(url, timeout=60).read().decode()
    return int(re.search(r"^# HeapAlloc = (\d+)$", text, re.M).group(1))


def rss_anon(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon for pid %d" % pid)


def measure(bin_dir, data, samples, port):
    d = tempfile.mkdtemp(prefix="score-mem-", dir="/dev/shm")
    env = dict(os.environ, SHADE_BIN=bin_dir, SHADE_BASE_PORT=str(port))
    mesh = os.path.join(ROOT, "deploy", "local", "mesh.sh")
    subprocess.run([mesh, "start", "1", d, "--dataset", "big=" + data, "--cache-size", "256MiB",
                    "--log-level", "warn"], env=env, check=True, stdout=subprocess.DEVNULL)
    try:
        pid = int(open(os.path.join(d, "n0.pid")).read())
        admin = "127.0.0.1:%d" % (port + 100)
        c = shade.Client(os.path.join(d, "n0.sock"))
        heap0 = live_heap(admin)
        c.order("big", 0, 0, 1)  # publishes epoch 0: the policy learns its order
        rng = random.Random(1)
        ids = list(range(samples))
        for start in range(0, samples, 65536):
            part = ids[start:start + 65536]
            c.report("big", 0, part, [rng.uniform(0.1, 3.0) for _ in part])
        wait_for("every sample scored", lambda: (c.job_stats("big") or {}).get("scored_samples") == samples)
        last = [-1, 0]

        def settled():
            b = c.stats()["policy_bytes"]
            last[1] = last[1] + 1 if b == last[0] else 0
            last[0] = b
            return last[1] >= 5
        wait_for("the policy's memory to settle", settled)
        heap = live_heap(admin)
        anon = rss_anon(pid)
        c.close()
        return heap0, heap, anon, last[0]
    finally:
        subprocess.run([mesh, "stop", d], env=env, stdout=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--bins", default="bin", help="directories holding shade-peer, space-separated")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--port", type=int, default=27946)
    a = ap.parse_args()
    bins = a.bins.split()
    if bins == ["bin"] and not os.path.exists(os.path.join(ROOT, "bin", "shade-peer")):
        subprocess.run(["go", "build", "-o", "bin/", "./cmd/shade-peer"], cwd=ROOT, check=True)
    data = dataset(a.samples)
    mb = 1 << 20
    print("# %d samples; %d cores, load %s" % (a.samples, os.cpu_count(),
                                                open("/proc/loadavg").read().split()[0]))
    print("%-40s %5s %14s %14s %14s %14s" % ("peer", "round", "heap before MB", "heap after MB",
                                             "anon MB", "policy off MB"))
    for r in range(a.rounds):
        for b in bins:
            heap0, heap, anon, off = measure(b, data, a.samples, a.port)
            print("%-40s %5d %14.1f %14.1f %14.1f %14.1f   (%.1f B a sample on the heap, %.1f off it)" % (
                b, r, heap0 / mb, heap / mb, anon / mb, off / mb,
                (heap - heap0) / a.samples, off / a.samples))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
