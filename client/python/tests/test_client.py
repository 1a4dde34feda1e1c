"""shade.Client against a real shade-peer."""

import logging
import random
import threading
import time

import pytest

import shade
from conftest import TEST, TRAIN

CLASSES = ["0-tshirt-top", "1-trouser", "2-pullover", "3-dress", "4-coat",
           "5-sandal", "6-shirt", "7-sneaker", "8-bag", "9-ankle-boot"]


def files(fmnist, split="train"):
    return sorted(p.relative_to(fmnist / split).as_posix() for p in (fmnist / split).glob("*/*"))


def test_manifest_is_imagefolder_order(client, fmnist):
    m = client.manifest(TRAIN)
    assert m == files(fmnist)
    assert len(m) == 200 and len(client.manifest(TEST)) == 200


def test_get_equals_file(client, fmnist):
    m = client.manifest(TRAIN)
    for i in (0, 1, 57, 199):
        assert client.get(TRAIN, i) == (fmnist / "train" / m[i]).read_bytes()


def test_mget_order(client, fmnist):
    m = client.manifest(TRAIN)
    ids = random.Random(1).sample(range(200), 64) + [3, 3, 0]
    got = client.mget(TRAIN, ids)
    assert got == [(fmnist / "train" / m[i]).read_bytes() for i in ids]
    assert client.mget(TRAIN, []) == []


def test_labels_from_manifest(client):
    m = client.manifest(TRAIN)
    labels = client.labels(TRAIN)
    assert labels == [CLASSES.index(p.split("/")[0]) for p in m]
    assert set(labels) == set(range(10))
    assert labels == sorted(labels)  # ImageFolder order groups classes


def reported(c):
    return c.stats(TRAIN)["datasets"][0]["job"]["reported_samples"]


def test_order_report_done_two_ranks_two_epochs(peer):
    with shade.Client(peer.sock) as c:
        c.reset(TRAIN)
        before = reported(c)
    world, epochs = 2, 2
    slices = {}
    errors = []
    release_rank1 = threading.Event()

    def rank(r):
        try:
            with shade.Client(peer.sock) as c:
                for e in range(epochs):
                    ids = c.order(TRAIN, e, r, world)
                    slices[e, r] = ids
                    for s in range(0, len(ids), 25):
                        batch = ids[s:s + 25]
                        assert len(c.mget(TRAIN, batch)) == len(batch)
                        assert c.report(TRAIN, e, batch, [0.01 * (i % 50) for i in batch]) == len(batch)
                    if r == 1 and e == 0:
                        release_rank1.wait(10)
                    c.done(TRAIN, e, r)
                    c.done(TRAIN, e, r)  # idempotent
        except Exception as ex:  # surfaced by the main thread
            errors.append(ex)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    with shade.Client(peer.sock) as c:
        # Epoch 1 is not published while rank 1 has not finished epoch 0.
        deadline = time.monotonic() + 10
        while (0, 0) not in slices or (0, 1) not in slices:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(shade.OrderTimeout):
            c.order(TRAIN, 1, 0, world, timeout_ms=200)
        release_rank1.set()
        for t in threads:
            t.join(20)
        assert not errors, errors
        job = c.stats(TRAIN)["datasets"][0]["job"]
    assert job["world"] == 2 and job["latest_epoch"] == 2
    assert job["reported_samples"] - before == 400
    for e in range(epochs):
        a, b = slices[e, 0], slices[e, 1]
        assert len(a) == len(b) == 100
        assert all(0 <= i < 200 for i in a + b)
    assert sorted(slices[0, 0] + slices[0, 1]) == list(range(200))  # epoch 0: a permutation


def test_report_accepts_tensors_and_splits_large_batches(client):
    import numpy as np
    before = reported(client)
    assert client.report(TRAIN, 0, np.arange(10), np.linspace(0.1, 2.0, 10)) == 10
    n = shade.client.REPORT_CHUNK + 100
    assert client.report(TRAIN, 0, [i % 200 for i in range(n)], [1.0 / (1 + i) for i in range(n)]) == n
    assert reported(client) - before == 10 + n


def test_bad_input_raises_shade_error(client):
    with pytest.raises(shade.SampleError, match="fmnist-train/200"):
        client.get(TRAIN, 200)
    with pytest.raises(shade.SampleError, match="fmnist-train/999"):
        client.mget(TRAIN, [1, 999, 2])
    with pytest.raises(shade.SampleError):
        client.get("no-such-dataset", 0)
    with pytest.raises(shade.RequestError, match="unknown dataset"):
        client.manifest("no-such-dataset")
    with pytest.raises(shade.RequestError):
        client.report(TRAIN, 0, [1, 2], [0.5, float("nan")])
    with pytest.raises(shade.RequestError):
        client.report(TRAIN, 0, [1, 100000], [0.5, 0.7])
    with pytest.raises(shade.RequestError, match="non-negative"):
        client.report(TRAIN, 0, [1, -1], [0.5, 0.7])  # no uint32: sent as text, refused there
    assert not client.packed_refused, "an error about the report was taken for a refusal of PACKED"
    with pytest.raises(shade.RequestError, match="rank"):
        client.order(TRAIN, 0, 3, 2)
    with pytest.raises(ValueError):
        client.report(TRAIN, 0, [1, 2], [0.5])
    with pytest.raises(shade.InvalidArgument):
        client.report(TRAIN, 0, [1, 2], [0.5])
    t0 = time.monotonic()
    with pytest.raises(shade.ShadeError):
        client.order("no-such-dataset", 0, 0, 1)
    assert time.monotonic() - t0 < 1, "error replies must not be retried"
    assert client.get(TRAIN, 0)  # the connection goes on


def test_peer_unavailable(workdir):
    sock = str(workdir / "nobody.sock")
    c = shade.Client(sock, retry_for=0.5)
    t0 = time.monotonic()
    with pytest.raises(shade.PeerUnavailable, match="nobody.sock"):
        c.get(TRAIN, 0)
    assert 0.4 < time.monotonic() - t0 < 3
    # A socket file nobody listens on (a killed peer's) is the same.
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.bind(sock)
    s.close()
    with pytest.raises(shade.PeerUnavailable, match="nobody.sock"):
        c.stats()


def test_auth(make_peer):
    p = make_peer("auth", "--requirepass", "s3cret").start()
    with shade.Client(p.sock, password="s3cret") as c:
        assert len(c.manifest(TRAIN)) == 200
    with shade.Client(p.sock, retry_for=5) as c:
        t0 = time.monotonic()
        with pytest.raises(shade.AuthError):
            c.get(TRAIN, 0)
        assert time.monotonic() - t0 < 1
    with shade.Client(p.sock, password="wrong", retry_for=5) as c:
        with pytest.raises(shade.AuthError):
            c.get(TRAIN, 0)


def test_report_is_retried_across_restart(make_peer, caplog):
    p = make_peer("rep").start()
    c = shade.Client(p.sock, retry_for=10)
    assert c.order(TRAIN, 0, 0, 1)
    assert c.report(TRAIN, 0, [1, 2], [0.1, 0.2]) == 2
    p.kill()
    threading.Timer(0.3, p.start, kwargs={"wait": False}).start()
    with caplog.at_level(logging.WARNING, logger="shade"):
        assert c.report(TRAIN, 0, [3, 4], [0.3, 0.4]) == 2
    assert "unreachable" in caplog.text
    assert c.stats(TRAIN)["datasets"][0]["job"]["reported_samples"] == 2
    c.close()
