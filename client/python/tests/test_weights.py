"""Importance weights of epoch orders (SHADE.ORDER ... WITHWEIGHTS) against
real shade-peer processes: the client, the sampler, DataLoader workers."""

import logging
import math
import os
import struct
from pathlib import Path

import pytest

import shade
from conftest import TRAIN, Peer

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from shade.torch import ShadeDataset, ShadeSampler, WeightedBatch, epoch_done, report_losses  # noqa: E402


def train_epoch(c, epoch, ids):
    """Report distinct losses for every id (so the next epoch's draws, and
    their weights, are not uniform) and finish the epoch as rank 0."""
    for s in range(0, len(ids), 50):
        batch = ids[s:s + 50]
        assert c.report(TRAIN, epoch, batch, [0.01 + 0.05 * (i % 40) for i in batch]) == len(batch)
    c.done(TRAIN, epoch, 0)


def check_weights(ids, weights):
    assert len(weights) == len(ids)
    assert all(isinstance(w, float) and math.isfinite(w) and w > 0 for w in weights)


def test_order_with_weights(make_peer):
    """The weighted order is the plain order plus a weight per draw; epoch 0
    (a permutation) weighs 1.0 everywhere; a later PADS epoch draws with
    replacement and weighs draws by 1/(N p), so the distinct drawn samples'
    probabilities 1/(N w) sum to at most 1."""
    # Orders not published ahead: epoch 1 is drawn from epoch 0's losses.
    p = make_peer("weights", "--pads", "on", "--uniform-floor", "0.1", "--coverage-epochs", "0",
                  "--order-ahead", "0").start()
    with shade.Client(p.sock) as c:
        n = len(c.manifest(TRAIN))
        ids, weights = c.order(TRAIN, 0, 0, 1, with_weights=True)
        assert not c.weights_refused, "the peer refused WITHWEIGHTS (is it older than go14?)"
        assert ids == c.order(TRAIN, 0, 0, 1)
        check_weights(ids, weights)
        assert sorted(ids) == list(range(n))
        assert weights == pytest.approx([1.0] * n, rel=1e-5)
        train_epoch(c, 0, ids)

        ids, weights = c.order(TRAIN, 1, 0, 1, timeout_ms=5000, with_weights=True)
        assert ids == c.order(TRAIN, 1, 0, 1)
        check_weights(ids, weights)
        assert len(ids) == n
        assert len(set(weights)) > 1, "a PADS epoch after varied losses weighs draws alike"
        prob = {i: 1.0 / (n * w) for i, w in zip(ids, weights)}
        assert sum(prob.values()) <= 1.0 + 1e-3
        assert c.stats(TRAIN)["sampler"]


def test_order_with_weights_uniform_peer(make_peer):
    """A peer running uniform permutations (--pads off) weighs every draw 1.0."""
    p = make_peer("uniform", "--pads", "off").start()
    with shade.Client(p.sock) as c:
        for epoch in range(2):
            ids, weights = c.order(TRAIN, epoch, 0, 1, timeout_ms=5000, with_weights=True)
            assert not c.weights_refused
            assert sorted(ids) == list(range(200))
            assert weights == pytest.approx([1.0] * 200, rel=1e-5)
            train_epoch(c, epoch, ids)


def test_order_with_weights_errors_are_kept(make_peer):
    """An error reply about the request itself is raised as before, not
    taken for a refusal of WITHWEIGHTS."""
    p = make_peer("werr").start()
    with shade.Client(p.sock) as c:
        with pytest.raises(shade.RequestError, match="rank"):
            c.order(TRAIN, 0, 3, 2, with_weights=True)
        c.order(TRAIN, 0, 0, 1, with_weights=True)  # publishes epoch 0
        with pytest.raises(shade.OrderTimeout):
            c.order(TRAIN, 3, 0, 1, timeout_ms=100, with_weights=True)  # not before done(1)
        assert not c.weights_refused


@pytest.mark.skipif(not os.environ.get("SHADE_OLD_BIN_DIR"),
                    reason="SHADE_OLD_BIN_DIR (a shade-peer built before WITHWEIGHTS) is not set")
