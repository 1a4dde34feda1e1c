#!/usr/bin/python3
"""Reading through a cache smaller than the dataset, two shade-peer builds
side by side in one run: a trainer process asks a standalone peer for
random minibatches of a folder dataset (MGET through redis-py) whose
samples mostly miss the cache, so the peer reads them from the files,
admits them and answers. Prints, per build, samples/s, the peer's CPU time
per sample (user + system, from /proc) and the MGET's 50th and 90th
percentile, the median of the rounds, and the ratios of B to A.

    test/bench/read_through.py --a <dir> --b <dir> [--size 4096] [--samples 20000]
        [--batch 256] [--cache 16MiB] [--seconds 6] [--rounds 3]

--a and --b are folders holding a shade-peer binary (the base first);
without --a the current tree's bin/ is both. Every round runs each build
on a fresh peer (--prefetch 0, no mesh), alternating which goes first,
over the same dataset and the same batches; every value read is checked
against the file. The dataset is written once to a temporary folder.
"""

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

import redis  # noqa: E402

from zero_copy import wait_socket  # noqa: E402


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(peer_bin, data, files, batches, args, tmp):
    sock = tmp / f"rt-{time.monotonic_ns()}.sock"
    proc = subprocess.Popen(
        [str(peer_bin), "--name", "rt", "--socket", str(sock), "--dataset", f"rt={data}",
         "--cache-size", args.cache, "--prefetch", "0", "--admin-addr", "off", "--log-level", "warn"],
        stderr=open(tmp / "peer.log", "ab"))
    try:
        wait_socket(sock, proc)
        r = redis.Redis(unix_socket_path=str(sock))
        for ids in batches[:4]:  # warm-up, and the check
            got = r.mget([f"rt/{i}" for i in ids])
            if got != [files[i] for i in ids]:
                sys.exit(f"{peer_bin}: wrong bytes")
        lat, n, k = [], 0, 4
        cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
        end = t0 + args.seconds
        while time.perf_counter() < end:
            ids = batches[k % len(batches)]
            k += 1
            s = time.perf_counter()
            got = r.mget([f"rt/{i}" for i in ids])
            lat.append(time.perf_counter() - s)
            if k % 64 == 0 and got != [files[i] for i in ids]:
                sys.exit(f"{peer_bin}: wrong bytes")
            n += len(got)
        took, cpu = time.perf_counter() - t0, cpu_seconds(proc.pid) - cpu0
        r.close()
        lat.sort()
        return n / took, cpu / n * 1e6, lat[len(lat) // 2] * 1e3, lat[len(lat) * 9 // 10] * 1e3
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", default=str(REPO / "bin"), help="folder of the base shade-peer")
    ap.add_argument("--b", default=None, help="folder of the shade-peer to compare (default: --a)")
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--size", type=int, default=4096, help="bytes per sample")
    ap.add_argument("--batch", type=int, default=256, help="samples per MGET")
    ap.add_argument("--cache", default="16MiB", help="the peer's --cache-size")
    ap.add_argument("--seconds", type=float, default=6.0, help="seconds of reads per round and build")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    builds = {"A": Path(args.a) / "shade-peer", "B": Path(args.b or args.a) / "shade-peer"}
    if not builds["A"].exists() and args.a == str(REPO / "bin"):
        subprocess.run(["go", "build", "-o", args.a + "/", "./cmd/shade-peer"], cwd=REPO, check=True)
    for name, b in builds.items():
        if not b.exists():
            sys.exit(f"build {name}: no {b}")

    tmp = Path(tempfile.mkdtemp(prefix="shade-rt-"))
    try:
        rng = random.Random(1)
        data = tmp / "data"
        data.mkdir()
        files = []
        for i in range(args.samples):
            b = rng.randbytes(args.size)
            (data / f"{i:07d}.bin").write_bytes(b)  # names sort in index order
            files.append(b)
        batches = [[rng.randrange(args.samples) for _ in range(args.batch)] for _ in range(4096)]
        results = {name: [] for name in builds}
        for rnd in range(args.rounds):
            order = list(builds) if rnd % 2 == 0 else list(reversed(builds))
            for name in order:
                results[name].append(one_round(builds[name], data, files, batches, args, tmp))
        print(f"# {os.cpu_count()} cores, load {' '.join(open('/proc/loadavg').read().split()[:3])}; "
              f"{args.samples} samples of {args.size} bytes, cache {args.cache}, MGET of {args.batch} "
              f"through redis-py, {args.seconds:g} s a round, median of {args.rounds} rounds")
        print(f"{'build':<6} {'samples/s':>10} {'cpu us/sample':>14} {'p50 ms':>8} {'p90 ms':>8}   rounds (samples/s)")
        med = {}
        for name, b in builds.items():
            rs = results[name]
            med[name] = [statistics.median(r[i] for r in rs) for i in range(4)]
            m = med[name]
            print(f"{name:<6} {m[0]:>10.0f} {m[1]:>14.1f} {m[2]:>8.2f} {m[3]:>8.2f}   "
                  f"{' '.join(f'{r[0]:.0f}' for r in rs)}   ({b})")
        a, b = med["A"], med["B"]
        print(f"B/A: samples/s {b[0] / a[0]:.2f}x, cpu per sample {b[1] / a[1]:.2f}x, "
              f"p50 {b[2] / a[2]:.2f}x, p90 {b[3] / a[3]:.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
