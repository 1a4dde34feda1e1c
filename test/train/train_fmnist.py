#!/usr/bin/python3
"""Train a small CNN on Fashion-MNIST through Shade, on CPU, with
torch.distributed (gloo on loopback) across --world rank processes.

Every rank reads its slice of each epoch's importance-sampled order, with
the importance weight w = 1/(N p) of each draw, from its own node's
shade-peer (rank r uses --sockets[r % len]), fetches each minibatch with one
MGET, reports per-sample losses keyed by the ids it trained, averages
gradients with DDP and sends SHADE.DONE. With --weights on (the default) it
minimises the weighted loss mean(loss * w), an unbiased estimate of the
dataset's mean loss whatever the draw probabilities; the losses it reports
and prints are the raw ones. After each epoch rank 0 evaluates on the test
set (read once through the peer, or from a folder) and prints one line:

    epoch  hit ratio of the epoch (SHADE.STATS summed over the distinct
    sockets)  bytes read from the source  test accuracy  mean raw loss
    samples/s  epoch time  data wait (seconds the training loop waited for
    its next minibatch, and that time as a share of the epoch, both
    averaged over the ranks)  distinct samples in the epoch's order (all
    ranks)  largest weight  ESS (effective sample size (sum w)^2 / sum w^2
    of the epoch's draws over all ranks, as a share of the draws: 1.0 when
    every weight is equal)  the sampler that made the order (the peer's own
    name for it from SHADE.STATS, or "uniform fallback" when the client
    fell back, "uniform permutation (client)" with --no-pads)

With --csv each epoch also appends a row holding, beside those figures, the
cumulative training time (train_seconds: the epochs' wall time, without the
test evaluations) and the wall time since training started (wall_seconds),
so time to a target accuracy can be derived; --target-accuracy prints when
it is first reached.

With --job NAME every rank trains in that job of the dataset (SHADE.ORDER,
REPORT, DONE ... JOB NAME, and its reads named with SHADE.JOB), beside any
other job sharing the dataset and the peers' cache; without it, the
dataset's default job. The epoch hit ratio and source bytes above are the
dataset's, every job's reads counted against the epoch the peer counts
(with several jobs at once, a mix of theirs). With --job, each epoch line
also gives the job's own figures: its reads' hit ratio and the bytes its
reads took from the source, from SHADE.STATS "jobs" summed over every
socket of --sockets (the counters are cumulative; the figures are the
epoch's increase). The CSV always ends with the columns job, job_hit_ratio
and job_source_bytes (the last two empty without --job).

The unique-sample hit ratio (distinct ids whose first read hit) is not
printed: whether a read hit is not visible to the client (GET/MGET replies
carry only bytes), so it cannot be derived on this side.

Example (one peer, 3 ranks):
    shadectl dataset import-idx --dst /tmp/fmnist
    shade-peer --socket /tmp/s.sock --dataset fmnist-train=/tmp/fmnist/train \\
        --dataset fmnist-test=/tmp/fmnist/test --cache-size 256MiB &
    PYTHONPATH=client/python /usr/bin/python3 test/train/train_fmnist.py \\
        --sockets /tmp/s.sock --world 3 --epochs 5 --csv runs.csv --label pads+app \\
        --weights on --target-accuracy 0.88
    # a second job on the same dataset, at the same time:
    PYTHONPATH=client/python /usr/bin/python3 test/train/train_fmnist.py \\
        --sockets /tmp/s.sock --world 1 --epochs 5 --job other --seed 1
"""

import argparse
import csv
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client" / "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import shade  # noqa: E402
from shade.client import check_job, find_job  # noqa: E402
from shade.torch import ShadeDataset, ShadeSampler, decode_image, epoch_done, report_losses  # noqa: E402