def test_older_peer_falls_back_to_unit_weights(fmnist, workdir, caplog):
    """A real shade-peer built before WITHWEIGHTS refuses it: the client
    gives the plain order with weights 1.0, and sends WITHWEIGHTS only once."""
    p = Peer(Path(os.environ["SHADE_OLD_BIN_DIR"]), fmnist, workdir / "old.sock").start()
    try:
        with shade.Client(p.sock) as c, caplog.at_level(logging.INFO, logger="shade"):
            assert "sampler" not in c.stats(TRAIN), "SHADE_OLD_BIN_DIR holds a peer that knows WITHWEIGHTS"
            ids, weights = c.order(TRAIN, 0, 0, 1, with_weights=True)
            assert c.weights_refused
            assert ids == c.order(TRAIN, 0, 0, 1) and sorted(ids) == list(range(200))
            assert weights == [1.0] * 200
            train_epoch(c, 0, ids)
            ids, weights = c.order(TRAIN, 1, 0, 1, timeout_ms=5000, with_weights=True)
            assert len(ids) == 200 and weights == [1.0] * 200
            assert caplog.text.count("predates SHADE.ORDER WITHWEIGHTS") == 1
            assert c.packed_refused
            # The sampler over it: plain ones, never an exception.
            s = ShadeSampler(p.sock, TRAIN, rank=0, world=1, batch_size=64, weights=True)
            s.set_epoch(1)
            batches = list(s)
            assert all(isinstance(b, WeightedBatch) and b.weights == [1.0] * len(b) for b in batches)
            assert sum(batches, []) == ids
    finally:
        p.stop()


def as_float32(xs):
    return list(struct.unpack("<%df" % len(xs), struct.pack("<%df" % len(xs), *xs)))


def test_packed_order_matches_text(make_peer):
    """The order read PACKED (binary ids and float32 weights) is the order
    of the reply with an element per id: the same ids, and the same
    float32 weights (text gives the shortest decimal of each, which reads
    back as the same float32), in a permutation and in a PADS epoch."""
    p = make_peer("packed", "--pads", "on", "--uniform-floor", "0.1", "--order-ahead", "0").start()
    with shade.Client(p.sock) as c:
        for epoch in range(2):
            ids, weights = c.order(TRAIN, epoch, 0, 1, timeout_ms=5000, with_weights=True)
            assert not c.packed_refused
            raw = c._execute("SHADE.ORDER", TRAIN, epoch, 0, 1, "WITHWEIGHTS", blocking=True)
            text_ids, text_weights = [int(x) for x in raw[0]], [float(w) for w in raw[1]]
            assert ids == text_ids == c.order(TRAIN, epoch, 0, 1)
            check_weights(ids, weights)
            assert weights == as_float32(weights) == as_float32(text_weights)
            if epoch == 0:
                train_epoch(c, 0, ids)
            else:
                assert len(set(weights)) > 1, "a PADS epoch after varied losses weighs draws alike"


def test_packed_reports_merge_as_text(make_peer):
    """Two peers started alike, one sent every report PACKED and the other
    an argument per id and loss (as to an older peer), draw the same
    weighted order of the next epoch."""
    flags = ("--pads", "on", "--uniform-floor", "0.1", "--order-ahead", "0", "--seed", "7")
    peers = [make_peer("rpacked", *flags).start(), make_peer("rtext", *flags).start()]
    got = []
    for k, p in enumerate(peers):
        with shade.Client(p.sock) as c:
            c._packed_refused = k == 1
            ids = sorted(c.order(TRAIN, 0, 0, 1))
            assert c.report(TRAIN, 0, ids, [0.1 + math.pi * (i % 5) / 3 for i in ids]) == len(ids)
            c.done(TRAIN, 0, 0)
            got.append(c.order(TRAIN, 1, 0, 1, timeout_ms=5000, with_weights=True))
            assert c.packed_refused == (k == 1)
    assert got[0][0] == got[1][0]
    assert as_float32(got[0][1]) == as_float32(got[1][1])
    assert len(set(got[0][1])) > 1, "the reports did not shape epoch 1"


@pytest.mark.skipif(not os.environ.get("SHADE_UNPACKED_BIN_DIR"),
                    reason="SHADE_UNPACKED_BIN_DIR (a shade-peer built before SHADE.ORDER PACKED) is not set")
