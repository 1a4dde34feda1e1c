#!/usr/bin/python3
"""Many training jobs on one dataset: what sharing the mesh's cache saves.

Several jobs (j0, j1, ... with trainer seeds --seeds, world sizes --worlds)
train the CNN of test/train/train_fmnist.py on one dataset of a local mesh
of --peers shade-peer processes, in two modes:

  separate    one mesh started once; the jobs run one after the other on it
  concurrent  a fresh mesh; the jobs run all at once

Each job names itself (train_fmnist.py --job), so each has its own world,
epochs, orders, scores and sampler seed while the cache is shared. Job k's
rank r reads through peer (k + r) mod --peers, so concurrent jobs spread
over the peers. The peers run compare.py's configuration (--config, v2 by
default: every sampling and policy flag spelled out) with --replicas 1 and
--prefetch 0, and a cache of --fractions of the training set's bytes summed
over the mesh, as compare.py does; the peers' --seed is --peer-seed in both
modes, so a job's sampler seed (the peer seed and the job's name) is the
same in both.

Measured per mode: bytes read from the source by the whole mesh (SHADE.STATS
dataset "total" source_bytes summed over the peers, read-ahead and warm-up
included, taken when the mode's last job ends); per job: its reads' hit
ratio and source bytes (its SHADE.STATS "jobs" counters summed over the
peers, taken as soon as the job ends, before the peers retire it as idle),
final test accuracy, and when each of its epochs ended (to see whether
concurrent jobs ran in lockstep). Targets (DESIGN.md section 8): the
concurrent mesh reads at most half what the separate runs read
(concurrent/separate <= 0.5), and each job's final accuracy is within 1
point of its separate run's.

Writes DIR/results.csv (every epoch of every job, train_fmnist.py's columns
with mode, fraction, job, seed and world in front), DIR/jobs.csv (one row
per job and mode), DIR/results.md (the tables) and DIR/logs/ (each job's
output). A run with the defaults (the whole training set, 8 epochs, 3 jobs
of one rank) takes about 15 minutes on a 2-core machine; it prints its
timing.

    /usr/bin/python3 test/bench/many_jobs.py --out test/results/many-jobs
    /usr/bin/python3 test/bench/many_jobs.py --subset 0.1 --epochs 2 --out /tmp/many-jobs
"""

import argparse
import csv
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "test" / "train"))
sys.path.insert(0, str(REPO / "client" / "python"))

import compare  # noqa: E402  (the mesh configurations, the subset, the flag checks)

import shade  # noqa: E402
from shade.client import find_job  # noqa: E402

DATASET = "fmnist-train"
MODES = ("separate", "concurrent")
RATIO_TARGET = 0.5  # concurrent / separate source bytes, at most
ACC_TARGET = 1.0  # points of accuracy between a job's two runs, at most


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=str(REPO / ".data" / "fashion-mnist"), help="imported Fashion-MNIST root")
    p.add_argument("--subset", type=float, default=1.0,
                   help="train on this fraction of the training set (compare.py's subset: every k-th image "
                        "of each class); 1 for all of it")
    p.add_argument("--fractions", default="0.2",
                   help="cache sizes as fractions of the training set's bytes (summed over the mesh); "
                        "both modes run for each")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--seeds", default="0,1,2", help="trainer seeds, one job per seed (j0, j1, ...)")
    p.add_argument("--worlds", default="1",
                   help="ranks of each job: one number for all, or one per job (e.g. 3,2,1)")
    p.add_argument("--peers", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--config", default="v2",
                   help=f"the peers' configuration, one of compare.py's: {', '.join(compare.CONFIGS)}")
    p.add_argument("--peer-seed", type=int, default=0, help="the peers' --seed, the same in both modes")
    p.add_argument("--throttle", help="shade-peer --source-throttle for both modes (e.g. latency=5ms)")
    p.add_argument("--modes", default=",".join(MODES), help="which modes to run, in this order")
    p.add_argument("--out", default=str(REPO / "test" / "results" / "many-jobs"))
    p.add_argument("--bin", default=str(REPO / "bin"))
    p.add_argument("--peer-flags", default="", help="extra shade-peer flags for every peer")
    a = p.parse_args(argv)
    a.seeds = [int(s) for s in a.seeds.split(",") if s]
    worlds = [int(w) for w in a.worlds.split(",") if w]
    if len(worlds) == 1:
        worlds *= len(a.seeds)
    if len(worlds) != len(a.seeds) or min(worlds) < 1:
        p.error(f"--worlds {a.worlds!r}: one world >= 1, or one per job ({len(a.seeds)} jobs)")
    a.worlds = worlds
    a.fractions = [float(f) for f in a.fractions.split(",") if f]
    a.modes = [m for m in a.modes.split(",") if m]
    if not a.seeds or any(m not in MODES for m in a.modes) or not a.modes:
        p.error(f"need seeds, and --modes among {', '.join(MODES)}")
    if a.config not in compare.CONFIGS:
        p.error(f"unknown --config {a.config!r}")
    if a.subset is not None and not 0 < a.subset <= 1:
        p.error("--subset wants a fraction in (0, 1]")
    return a


