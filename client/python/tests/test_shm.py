"""Zero-copy reads from the peer's shared memory, checked byte for byte."""

import random
import threading

import pytest
import redis

from conftest import TRAIN

import shade
from shade import shm

pytestmark = pytest.mark.skipif(not shm.SUPPORTED, reason="zero-copy reads need x86-64")


def _files(fmnist, client):
    return [(fmnist / "train" / p).read_bytes() for p in client.manifest(TRAIN)]


def test_mget_copies_held_samples_from_shared_memory(client, fmnist):
    files = _files(fmnist, client)
    ids = list(range(0, 200, 3))
    assert client.shared_memory
    for _ in range(2):  # the first pass reads through, the second hits
        assert client.mget(TRAIN, ids) == [files[i] for i in ids]
    assert client.shared_copies >= len(ids)

    plain = shade.Client(client.socket_path, shared_memory=False)
    try:
        assert not plain.shared_memory
        assert plain.mget(TRAIN, ids) == [files[i] for i in ids]
        assert plain.shared_copies == 0
    finally:
        plain.close()


def _sent(monkeypatch):
    """Commands this process sends from now on: (name, number of keys)."""
    sent = []
    orig = redis.connection.Connection.send_packed_command

    def send_packed_command(conn, command, *args, **kwargs):
        data = command if isinstance(command, bytes) else b"".join(command)
        head = data.split(b"\r\n", 3)  # *<count>, $<len>, name
        sent.append((head[2].decode(), int(head[0][1:]) - 1))
        return orig(conn, command, *args, **kwargs)

    monkeypatch.setattr(redis.connection.Connection, "send_packed_command", send_packed_command)
    return sent


