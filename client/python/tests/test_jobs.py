"""Several training jobs on one dataset of one real shade-peer: the client's
``job=`` (JOB <name> on the job's commands, SHADE.JOB on every connection),
each job's own orders, and its reads counted apart in SHADE.STATS."""

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import shade
from shade.client import find_job
from conftest import TRAIN

N = 200  # samples of the conftest import


def train_epoch(c, epoch, rank, ids):
    """Report a loss for every id and finish the epoch as rank."""
    for s in range(0, len(ids), 50):
        batch = ids[s:s + 50]
        assert c.report(TRAIN, epoch, batch, [0.1 + 0.01 * (i % 30) for i in batch]) == len(batch)
    c.done(TRAIN, epoch, rank)


def all_ranks(c, epoch, world, timeout_ms=5000):
    """Every rank's slice of epoch, asked at once (the peer publishes an
    epoch once every rank of the job has asked)."""
    with ThreadPoolExecutor(world) as pool:
        return list(pool.map(lambda r: c.order(TRAIN, epoch, r, world, timeout_ms=timeout_ms),
                             range(world)))


def jobs_by_name(c):
    return {j["name"]: j for j in c.stats(TRAIN)["datasets"][0]["jobs"]}


def test_jobs_with_different_worlds_get_their_own_orders(make_peer):
    """Job a (world 1) and job b (world 2) on one dataset of one peer: each
    gets its own permutation, cut for its own world, and its own epoch 1
    once its own ranks are done; the default job keeps its world and epoch."""
    p = make_peer("jobs", "--order-ahead", "0").start()
    with shade.Client(p.sock) as cd, shade.Client(p.sock, job="a") as ca, \
            shade.Client(p.sock, job="b") as cb:
        default0 = all_ranks(cd, 0, 3)
        assert len({len(part) for part in default0}) == 1  # equal slices (padded)
        assert set(sum(default0, [])) == set(range(N))

        a0 = ca.order(TRAIN, 0, 0, 1, timeout_ms=5000)
        assert sorted(a0) == list(range(N))
        b0 = all_ranks(cb, 0, 2)
        assert len(b0[0]) == len(b0[1]) == N // 2
        assert sorted(b0[0] + b0[1]) == list(range(N))
        # Each job's sampler is seeded by its own name: other permutations.
        assert a0[:N // 2] not in (b0[0], b0[1]) and a0 != default0[0][:len(a0)]

        # Job a's epoch 1 waits for a's only rank, not for b's or the default's.
        train_epoch(ca, 0, 0, a0)
        a1 = ca.order(TRAIN, 1, 0, 1, timeout_ms=5000)
        assert len(a1) == N
        # Job b's waits for both of its ranks.
        train_epoch(cb, 0, 0, b0[0])
        with pytest.raises(shade.OrderTimeout):
            cb.order(TRAIN, 1, 0, 2, timeout_ms=300)
        train_epoch(cb, 0, 1, b0[1])
        b1 = all_ranks(cb, 1, 2)
        assert len(b1[0]) == len(b1[1]) == N // 2

        jobs = jobs_by_name(cd)
        assert list(jobs) == ["default", "a", "b"]  # the default job first
        assert (jobs["a"]["world"], jobs["a"]["latest_epoch"]) == (1, 1)
        assert (jobs["b"]["world"], jobs["b"]["latest_epoch"]) == (2, 1)
        # The default job is untouched: world 3, still at epoch 0, the same order.
        assert (jobs["default"]["world"], jobs["default"]["latest_epoch"]) == (3, 0)
        assert cd.stats(TRAIN)["datasets"][0]["job"]["name"] == "default"
        assert all_ranks(cd, 0, 3) == default0
        # "default" names the default job.
        with shade.Client(p.sock, job="default") as named:
            assert named.order(TRAIN, 0, 1, 3, timeout_ms=5000) == default0[1]
        assert ca.job_stats(TRAIN)["name"] == "a" and cd.job_stats(TRAIN)["name"] == "default"

        # Resetting job a starts it over, alone: b keeps its epoch.
        ca.reset(TRAIN)
        assert all(all_ranks(ca, 0, 2))  # any world after a reset
        jobs = jobs_by_name(cd)
        assert jobs["a"]["world"] == 2 and jobs["b"]["latest_epoch"] == 1


@pytest.mark.parametrize("name", ["", "a b", "j/1", "x" * 65, ".", "..", "jöb", "JOB\r\n", 7])
def test_bad_job_name_refused_client_side(tmp_path, name):
    """A name the peer would refuse is refused before anything is sent
    (the socket here does not even exist)."""
    sock = tmp_path / "none.sock"
    with pytest.raises(shade.InvalidArgument):
        shade.Client(sock, job=name)
    torch = pytest.importorskip("torch")  # noqa: F841
    from shade.torch import ShadeDataset, ShadeSampler
    with pytest.raises(shade.InvalidArgument):
        ShadeSampler(sock, TRAIN, 0, 1, batch_size=8, job=name)
    with pytest.raises(shade.InvalidArgument):
        ShadeDataset(sock, TRAIN, job=name)


def test_good_job_names(tmp_path):
    for name in ("x" * 64, "a", "job-1.v2_final", "default"):
        c = shade.Client(tmp_path / "none.sock", job=name)
        assert c.job == name and repr(c).endswith(f"job={name!r})")
        c.close()


def check_counters(job, reads):
    assert job["reads"] == reads
    assert job["hits"] + job["source_reads"] == job["reads"]
    assert job["hit_ratio"] == pytest.approx(job["hits"] / job["reads"])


@pytest.mark.parametrize("shared_memory", [True, False])
def test_reads_counted_for_the_job(make_peer, shared_memory):
    """GET, MGET and SHADE.LOCATE through a client with job=x count for x
    in SHADE.STATS, not for the default job; a second read of the same
    samples hits."""
    # No read-ahead: every source read is a trainer's, counted for its job.
    p = make_peer(f"reads{int(shared_memory)}", "--prefetch", "0").start()
    with shade.Client(p.sock, job="x", shared_memory=shared_memory) as cx, \
            shade.Client(p.sock, shared_memory=shared_memory) as cd:
        ids = cx.order(TRAIN, 0, 0, 1, timeout_ms=5000)[:50]  # the peer now knows job x
        first = cx.mget(TRAIN, ids)
        assert cx.mget(TRAIN, ids) == first  # read again: from memory
        assert cx.get(TRAIN, ids[0]) == first[0]
        if shared_memory and shade.shm.SUPPORTED:
            assert cx.shared_copies > 0, "the second MGET did not go through SHADE.LOCATE"
        x = cx.job_stats(TRAIN)
        check_counters(x, 101)
        assert x["source_reads"] == 50 and x["hits"] == 51
        assert x["source_bytes"] == sum(len(v) for v in first)
        assert cd.job_stats(TRAIN)["reads"] == 0

        # Reads without a job count for the default job only.
        cd.mget(TRAIN, ids[:10])
        check_counters(cd.job_stats(TRAIN), 10)
        assert cx.job_stats(TRAIN)["reads"] == 101
        # The dataset's counters are every job's together.
        total = cd.stats(TRAIN)["datasets"][0]["total"]
        assert total["source_bytes"] == x["source_bytes"]  # the default job read no new sample


def test_reads_of_a_new_connection_are_counted(make_peer):
    """Every connection of the client's pools names the job, after AUTH:
    after the pool's connections are dropped, the reconnected ones still
    count for it; a wrong password is still an AuthError."""
    p = make_peer("reconnect", "--requirepass", "s3cret").start()
    with shade.Client(p.sock, password="s3cret", job="y", shared_memory=False) as c:
        ids = c.order(TRAIN, 0, 0, 1, timeout_ms=5000)[:20]
        c.mget(TRAIN, ids)
        c._redis.connection_pool.disconnect()
        c.mget(TRAIN, ids)
        check_counters(c.job_stats(TRAIN), 40)
    with shade.Client(p.sock, password="wrong", job="y", retry_for=2) as c:
        with pytest.raises(shade.AuthError):
            c.get(TRAIN, 0)


def test_sampler_and_workers_read_for_the_job(make_peer):
    """ShadeSampler(job=) and ShadeDataset(job=) in DataLoader workers: the
    job's orders, reports and dones, and every worker's reads, are the
    job's; the default job sees none of them."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader
    from shade.torch import ShadeDataset, ShadeSampler, epoch_done, report_losses

    p = make_peer("sampler", "--order-ahead", "0").start()
    ds = ShadeDataset(p.sock, TRAIN, job="t")
    sampler = ShadeSampler(p.sock, TRAIN, rank=0, world=1, batch_size=40, job="t")
    assert sampler.client.job == "t"
    loader = DataLoader(ds, sampler=sampler, batch_size=None, num_workers=2)
    read = 0
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for xs, ys, ids in loader:
            report_losses(sampler.client, TRAIN, epoch, ids, torch.rand(len(ids)))
            read += len(ids)
        assert sampler.order_source == "pads"
        assert epoch_done(sampler.client, TRAIN, epoch, 0)
    assert read == 2 * N
    with shade.Client(p.sock) as c:
        st = c.stats(TRAIN)["datasets"][0]
        t = find_job(st, "t")
        assert (t["world"], t["latest_epoch"]) == (1, 2)
        assert t["reports"] > 0
        # SHADE.LOCATE may count a sample that moved during its copy once
        # more (the MGET that reads it again counts it too): at least.
        assert t["reads"] >= read and t["hits"] + t["source_reads"] == t["reads"]
        assert find_job(st, None)["reads"] == 0 and find_job(st, None)["latest_epoch"] == -1


def test_sampler_falls_back_on_its_own_job(make_peer, caplog):
    """The fallback watches the sampler's job, not the default job: job j
    reset on the peer (its epochs forgotten) while the default job is
    further on still makes a sampler of j fall back at once."""
    pytest.importorskip("torch")
    from shade.torch import ShadeSampler, epoch_done, uniform_slice

    p = make_peer("jlost", "--order-ahead", "0").start()
    with shade.Client(p.sock) as cd:
        for epoch in range(2):
            train_epoch(cd, epoch, 0, cd.order(TRAIN, epoch, 0, 1, timeout_ms=5000))
        assert cd.job_stats(TRAIN)["latest_epoch"] == 2
    sampler = ShadeSampler(p.sock, TRAIN, rank=0, world=1, batch_size=50, seed=4, job="j")
    assert len(sum(list(sampler), [])) == N and sampler.order_source == "pads"
    assert epoch_done(sampler.client, TRAIN, 0, 0)
    assert sampler.client.job_stats(TRAIN)["latest_epoch"] == 1
    sampler.client.reset(TRAIN)
    assert sampler.client.job_stats(TRAIN)["latest_epoch"] == -1

    caplog.set_level(logging.WARNING, logger="shade")
    sampler.set_epoch(2)
    t0 = time.monotonic()
    ids = sum(list(sampler), [])
    assert time.monotonic() - t0 < 2, "a lost job must be noticed without waiting"
    assert sampler.order_source == "fallback" and ids == uniform_slice(N, 0, 1, 4, 2)
    assert "job j" in caplog.text
