#!/usr/bin/python3
"""Compare sampling and cache policies on real training, side by side.

For each cache size (a fraction of the training set's bytes, summed over
the mesh), each configuration (CONFIGS: every sampling and policy flag of
the peers, and whether the trainer weighs its loss by the orders'
importance weights) and each seed, start a local mesh of --peers shade-peer
processes, train the CNN of train_fmnist.py with --world ranks (rank r
reads through peer r), stop the mesh, and record per epoch: hit ratio,
bytes read from the source, distinct samples drawn, largest importance
weight, effective sample size, test accuracy, epoch and cumulative time.

With --throttle, a second pass runs every configuration again over a source
slowed by --source-throttle (like a remote object store), and the time to
--target-accuracy is taken from that pass.

Writes DIR/results.csv (every epoch of every run), DIR/results.md (per cache
size and configuration, means and standard deviations over the seeds; each
configuration's hit ratio as a multiple of replacement+order's, and its
accuracy against perm+minio's in units of perm+minio's sd) and
DIR/results.png (hit ratio and accuracy per epoch, means over the seeds).

The runs measure the policies, not the prefetcher: peers run with
--prefetch 0 and --replicas 1 (so the mesh's unique capacity is exactly the
cache size), and the test set is read from its folder, not through the
cache. Every sampling and policy flag is spelled out for every
configuration, so a change of the peer's defaults changes no row.

    /usr/bin/python3 test/train/compare.py --epochs 8 --seeds 0,1,2 --out test/results/training
    /usr/bin/python3 test/train/compare.py --subset 0.1 --epochs 2 --seeds 0 --fractions 0.1 \\
        --configs perm+minio,pads+app,v2
"""

import argparse
import csv
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Every sampling and ordering flag of shade-peer, at the value a
# configuration gets unless it says otherwise. Spelled out on every run.
SAMPLING = {
    "--pads": "on",
    "--score": "rank",
    "--alpha": "0.5",
    "--lambda": "0",
    "--uniform-floor": "0.1",
    "--coverage-epochs": "5",
    "--max-weight": "0",
    "--boost": "0",
    "--strata": "8",
    "--order-ahead": "0",
    "--locality": "on",
    "--warm": "on",
}


@dataclass(frozen=True)
class Config:
    """One configuration: shade-peer's sampling flags (over SAMPLING), its
    --policy, whether it caches at all, and the trainer's --weights."""
    doc: str
    policy: str
    sampling: dict = field(default_factory=dict)
    weights: str = "on"
    cache: bool = True

    def peer_flags(self, cache_bytes):
        flags = dict(SAMPLING, **self.sampling)
        out = []
        for k, v in flags.items():
            out += [k, v]
        out += ["--policy", self.policy, "--cache-size", str(cache_bytes if self.cache else 0)]
        return out


UNIFORM = {"--pads": "off"}
V2 = {"--pads": "on", "--score": "magnitude", "--lambda": "0", "--uniform-floor": "0.1",
      "--max-weight": "4", "--boost": "8", "--order-ahead": "0"}
V2_AHEAD = dict(V2, **{"--order-ahead": "1"})