def test_peer_before_packed_answers_orders_unpacked(fmnist, workdir, caplog):
    """A real shade-peer built before PACKED (but after WITHWEIGHTS) refuses
    it: the client asks again without it, gets the same order, and asks
    without it from then on; an error about the request itself is still
    raised. A report is sent again as text, and merged."""
    p = Peer(Path(os.environ["SHADE_UNPACKED_BIN_DIR"]), fmnist, workdir / "unpacked.sock").start()
    try:
        with shade.Client(p.sock) as c, caplog.at_level(logging.INFO, logger="shade"):
            with pytest.raises(shade.RequestError, match="rank"):
                c.order(TRAIN, 0, 3, 2, with_weights=True)
            assert not c.packed_refused
            ids, weights = c.order(TRAIN, 0, 0, 1, with_weights=True)
            assert c.packed_refused and not c.weights_refused
            assert sorted(ids) == list(range(200)) and weights == [1.0] * 200
            assert ids == c.order(TRAIN, 0, 0, 1)
            assert caplog.text.count("predates SHADE.ORDER PACKED") == 1
        with shade.Client(p.sock) as c, caplog.at_level(logging.INFO, logger="shade"):
            assert c.report(TRAIN, 0, [1, 2, 3], [0.5, 1.0, 2.0]) == 3  # a report first
            assert c.packed_refused
            assert caplog.text.count("predates SHADE.REPORT PACKED") == 1
    finally:
        p.stop()


def test_weighted_batch_pickles():
    import pickle
    b = WeightedBatch([3, 1, 3], [0.5, 2.0, 0.5])
    c = pickle.loads(pickle.dumps(b))
    assert isinstance(c, WeightedBatch) and c == [3, 1, 3] and c.weights == [0.5, 2.0, 0.5]
    assert WeightedBatch([1, 2]).weights == [1.0, 1.0]
    with pytest.raises(shade.InvalidArgument):
        WeightedBatch([1, 2], [1.0])


@pytest.mark.parametrize("workers", [0, 2])
def test_sampler_weights_through_dataloader(make_peer, workers):
    """ShadeSampler(weights=True) through a DataLoader: every batch is
    (x, y, ids, w) with w the peer's weight of each of those draws."""
    p = make_peer(f"wdl{workers}", "--pads", "on", "--uniform-floor", "0.1").start()
    c = shade.Client(p.sock)
    labels = c.labels(TRAIN)
    ds = ShadeDataset(p.sock, TRAIN)
    sampler = ShadeSampler(p.sock, TRAIN, rank=0, world=1, batch_size=32, weights=True)
    loader = DataLoader(ds, sampler=sampler, batch_size=None, num_workers=workers)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        got_ids, got_w = [], []
        for x, y, ids, w in loader:
            assert x.shape[0] == y.shape[0] == ids.shape[0] == w.shape[0] <= 32
            assert w.dtype == torch.float32
            assert y.tolist() == [labels[i] for i in ids.tolist()]
            report_losses(sampler.client, TRAIN, epoch,
                          ids, torch.tensor([0.01 + 0.05 * (i % 40) for i in ids.tolist()]))
            got_ids += ids.tolist()
            got_w += w.tolist()
        assert sampler.order_source == "pads"
        want_ids, want_w = c.order(TRAIN, epoch, 0, 1, with_weights=True)
        assert got_ids == want_ids == sampler.indices(epoch)
        assert got_w == pytest.approx(want_w, rel=1e-6)
        assert sampler.last_weights == want_w
        if epoch > 0:
            assert len(set(want_w)) > 1
        assert epoch_done(sampler.client, TRAIN, epoch, 0)
    c.close()


def test_sampler_weights_are_one_without_pads(peer):
    """pads=False on the client: uniform order, weights 1.0, still 4-tuples."""
    ds = ShadeDataset(peer.sock, TRAIN)
    s = ShadeSampler(peer.sock, TRAIN, rank=0, world=2, batch_size=40, pads=False, weights=True)
    loader = DataLoader(ds, sampler=s, batch_size=None)
    n = 0
    for x, y, ids, w in loader:
        assert w.tolist() == [1.0] * len(ids)
        n += len(ids)
    assert n == 100 and s.order_source == "uniform"
