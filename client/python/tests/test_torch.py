"""shade.torch against a real shade-peer: DataLoader workers, peer restarts."""

import logging
import pickle
import threading
import time

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

import shade  # noqa: E402
from shade.torch import (ShadeDataset, ShadeSampler, decode_image, epoch_done,  # noqa: E402
                         report_losses, uniform_slice)
from conftest import TRAIN  # noqa: E402


def expected(fmnist, client):
    m = client.manifest(TRAIN)
    classes = sorted({p.split("/")[0] for p in m})
    return m, [classes.index(p.split("/")[0]) for p in m]


def test_dataset_item_and_batch(client, peer, fmnist):
    m, labels = expected(fmnist, client)
    ds = ShadeDataset(peer.sock, TRAIN)
    assert len(ds) == 200
    x, y, i = ds[150]
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32 and 0 <= x.min() <= x.max() <= 1
    assert (y, i) == (labels[150], 150)
    assert torch.equal(x, decode_image((fmnist / "train" / m[150]).read_bytes()))
    xs, ys, ids = ds[[5, 150, 5]]
    assert xs.shape == (3, 1, 28, 28) and ids.tolist() == [5, 150, 5]
    assert ys.tolist() == [labels[5], labels[150], labels[5]]
    assert torch.equal(xs[1], x)
    with pytest.raises(IndexError):
        ds[200]
    clone = pickle.loads(pickle.dumps(ds))  # the connection is not pickled
    assert clone._client is None and clone[150][1] == labels[150]


def test_dataloader_two_workers(client, peer, fmnist):
    client.reset(TRAIN)
    m, labels = expected(fmnist, client)
    ds = ShadeDataset(peer.sock, TRAIN)
    sampler = ShadeSampler(peer.sock, TRAIN, rank=0, world=1, batch_size=32)
    assert len(sampler) == 7
    loader = DataLoader(ds, sampler=sampler, batch_size=None, num_workers=2)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        seen = []
        for xs, ys, ids in loader:
            assert xs.shape[0] == ys.shape[0] == ids.shape[0] <= 32
            assert ys.tolist() == [labels[i] for i in ids.tolist()]
            j = int(ids[-1])
            assert torch.equal(xs[-1], decode_image((fmnist / "train" / m[j]).read_bytes()))
            loss = torch.rand(len(ids))
            assert report_losses(sampler.client, TRAIN, epoch, ids, loss) == len(ids)
            seen += ids.tolist()
        assert sampler.order_source == "pads"
        assert len(seen) == 200
        if epoch == 0:
            assert sorted(seen) == list(range(200))
        assert epoch_done(sampler.client, TRAIN, epoch, 0)


def test_restart_mid_epoch(make_peer, fmnist, caplog):
    """SIGKILL the peer while a loop reads batches, start a new one on the
    same socket: the loop finishes with the right bytes and no exception, and
    the next epoch falls back to the uniform order at once."""
    p = make_peer("restart").start()
    c = shade.Client(p.sock, retry_for=20)
    m = c.manifest(TRAIN)
    truth = [(fmnist / "train" / name).read_bytes() for name in m]
    sampler = ShadeSampler(p.sock, TRAIN, rank=0, world=1, batch_size=10, seed=7)
    ds = ShadeDataset(p.sock, TRAIN)

    reached = threading.Event()
    restarted = threading.Event()

    def chaos():
        reached.wait(20)
        p.kill()  # SIGKILL: the socket file stays behind, refusing connections
        time.sleep(0.5)
        p.start()
        restarted.set()

    t = threading.Thread(target=chaos)
    t.start()
    caplog.set_level(logging.WARNING, logger="shade")
    seen = []
    for k, batch in enumerate(sampler):
        if k == 5:
            reached.set()
            time.sleep(0.1)  # the kill lands in the middle of the epoch
        blobs = c.mget(TRAIN, batch)
        assert blobs == [truth[i] for i in batch]
        xs, ys, ids = ds[batch]
        assert ids.tolist() == batch
        report_losses(c, TRAIN, 0, batch, torch.rand(len(batch)))
        seen += batch
    t.join(20)
    assert restarted.is_set()
    assert sorted(seen) == list(range(200))
    assert "unreachable" in caplog.text
    epoch_done(c, TRAIN, 0, 0)  # the new peer has no job: logged, not raised

    sampler.set_epoch(1)
    t0 = time.monotonic()
    batches = list(sampler)
    assert time.monotonic() - t0 < 2, "a lost job must be noticed without waiting"
    assert sampler.order_source == "fallback"
    assert sum(batches, []) == uniform_slice(200, 0, 1, 7, 1)
    assert "uniform order" in caplog.text
    c.close()


def test_order_lost_while_waiting(make_peer, monkeypatch):
    """The peer restarts while rank 1 waits in SHADE.ORDER for epoch 1 (rank 0
    not done yet): both ranks fall back to disjoint DistributedSampler slices
    of epoch 1 instead of waiting forever, and go on so in epoch 2."""
    monkeypatch.setattr(shade.torch, "_ORDER_POLL_S", 1.0)
    p = make_peer("wait", "--order-ahead", "0").start()  # epoch 1 waits for epoch 0's dones
    s = [ShadeSampler(p.sock, TRAIN, rank=r, world=2, batch_size=50, seed=3) for r in range(2)]
    for r in range(2):
        assert len(list(s[r])) == 2 and s[r].order_source == "pads"
    assert epoch_done(s[1].client, TRAIN, 0, 1)
    out = {}
    th = threading.Thread(target=lambda: out.setdefault(1, s[1].indices(1)))
    th.start()
    time.sleep(0.3)
    assert th.is_alive()  # blocked: rank 0 has not finished epoch 0
    p.kill()
    p.start()
    assert not epoch_done(s[0].client, TRAIN, 0, 0)  # refused by the new peer, not raised
    t0 = time.monotonic()
    th.join(30)
    assert time.monotonic() - t0 < 5
    a = s[0].indices(1)
    assert s[0].order_source == s[1].order_source == "fallback"
    assert sorted(a + out[1]) == list(range(200))
    b = [s[r].indices(2) for r in range(2)]
    assert s[0].order_source == s[1].order_source == "fallback"
    assert sorted(b[0] + b[1]) == list(range(200))


def test_pads_off_on_client(peer, caplog):
    caplog.set_level(logging.WARNING, logger="shade")
    s = ShadeSampler(peer.sock, TRAIN, rank=1, world=3, batch_size=16, seed=5, pads=False)
    for e in range(2):
        s.set_epoch(e)
        ids = sum(list(s), [])
        assert s.order_source == "uniform"
        ref = torch.utils.data.DistributedSampler(range(200), num_replicas=3, rank=1, seed=5)
        ref.set_epoch(e)
        assert ids == list(ref)
    assert caplog.text.count("PADS off") == 1
