#!/usr/bin/python3
"""Epochs of a PyTorch DataLoader over a dataset in an S3 bucket, read one of
two ways, for test/bench/s3.sh:

  boto3  a plain map-style Dataset: ds[i] GETs object i with boto3 (path-style,
         the endpoint given), sleeping --latency first (the same latency the
         peer's --source-throttle adds to its own GETs), and decodes it.
  boto3-threads  the same Dataset, but ds[[i, j, ...]] GETs a whole batch at
         once on --threads threads (a stronger baseline than the plain one:
         as many GETs in flight as the peer allows itself per dataset)
  shade  shade.torch.ShadeDataset over a peer's socket: one MGET per batch.
         Given several sockets (a mesh, one peer per trainer), batch b goes
         to peer b mod the sockets, as the ranks of a job would split an
         epoch's batches among their own peers.

Both iterate the same seeded random order per epoch, in batches of --batch,
with --workers DataLoader workers, and decode every image to a float tensor
(shade.torch's decoder, as test/train does). No training step. Per epoch it
writes one JSON line: epoch time, data wait (time the loop waited for its
next batch), samples, and the GetObject requests the gateway's access log
gained during the epoch; for shade also the peer's SHADE.STATS deltas (hits,
misses, source reads) and its hit ratio.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from shade.torch import ShadeDataset, decode_image  # noqa: E402


def count_gets(log_path, bucket):
    """GetObject requests on bucket in the gateway's access log so far."""
    n = 0
    with open(log_path, errors="replace") as f:
        for line in f:
            head, sep, rest = line.partition("] ")
            if not sep:
                continue
            hf, rf = head.split(), rest.split()
            if len(hf) >= 2 and hf[1] == bucket and len(rf) >= 4 and rf[3].endswith("GetObject"):
                n += 1
    return n


class Boto3Dataset(Dataset):
    """ds[i] = (image tensor, label, i): one boto3 GetObject, after sleeping
    latency seconds. The client is made once per process (after a fork)."""

    def __init__(self, endpoint, bucket, prefix, latency, threads=1):
        self.endpoint, self.bucket, self.latency, self.threads = endpoint, bucket, latency, threads
        self._client, self._pid, self._pool, self._pool_pid = None, None, None, None
        keys = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
            keys += [o["Key"] for o in page.get("Contents", [])]
        keys = sorted(k for k in keys if not k.endswith("/") and not os.path.basename(k).startswith("."))
        classes = sorted({k[len(prefix) + 1:].split("/")[0] for k in keys})
        index = {c: i for i, c in enumerate(classes)}
        self.keys = keys
        self.labels = [index[k[len(prefix) + 1:].split("/")[0]] for k in keys]

    @property
    def client(self):
        if self._client is None or self._pid != os.getpid():
            import boto3
            from botocore.config import Config
            self._client = boto3.session.Session().client(
                "s3", endpoint_url=self.endpoint, region_name="us-east-1",
                config=Config(s3={"addressing_style": "path"}, max_pool_connections=max(10, self.threads)))
            self._pid = os.getpid()
        return self._client

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_client"], state["_pid"], state["_pool"], state["_pool_pid"] = None, None, None, None
        return state

    def __len__(self):
        return len(self.keys)

    def _get(self, i):
        time.sleep(self.latency)
        return self.client.get_object(Bucket=self.bucket, Key=self.keys[i])["Body"].read()

    def __getitem__(self, i):
        if isinstance(i, list):  # a batch: its GETs on self.threads threads
            client = self.client  # made here, before the threads share it
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool_pid = os.getpid()
                from concurrent.futures import ThreadPoolExecutor
                self._pool = ThreadPoolExecutor(self.threads)
            blobs = list(self._pool.map(self._get, i))
            return (torch.stack([decode_image(b) for b in blobs]),
                    torch.tensor([self.labels[j] for j in i]), torch.tensor(i))
        return decode_image(self._get(i)), self.labels[i], i


class MeshDataset(Dataset):
    """ds[(k, [i, j, ...])] = peer k's ShadeDataset's batch of those ids."""

    def __init__(self, peers):
        self.peers = peers

    def __len__(self):
        return len(self.peers[0])

    def __getitem__(self, index):
        k, ids = index
        return self.peers[k].batch(ids)


