"""shade.torch over WebDataset tar shards served by a real shade-peer: a
sample is a dict {extension: bytes} (plus "__key__"), as webdataset yields it."""

import io
import random
import tarfile
import tempfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("msgpack")
from torch.utils.data import DataLoader  # noqa: E402

from shade.torch import ShadeDataset  # noqa: E402
from conftest import TRAIN  # noqa: E402


def write_shards(dst, samples, per_shard):
    """Tar shards of samples [(key, {ext: bytes})], per_shard to a shard."""
    dst.mkdir()
    for s in range(0, len(samples), per_shard):
        with tarfile.open(dst / f"train-{s // per_shard:03d}.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
            for key, members in samples[s:s + per_shard]:
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))


@pytest.fixture
def shards(workdir, make_peer):
    """A peer serving "wds" (samples with a .cls member, keys without
    folders) and "wdsf" (no .cls, keys in class folders), beside the
    Fashion-MNIST file datasets; returns (socket, wds samples, wdsf samples)."""
    rng = random.Random(5)
    blob = lambda: bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 3000)))  # noqa: E731
    wds = [(f"s{i:04d}", {"png": blob(), "cls": str(i % 7).encode(), "json": b'{"i": %d}' % i})
           for i in range(25)]
    wdsf = [(f"{c}/t{i:03d}", {"jpg": blob()}) for c in ("cat", "dog") for i in range(6)]
    root = Path(tempfile.mkdtemp(prefix="wds-", dir=workdir))  # one per test
    write_shards(root / "wds", wds, 10)
    write_shards(root / "wdsf", wdsf, 5)
    p = make_peer(root.name, "--dataset", f"wds=shards:{root / 'wds'}",
                  "--dataset", f"wdsf=shards:{root / 'wdsf'}").start()
    return p.sock, wds, wdsf


def test_shard_samples_are_member_dicts(shards):
    sock, wds, _ = shards
    ds = ShadeDataset(sock, "wds")
    assert ds.encoding == "wds" and ds.is_shards and len(ds) == len(wds)
    for i in (0, 9, 10, 24):
        x, y, j = ds[i]
        key, members = wds[i]
        assert x == {"__key__": key, **members}  # byte-exact, every member
        assert all(type(v) is bytes for k, v in x.items() if k != "__key__")
        assert (y, j) == (i % 7, i)  # the .cls member
    xs, ys, ids = ds[[3, 24, 3]]
    assert [x["__key__"] for x in xs] == ["s0003", "s0024", "s0003"]
    assert xs[1]["png"] == wds[24][1]["png"]
    assert ys.tolist() == [3, 24 % 7, 3] and ids.tolist() == [3, 24, 3]
    # A file dataset of the same peer is not a shard dataset.
    assert ShadeDataset(sock, TRAIN).encoding == ""


def test_shard_labels_from_folders_and_decode(shards):
    sock, _, wdsf = shards
    ds = ShadeDataset(sock, "wdsf", decode=lambda m: torch.tensor(len(m["jpg"])))
    assert ds.labels.tolist() == [0] * 6 + [1] * 6  # no .cls: the class folder
    x, y, i = ds[7]
    assert (int(x), y, i) == (len(wdsf[7][1]["jpg"]), 1, 7)
    xs, ys, _ = ds[[0, 11]]  # decoded to tensors: stacked
    assert xs.tolist() == [len(wdsf[0][1]["jpg"]), len(wdsf[11][1]["jpg"])] and ys.tolist() == [0, 1]


def test_shard_dataloader_two_workers(shards):
    sock, wds, _ = shards
    ds = ShadeDataset(sock, "wds")
    batches = [list(range(s, min(s + 8, len(wds)))) for s in range(0, len(wds), 8)]
    loader = DataLoader(ds, sampler=batches, batch_size=None, num_workers=2)
    seen = []
    for xs, ys, ids in loader:
        for x, y, i in zip(xs, ys.tolist(), ids.tolist()):
            assert x == {"__key__": wds[i][0], **wds[i][1]} and y == i % 7
            seen.append(i)
    assert sorted(seen) == list(range(len(wds)))