class Job:
    """One job of a mode: its trainer process, its log, its figures."""

    def __init__(self, k, seed, world):
        self.name, self.seed, self.world = f"j{k}", seed, world
        self.k = k
        self.proc = None
        self.started = self.ended = None
        self.counters = None  # (reads, hits, source_reads, source_bytes) summed over the peers
        self.csv = None

    def sockets(self, mesh_dir, peers):
        """Rank r of job k reads through peer (k + r) mod peers."""
        return ",".join(str(mesh_dir / f"n{(self.k + r) % peers}.sock") for r in range(peers))


def job_counters(sockets, job):
    """(reads, hits, source_reads, source_bytes) of job summed over the peers."""
    total = [0, 0, 0, 0]
    for s in sockets:
        with shade.Client(s, retry_for=10) as c:
            j = find_job(c.stats(DATASET)["datasets"][0], job)
        if j is not None:
            for i, key in enumerate(("reads", "hits", "source_reads", "source_bytes")):
                total[i] += j[key]
    return tuple(total)


def mesh_totals(sockets):
    """(source bytes, source reads, hits, reads) of the dataset over the
    whole mesh, every job and the read-ahead and warm-up included."""
    src = n_src = hits = reads = 0
    for s in sockets:
        with shade.Client(s, retry_for=10) as c:
            t = c.stats(DATASET)["datasets"][0]["total"]
        src += t["source_bytes"]
        n_src += t["source_reads"]
        hits += t["hits"]
        reads += t["hits"] + t["cold_misses"] + t["capacity_misses"]
    return src, n_src, hits, reads


class Mesh:
    """A local mesh of shade-peer processes (deploy/local/mesh.sh), stopped
    by the PIDs the script recorded."""

    def __init__(self, args, directory, flags):
        self.dir, self.flags, self.n = directory, flags, args.peers
        self.env = dict(os.environ, SHADE_BIN=args.bin)
        self.script = str(REPO / "deploy" / "local" / "mesh.sh")

    @property
    def sockets(self):
        return [str(self.dir / f"n{i}.sock") for i in range(self.n)]

    def __enter__(self):
        subprocess.run([self.script, "stop", str(self.dir)], env=self.env, check=False)
        subprocess.run([self.script, "start", str(self.n), str(self.dir)] + self.flags, env=self.env,
                       check=True)
        return self

    def __exit__(self, *exc):
        subprocess.run([self.script, "stop", str(self.dir)], env=self.env, check=False)


def start_job(args, job, mode, mesh, cfg, test_dir, log_dir, run_dir):
    job.csv = run_dir / f"{mode}-{job.name}.csv"
    if job.csv.exists():
        job.csv.unlink()
    cmd = [sys.executable, str(REPO / "test" / "train" / "train_fmnist.py"),
           "--sockets", job.sockets(mesh.dir, args.peers), "--world", str(job.world),
           "--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--seed", str(job.seed),
           "--test-dir", str(test_dir), "--weights", cfg.weights, "--job", job.name,
           "--csv", str(job.csv), "--label", mode]
    log = open(log_dir / f"{mode}-{job.name}.log", "w")
    job.started = time.time()
    job.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1)

    def pump():
        with log:
            for line in job.proc.stdout:
                log.write(line)
                log.flush()
                print(f"[{mode} {job.name}] {line}", end="", flush=True)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return t


def finish_job(job, pump, mesh, mode):
    """Waits for the job's trainer, then takes its counters at once."""
    rc = job.proc.wait()
    pump.join()
    job.ended = time.time()
    if rc != 0:
        sys.exit(f"many_jobs.py: {mode} {job.name}: train_fmnist.py exited with {rc}")
    job.counters = job_counters(mesh.sockets, job.name)