def order(n, seed, epoch):
    g = torch.Generator()
    g.manual_seed(seed * 1000 + epoch)
    return torch.randperm(n, generator=g).tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["boto3", "boto3-threads", "shade"])
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--access-log", required=True)
    ap.add_argument("--socket", help="the peer's socket, or a mesh's sockets joined by commas (shade)")
    ap.add_argument("--dataset", default="fmnist", help="the peer's dataset name (shade)")
    ap.add_argument("--latency", type=float, default=0.020, help="seconds slept before each boto3 GET")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=16, help="GETs in flight per worker (boto3-threads)")
    ap.add_argument("--label", help="the rows' mode (default: the mode), to tell two runs of one mode apart")
    args = ap.parse_args()
    torch.set_num_threads(1)

    if args.mode.startswith("boto3"):
        ds = Boto3Dataset(args.endpoint, args.bucket, args.prefix, args.latency, args.threads)
    else:
        peers = [ShadeDataset(s, args.dataset) for s in args.socket.split(",")]
        ds = peers[0] if len(peers) == 1 else MeshDataset(peers)
    n = len(ds)

    def stats():
        """The peers' SHADE.STATS counters, summed over the mesh."""
        if args.mode != "shade":
            return None
        total = {}
        for p in peers:
            st = p.client.stats(args.dataset)
            for k, v in dict(st["datasets"][0]["total"], cache_entries=st["cache_entries"],
                             cache_used=st["cache_used"]).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    total[k] = total.get(k, 0) + v
        reads = total["hits"] + total["cold_misses"] + total["capacity_misses"]
        total["hit_ratio"] = total["hits"] / reads if reads else 0.0
        return total

    for epoch in range(args.epochs):
        ids = order(n, args.seed, epoch)
        if args.mode == "boto3":
            # ds[i] per sample, collated into batches of args.batch.
            loader = DataLoader(ds, sampler=ids, batch_size=args.batch, num_workers=args.workers)
        else:
            # The same batches, each one call: ds[[i, j, ...]] (an MGET for shade).
            batches = [ids[b:b + args.batch] for b in range(0, n, args.batch)]
            if isinstance(ds, MeshDataset):
                batches = [(b % len(ds.peers), ids) for b, ids in enumerate(batches)]
            loader = DataLoader(ds, sampler=batches, batch_size=None, num_workers=args.workers)
        gets0, s0 = count_gets(args.access_log, args.bucket), stats()
        t0 = time.perf_counter()
        wait, seen, pixels = 0.0, 0, 0.0
        it = iter(loader)
        while True:
            tw = time.perf_counter()
            batch = next(it, None)
            wait += time.perf_counter() - tw
            if batch is None:
                break
            x, y, i = batch
            seen += len(i)
            pixels += float(x.sum())  # touch the decoded images
        elapsed = time.perf_counter() - t0
        row = {"mode": args.label or args.mode, "epoch": epoch, "samples": seen, "epoch_time": round(elapsed, 3),
               "data_wait": round(wait, 3), "gets": count_gets(args.access_log, args.bucket) - gets0,
               "batch": args.batch, "workers": args.workers}
        if s0 is not None:
            s1 = stats()
            d = {k: s1[k] - s0[k] for k in ("hits", "peer_hits", "cold_misses", "capacity_misses", "source_reads",
                                            "evictions", "rejected_admissions")}
            reads = d["hits"] + d["cold_misses"] + d["capacity_misses"]
            row.update({"peer_hits": d["hits"], "hits_from_other_peers": d["peer_hits"],
                        "peer_misses": d["cold_misses"] + d["capacity_misses"], "peer_source_reads": d["source_reads"],
                        "hit_ratio": d["hits"] / reads if reads else 0.0,
                        "hit_ratio_total": s1["hit_ratio"], "evictions": d["evictions"],
                        "rejected_admissions": d["rejected_admissions"],
                        "cache_entries": s1["cache_entries"], "cache_used": s1["cache_used"]})
        print(json.dumps(row), flush=True)
        if seen != n:
            sys.exit(f"epoch {epoch}: {seen} samples, want {n}")


if __name__ == "__main__":
    main()
