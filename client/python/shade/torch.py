"""PyTorch side of Shade: a map-style dataset read through the local peer,
a batch sampler driven by the peer's importance-sampled orders (PADS), and
two helpers for the training loop.

Typical loop (one process per rank)::

    ds = ShadeDataset(sock, "fmnist-train")
    sampler = ShadeSampler(sock, "fmnist-train", rank, world, batch_size=64)
    loader = DataLoader(ds, sampler=sampler, batch_size=None, num_workers=2)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y, ids in loader:                  # one MGET per batch
            loss = F.cross_entropy(model(x), y, reduction="none")
            report_losses(sampler.client, "fmnist-train", epoch, ids, loss)
            loss.mean().backward(); opt.step(); opt.zero_grad()
        epoch_done(sampler.client, "fmnist-train", epoch, rank)

With importance weights (``ShadeSampler(..., weights=True)``) each batch is
``(x, y, ids, w)``, ``w`` the float32 weight ω = 1/(N·p) of each draw, and
the unbiased loss is ``(loss * w).mean()``; report the raw ``loss``.

Several jobs on one dataset: give the sampler and the dataset the same
``job="name"``; the sampler's client (``sampler.client``, used for reports
and dones) and every DataLoader worker's client then act and read for that
job (see :class:`shade.Client`).
"""

from __future__ import annotations

import io
import logging
import math
import os
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

from .errors import (InvalidArgument, MissingDependency, OrderTimeout, OutOfRange, ProtocolError,
                     RequestError)

try:
    import numpy as np
    import torch
    import torch.utils.data
except ImportError as e:  # pragma: no cover
    raise MissingDependency(
        "shade.torch needs PyTorch and numpy (Debian: python3-torch python3-numpy; "
        "pip: shade-mesh[torch])"
    ) from e

from .client import Client, Values, check_job, find_job, finite_pairs, labels_from_manifest

log = logging.getLogger("shade")

__all__ = [
    "ShadeDataset", "ShadeSampler", "WeightedBatch", "report_losses", "epoch_done",
    "decode_image", "uniform_slice", "unpack_members", "ENCODING_WDS",
]

# SHADE.ORDER is asked in slices of this many seconds; between them the
# sampler checks that the peer still has the job (see ShadeSampler).
_ORDER_POLL_S = 5.0


# SHADE.STATS "encoding" of a WebDataset shard dataset (Go: dataset.EncodingWDS).
ENCODING_WDS = "wds"


def unpack_members(data: bytes) -> dict:
    """A WebDataset shard sample's bytes (one MessagePack map from member
    extension to bytes; the Go package dataset/shards defines it) ->
    ``{extension: bytes}``."""
    try:
        import msgpack
    except ImportError as e:  # pragma: no cover
        raise MissingDependency(
            "shard datasets need msgpack (Debian: python3-msgpack; pip: msgpack)") from e
    members = msgpack.unpackb(data, raw=False)
    if not isinstance(members, dict):
        raise ProtocolError(f"shard sample: a MessagePack {type(members).__name__}, want a map")
    return members


def _image_array(data: bytes) -> "np.ndarray":
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img, dtype=np.uint8)


def _images_tensor(arrays: Sequence["np.ndarray"]) -> torch.Tensor:
    """uint8 arrays (H x W or H x W x C), one shape -> float N x C x H x W."""
    t = torch.from_numpy(np.stack(arrays))
    t = t.unsqueeze(1) if t.dim() == 3 else t.permute(0, 3, 1, 2)
    return t.float().div_(255.0).contiguous()


def decode_image(data: bytes) -> torch.Tensor:
    """PNG/JPEG bytes -> float32 tensor C x H x W in [0, 1] (PIL)."""
    return _images_tensor([_image_array(data)])[0]


class WeightedBatch(list):
    """A minibatch of sample ids (a list) carrying the importance weight of
    each draw in ``weights`` (floats, parallel to the ids). ``ShadeSampler(...,
    weights=True)`` yields these; ``ShadeDataset`` given one returns
    ``(samples, labels, ids, w)``. Pickles with its weights, so it reaches
    DataLoader workers intact."""

    def __init__(self, ids: Sequence[int] = (), weights: Optional[Sequence[float]] = None) -> None:
        super().__init__(ids)
        self.weights: List[float] = [1.0] * len(self) if weights is None else list(weights)
        if len(self.weights) != len(self):
            raise InvalidArgument(f"{len(self)} ids but {len(self.weights)} weights")

    def __reduce__(self) -> Any:
        return (WeightedBatch, (list(self), self.weights))

    def __repr__(self) -> str:
        return f"WeightedBatch({list(self)!r}, weights={self.weights!r})"


