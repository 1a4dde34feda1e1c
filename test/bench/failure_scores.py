#!/usr/bin/python3
"""Real training through a member's failure and return, two shade-peer builds
side by side in one run: what the survivors' cache policies know of the
importance of the samples they take over shows in the hit ratio of the
epochs after.

A local mesh (deploy/local/mesh.sh) of --peers peers serves
Fashion-MNIST (or a subset of it) to train_fmnist.py, whose --world ranks
train on the first --world peers; the others hold samples but train no
rank. After epoch --kill-after the last peer is killed with SIGKILL, so the
survivors come to own its samples, and after epoch --return-after it is
started again with its first command line, so it comes to own some again.
Each seed runs each build on a fresh mesh, alternating which goes first.
Prints the hit ratio and the bytes read from the source of every epoch,
the mean over the seeds per build, and the ratio of B to A; "(killed)"
marks the epoch the peer was killed in (just after the one before
ended), "(back)" the one it came back in.

    test/bench/failure_scores.py --a <dir> --b <dir> [--config pads+app]
        [--subset 0.25] [--fraction 0.2] [--epochs 7] [--kill-after 2]
        [--return-after 4] [--seeds 0,1] [--replicas 2] [--peer-flags "..."]

--a and --b are folders holding shade-peer (the base first); without --a
the current tree's bin/ is both. --config is a configuration of
test/train/compare.py (its sampling flags, policy and trainer weights);
--fraction the mesh's cache as a share of the training bytes, split over
the peers; --peer-flags more flags for every peer of both builds (for
instance "--replicate-budget 1", so that the members that do not stand by
to lead keep the copy of the score table the leader first sent them, as
a mesh of a thousand peers keeps them minutes old).
"""

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "test" / "train"))

import compare  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", help="folder holding the base build's shade-peer (default: --b)")
    p.add_argument("--b", default=str(REPO / "bin"), help="folder holding the build compared with it")
    p.add_argument("--data", default=str(REPO / ".data" / "fashion-mnist"), help="imported Fashion-MNIST root")
    p.add_argument("--config", default="pads+app", help="a configuration of test/train/compare.py")
    p.add_argument("--subset", type=float, default=0.25, help="train on this share of the training set")
    p.add_argument("--fraction", type=float, default=0.2, help="the mesh's cache over the training bytes")
    p.add_argument("--peers", type=int, default=4)
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--epochs", type=int, default=7)
    p.add_argument("--kill-after", type=int, default=2, help="kill the last peer after this epoch")
    p.add_argument("--return-after", type=int, default=4, help="start it again after this epoch")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--replicas", type=int, default=2, help="copies of each sample in the mesh (R)")
    p.add_argument("--peer-flags", default="", help="more shade-peer flags for every peer of both builds")
    args = p.parse_args()
    if args.world >= args.peers:
        p.error("--world must leave a peer without ranks to kill")
    if not 0 <= args.kill_after < args.return_after < args.epochs - 1:
        p.error("want 0 <= --kill-after < --return-after < --epochs - 1")
    args.a = args.a or args.b
    return args


def epochs_done(csv_path):
    if not csv_path.exists():
        return 0
    with open(csv_path) as f:
        return max(0, sum(1 for _ in f) - 1)


