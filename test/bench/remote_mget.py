#!/usr/bin/python3
"""MGETs of samples held in other peers' memory, two shade-peer builds side
by side in one run: a trainer process asks one peer of a local mesh
(deploy/local/mesh.sh) for random minibatches through redis-py, and every
sample is already in the memory of its owner, so a minibatch's samples
owned by other peers are fetched from them over QUIC. Prints, per build,
samples/s, the CPU time of all the mesh's peers per sample (user + system,
from /proc), the MGET's 50th and 90th percentile, and the share of samples
that came from another peer's memory; the median of the rounds, and the
ratios of B to A.

    test/bench/remote_mget.py --a <dir> --b <dir> [--peers 3] [--replicas 1]
        [--samples 6000] [--size 512] [--batch 64] [--seconds 6] [--rounds 3]

--a and --b are folders holding shade-peer (the base first); without --a
the current tree's bin/ is both. Every round runs each build on a fresh
mesh (--prefetch 0, a cache that holds the dataset), alternating which
goes first, over the same dataset and the same minibatches. Before the
timed reads, one pass over the dataset through the asking peer has each
owner read its samples and keep them; every value is checked against its
file.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

import redis  # noqa: E402

from read_through import compare, compare_args, cpu_seconds, timed_mgets  # noqa: E402


def peer_pids(mesh_dir, n):
    return [int((mesh_dir / f"n{i}.pid").read_text()) for i in range(n)]


def peer_stats(r):
    return json.loads(r.execute_command("SHADE.STATS", "rt"))["datasets"][0]["total"]


def one_round(build, data, files, batches, args, tmp):
    mesh_dir = tmp / f"mesh-{time.monotonic_ns()}"
    script = str(REPO / "deploy" / "local" / "mesh.sh")
    env = dict(os.environ, SHADE_BIN=str(build))
    subprocess.run([script, "start", str(args.peers), str(mesh_dir), "--dataset", f"rt={data}",
                    "--replicas", str(args.replicas), "--cache-size", "256MiB", "--prefetch", "0",
                    "--log-level", "warn"], env=env, check=True, stdout=subprocess.DEVNULL)
    try:
        r = redis.Redis(unix_socket_path=str(mesh_dir / "n0.sock"))
        ids = list(range(len(files)))
        for k in range(0, len(ids), args.batch):  # each owner reads its samples and keeps them
            part = ids[k:k + args.batch]
            if r.mget([f"rt/{i}" for i in part]) != [files[i] for i in part]:
                sys.exit(f"{build}: wrong bytes")
        pids = peer_pids(mesh_dir, args.peers)
        before = peer_stats(r)
        result = timed_mgets(r, files, batches, args.seconds, lambda: sum(cpu_seconds(p) for p in pids), build)
        after = peer_stats(r)
        r.close()
        if after["source_reads"] != before["source_reads"]:
            sys.exit(f"{build}: {after['source_reads'] - before['source_reads']} samples read from the source "
                     "in the timed reads; the cache should hold them all")
        reads = sum(after[k] - before[k] for k in ("hits", "cold_misses", "capacity_misses"))
        return result + ((after["peer_hits"] - before["peer_hits"]) / reads,)
    finally:
        subprocess.run([script, "stop", str(mesh_dir)], env=env, check=False, stdout=subprocess.DEVNULL)


def main():
    ap = compare_args(__doc__, samples=6000, size=512, batch=64)
    ap.add_argument("--peers", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=1, help="owners of each sample (--replicas)")
    args = ap.parse_args()
    compare(args, one_round, "shade-rm-",
            f"{args.peers} peers, --replicas {args.replicas}, {args.samples} samples of {args.size} bytes held "
            f"in memory, MGET of {args.batch} at n0 through redis-py",
            extra=("from peers", ".0%"),
            footer="(cpu: all the mesh's peers, user + system; from peers: samples an owner served from its memory)")


if __name__ == "__main__":
    main()