class _PerProcessClient:
    """Opens a Client lazily, once per process; never pickled. ``job`` (None
    for the dataset's default job) is checked at once and given to every
    Client made."""

    def _init_client(self, socket_path: Union[str, "os.PathLike[str]"], password: Optional[str],
                     retry_for: float, job: Optional[str] = None) -> None:
        self.socket_path = os.fspath(socket_path)
        self._password = password
        self._retry_for = retry_for
        #: the job this object's clients act and read for (None: the default job)
        self.job: Optional[str] = None if job is None else check_job(job)
        self._client: Optional[Client] = None
        self._pid: Optional[int] = None

    @property
    def client(self) -> Client:
        """This process's Client (made after a fork, never shared)."""
        if self._client is None or self._pid != os.getpid():
            self._client = Client(self.socket_path, password=self._password,
                                  retry_for=self._retry_for, job=self.job)
            self._pid = os.getpid()
        return self._client

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_client"] = None
        state["_pid"] = None
        return state


class ShadeDataset(_PerProcessClient, torch.utils.data.Dataset):
    """Map-style dataset of the samples a shade-peer serves.

    ``ds[i]`` returns ``(sample, label, i)`` with one GET. ``ds[[i, j, ...]]``
    returns ``(samples, labels, ids)`` with ONE MGET (samples stacked when
    they are tensors): use it with ``DataLoader(ds, sampler=ShadeSampler(...),
    batch_size=None)``. Given a :class:`WeightedBatch` (what
    ``ShadeSampler(..., weights=True)`` yields) it returns ``(samples,
    labels, ids, w)``, ``w`` the batch's importance weights as a float32
    tensor aligned with ``ids``. ``decode`` turns a sample into an object and
    ``transform`` is applied to that object.

    File datasets (a directory or bucket): a sample is the file's bytes;
    ``decode`` defaults to ``decode_image`` (image -> float tensor C x H x W);
    labels come from the manifest's class folders, fetched once on first use.

    WebDataset shard datasets (``--dataset NAME=shards:...``; the peer's
    SHADE.STATS says ``"encoding": "wds"``, see ``encoding``): a sample is a
    dict ``{extension: bytes}`` of its members plus ``"__key__"`` (its key in
    the shards), as the webdataset library yields it; ``decode`` defaults to
    none (the dict as it is) and, when given, receives the dict. A sample's
    label is its ``cls`` member as an integer when it has one, else its
    class folder (the first element of its key, as for a file dataset), else
    -1; ``labels`` holds the folder labels (or -1) only.

    Works in DataLoader workers: each process opens its own connection
    lazily; pickling drops the connection. Reads block on the peer
    (read-through on a miss) and retry across peer restarts.

    ``job``: the training job the reads are for (the sampler's ``job``), so
    that the peer counts its hits and source reads apart; None for the
    dataset's default job.
    """

    def __init__(self, socket_path: Union[str, "os.PathLike[str]"], dataset: str,
                 transform: Optional[Callable[[Any], Any]] = None,
                 decode: Optional[Callable[[Any], Any]] = None,
                 password: Optional[str] = None, retry_for: float = 30.0,
                 job: Optional[str] = None) -> None:
        self._init_client(socket_path, password, retry_for, job)
        self.dataset = dataset
        self.transform = transform
        self.decode = decode
        self._names: Optional[List[str]] = None
        self._labels: Optional[torch.Tensor] = None
        self._encoding: Optional[str] = None

    @property
    def encoding(self) -> str:
        """How the peer encodes a sample: "" (a file's bytes) or "wds" (a
        WebDataset sample); from SHADE.STATS, fetched once."""
        if self._encoding is None:
            self._encoding = str(self.client.stats(self.dataset)["datasets"][0].get("encoding", ""))
        return self._encoding

    @property
    def is_shards(self) -> bool:
        """True for a WebDataset shard dataset (samples are member dicts)."""
        return self.encoding == ENCODING_WDS

    @property
    def names(self) -> List[str]:
        """The manifest: every sample's name (relative path or shard key)."""
        if self._names is None:
            self._names = self.client.manifest(self.dataset)
        return self._names

    @property
    def labels(self) -> torch.Tensor:
        """int64 tensor of every sample's class index (its class folder; for
        a shard dataset whose keys are not all in folders, -1)."""
        if self._labels is None:
            names = self.names
            if self.is_shards and not all("/" in n for n in names):
                labels = [-1] * len(names)
            else:
                labels = labels_from_manifest(names)
            self._labels = torch.tensor(labels, dtype=torch.int64)
        return self._labels

    def __len__(self) -> int:
        return len(self.names)

    def _decoder(self) -> Optional[Callable[[Any], Any]]:
        if self.decode is not None:
            return self.decode
        return None if self.is_shards else decode_image

    def _prepare(self, x: Any) -> Any:
        dec = self._decoder()
        if dec is not None:
            x = dec(x)
        return self.transform(x) if self.transform is not None else x

    def _members(self, data: bytes, i: int) -> Tuple[dict, int]:
        """A shard sample's member dict (with "__key__") and label."""
        m = unpack_members(data)
        label = int(m["cls"]) if "cls" in m else int(self.labels[i])
        m["__key__"] = self.names[i]
        return m, label

    def __getitem__(self, index: Any) -> Tuple[Any, ...]:
        if isinstance(index, WeightedBatch):
            return self.batch(index) + (torch.tensor(index.weights, dtype=torch.float32),)
        if isinstance(index, (list, tuple, range, np.ndarray, torch.Tensor)) and \
                not (hasattr(index, "dim") and index.dim() == 0):
            return self.batch(index)
        i = int(index)
        if not 0 <= i < len(self):
            raise OutOfRange(f"{self.dataset}: index {i} outside [0, {len(self)})")
        data = self.client.get(self.dataset, i)
        if self.is_shards:
            m, label = self._members(data, i)
            return self._prepare(m), label, i
        return self._prepare(data), int(self.labels[i]), i

    def batch(self, ids: Values) -> Tuple[Any, torch.Tensor, torch.Tensor]:
        """(samples, labels, ids) for a list of ids, one MGET."""
        ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1)
        blobs = self.client.mget(self.dataset, ids.tolist())
        if self.is_shards:
            pairs = [self._members(b, i) for b, i in zip(blobs, ids.tolist())]
            labels = torch.tensor([lab for _, lab in pairs], dtype=torch.int64)
            samples = [self._prepare(m) for m, _ in pairs]
        else:
            labels = self.labels[ids]
            if self._decoder() is decode_image and self.transform is None and blobs:
                # Fast path: decode to arrays, convert the batch to a tensor once.
                return _images_tensor([_image_array(b) for b in blobs]), labels, ids
            samples = [self._prepare(b) for b in blobs]
        if samples and isinstance(samples[0], torch.Tensor):
            samples = torch.stack(samples)
        return samples, labels, ids