class Net(nn.Module):
    """2 conv + 2 fc, about 0.1M parameters: narrow, for 2-core CPUs."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc1 = nn.Linear(16 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sockets", default=os.environ.get("SHADE_SOCKET", "/run/shade/shade.sock"),
                   help="comma-separated peer sockets; rank r uses sockets[r %% len]")
    p.add_argument("--dataset", default="fmnist-train", help="training dataset name on the peers")
    p.add_argument("--test-dataset", default="fmnist-test",
                   help="test dataset name on rank 0's peer (read once, kept in memory)")
    p.add_argument("--test-dir", help="read the test set from this ImageFolder directory instead")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers per rank")
    p.add_argument("--no-pads", action="store_true",
                   help="client-side PADS off: uniform order as DistributedSampler")
    p.add_argument("--weights", choices=("on", "off"), default="on",
                   help="on: minimise mean(loss * w) with the order's importance weights "
                        "(unbiased); off: mean(loss), biased toward what the sampler favours. "
                        "The weights are fetched either way, for the ESS and largest-weight figures")
    p.add_argument("--target-accuracy", type=float,
                   help="print when the test accuracy first reaches this (e.g. 0.88)")
    p.add_argument("--password", default=os.environ.get("SHADE_REQUIREPASS"))
    p.add_argument("--csv", help="append one row per epoch to this CSV file")
    p.add_argument("--label", default="", help="configuration label for the CSV (e.g. pads+app)")
    p.add_argument("--job", help="train in this job of the dataset (default: the dataset's default job); "
                                 "several jobs share the dataset and the cache, each with its own orders")
    a = p.parse_args(argv)
    a.sockets = [s for s in a.sockets.split(",") if s]
    if not a.sockets or a.world < 1:
        p.error("need at least one socket and --world >= 1")
    if a.job is not None:
        try:
            check_job(a.job)
        except shade.InvalidArgument as e:
            p.error(f"--job: {e}")
    return a


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_test(args, client):
    """Test images and labels as tensors, read once."""
    if args.test_dir:
        root = Path(args.test_dir)
        classes = sorted(d.name for d in root.iterdir() if d.is_dir())
        paths = sorted(p for c in classes for p in (root / c).iterdir())
        xs = torch.stack([decode_image(p.read_bytes()) for p in paths])
        ys = torch.tensor([classes.index(p.parent.name) for p in paths])
        return xs, ys
    labels = client.labels(args.test_dataset)
    xs = []
    for s in range(0, len(labels), 1000):
        ids = list(range(s, min(s + 1000, len(labels))))
        xs += [decode_image(b) for b in client.mget(args.test_dataset, ids)]
    return torch.stack(xs), torch.tensor(labels)


@torch.no_grad()
def accuracy(model, xs, ys):
    model.eval()
    correct = sum(int((model(xs[s:s + 1000]).argmax(1) == ys[s:s + 1000]).sum())
                  for s in range(0, len(ys), 1000))
    model.train()
    return correct / len(ys)


def sampler_name(stats, sampler):
    """The sampler behind the order ``sampler`` (a ShadeSampler) last used:
    the peer's own name for it (SHADE.STATS "sampler"; an older peer has
    only the boolean "pads"), unless the client made the order itself."""
    if sampler.order_source == "uniform":
        return "uniform permutation (client)"
    if sampler.order_source == "fallback":
        return "uniform fallback"
    if stats.get("sampler"):
        return stats["sampler"]
    return "pads rank-log" if stats.get("pads") else "uniform permutation"


def order_figures(ids, weights, world):
    """(distinct samples, draws, largest weight, ESS as a share of the
    draws) of the epoch's whole order, gathered from every rank."""
    parts = [None] * world
    dist.all_gather_object(parts, (ids, weights))
    all_ids = [i for part in parts for i in part[0]]
    all_w = [w for part in parts for w in part[1]]
    if not all_w:
        return 0, 0, 0.0, 0.0
    s1 = sum(all_w)
    s2 = sum(w * w for w in all_w)
    ess = (s1 * s1 / s2) / len(all_w) if s2 > 0 else 0.0
    return len(set(all_ids)), len(all_w), max(all_w), ess