CONFIGS = {
    "perm+minio": Config("uniform permutations + MinIO (fill once, never evict): CoorDL's baseline",
                         "minio", UNIFORM),
    "replacement+order": Config("uniform draws with replacement + the order-aware policy",
                                "order", {"--pads": "on", "--lambda": "1000000"}),
    "pads+app": Config("SHADE: rank-log scores, PADS draws, APP; unweighted loss, as SHADE trains",
                       "app", {"--pads": "on"}, weights="off"),
    "pads+order": Config("SHADE's draws + the order-aware policy; unweighted loss",
                         "order", {"--pads": "on"}, weights="off"),
    "v2": Config("magnitude scores, capped weights, cache-aware draws, order-aware policy; "
                 "importance-weighted loss", "order", V2, weights="on"),
    "v2-ahead": Config("v2 with orders published an epoch ahead (--order-ahead 1)", "order", V2_AHEAD, weights="on"),
    "v2-noweights": Config("v2-ahead's peers, unweighted loss", "order", V2_AHEAD, weights="off"),
    "nocache": Config("no cache: every read from the source; uniform permutations",
                      "none", UNIFORM, cache=False),
    "pads+lru": Config("SHADE's draws + LRU; unweighted loss", "lru", {"--pads": "on"}, weights="off"),
    "uniform+app": Config("uniform permutations + APP", "app", UNIFORM),
    "uniform+lru": Config("uniform permutations + LRU", "lru", UNIFORM),
    "uniform+fifo": Config("uniform permutations + FIFO", "fifo", UNIFORM),
    "uniform+lfu": Config("uniform permutations + LFU", "lfu", UNIFORM),
    "uniform+minio": Config("uniform permutations + MinIO (as perm+minio)", "minio", UNIFORM),
}

# Labels that name another configuration. "default" is whichever one the
# peer runs with no flags.
ALIASES = {"default": "v2"}

# Configurations the ratios and differences of results.md are taken against.
HIT_BASE = "replacement+order"
ACC_BASE = "perm+minio"

DEFAULT_CONFIGS = "perm+minio,replacement+order,pads+app,pads+order,v2,v2-noweights,nocache"

# Flags an older shade-peer lacks, and the value that means what it did
# without them: such a flag at that value is left out for an older binary.
LEGACY = {"--score": "rank", "--max-weight": "0", "--boost": "0", "--strata": None, "--order-ahead": "0"}


def config(label):
    return CONFIGS[ALIASES.get(label, label)]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=str(REPO / ".data" / "fashion-mnist"), help="imported Fashion-MNIST root")
    p.add_argument("--fractions", default="0.1,0.2", help="cache sizes as fractions of the training set's bytes")
    p.add_argument("--configs", default=DEFAULT_CONFIGS,
                   help=f"comma-separated labels of {', '.join(list(CONFIGS) + list(ALIASES))}, or all")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--peers", type=int, default=3)
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seeds", help="comma-separated seeds; every config x fraction runs once per seed "
                                   "(default 0)")
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--subset", type=float,
                   help="train on this fraction of the training set: every k-th image of each class "
                        "(hard links, built once beside --data); the test set stays whole")
    p.add_argument("--throttle", help="also run every configuration over a source slowed by "
                                      "--source-throttle THROTTLE (e.g. latency=20ms), for time to accuracy")
    p.add_argument("--throttled-only", action="store_true",
                   help="with --throttle: skip the plain pass, run only the throttled one")
    p.add_argument("--target-accuracy", type=float, default=0.88,
                   help="test accuracy whose first epoch gives the time to accuracy")
    p.add_argument("--v2-flags", default="",
                   help="shade-peer flags replacing v2's, v2-ahead's and v2-noweights' (e.g. '--boost 2 --max-weight 8')")
    p.add_argument("--out", default=str(REPO / "test" / "results" / "training"))
    p.add_argument("--bin", default=str(REPO / "bin"))
    p.add_argument("--peer-flags", default="", help="extra shade-peer flags for every run")
    p.add_argument("--merge", nargs="+", metavar="CSV",
                   help="train nothing: summarize these results.csv files of earlier runs (a benchmark run "
                        "in parts) together into --out")
    a = p.parse_args(argv)
    a.seeds = [int(s) for s in a.seeds.split(",")] if a.seeds else [a.seed]
    a.fractions = [float(f) for f in a.fractions.split(",")]
    a.configs = list(CONFIGS) if a.configs == "all" else [c for c in a.configs.split(",") if c]
    for c in a.configs:
        if ALIASES.get(c, c) not in CONFIGS:
            p.error(f"unknown configuration {c!r}; known: {', '.join(list(CONFIGS) + list(ALIASES))}")
    if a.subset is not None and not 0 < a.subset <= 1:
        p.error("--subset wants a fraction in (0, 1]")
    if a.v2_flags:
        apply_v2_flags(p, a.v2_flags)
    return a