def run_mode(args, mode, fraction, cfg, flags, test_dir, out):
    """Runs every job of mode on a fresh mesh; returns (jobs, mesh totals, seconds)."""
    jobs = [Job(k, s, w) for k, (s, w) in enumerate(zip(args.seeds, args.worlds))]
    log_dir = run_dir = out / "logs"  # each job's output and its epochs' CSV
    log_dir.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"== {mode}: {len(jobs)} jobs ({', '.join(f'{j.name} seed {j.seed} world {j.world}' for j in jobs)})"
          f", cache {fraction:.0%}, peers {' '.join(flags)}", flush=True)
    with Mesh(args, out / "mesh", flags) as mesh:
        t0 = time.time()
        if mode == "separate":
            for job in jobs:
                finish_job(job, start_job(args, job, mode, mesh, cfg, test_dir, log_dir, run_dir), mesh, mode)
        else:
            pumps = [start_job(args, job, mode, mesh, cfg, test_dir, log_dir, run_dir) for job in jobs]
            # Counters as each job ends: wait in the order they finish.
            left = list(zip(jobs, pumps))
            while left:
                for job, pump in list(left):
                    if job.proc.poll() is not None:
                        finish_job(job, pump, mesh, mode)
                        left.remove((job, pump))
                time.sleep(0.2)
        seconds = time.time() - t0
        totals = mesh_totals(mesh.sockets)
    for job in jobs:
        job.mode_start = t0
    print(f"== {mode} took {seconds:.0f}s; mesh source {totals[0] / 2**20:.2f} MiB", flush=True)
    return jobs, totals, seconds


def epoch_rows(job):
    with open(job.csv) as f:
        return list(csv.DictReader(f))