def uniform_slice(n: int, rank: int, world: int, seed: int, epoch: int) -> List[int]:
    """Rank's slice of a uniform shuffle of range(n), exactly as PyTorch's
    DistributedSampler(shuffle=True, drop_last=False) after set_epoch:
    randperm seeded with seed + epoch, padded by wrap-around to a multiple of
    world, indices[rank::world]; ceil(n / world) ids."""
    g = torch.Generator()
    g.manual_seed(int(seed) + int(epoch))
    perm = torch.randperm(n, generator=g).tolist()
    per = math.ceil(n / world)
    pad = per * world - n
    if pad and perm:
        perm += (perm * math.ceil(pad / n))[:pad]
    return perm[rank:per * world:world]


class ShadeSampler(_PerProcessClient, torch.utils.data.Sampler):
    """Batches of sample ids for this rank, from the peer's SHADE.ORDER.

    Iterating yields lists of ``batch_size`` ids (the last one shorter unless
    ``drop_last``) covering this rank's slice of the current epoch; call
    ``set_epoch(e)`` before each epoch. The first iteration step blocks until
    the peer publishes the epoch (after every rank's done for the previous
    one). Slices of all ranks have equal length, so DDP ranks run the same
    number of steps. ``order_source`` tells where the last epoch's ids came
    from: "pads", "uniform" (pads=False) or "fallback".

    Fallback (never an exception in the training loop): if the peer restarted
    it has lost the job, and the order of an epoch e > 0 would never come.
    The sampler notices it (a timeout or error reply to SHADE.ORDER while the
    peer's job is behind epoch e - 1, i.e. SHADE.STATS job.latest_epoch <
    e - 1), or when no order came within ``order_timeout`` seconds, and then
    uses the uniform order ``uniform_slice(n, rank, world, seed, epoch)``,
    identical to DistributedSampler's, with a warning. Ranks that fall back
    together get disjoint slices of one permutation. ``epoch_done`` ignores
    the peer's refusal of such an epoch. With ``pads=False`` the peer is not
    asked for orders at all (uniform shuffle, one warning).

    Importance weights: with ``weights=True`` the sampler asks for the order
    with its weights (``Client.order(..., with_weights=True)``) and yields
    :class:`WeightedBatch` lists, whose ``weights`` hold ω = 1/(N·p) of each
    draw; ``ShadeDataset`` turns such a batch into ``(x, y, ids, w)``, in the
    main process or in DataLoader workers alike (the batch pickles with its
    weights). ``last_weights`` holds the whole epoch's weights, parallel to
    ``indices(epoch)``. Every weight is 1.0 where the order is uniform:
    ``pads=False``, the fallback, a peer running uniform permutations, or an
    older peer that refuses WITHWEIGHTS (then asked once, not every epoch).
    With ``weights=False`` (the default) batches are plain lists and
    ``ShadeDataset`` gives ``(x, y, ids)`` as before.

    Jobs: ``job="name"`` makes the sampler one rank of that job of the
    dataset (its own world, epochs, orders and scores; the cache is shared
    with the dataset's other jobs). ``sampler.client`` then names the job on
    its orders, reports and dones, and the fallback above watches that
    job's ``latest_epoch``. Give the ``ShadeDataset`` the same ``job`` so
    that its reads are counted for the job. None (the default) is the
    dataset's default job.
    """

    def __init__(self, socket_path: Union[str, "os.PathLike[str]"], dataset: str, rank: int,
                 world: int, batch_size: int, seed: int = 0, drop_last: bool = False,
                 pads: bool = True, password: Optional[str] = None,
                 order_timeout: float = 600.0, retry_for: float = 30.0,
                 lost_grace: float = 5.0, weights: bool = False,
                 job: Optional[str] = None) -> None:
        if world < 1 or not 0 <= rank < world:
            raise InvalidArgument(f"rank {rank} outside [0, world={world})")
        if batch_size < 1:
            raise InvalidArgument(f"batch_size {batch_size} < 1")
        self._init_client(socket_path, password, retry_for, job)
        self.dataset = dataset
        self.rank, self.world, self.batch_size = int(rank), int(world), int(batch_size)
        self.seed, self.drop_last, self.pads = int(seed), bool(drop_last), bool(pads)
        self.weights = bool(weights)
        #: importance weights of the last ``indices`` call, parallel to its ids
        self.last_weights: List[float] = []
        self.order_timeout = float(order_timeout)
        # A peer that restarted inside a mesh gets the job's newest order
        # back from the leader as soon as a rank asks: there, only a job
        # still missing after this many seconds of asking is lost.
        self.lost_grace = float(lost_grace)
        self._in_mesh = False
        self.epoch = 0
        self.order_source: Optional[str] = None
        self._n: Optional[int] = None
        self._warned_off = False

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    @property
    def num_samples(self) -> int:
        """Samples in the dataset (from SHADE.STATS, fetched once)."""
        if self._n is None:
            self._n = int(self.client.stats(self.dataset)["datasets"][0]["samples"])
        return self._n

    def __len__(self) -> int:
        per = math.ceil(self.num_samples / self.world)
        return per // self.batch_size if self.drop_last else math.ceil(per / self.batch_size)

    def __iter__(self) -> Iterator[List[int]]:
        ids = self.indices(self.epoch)
        weights = self.last_weights
        bs = self.batch_size
        for s in range(0, len(ids), bs):
            batch = ids[s:s + bs]
            if self.drop_last and len(batch) < bs:
                return
            yield WeightedBatch(batch, weights[s:s + bs]) if self.weights else batch

    def indices(self, epoch: int) -> List[int]:
        """This rank's ids for ``epoch`` (blocking; see the class doc); their
        weights are then in ``last_weights``."""
        ids, self.last_weights = self._order(epoch)
        return ids

    def _order(self, epoch: int) -> Tuple[List[int], List[float]]:
        """(ids, weights) of this rank's slice of ``epoch``."""
        if not self.pads:
            if not self._warned_off:
                log.warning("ShadeSampler(%s): PADS off on the client: uniform order "
                            "(as DistributedSampler), the peer's order is not used", self.dataset)
                self._warned_off = True
            self.order_source = "uniform"
            return _unweighted(self._uniform(epoch))
        order = self._peer_slice(epoch)
        if order is None:
            self.order_source = "fallback"
            return _unweighted(self._uniform(epoch))
        self.order_source = "pads"
        return order

    def _uniform(self, epoch: int) -> List[int]:
        return uniform_slice(self.num_samples, self.rank, self.world, self.seed, epoch)

    def _job_lost(self, epoch: int) -> bool:
        """True when the peer's job cannot reach ``epoch`` (it restarted or
        was reset, or no longer knows a named job): its newest order is
        older than epoch - 1."""
        st = self.client.stats(self.dataset)
        self._in_mesh = len(st.get("members") or []) > 1
        job = find_job(st["datasets"][0], self.job)
        latest = -1 if job is None else int(job["latest_epoch"])
        return epoch > 0 and latest < epoch - 1

    def _peer_slice(self, epoch: int) -> Optional[Tuple[List[int], List[float]]]:
        """(ids, weights) from the peer (weights 1.0 unless ``weights``), or
        None when the sampler falls back."""
        c = self.client
        deadline = time.monotonic() + self.order_timeout
        lost_since = None  # when the job first looked lost

        def lost(why: str) -> bool:
            """True (after warning) once the job has looked lost for the
            whole grace period."""
            nonlocal lost_since
            if not self._job_lost(epoch):
                lost_since = None
                return False
            now = time.monotonic()
            lost_since = lost_since or now
            # A standalone peer that lost the job lost it for good: every
            # rank sees that at once and falls back alike. In a mesh the
            # leader still has it and the restarted peer catches up.
            if not self._in_mesh or now - lost_since >= self.lost_grace:
                self._fall_back(epoch, why)
                return True
            return False

        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return self._fall_back(epoch, f"no order within {self.order_timeout:.0f}s")
            # While the job looks lost, ask in short waits: each ask makes
            # the peer announce the rank to the leader, which re-sends it.
            if lost_since is None and lost("the peer has lost the job (restarted or reset)"):
                return None
            wait = 0.2 if lost_since is not None else _ORDER_POLL_S
            try:
                if self.weights:
                    return c.order(self.dataset, epoch, self.rank, self.world,
                                   timeout_ms=1000 * min(left, wait), with_weights=True)
                return _unweighted(c.order(self.dataset, epoch, self.rank, self.world,
                                           timeout_ms=1000 * min(left, wait)))
            except OrderTimeout:
                if lost("the peer has lost the job (restarted or reset)"):
                    return None
            except RequestError as e:
                if self._job_lost(epoch):
                    if lost(f"the peer has lost the job ({e})"):
                        return None
                    continue
                raise

    def _fall_back(self, epoch: int, why: str) -> None:
        log.warning("ShadeSampler(%s%s) rank %d epoch %d: %s; using the uniform order "
                    "(DistributedSampler, seed %d) for this epoch",
                    self.dataset, "" if self.job is None else f", job {self.job}", self.rank,
                    epoch, why, self.seed)
        return None


