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


def compare(args, one_round, prefix, what, extra=None, footer=None):
    """Runs one_round(build, data, files, batches, args, tmp) for the two
    builds (builds_of) over the same dataset and minibatches (prepare),
    alternating (alternate), in a temporary folder named from prefix, and
    prints the comparison (print_comparison) under a line that says what
    was measured, and footer."""
    builds = builds_of(args)
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        data, files, batches = prepare(tmp, args)
        results = alternate(builds, args.rounds, lambda name: one_round(builds[name], data, files, batches, args, tmp))
        print(f"# {os.cpu_count()} cores, load {' '.join(open('/proc/loadavg').read().split()[:3])}; "
              f"{what}, {args.seconds:g} s a round, median of {args.rounds} rounds")
        print_comparison(builds, results, extra)
        if footer:
            print(footer)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def compare_args(doc, samples, size, batch):
    """An argument parser with what compare reads: the builds (--a, --b),
    the dataset (--samples of --size bytes), the MGETs (--batch) and the
    rounds (--seconds, --rounds), with these defaults."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", default=str(REPO / "bin"), help="folder of the base shade-peer")
    ap.add_argument("--b", default=None, help="folder of the shade-peer to compare (default: --a)")
    ap.add_argument("--samples", type=int, default=samples)
    ap.add_argument("--size", type=int, default=size, help="bytes per sample")
    ap.add_argument("--batch", type=int, default=batch, help="samples per MGET")
    ap.add_argument("--seconds", type=float, default=6.0, help="seconds of reads per round and build")
    ap.add_argument("--rounds", type=int, default=3)
    return ap


def builds_of(args):
    """The folders of the two builds (--a, --b), each holding shade-peer;
    without --a, the current tree is built into bin/ first."""
    builds = {"A": Path(args.a), "B": Path(args.b or args.a)}
    if not (builds["A"] / "shade-peer").exists() and args.a == str(REPO / "bin"):
        subprocess.run(["go", "build", "-o", args.a + "/", "./cmd/..."], cwd=REPO, check=True)
    for name, b in builds.items():
        if not (b / "shade-peer").exists():
            sys.exit(f"build {name}: no {b}/shade-peer")
    return builds


def prepare(tmp, args):
    """Writes the dataset, args.samples files of args.size random bytes
    under tmp/data named so that they sort in index order, and returns its
    folder, the files' bytes and 4,096 minibatches of args.batch random
    ids, the same for every build."""
    rng = random.Random(1)
    data = tmp / "data"
    data.mkdir()
    files = []
    for i in range(args.samples):
        b = rng.randbytes(args.size)
        (data / f"{i:07d}.bin").write_bytes(b)
        files.append(b)
    batches = [[rng.randrange(args.samples) for _ in range(args.batch)] for _ in range(4096)]
    return data, files, batches


def alternate(builds, rounds, run):
    """Calls run(name) for every build in each round, alternating which goes
    first, and returns each build's results in the order of the rounds."""
    results = {name: [] for name in builds}
    for rnd in range(rounds):
        for name in (list(builds) if rnd % 2 == 0 else list(reversed(builds))):
            results[name].append(run(name))
    return results


def timed_mgets(r, files, batches, seconds, cpu, label):
    """MGETs the batches in turn through r for seconds, every 64th checked
    against files, and returns samples/s, the CPU seconds that cpu() counts
    per sample in microseconds, and the MGET's p50 and p90 in ms."""
    lat, n, k = [], 0, 0
    cpu0, t0 = cpu(), time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        ids = batches[k % len(batches)]
        k += 1
        s = time.perf_counter()
        got = r.mget([f"rt/{i}" for i in ids])
        lat.append(time.perf_counter() - s)
        if k % 64 == 0 and got != [files[i] for i in ids]:
            sys.exit(f"{label}: wrong bytes")
        n += len(got)
    took, used = time.perf_counter() - t0, cpu() - cpu0
    lat.sort()
    return n / took, used / n * 1e6, lat[len(lat) // 2] * 1e3, lat[len(lat) * 9 // 10] * 1e3


def print_comparison(builds, results, extra=None):
    """Prints, for each build, the medians over its rounds of results
    (samples/s, CPU us a sample, MGET p50 and p90 ms, and with extra, a
    (title, format) pair, a fifth value) and its rounds' samples/s; then
    B's ratios to A."""
    title = f" {extra[0]:>11}" if extra else ""
    print(f"{'build':<6} {'samples/s':>10} {'cpu us/sample':>14} {'p50 ms':>8} {'p90 ms':>8}{title}   rounds (samples/s)")
    med = {}
    for name, b in builds.items():
        rs = results[name]
        med[name] = m = [statistics.median(r[i] for r in rs) for i in range(len(rs[0]))]
        col = f" {format(m[4], extra[1]):>11}" if extra else ""
        print(f"{name:<6} {m[0]:>10.0f} {m[1]:>14.1f} {m[2]:>8.2f} {m[3]:>8.2f}{col}   "
              f"{' '.join(f'{r[0]:.0f}' for r in rs)}   ({b})")
    a, b = med["A"], med["B"]
    print(f"B/A: samples/s {b[0] / a[0]:.2f}x, cpu per sample {b[1] / a[1]:.2f}x, "
          f"p50 {b[2] / a[2]:.2f}x, p90 {b[3] / a[3]:.2f}x")


def one_round(build, data, files, batches, args, tmp):
    peer_bin = build / "shade-peer"
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
        result = timed_mgets(r, files, batches[4:], args.seconds, lambda: cpu_seconds(proc.pid), peer_bin)
        r.close()
        return result
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = compare_args(__doc__, samples=20000, size=4096, batch=256)
    ap.add_argument("--cache", default="16MiB", help="the peer's --cache-size")
    args = ap.parse_args()
    compare(args, one_round, "shade-rt-",
            f"{args.samples} samples of {args.size} bytes, cache {args.cache}, MGET of {args.batch} through redis-py")


if __name__ == "__main__":
    main()
