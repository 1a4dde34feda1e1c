#!/usr/bin/python3
"""Side by side, in one run: 100 KiB samples read by a trainer process through
the shade Python client from the peer's shared memory (zero-copy), through
the same client over the socket (MGET), and through redis-py MGET from
redis-server on the same kind of socket. Prints samples/s, MB/s and ratios.

    test/bench/zero_copy.py [--samples 512] [--size 102400] [--batch 64] [--rounds 5]

BIN=<dir> (or --bin) picks the shade-peer build; PEER_FLAGS adds flags to it.

Every mode reads the same batches (uniformly random ids, all cached), in
alternating rounds; the figure per mode is the median round. A sample of
every mode's batches is compared with the files byte for byte. The shade
Client sets the process's malloc to keep freed memory (shade.malloc), and
redis-py parses in C where python3-hiredis is installed: for every mode
alike, as all run in this one process.
"""

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))

import redis  # noqa: E402

import shade  # noqa: E402


def wait_socket(path, proc, limit=20.0):
    import socket
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(path))
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing answers on {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=512)
    ap.add_argument("--size", type=int, default=100 * 1024, help="bytes per sample")
    ap.add_argument("--batch", type=int, default=64, help="samples per request (a minibatch)")
    ap.add_argument("--batches", type=int, default=60, help="batches per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bin", default=os.environ.get("BIN", str(REPO / "bin")))
    args = ap.parse_args()

    peer_bin = Path(args.bin) / "shade-peer"
    if not peer_bin.exists():
        subprocess.run(["go", "build", "-o", args.bin + "/", "./cmd/..."], cwd=REPO, check=True)
    if not shutil.which("redis-server"):
        subprocess.run([str(REPO / ".ci/deps.sh"), "redis-server", "redis-tools"], check=True)

    tmp = Path(tempfile.mkdtemp(prefix="shade-zc-"))
    procs = []
    try:
        rng = random.Random(1)
        data = tmp / "data"
        files = []
        for i in range(args.samples):
            cls = data / f"c{i % 4}"
            cls.mkdir(parents=True, exist_ok=True)
            b = rng.randbytes(args.size)
            (cls / f"{i:06d}.bin").write_bytes(b)
        # Manifest order: class folders sorted, then files sorted.
        for c in sorted(data.iterdir()):
            for f in sorted(c.iterdir()):
                files.append(f.read_bytes())

        rsock, ssock = tmp / "redis.sock", tmp / "shade.sock"
        procs.append(subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", str(rsock), "--unixsocketperm", "660",
             "--save", "", "--appendonly", "no", "--logfile", str(tmp / "redis.log")]))
        wait_socket(rsock, procs[-1])
        cache = max(64 << 20, 2 * args.samples * (args.size + 4096))
        procs.append(subprocess.Popen(
            [str(peer_bin), "--name", "zc", "--socket", str(ssock), "--dataset", f"zc={data}",
             "--cache-size", str(cache), "--log-level", "warn", *os.environ.get("PEER_FLAGS", "").split()],
            stderr=open(tmp / "shade.log", "wb")))
        wait_socket(ssock, procs[-1])

        r = redis.Redis(unix_socket_path=str(rsock))
        for i, b in enumerate(files):
            r.set(f"zc/{i}", b)
        zc = shade.Client(str(ssock))
        plain = shade.Client(str(ssock), shared_memory=False)
        if not zc.shared_memory:
            sys.exit("the client could not map the peer's memory")
        everything = list(range(args.samples))
        for _ in range(2):  # read through, then all are held
            zc.mget("zc", everything)

        batches = [[rng.randrange(args.samples) for _ in range(args.batch)] for _ in range(args.batches)]
        modes = {
            "shade zero-copy": lambda ids: zc.mget("zc", ids),
            "shade MGET": lambda ids: plain.mget("zc", ids),
            "redis-server MGET": lambda ids: r.mget([f"zc/{i}" for i in ids]),
        }
        for name, read in modes.items():  # correctness, and a warm-up round
            for ids in batches[:5]:
                got = read(ids)
                if got != [files[i] for i in ids]:
                    sys.exit(f"{name}: wrong bytes")
        times = {name: [] for name in modes}
        copies_before = zc.shared_copies
        for _ in range(args.rounds):
            for name, read in modes.items():
                t0 = time.perf_counter()
                for ids in batches:
                    read(ids)
                times[name].append(time.perf_counter() - t0)
        copied = zc.shared_copies - copies_before
        total = args.rounds * args.batches * args.batch
        n = args.batches * args.batch
        base = statistics.median(times["redis-server MGET"])
        print(f"{args.samples} samples of {args.size} bytes, MGET of {args.batch}, "
              f"{args.batches} batches a round, median of {args.rounds} rounds, one trainer process")
        print(f"{'mode':<20} {'samples/s':>10} {'MB/s':>9} {'vs redis':>9}")
        for name in modes:
            t = statistics.median(times[name])
            print(f"{name:<20} {n / t:>10.0f} {n * args.size / t / 1e6:>9.1f} {base / t:>9.2f}")
        print(f"(zero-copy: {copied} of {total} samples copied from shared memory, "
              f"{zc.shared_moved} moved and read again)")
        zc.close(), plain.close(), r.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