def _unweighted(ids: List[int]) -> Tuple[List[int], List[float]]:
    return ids, [1.0] * len(ids)


def report_losses(client: Client, dataset: str, epoch: int, ids: Values,
                  per_sample_losses: Values) -> int:
    """Report one trained minibatch: ``per_sample_losses`` from a criterion
    with reduction='none', ``ids`` the sample ids that were trained (the
    ``ids`` a ShadeDataset batch returns). Blocks for one round trip.
    Non-finite losses are left out; a refusal by the peer is logged, not
    raised. Returns the number of samples merged."""
    ids, losses, dropped = finite_pairs(ids, per_sample_losses)
    if dropped:
        log.warning("report %s epoch %d: %d non-finite losses left out", dataset, epoch, dropped)
    if not ids:
        return 0
    try:
        return client.report(dataset, epoch, ids, losses)
    except RequestError as e:
        log.warning("report %s epoch %d refused by the peer: %s", dataset, epoch, e)
        return 0


def epoch_done(client: Client, dataset: str, epoch: int, rank: int) -> bool:
    """Tell the peer this rank finished ``epoch`` (SHADE.DONE). A refusal
    (the peer restarted and lost the job) is logged, not raised. Returns
    True when the peer accepted it."""
    try:
        client.done(dataset, epoch, rank)
        return True
    except RequestError as e:
        log.warning("SHADE.DONE %s epoch %d rank %d refused (%s); ignored", dataset, epoch, rank, e)
        return False