def one_run(build, label, seed, train_dir, cache_bytes, args, tmp):
    """Train args.epochs epochs on a fresh mesh of build, killing and
    restarting the last peer; returns the trainer's CSV rows."""
    cfg = compare.config(args.config)
    mesh_dir = tmp / f"mesh-{label}-{seed}"
    csv_path = tmp / f"{label}-{seed}.csv"
    script = str(REPO / "deploy" / "local" / "mesh.sh")
    env = dict(os.environ, SHADE_BIN=str(build))
    flags = ["--dataset", f"fmnist-train={train_dir}"] + cfg.peer_flags(cache_bytes // args.peers) + [
        "--replicas", str(args.replicas), "--prefetch", "0", "--seed", str(seed), "--log-level", "warn"] + args.peer_flags.split()
    subprocess.run([script, "start", str(args.peers), str(mesh_dir)] + flags, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    last = args.peers - 1
    pid_file = mesh_dir / f"n{last}.pid"
    argv = Path(f"/proc/{int(pid_file.read_text())}/cmdline").read_bytes().split(b"\0")[:-1]
    restarted = None
    trainer = None
    try:
        sockets = ",".join(str(mesh_dir / f"n{i}.sock") for i in range(args.world))
        trainer = subprocess.Popen(
            [sys.executable, str(REPO / "test" / "train" / "train_fmnist.py"), "--sockets", sockets,
             "--world", str(args.world), "--epochs", str(args.epochs), "--seed", str(seed),
             "--test-dir", f"{args.data}/test", "--weights", cfg.weights, "--csv", str(csv_path),
             "--label", label],
            stdout=subprocess.DEVNULL)
        killed = False
        deadline = time.monotonic() + 3600
        while trainer.poll() is None and time.monotonic() < deadline:
            done = epochs_done(csv_path)
            if not killed and done > args.kill_after:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                killed = True
            if killed and restarted is None and done > args.return_after:
                log = open(mesh_dir / f"n{last}.restarted.log", "w")
                restarted = subprocess.Popen(argv, stdout=log, stderr=log)
            time.sleep(0.05)
        if trainer.wait(timeout=max(1, deadline - time.monotonic())) != 0:
            sys.exit(f"{build}: training failed")
        if not killed or restarted is None:
            sys.exit(f"{build}: the run ended before the kill and the return")
    finally:
        if trainer is not None and trainer.poll() is None:
            trainer.kill()
        if restarted is not None:
            restarted.send_signal(signal.SIGTERM)
            restarted.wait(timeout=30)
        subprocess.run([script, "stop", str(mesh_dir)], env=env, check=False, stdout=subprocess.DEVNULL)
    with open(csv_path) as f:
        return list(csv.DictReader(f))


def main():
    args = parse_args()
    train_dir = compare.subset_dir(args.data, args.subset) / "train" if args.subset < 1 else Path(args.data) / "train"
    cache_bytes = int(args.fraction * compare.dataset_bytes(str(REPO / "bin"), str(train_dir)))
    seeds = [int(s) for s in args.seeds.split(",")]
    builds = {"A": Path(args.a), "B": Path(args.b)}
    rows = {"A": [], "B": []}
    with tempfile.TemporaryDirectory(prefix="shade-failure-") as tmp:
        for k, seed in enumerate(seeds):
            for label in (("A", "B") if k % 2 == 0 else ("B", "A")):
                print(f"== build {label} ({builds[label]}), seed {seed}", flush=True)
                rows[label].append(one_run(builds[label], label, seed, train_dir, cache_bytes, args, Path(tmp)))
    print(f"\n{args.config}, {args.peers} peers (ranks on {args.world}), R = {args.replicas}, cache {args.fraction:.0%} of "
          f"{train_dir}; the last peer killed after epoch {args.kill_after}, back after epoch "
          f"{args.return_after}; mean of seeds {args.seeds}" + (f"; peers given {args.peer_flags}" if args.peer_flags else ""))
    print(f"{'epoch':>5}  {'hit A':>7}  {'hit B':>7}  {'B/A':>5}  {'source MiB A':>12}  {'source MiB B':>12}  {'B/A':>5}")
    for e in range(args.epochs):
        def mean(label, col):
            return sum(float(r[e][col]) for r in rows[label]) / len(rows[label])
        ha, hb = mean("A", "hit_ratio"), mean("B", "hit_ratio")
        sa, sb = mean("A", "source_bytes") / 2**20, mean("B", "source_bytes") / 2**20
        mark = " (killed)" if e == args.kill_after + 1 else " (back)" if e == args.return_after + 1 else ""
        print(f"{e:>5}  {ha:7.2%}  {hb:7.2%}  {hb / ha if ha else 0:5.2f}  {sa:12.2f}  {sb:12.2f}  "
              f"{sb / sa if sa else 0:5.2f}{mark}")
    print("\nhit ratio by seed, A / B:")
    for e in range(args.epochs):
        print(f"{e:>5}  " + "  ".join(f"{float(a[e]['hit_ratio']):6.2%} / {float(b[e]['hit_ratio']):6.2%}"
                                      for a, b in zip(rows["A"], rows["B"])))


if __name__ == "__main__":
    main()