def epoch_stats(clients, dataset, epoch):
    """(hit ratio, source bytes, share of reads served from the read-ahead)
    of one epoch summed over the peers."""
    hits = reads = src = ahead = 0
    for c in clients:
        for d in c.stats(dataset)["datasets"]:
            for e in d["epochs"]:
                if e["epoch"] == epoch:
                    hits += e["hits"]
                    reads += e["hits"] + e["cold_misses"] + e["capacity_misses"]
                    src += e["source_bytes"]
                    ahead += e.get("prefetch_hits", 0)
    return (hits / reads if reads else 0.0), src, (ahead / reads if reads else 0.0)


def job_counters(clients, dataset, job):
    """(reads, hits, source bytes) of job's trainers so far, summed over the
    peers (each peer counts the reads of the trainers on its socket)."""
    reads = hits = src = 0
    for c in clients:
        j = find_job(c.stats(dataset)["datasets"][0], job)
        if j is not None:
            reads += j["reads"]
            hits += j["hits"]
            src += j["source_bytes"]
    return reads, hits, src


def rank_main(rank, args, port):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=args.world)
    sock = args.sockets[rank % len(args.sockets)]
    distinct = list(dict.fromkeys(args.sockets[: args.world]))
    peers, everyone = [], []
    if rank == 0:
        peers = [shade.Client(s, password=args.password, job=args.job) for s in distinct]
        for c in peers:
            # A new run: epoch 0, this world (a job the mesh does not know
            # yet has nothing to reset).
            c.reset(args.dataset)
        everyone = [shade.Client(s, password=args.password)
                    for s in dict.fromkeys(args.sockets)] if args.job is not None else []
    dist.barrier()

    ds = ShadeDataset(sock, args.dataset, password=args.password, job=args.job)
    sampler = ShadeSampler(sock, args.dataset, rank, args.world, args.batch_size,
                           seed=args.seed, pads=not args.no_pads, password=args.password,
                           weights=True, job=args.job)
    loader = DataLoader(ds, sampler=sampler, batch_size=None, num_workers=args.workers,
                        persistent_workers=args.workers > 0)
    client = sampler.client
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    if rank == 0:
        t = time.time()
        test_x, test_y = load_test(args, peers[0])
        st = peers[0].stats(args.dataset)
        d = st["datasets"][0]
        print(f"# {args.label or 'run'}: dataset {args.dataset} ({d['samples']} samples), "
              f"job {args.job or 'default'}, "
              f"world {args.world}, batch {args.batch_size}, lr {args.lr}, peers {len(peers)}, "
              f"policy {st['policy']}, sampler "
              f"{'uniform permutation (client)' if args.no_pads else sampler_name(st, sampler)}, "
              f"loss {'weighted' if args.weights == 'on' else 'unweighted'}, "
              f"cache {st['cache_capacity'] / 2**20:.2f} MiB per peer; test set {len(test_y)} images "
              f"loaded in {time.time() - t:.1f}s; started {time.time() - args.t_start:.1f}s "
              f"after launch", flush=True)

    dist.barrier()
    train_start = time.time()
    train_seconds = 0.0  # the epochs' wall time, without the evaluations
    job_before = job_counters(everyone, args.dataset, args.job) if everyone else None
    reached = False
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        dist.barrier()
        t0 = time.time()
        n, loss_sum, wait = 0, 0.0, 0.0
        epoch_ids, epoch_w = [], []
        batches = iter(loader)
        while True:
            # Data wait: the time the loop spends waiting for its next
            # minibatch (the order, the MGET, decoding), not training.
            tw = time.perf_counter()
            batch = next(batches, None)
            wait += time.perf_counter() - tw
            if batch is None:
                break
            x, y, ids, w = batch
            loss = F.cross_entropy(model(x), y, reduction="none")
            report_losses(client, args.dataset, epoch, ids, loss)
            # Importance-sampling SGD: mean(loss * w) has the expectation of
            # the dataset's mean loss, however the draws were weighted.
            mean = (loss * w).mean() if args.weights == "on" else loss.mean()
            opt.zero_grad()
            mean.backward()
            opt.step()
            n += len(ids)
            loss_sum += float(loss.detach().sum())
            epoch_ids += ids.tolist()
            epoch_w += w.tolist()
        epoch_done(client, args.dataset, epoch, rank)
        busy = time.time() - t0  # this rank's epoch, before waiting for the others
        totals = torch.tensor([n, loss_sum, wait, wait / busy], dtype=torch.float64)
        dist.all_reduce(totals)
        elapsed = time.time() - t0
        train_seconds += elapsed
        distinct, draws, max_w, ess = order_figures(epoch_ids, epoch_w, args.world)
        if rank == 0:
            hit, src, ahead = epoch_stats(peers, args.dataset, epoch)
            name = sampler_name(peers[0].stats(args.dataset), sampler)
            acc = accuracy(model.module, test_x, test_y)
            wall = time.time() - train_start
            rate = totals[0].item() / elapsed
            data_wait, wait_frac = totals[2].item() / args.world, totals[3].item() / args.world
            job_hit, job_src, job_line = "", "", ""
            if everyone:
                # Every rank is done with the epoch (all_reduce above): the
                # job's counters hold all its reads of the epoch.
                now = job_counters(everyone, args.dataset, args.job)
                reads, hits, jsrc = (a - b for a, b in zip(now, job_before))
                job_before = now
                job_hit, job_src = (hits / reads if reads else 0.0), jsrc
                job_line = f"  job {args.job} hit {job_hit:6.2%} source {jsrc / 2**20:7.2f} MiB"
            print(f"epoch {epoch:3d}  hit {hit:6.2%}  source {src / 2**20:7.2f} MiB  "
                  f"acc {acc:6.2%}  loss {totals[1].item() / totals[0].item():.4f}  "
                  f"{rate:7.0f} samples/s  {elapsed:6.1f}s  data wait {data_wait:5.2f}s "
                  f"{wait_frac:6.1%}  distinct {distinct}  max w {max_w:.2f}  ESS {ess:.3f}  "
                  f"sampler {name}{job_line}",
                  flush=True)
            if args.target_accuracy is not None and not reached and acc >= args.target_accuracy:
                reached = True
                print(f"# target accuracy {args.target_accuracy:.2%} reached after epoch {epoch}: "
                      f"{train_seconds:.1f}s of training, {wall:.1f}s of wall time", flush=True)
            if args.csv:
                new = not Path(args.csv).exists() or Path(args.csv).stat().st_size == 0
                with open(args.csv, "a", newline="") as f:
                    out = csv.writer(f)
                    if new:
                        out.writerow(["label", "epoch", "hit_ratio", "source_bytes", "accuracy",
                                      "epoch_time", "samples_per_s", "data_wait", "data_wait_fraction",
                                      "prefetch_hit_ratio", "distinct_samples", "draws", "max_weight",
                                      "ess", "train_seconds", "wall_seconds", "weights", "sampler",
                                      "job", "job_hit_ratio", "job_source_bytes"])
                    out.writerow([args.label, epoch, f"{hit:.6f}", src, f"{acc:.6f}",
                                  f"{elapsed:.3f}", f"{rate:.1f}", f"{data_wait:.3f}", f"{wait_frac:.4f}",
                                  f"{ahead:.6f}", distinct, draws, f"{max_w:.6g}", f"{ess:.6f}",
                                  f"{train_seconds:.3f}", f"{wall:.3f}", args.weights, name,
                                  args.job or "default",
                                  job_hit if job_hit == "" else f"{job_hit:.6f}", job_src])
    dist.barrier()
    if rank == 0 and args.job is not None:
        # The job is over: its reset tells every peer, whose cache stops
        # keeping samples for the order it would have read next.
        peers[0].reset(args.dataset)
    # Every rank is past the last barrier, and everything is written and
    # flushed: leave without PyTorch's teardown. PyTorch 1.13's gloo can
    # deadlock destroying the DDP reducer's process group
    # (~ProcessGroupGloo waits on a lock its own worker thread holds): one
    # e2e run here had a rank spin for 10 minutes after its last epoch.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv=None):
    args = parse_args(argv)
    args.t_start = time.time()
    mp.spawn(rank_main, args=(args, free_port()), nprocs=args.world, join=True)
    print(f"# done in {time.time() - args.t_start:.1f}s", flush=True)


if __name__ == "__main__":
    main()