def write_results(args, argv, out, runs, train_bytes, n_samples, per_peer_by_fraction, cfg_flags, elapsed):
    """runs: {(fraction, mode): (jobs, totals, seconds)}."""
    results, jobs_csv = out / "results.csv", out / "jobs.csv"
    fields = None
    with open(results, "w", newline="") as f:
        w = None
        for (fraction, mode), (jobs, _, _) in runs.items():
            for job in jobs:
                for r in epoch_rows(job):
                    r.pop("label", None)
                    row = dict(mode=mode, fraction=f"{fraction:g}", job=job.name, seed=job.seed,
                               world=job.world, **{k: v for k, v in r.items() if k != "job"})
                    if w is None:
                        fields = list(row)
                        w = csv.DictWriter(f, fieldnames=fields)
                        w.writeheader()
                    w.writerow(row)
    summary = {}
    with open(jobs_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mode", "fraction", "job", "seed", "world", "reads", "hits", "hit_ratio", "source_reads",
                    "source_bytes", "final_accuracy", "seconds", "mesh_source_bytes", "mode_seconds"])
        for (fraction, mode), (jobs, totals, seconds) in runs.items():
            for job in jobs:
                rows = epoch_rows(job)
                reads, hits, src_reads, src_bytes = job.counters
                acc = float(rows[-1]["accuracy"])
                ends = [job.started - job.mode_start + float(r["wall_seconds"]) for r in rows]
                summary[(fraction, mode, job.name)] = dict(
                    seed=job.seed, world=job.world, reads=reads, hits=hits, src=src_bytes, acc=acc,
                    hit=hits / reads if reads else 0.0, seconds=job.ended - job.started, ends=ends,
                    epoch_hits=[float(r["job_hit_ratio"]) for r in rows])
                w.writerow([mode, f"{fraction:g}", job.name, job.seed, job.world, reads, hits,
                            f"{hits / reads if reads else 0.0:.6f}", src_reads, src_bytes, f"{acc:.6f}",
                            f"{job.ended - job.started:.1f}", totals[0], f"{seconds:.1f}"])

    names = [f"j{k}" for k in range(len(args.seeds))]
    lines = ["# Many jobs on one dataset: separate runs vs concurrent", "",
             f"Command: `/usr/bin/python3 test/bench/many_jobs.py {' '.join(argv)}`", "",
             f"Fashion-MNIST ({'subset ' + format(args.subset, 'g') + ' of the ' if args.subset and args.subset < 1 else ''}"
             f"training set: {n_samples} images, {train_bytes / 2**20:.2f} MiB), the CNN of train_fmnist.py, "
             f"{len(names)} jobs ({', '.join(f'{n} seed {s} world {w}' for n, s, w in zip(names, args.seeds, args.worlds))}),"
             f" {args.epochs} epochs each, on {args.peers} local peers (`--replicas 1`, `--prefetch 0`, "
             f"peer `--seed {args.peer_seed}`, config `{args.config}`: `{' '.join(cfg_flags)}`"
             f"{', source throttled ' + args.throttle if args.throttle else ''}). "
             "Job k's rank r reads through peer (k + r) mod peers.",
             "**separate**: one mesh, the jobs one after the other; **concurrent**: a fresh mesh, the jobs at once.",
             "Mesh source MiB: the dataset's source bytes summed over the peers (SHADE.STATS `total`), "
             "every job together; jobs' own source MiB: the bytes of the jobs' reads that went to the source "
             "(their `jobs` counters; concurrent misses of one sample collapse into one mesh read, but count "
             "for each job). Mesh hit ratio: the dataset's hits over its reads on every peer. Per job: its reads' hit ratio and source bytes (SHADE.STATS `jobs`, summed over"
             " the peers), test accuracy after the last epoch.", ""]
    for fraction in args.fractions:
        got = {m: runs.get((fraction, m)) for m in MODES}
        lines += [f"## Cache {fraction:.0%} of the training set ({per_peer_by_fraction[fraction]} bytes per peer)", "",
                  "| mode | mesh source MiB | × one pass over the data | jobs' own source MiB (sum) "
                  "| mesh hit ratio | wall s |", "| --- | --- | --- | --- | --- | --- |"]
        for m in MODES:
            if got[m]:
                jobs, totals, seconds = got[m]
                own = sum(j.counters[3] for j in jobs)
                lines.append(f"| {m} | {totals[0] / 2**20:.2f} | {totals[0] / train_bytes:.2f} | {own / 2**20:.2f} "
                             f"| {100 * totals[2] / totals[3] if totals[3] else 0:.2f}% | {seconds:.0f} |")
        ratio = None
        if got["separate"] and got["concurrent"] and got["separate"][1][0] > 0:
            ratio = got["concurrent"][1][0] / got["separate"][1][0]
            lines += ["", f"**concurrent / separate source bytes: {ratio:.3f}** (target ≤ {RATIO_TARGET}: "
                          f"{'met' if ratio <= RATIO_TARGET else 'not met'})"]
        lines += ["", "| job | seed | world | mode | hit ratio | per-epoch hit ratio | source MiB | final accuracy "
                      "| Δ accuracy (concurrent − separate) | epochs ended (s into the mode) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        worst = None
        for n in names:
            for m in MODES:
                s = summary.get((fraction, m, n))
                if s is None:
                    continue
                d = "-"
                a, b = summary.get((fraction, "separate", n)), summary.get((fraction, "concurrent", n))
                if m == "concurrent" and a and b:
                    diff = 100 * (b["acc"] - a["acc"])
                    worst = max(worst or 0.0, abs(diff))
                    d = f"{diff:+.2f} pt"
                lines.append(f"| {n} | {s['seed']} | {s['world']} | {m} | {100 * s['hit']:.2f}% "
                             f"| {' '.join(f'{100 * h:.0f}%' for h in s['epoch_hits'])} | {s['src'] / 2**20:.2f} "
                             f"| {100 * s['acc']:.2f}% | {d} | {' '.join(f'{e:.0f}' for e in s['ends'])} |")
        if worst is not None:
            lines += ["", f"**largest accuracy difference: {worst:.2f} points** (target ≤ {ACC_TARGET:g}: "
                          f"{'met' if worst <= ACC_TARGET else 'not met'})"]
        lines.append("")
    lines.append(f"All runs took {elapsed:.0f}s.")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.subset is not None and args.subset < 1:
        root = compare.subset_dir(args.data, args.subset)
    else:
        root = Path(args.data)
    train_dir, test_dir = root / "train", Path(args.data) / "test"
    train_bytes = compare.dataset_bytes(args.bin, str(train_dir))
    n_samples = sum(1 for p in train_dir.rglob("*") if p.is_file())
    known = compare.peer_flag_names(args.bin)
    cfg = compare.config(args.config)
    start = time.time()
    runs, per_peer_by_fraction, shown_flags = {}, {}, []
    for fraction in args.fractions:
        per_peer = max(1 << 16, int(fraction * train_bytes / args.peers))
        per_peer_by_fraction[fraction] = per_peer
        flags, dropped = compare.fit_flags(cfg.peer_flags(per_peer), known, args.config)
        if dropped:
            print(f"# this shade-peer predates {', '.join(dropped)}: left out (its behaviour without them)")
        shown_flags = compare.fit_flags(cfg.peer_flags("SIZE"), known, args.config)[0]
        flags = ["--dataset", f"{DATASET}={train_dir}"] + flags + [
            "--replicas", "1", "--prefetch", "0", "--seed", str(args.peer_seed),
            "--source-throttle", args.throttle or "off"] + args.peer_flags.split()
        for mode in args.modes:
            runs[(fraction, mode)] = run_mode(args, mode, fraction, cfg, flags, test_dir, out)
    elapsed = time.time() - start
    print(f"all runs took {elapsed:.0f}s", flush=True)
    write_results(args, argv, out, runs, train_bytes, n_samples, per_peer_by_fraction, shown_flags, elapsed)


if __name__ == "__main__":
    main()
