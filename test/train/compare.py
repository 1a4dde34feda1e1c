#!/usr/bin/python3
"""Compare sampling and cache policies on real training, side by side.

For each cache size (a fraction of the training set's bytes, summed over
the mesh) and each configuration (sampling + policy), start a local mesh of
--peers shade-peer processes, train the CNN of train_fmnist.py with --world
ranks (rank r reads through peer r), stop the mesh, and record per epoch:
hit ratio, bytes read from the source, test accuracy and epoch time.

Writes DIR/results.csv, DIR/results.md (the table, with each configuration's
hit ratio as a multiple of uniform + LRU's) and DIR/results.png (hit ratio
and accuracy per epoch).

The runs measure the policies, not the prefetcher: peers run with
--prefetch 0 and --replicas 1 (so the mesh's unique capacity is exactly the
cache size), and the test set is read from its folder, not through the
cache.

    /usr/bin/python3 test/train/compare.py --epochs 8 --out test/results/training
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIGS = {
    "pads+app": ("on", "app"),
    "pads+lru": ("on", "lru"),
    "uniform+app": ("off", "app"),
    "uniform+lru": ("off", "lru"),
    "uniform+minio": ("off", "minio"),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=str(REPO / ".data" / "fashion-mnist"), help="imported Fashion-MNIST root")
    p.add_argument("--fractions", default="0.1,0.2", help="cache sizes as fractions of the training set's bytes")
    p.add_argument("--configs", default="pads+app,uniform+lru,uniform+minio,pads+lru,uniform+app")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--peers", type=int, default=3)
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(REPO / "test" / "results" / "training"))
    p.add_argument("--bin", default=str(REPO / "bin"))
    p.add_argument("--peer-flags", default="", help="extra shade-peer flags for every run")
    return p.parse_args(argv)


def dataset_bytes(bin_dir, train_dir):
    out = subprocess.run([f"{bin_dir}/shadectl", "dataset", "index", "--json", train_dir],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["bytes"]


def run_one(args, label, fraction, train_bytes, csv_path):
    pads, policy = CONFIGS[label]
    per_peer = max(1 << 16, int(fraction * train_bytes / args.peers))
    mesh_dir = Path(args.out) / "mesh"
    env = dict(os.environ, SHADE_BIN=args.bin)
    mesh = [str(REPO / "deploy" / "local" / "mesh.sh")]
    flags = ["--dataset", f"fmnist-train={args.data}/train", "--cache-size", str(per_peer),
             "--policy", policy, "--pads", pads, "--replicas", "1", "--prefetch", "0",
             "--seed", str(args.seed)] + args.peer_flags.split()
    subprocess.run(mesh + ["stop", str(mesh_dir)], env=env, check=False)
    subprocess.run(mesh + ["start", str(args.peers), str(mesh_dir)] + flags, env=env, check=True)
    try:
        sockets = ",".join(str(mesh_dir / f"n{i}.sock") for i in range(args.peers))
        cmd = [sys.executable, str(REPO / "test" / "train" / "train_fmnist.py"), "--sockets", sockets,
               "--world", str(args.world), "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
               "--seed", str(args.seed), "--test-dir", f"{args.data}/test",
               "--csv", str(csv_path), "--label", f"{label}@{fraction:g}"]
        print(f"== {label} cache {fraction:.0%} ({per_peer} bytes per peer)", flush=True)
        subprocess.run(cmd, check=True)
    finally:
        subprocess.run(mesh + ["stop", str(mesh_dir)], env=env, check=False)


def load_rows(csv_path):
    rows = []
    with open(csv_path) as f:
        for r in csv.DictReader(f):
            label, frac = r["label"].rsplit("@", 1)
            rows.append(dict(config=label, fraction=float(frac), epoch=int(r["epoch"]),
                             hit_ratio=float(r["hit_ratio"]), source_bytes=int(r["source_bytes"]),
                             accuracy=float(r["accuracy"]), epoch_time=float(r["epoch_time"])))
    return rows


def summarize(rows, out_dir, argv):
    by = {}
    for r in rows:
        by.setdefault((r["fraction"], r["config"]), []).append(r)
    lines = ["# Training through Shade: sampling and cache policies side by side", "",
             f"Command: `/usr/bin/python3 test/train/compare.py {' '.join(argv)}`", "",
             "Fashion-MNIST (60,000 training images), small CNN, 3 ranks on 3 local peers (`--replicas 1`,"
             " `--prefetch 0`); cache = fraction of the training set's bytes, summed over the mesh.",
             "Hit ratio: mean over epochs 1.. (epoch 0 starts cold). Ratio: hit ratio / uniform+lru's at the"
             " same cache size. Accuracy: test accuracy after the last epoch.", "",
             "| cache | config | hit ratio | × uniform+lru | source MiB/epoch | final accuracy | Δ acc vs uniform+lru | s/epoch |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for frac in sorted({k[0] for k in by}):
        base = by.get((frac, "uniform+lru"))
        base_hit = sum(r["hit_ratio"] for r in base if r["epoch"] > 0) / max(1, sum(1 for r in base if r["epoch"] > 0)) if base else None
        base_acc = max(base, key=lambda r: r["epoch"])["accuracy"] if base else None
        for cfg in sorted({k[1] for k in by if k[0] == frac}, key=lambda c: list(CONFIGS).index(c)):
            rs = sorted(by[(frac, cfg)], key=lambda r: r["epoch"])
            warm = [r for r in rs if r["epoch"] > 0] or rs
            hit = sum(r["hit_ratio"] for r in warm) / len(warm)
            src = sum(r["source_bytes"] for r in warm) / len(warm) / 2**20
            t = sum(r["epoch_time"] for r in warm) / len(warm)
            acc = rs[-1]["accuracy"]
            ratio = f"{hit / base_hit:.1f}×" if base_hit else "-"
            dacc = f"{100 * (acc - base_acc):+.2f}" if base_acc is not None else "-"
            lines.append(f"| {frac:.0%} | {cfg} | {hit:.2%} | {ratio} | {src:.2f} | {acc:.2%} | {dacc} | {t:.1f} |")
    (out_dir / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (Debian python3-matplotlib): no plot", file=sys.stderr)
        return
    fracs = sorted({k[0] for k in by})
    fig, axes = plt.subplots(2, len(fracs), figsize=(6 * len(fracs), 8), squeeze=False)
    for col, frac in enumerate(fracs):
        for cfg in CONFIGS:
            rs = sorted(by.get((frac, cfg), []), key=lambda r: r["epoch"])
            if not rs:
                continue
            ep = [r["epoch"] for r in rs]
            axes[0][col].plot(ep, [100 * r["hit_ratio"] for r in rs], marker="o", label=cfg)
            axes[1][col].plot(ep, [100 * r["accuracy"] for r in rs], marker="o", label=cfg)
        axes[0][col].set_title(f"cache {frac:.0%} of the training set")
        axes[0][col].set_ylabel("hit ratio (%)")
        axes[1][col].set_ylabel("test accuracy (%)")
        axes[1][col].set_xlabel("epoch")
        axes[0][col].legend()
        axes[1][col].legend()
    fig.tight_layout()
    fig.savefig(out_dir / "results.png", dpi=100)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train_bytes = dataset_bytes(args.bin, f"{args.data}/train")
    csv_path = out / "results.csv"
    if csv_path.exists():
        csv_path.unlink()
    start = time.time()
    for fraction in [float(f) for f in args.fractions.split(",")]:
        for label in args.configs.split(","):
            run_one(args, label, fraction, train_bytes, csv_path)
    print(f"all runs took {time.time() - start:.0f}s")
    summarize(load_rows(csv_path), out, argv)


if __name__ == "__main__":
    main()