def test_long_batch_located_in_parts(client, fmnist, monkeypatch):
    """A batch of more than twice LOCATE_PART's bytes is located a part at
    a time, each part's samples copied as the next is located."""
    files = _files(fmnist, client)
    ids = list(range(0, 200, 2))
    client.mget(TRAIN, ids)  # read through if not held yet
    assert client.mget(TRAIN, ids) == [files[i] for i in ids]  # located
    monkeypatch.setattr(shade.client, "LOCATE_PART", 2048)
    step = client._locate_step(len(ids))
    assert 1 < step < len(ids) // 4, f"{step} keys a part"
    sent, copies = _sent(monkeypatch), client.shared_copies
    m = client._mapping
    orig, asked = m.copy_located, []

    def copy_located(words):
        asked.append(len(sent))  # parts asked for as this one is copied
        return orig(words)

    m.copy_located = copy_located
    try:
        assert client.mget(TRAIN, ids) == [files[i] for i in ids]
    finally:
        del m.copy_located
    assert client.shared_copies == copies + len(ids)
    parts = -(-len(ids) // step)
    assert [n for _, n in sent] == [step] * (len(ids) // step) + ([len(ids) % step] if len(ids) % step else [])
    assert asked == [min(p + 2, parts) for p in range(parts)], "not one part ahead"
    assert {c for c, _ in sent} == {"SHADE.LOCATE"}
    assert client.ping()  # the connection is left fit for the next command


def test_peer_killed_between_parts(make_peer, fmnist, monkeypatch):
    """The peer dies while a batch is located in parts: the samples copied
    stand, the rest are read from the restarted peer, every byte right."""
    p = make_peer("parts").start()
    c = shade.Client(p.sock, retry_for=10)
    try:
        files = _files(fmnist, c)
        ids = list(range(100))
        c.mget(TRAIN, ids)  # read through
        c.mget(TRAIN, ids)  # located: the client learns the samples' size
        monkeypatch.setattr(shade.client, "LOCATE_PART", 2048)
        m = c._mapping
        orig, calls = m.copy_located, []

        def copy_then_kill(words):
            if not calls:
                p.kill()
                p.start()
            calls.append(words)
            return orig(words)

        m.copy_located = copy_then_kill
        sent = _sent(monkeypatch)
        try:
            assert c.mget(TRAIN, ids) == [files[i] for i in ids]
        finally:
            del m.copy_located
        step = c._locate_step(len(ids))
        locates = [n for name, n in sent if name == "SHADE.LOCATE"]
        # Parts until the connection fails (the dead peer may have answered
        # the part sent before it died), then the keys left in one command,
        # which the new peer answers from another memory: MGET reads them.
        assert 1 < step < len(ids) // 4 and locates[0] == step, sent
        left = locates[-1]
        assert locates[:-1] == [step] * len(locates[:-1]), sent
        assert left < len(ids) and (len(ids) - left) % step == 0, sent
        assert sent[-1][0] == "MGET", sent
        assert c._mapping is None or c._mapping.id != m.id
        assert c.mget(TRAIN, ids) == [files[i] for i in ids]

        # Restarted before a batch, its connection made again first: the
        # first part's reply names the new memory while the next part's is
        # on its way.
        c.mget(TRAIN, ids)
        m = c._mapping
        assert m is not None
        p.kill()
        p.start()
        assert c.ping()
        del sent[:]
        assert c.mget(TRAIN, ids) == [files[i] for i in ids]
        assert sent[:2] == [("SHADE.LOCATE", step)] * 2 and sent[2] == ("MGET", len(ids)), sent
        assert c.ping() and c.mget(TRAIN, ids) == [files[i] for i in ids]
    finally:
        c.close()


@pytest.mark.parametrize("part", [None, 64], ids=["whole", "in parts"])
def test_no_wrong_byte_while_evicting(make_peer, fmnist, monkeypatch, part):
    """Readers copy out of a cache far smaller than what they read, whose
    misses evict what others are copying."""
    # About 45 of the 200 samples (450 bytes each) fit.
    if part is not None:
        monkeypatch.setattr(shade.client, "LOCATE_PART", part)
    p = make_peer("evict", "--cache-size", "24KiB", "--policy", "lru").start()
    c = shade.Client(p.sock, retry_for=10)
    try:
        assert c.shared_memory
        files = _files(fmnist, c)
        errors = []

        def reader(seed):
            rng = random.Random(seed)
            try:
                for _ in range(120):
                    ids = [rng.randrange(30) if k % 4 else rng.randrange(200) for k in range(16)]
                    got = c.mget(TRAIN, ids)
                    for i, v in zip(ids, got):
                        if v != files[i]:
                            errors.append(f"sample {i}: wrong bytes")
                            return
            except Exception as e:  # reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors[:3]
        assert c.shared_copies > 0
        print(f"copied {c.shared_copies}, moved and read again {c.shared_moved}")

        # The race made certain: locate, evict everything, then copy.
        keys = [f"{TRAIN}/{i}" for i in range(10)]
        c.mget(TRAIN, range(10))
        reply = c._execute("SHADE.LOCATE", *keys)
        words = memoryview(reply[1]).cast("Q")
        located = [words[5 * k:5 * k + 5] for k in range(len(keys)) if words[5 * k]]
        assert located, "nothing of a batch just read is held"
        c.mget(TRAIN, range(100, 200))  # LRU evicts the batch
        m = c._mapping
        with pytest.raises(shm.Moved):
            for loc in located:
                m.copy(loc)
        # Evicted between SHADE.LOCATE and the copies: read again.
        other = shade.Client(p.sock, shared_memory=False)
        orig, calls = m.copy_located, []

        def copy_after_eviction(words):
            if not calls:
                other.mget(TRAIN, range(100, 200))
            calls.append(len(words) // shm.LOCATION_WORDS - words[0::shm.LOCATION_WORDS].count(0))
            return orig(words)

        c.mget(TRAIN, range(10))
        moved = c.shared_moved
        m.copy_located = copy_after_eviction
        try:
            assert c.mget(TRAIN, range(10)) == files[:10]
        finally:
            del m.copy_located
            other.close()
        assert calls and c.shared_moved >= moved + calls[0]
    finally:
        c.close()


def test_mapping_follows_a_restarted_peer(make_peer, fmnist):
    p = make_peer("restart").start()
    c = shade.Client(p.sock, retry_for=10)
    try:
        files = _files(fmnist, c)
        ids = list(range(20))
        c.mget(TRAIN, ids)
        assert c.mget(TRAIN, ids) == files[:20]
        old = c._mapping
        assert old is not None
        p.kill()
        p.start()
        assert c.mget(TRAIN, ids) == files[:20]  # over MGET: the mapping is stale
        c.mget(TRAIN, ids)
        assert c.mget(TRAIN, ids) == files[:20]
        assert c._mapping is not None and c._mapping.id != old.id
    finally:
        c.close()


def test_password_and_refusal(make_peer, fmnist):
    p = make_peer("pw", "--requirepass", "s3cret").start()
    good = shade.Client(p.sock, password="s3cret", retry_for=2)
    try:
        assert good.shared_memory
        files = _files(fmnist, good)
        good.mget(TRAIN, [1, 2])
        assert good.mget(TRAIN, [1, 2]) == files[1:3]
    finally:
        good.close()
    with pytest.raises(shm.MapError) as e:
        shm.map_peer_memory(p.sock)
    assert e.value.code == "NOAUTH"


def test_map_must_lead_its_pipeline(peer):
    import socket
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(peer.sock)
        s.sendall(b"*1\r\n$4\r\nPING\r\n*1\r\n$9\r\nSHADE.MAP\r\n*1\r\n$4\r\nPING\r\n")
        data = b""
        while data.count(b"\r\n") < 3:
            data += s.recv(4096)
        assert data.startswith(b"+PONG\r\n-ERR SHADE.MAP must be the first command")
        assert data.endswith(b"+PONG\r\n")


def test_cache_size_not_a_multiple_of_8(make_peer, fmnist):
    p = make_peer("odd", "--cache-size", "1000003").start()
    c = shade.Client(p.sock, retry_for=10)
    try:
        assert c.shared_memory
        files = _files(fmnist, c)
        c.mget(TRAIN, range(10))
        assert c.mget(TRAIN, range(10)) == files[:10]
        assert c.shared_copies >= 10
    finally:
        c.close()


def test_close_unmaps(peer):
    c = shade.Client(peer.sock, retry_for=10)
    assert c.shared_memory
    m = c._mapping
    assert m is not None and not m.closed
    assert c.mget(TRAIN, [0, 1])
    c.close()
    assert m.closed and c._mapping is None
    with pytest.raises(shade.ProtocolError):
        m.copy((1, 0, 0, 1))
    c.close()  # again: nothing to do
    m.close()


def test_mapping_close_and_bounds(peer):
    m = shm.map_peer_memory(peer.sock)
    with m:
        with pytest.raises(shade.ProtocolError):
            m.copy((1, m.size, 0, 1))
        with pytest.raises(ValueError):  # ProtocolError is a ValueError too
            m.copy((1, 8, m.size - 1, 2))
    assert m.closed
    m.close()