def apply_v2_flags(parser, text):
    """Replace the sampling flags of v2, v2-ahead and v2-noweights with those in text."""
    words = shlex.split(text)
    if len(words) % 2 or not all(w.startswith("--") for w in words[::2]):
        parser.error(f"--v2-flags {text!r}: want pairs of '--flag value'")
    extra = dict(zip(words[::2], words[1::2]))
    policy = extra.pop("--policy", None)
    for label in ("v2", "v2-ahead", "v2-noweights"):
        c = CONFIGS[label]
        CONFIGS[label] = Config(c.doc + f" ({text})", policy or c.policy, dict(c.sampling, **extra),
                                c.weights, c.cache)


def dataset_bytes(bin_dir, train_dir):
    out = subprocess.run([f"{bin_dir}/shadectl", "dataset", "index", "--json", train_dir],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["bytes"]


def subset_dir(data, fraction):
    """DIR-subset-F beside data: train/ holding hard links (symlinks across
    file systems) to every k-th image of each class of data/train, k = 1/F,
    built once (a later call finds it); test/ a link to the whole test set."""
    data = Path(data).resolve()
    dst = data.parent / f"{data.name}-subset-{fraction:g}"
    if (dst / ".complete").exists():
        return dst
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    picked = 0
    for cls in sorted(d for d in (data / "train").iterdir() if d.is_dir()):
        files = sorted(f for f in cls.iterdir() if f.is_file())
        (tmp / "train" / cls.name).mkdir(parents=True)
        for j in range(max(1, round(len(files) * fraction))):
            f = files[min(len(files) - 1, round(j / fraction))]
            link = tmp / "train" / cls.name / f.name
            try:
                os.link(f, link)
            except OSError:
                link.symlink_to(f)
            picked += 1
    (tmp / "test").symlink_to(data / "test")
    (tmp / ".complete").write_text(f"{picked} training images: every {1 / fraction:g}-th of {data / 'train'}\n")
    if dst.exists():  # a build that did not finish
        subprocess.run(["rm", "-rf", str(dst)], check=True)
    tmp.rename(dst)
    return dst


def peer_flag_names(bin_dir):
    """The flags this shade-peer binary knows (from its --help)."""
    r = subprocess.run([f"{bin_dir}/shade-peer", "--help"], capture_output=True, text=True)
    return {w.rstrip(",=") for w in (r.stdout + r.stderr).split() if w.startswith("--")}


def fit_flags(flags, known, label):
    """flags without those an older binary lacks where they hold the value
    that means what the binary does without them; an error for any other."""
    out, dropped = [], []
    for k, v in zip(flags[::2], flags[1::2]):
        if k in known:
            out += [k, v]
        elif k in LEGACY and LEGACY[k] in (None, v):
            dropped.append(f"{k} {v}")
        else:
            sys.exit(f"compare.py: {label} needs shade-peer {k} {v}, which this binary lacks (make build)")
    return out, dropped


def run_one(args, label, fraction, seed, throttle, train_dir, train_bytes, known, csv_path):
    cfg = config(label)
    per_peer = max(1 << 16, int(fraction * train_bytes / args.peers))
    flags, dropped = fit_flags(cfg.peer_flags(per_peer), known, label)
    if dropped:
        print(f"# this shade-peer predates {', '.join(dropped)}: left out (its behaviour without them)")
    mesh_dir = Path(args.out) / "mesh"
    env = dict(os.environ, SHADE_BIN=args.bin)
    mesh = [str(REPO / "deploy" / "local" / "mesh.sh")]
    flags = ["--dataset", f"fmnist-train={train_dir}"] + flags + [
        "--replicas", "1", "--prefetch", "0", "--seed", str(seed),
        "--source-throttle", throttle or "off"] + args.peer_flags.split()
    subprocess.run(mesh + ["stop", str(mesh_dir)], env=env, check=False)
    subprocess.run(mesh + ["start", str(args.peers), str(mesh_dir)] + flags, env=env, check=True)
    try:
        sockets = ",".join(str(mesh_dir / f"n{i}.sock") for i in range(args.peers))
        cmd = [sys.executable, str(REPO / "test" / "train" / "train_fmnist.py"), "--sockets", sockets,
               "--world", str(args.world), "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
               "--seed", str(seed), "--test-dir", f"{args.data}/test", "--weights", cfg.weights,
               "--target-accuracy", str(args.target_accuracy),
               "--csv", str(csv_path), "--label", label]
        print(f"== {label} cache {fraction:.0%} ({per_peer if cfg.cache else 0} bytes per peer) seed {seed}"
              f"{' source ' + throttle if throttle else ''}: trainer --weights {cfg.weights}, peers "
              f"{' '.join(flags[2:])}", flush=True)
        subprocess.run(cmd, check=True)
    finally:
        subprocess.run(mesh + ["stop", str(mesh_dir)], env=env, check=False)


def append_rows(run_csv, results_csv, fraction, seed, throttle):
    """Copy a run's rows into results.csv with its cache fraction, seed and
    pass (plain, or the source throttle)."""
    with open(run_csv) as f:
        rows = list(csv.DictReader(f))
    new = not results_csv.exists()
    with open(results_csv, "a", newline="") as f:
        fields = ["config", "fraction", "seed", "pass"] + [k for k in rows[0] if k != "label"]
        w = csv.DictWriter(f, fieldnames=fields)
        if new:
            w.writeheader()
        for r in rows:
            label = r.pop("label")
            w.writerow(dict(r, config=label, fraction=f"{fraction:g}", seed=seed, **{"pass": throttle or "plain"}))
    run_csv.unlink()


def merge(paths, csv_path):
    """Writes the rows of several results.csv files into csv_path; a run
    (config, fraction, seed, pass) found in two files is an error."""
    rows, seen, fields = [], {}, None
    for path in paths:
        with open(path) as f:
            reader = csv.DictReader(f)
            fields = fields or reader.fieldnames
            for r in reader:
                run = (r["config"], r["fraction"], r["seed"], r["pass"])
                if seen.setdefault(run, path) != path:
                    sys.exit(f"compare.py: run {run} is in both {seen[run]} and {path}")
                rows.append(r)
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def load_rows(csv_path):
    rows = []
    with open(csv_path) as f:
        for r in csv.DictReader(f):
            rows.append(dict(config=r["config"], fraction=float(r["fraction"]), seed=int(r["seed"]),
                             pass_=r["pass"], epoch=int(r["epoch"]),
                             hit_ratio=float(r["hit_ratio"]), source_bytes=int(r["source_bytes"]),
                             accuracy=float(r["accuracy"]), epoch_time=float(r["epoch_time"]),
                             distinct=int(r["distinct_samples"]), max_weight=float(r["max_weight"]),
                             ess=float(r["ess"]), train_seconds=float(r["train_seconds"]),
                             sampler=r["sampler"]))
    return rows


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def sd(xs):
    return statistics.stdev(xs) if len(xs) > 1 else float("nan")


def pm(xs, fmt):
    """'mean ± sd' of xs (just the mean for one value)."""
    s = sd(xs)
    return fmt(mean(xs)) + ("" if math.isnan(s) else f" ± {fmt(s)}")


class Group:
    """The runs of one (fraction, config, pass), one list of epochs per seed."""

    def __init__(self, rows):
        self.runs = {}
        for r in rows:
            self.runs.setdefault(r["seed"], []).append(r)
        for rs in self.runs.values():
            rs.sort(key=lambda r: r["epoch"])

    def per_run(self, f):
        return [f(rs) for _, rs in sorted(self.runs.items())]

    @staticmethod
    def warm(rs):
        """Epochs 1.. (epoch 0 starts cold and is a permutation), or all."""
        return [r for r in rs if r["epoch"] > 0] or rs

    def hit(self):
        return self.per_run(lambda rs: mean([r["hit_ratio"] for r in self.warm(rs)]))

    def acc(self):
        return self.per_run(lambda rs: rs[-1]["accuracy"])

    def warm_mean(self, key):
        return mean(self.per_run(lambda rs: mean([r[key] for r in self.warm(rs)])))

    def time_to(self, target):
        """(mean training seconds to target over the runs that reached it, runs
        that reached it, runs)."""
        t = [next((r["train_seconds"] for r in rs if r["accuracy"] >= target), None)
             for rs in self.runs.values()]
        got = [x for x in t if x is not None]
        return (mean(got) if got else None), len(got), len(t)


def summarize(rows, out_dir, argv, args):
    groups = {}
    for r in rows:
        groups.setdefault((r["fraction"], r["config"], r["pass_"]), []).append(r)
    groups = {k: Group(v) for k, v in groups.items()}
    order = list(CONFIGS) + list(ALIASES)
    throttled = sorted({k[2] for k in groups if k[2] != "plain"})
    ttt_pass = throttled[0] if throttled else "plain"
    target = args.target_accuracy
    seeds = sorted({r["seed"] for r in rows})
    lines = ["# Training through Shade: sampling and cache policies side by side", "",
             f"Command: `/usr/bin/python3 test/train/compare.py {' '.join(argv)}`", "",
             f"Fashion-MNIST ({'subset ' + format(args.subset, 'g') + ' of the ' if args.subset else ''}"
             f"training set), small CNN, {args.world} ranks on {args.peers} local peers (`--replicas 1`,"
             f" `--prefetch 0`), {args.epochs} epochs, seeds {','.join(map(str, seeds))}; cache = fraction"
             " of the training set's bytes, summed over the mesh.",
             "Per run, hit ratio, source MiB, distinct samples, largest weight and ESS are means over epochs"
             " 1.. (epoch 0 starts cold and is a permutation); the table gives mean ± sd over the seeds.",
             f"× {HIT_BASE}: hit ratio over {HIT_BASE}'s at the same cache size. Accuracy: test accuracy after"
             f" the last epoch; Δ vs {ACC_BASE}: difference in points, and in units of {ACC_BASE}'s sd over"
             " the seeds. ESS: (Σw)²/Σw² of an epoch's draws over the draws (1 = all weights equal).",
             f"Time to {target:.0%}: training seconds (evaluations excluded) until the test accuracy first"
             f" reached it, mean over the seeds that reached it"
             f"{', over a source throttled by ' + ttt_pass if throttled else ''}.", "",
             f"| cache | config | hit ratio | × {HIT_BASE} | source MiB/epoch | distinct/epoch | max weight | ESS "
             f"| final accuracy | Δ vs {ACC_BASE} | time to {target:.0%} | s/epoch |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for frac in sorted({k[0] for k in groups}):
        base_hit = groups.get((frac, HIT_BASE, "plain"))
        base_hit = mean(base_hit.hit()) if base_hit else None
        base_acc = groups.get((frac, ACC_BASE, "plain"))
        for cfg in sorted({k[1] for k in groups if k[0] == frac}, key=order.index):
            g = groups.get((frac, cfg, "plain")) or groups[(frac, cfg, ttt_pass)]
            hit, acc = g.hit(), g.acc()
            ratio = f"{mean(hit) / base_hit:.2f}×" if base_hit else "-"
            dacc = "-"
            if base_acc:
                d = mean(acc) - mean(base_acc.acc())
                s = sd(base_acc.acc())
                dacc = f"{100 * d:+.2f} pt" + ("" if math.isnan(s) or s == 0 else f" ({d / s:+.1f} sd)")
            tg = groups.get((frac, cfg, ttt_pass))
            ttt = "-"
            if tg:
                t, k, n = tg.time_to(target)
                ttt = "not reached" if t is None else f"{t:.1f}s" + ("" if k == n else f" ({k}/{n} seeds)")
            lines.append(
                f"| {frac:.0%} | {cfg} | {pm(hit, lambda x: f'{100 * x:.2f}%')} | {ratio} "
                f"| {g.warm_mean('source_bytes') / 2**20:.2f} | {g.warm_mean('distinct'):.0f} "
                f"| {g.warm_mean('max_weight'):.2f} | {g.warm_mean('ess'):.3f} "
                f"| {pm(acc, lambda x: f'{100 * x:.2f}%')} | {dacc} | {ttt} | {g.warm_mean('epoch_time'):.1f} |")
    lines += ["", "Configurations (every sampling and policy flag is given explicitly):", ""]
    samplers = {}
    for r in rows:
        samplers.setdefault(r["config"], r["sampler"])
    for label in sorted({k[1] for k in groups}, key=order.index):
        c = config(label)
        alias = f" (alias of {ALIASES[label]})" if label in ALIASES else ""
        flags = " ".join(c.peer_flags("SIZE"))
        lines.append(f"- `{label}`{alias}: {c.doc}. Peers `{flags}`, trainer `--weights {c.weights}`;"
                     f" the peers named their sampler \"{samplers.get(label, '?')}\".")
    (out_dir / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(groups, out_dir, order)


def plot(groups, out_dir, order):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (Debian python3-matplotlib): no plot", file=sys.stderr)
        return
    fracs = sorted({k[0] for k in groups})
    fig, axes = plt.subplots(2, len(fracs), figsize=(6 * len(fracs), 8), squeeze=False)
    for col, frac in enumerate(fracs):
        for cfg in sorted({k[1] for k in groups if k[0] == frac}, key=order.index):
            g = groups.get((frac, cfg, "plain"))
            if g is None:
                continue
            epochs = sorted({r["epoch"] for rs in g.runs.values() for r in rs})
            hit = [mean([r["hit_ratio"] for rs in g.runs.values() for r in rs if r["epoch"] == e]) for e in epochs]
            acc = [mean([r["accuracy"] for rs in g.runs.values() for r in rs if r["epoch"] == e]) for e in epochs]
            axes[0][col].plot(epochs, [100 * h for h in hit], marker="o", label=cfg)
            axes[1][col].plot(epochs, [100 * a for a in acc], marker="o", label=cfg)
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
    if args.merge:
        merge(args.merge, out / "results.csv")
        summarize(load_rows(out / "results.csv"), out, argv, args)
        return
    if args.subset is not None and args.subset < 1:
        train_dir = subset_dir(args.data, args.subset) / "train"
    else:
        train_dir = Path(args.data) / "train"
    train_bytes = dataset_bytes(args.bin, str(train_dir))
    known = peer_flag_names(args.bin)
    csv_path = out / "results.csv"
    run_csv = out / "run.csv"
    for p in (csv_path, run_csv):
        if p.exists():
            p.unlink()
    start = time.time()
    passes = [None] + ([args.throttle] if args.throttle else [])
    if args.throttle and args.throttled_only:
        passes = [args.throttle]
    for throttle in passes:
        for fraction in args.fractions:
            for label in args.configs:
                for seed in args.seeds:
                    run_one(args, label, fraction, seed, throttle, train_dir, train_bytes, known, run_csv)
                    append_rows(run_csv, csv_path, fraction, seed, throttle)
    print(f"all runs took {time.time() - start:.0f}s")
    summarize(load_rows(csv_path), out, argv, args)


if __name__ == "__main__":
    main()
