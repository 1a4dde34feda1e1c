"""Client of the local shade-peer's trainer socket (Redis protocol, RESP2)."""

from __future__ import annotations

import array
import contextlib
import json
import logging
import math
import os
import re
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Literal, Optional, Sequence, Tuple, Union, overload

import redis

from . import malloc, shm
from .errors import (AuthError, InvalidArgument, OrderTimeout, PeerUnavailable, ProtocolError,
                     RequestError, SampleError)

#: ids or losses: a list, tuple, numpy array or tensor (anything with
#: ``tolist``), or one number
Values = Union[Iterable[Any], int, float]

log = logging.getLogger("shade")

# Pairs per SHADE.REPORT command. Larger reports are split; each part is
# ranked by the peer as its own minibatch, which only matters for batches
# far bigger than any trainer uses.
REPORT_CHUNK = 16384

# A blocking SHADE.ORDER is bounded by the peer (10 minutes by default); its
# connection waits that long plus this margin before calling the peer hung.
_ORDER_SOCKET_MARGIN = 60.0
_SERVER_ORDER_LIMIT = 600.0

# Seconds before SHADE.MAP is tried again after it failed.
_MAP_RETRY = 5.0

#: bytes of samples one SHADE.LOCATE asks for where a batch is located in
#: parts (Client._locate)
LOCATE_PART = 1 << 20

# A job name, as the peer checks it (Go: protocol/samplekey.ValidName):
# 1 to 64 bytes of A-Z a-z 0-9 . _ -, and neither "." nor "..".
_JOB_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")

#: the name of a dataset's default job (Go: mesh.DefaultJob); naming it is
#: the same as naming no job
DEFAULT_JOB = "default"


def sample_key(dataset: str, i: int) -> str:
    """The key of sample ``i`` of ``dataset``, ``"<dataset>/<i>"``, as the
    Go reference builds it (protocol/samplekey.Format). Not validated: the
    peer answers a bad key with an error."""
    return f"{dataset}/{int(i)}"


def _pack_samples(command: str, dataset: str, ids: Sequence[int]) -> bytes:
    """``command`` with the key of each of ids (ints), as sample_key makes
    it, RESP-encoded as redis-py's pack_command encodes it, in one pass: a
    third of pack_command's time for the many keys of a batch."""
    prefix = f"{dataset}/"
    n = len(prefix.encode())
    head = f"*{len(ids) + 1}\r\n${len(command)}\r\n{command}\r\n"
    return (head + "".join([f"${n + len(i)}\r\n{prefix}{i}\r\n" for i in map(str, ids)])).encode()


def check_job(name: str) -> str:
    """``name`` if it can name a job, else InvalidArgument (the rule of the
    Go reference, protocol/samplekey.ValidName)."""
    if not isinstance(name, str) or not _JOB_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidArgument(
            f"job name {name!r}: want 1-64 characters of A-Z a-z 0-9 . _ - (not '.' or '..')")
    return name


def _naming_job(job: str) -> Any:
    """A redis-py ``redis_connect_func`` that runs the connection's usual
    set-up (AUTH) and then ``SHADE.JOB job``, so that every connection of the
    pool, a new one after a reconnect or a fork included, reads for the job.
    An error reply (a peer that predates jobs) fails the connection: redis-py
    raises it to the command that opened it, which raises RequestError, as
    go-redis's OnConnect does in the Go client."""

    def on_connect(conn: Any) -> None:
        conn.on_connect()
        conn.send_command("SHADE.JOB", job, check_health=False)
        conn.read_response()  # OK, or an error reply raised as ResponseError

    return on_connect


def _as_list(values: Values) -> List[Any]:
    """A list of Python scalars from a list, tuple, numpy array or tensor."""
    if hasattr(values, "detach"):  # torch tensor: no autograd, on the CPU
        values = values.detach().cpu()
    if hasattr(values, "tolist"):
        values = values.tolist()
    if isinstance(values, (int, float)):
        return [values]
    return list(values)


class Client:
    """A connection to this node's shade-peer over its Unix socket.

    Every method blocks until the peer answers. Safe to share between the
    threads of one process (redis-py's pool gives each thread a connection);
    after a fork, make a new Client in the child (the torch classes do).

    Reconnection: when the peer cannot be reached (socket file missing,
    connection refused or reset, the peer restarted mid-command), every
    command is retried with exponential backoff (50 ms doubling to 1 s) for up
    to ``retry_for`` seconds, then :class:`PeerUnavailable` is raised naming
    the socket. All commands are retried, including SHADE.REPORT: if the peer
    died after merging a report, the report is sent again, and one lost or
    duplicated minibatch report only nudges importance scores. SHADE.DONE is
    idempotent. Error replies (bad input) raise :class:`RequestError`
    subclasses at once, never retried.

    A restarted peer has lost the job (epochs, world, scores): see
    :class:`shade.torch.ShadeSampler` for how the order then falls back.

    Jobs: several training jobs may share one dataset (and the peers'
    cache), each with its own world size, epochs, orders and scores. A
    Client made with ``job="name"`` acts for that job: it appends ``JOB
    name`` to SHADE.ORDER, REPORT, DONE and RESET, and every connection it
    opens first sends ``SHADE.JOB name``, so that the peer counts the job's
    reads (GET, MGET, SHADE.LOCATE) apart: SHADE.STATS ``"jobs"``. Without
    a job (or with ``"default"``) it acts for the dataset's default job, as
    a client that predates jobs does.
    """

    def __init__(self, socket_path: Union[str, "os.PathLike[str]"],
                 password: Optional[str] = None, timeout: Optional[float] = 60.0,
                 retry_for: float = 30.0, shared_memory: bool = True,
                 job: Optional[str] = None, retain_freed_memory: bool = True) -> None:
        """``timeout``: seconds to wait for any reply but SHADE.ORDER's
        (whose wait is bounded by its own timeout_ms and by the peer);
        ``retry_for``: seconds to keep retrying an unreachable peer;
        ``shared_memory``: copy samples the peer holds straight out of its
        memory (mapped through SHADE.MAP, see :mod:`shade.shm`) instead of
        receiving them over the socket, where the peer can share it;
        ``job``: the training job this client acts and reads for (1-64
        characters of A-Z a-z 0-9 . _ -; InvalidArgument otherwise), None
        for the dataset's default job; ``retain_freed_memory``: have this
        process's malloc keep freed memory for the next batch's samples
        instead of faulting it in afresh (:mod:`shade.malloc`; glibc only,
        and not where the user set MALLOC_TRIM_THRESHOLD_ or
        MALLOC_MMAP_THRESHOLD_)."""
        if retain_freed_memory:
            malloc.retain_freed_memory()
        #: the job named on every command and connection, None for the
        #: dataset's default job
        self.job: Optional[str] = None if job is None else check_job(job)
        self._job_args: Tuple[str, ...] = () if job is None else ("JOB", job)
        self.socket_path = os.fspath(socket_path)
        self.retry_for = float(retry_for)
        self._password = password
        self._map_timeout = min(timeout, 5.0) if timeout else 5.0
        self._shm_on = bool(shared_memory) and shm.SUPPORTED
        self._mapping: Optional[shm.Mapping] = None
        self._map_retry_at = 0.0
        self._map_lock = threading.Lock()
        self._weights_refused = False
        self._packed_refused = False
        #: samples copied out of the peer's memory, and located samples that
        #: moved before their copy (read again over the socket)
        self.shared_copies = 0
        self.shared_moved = 0
        # bytes and count of the samples located so far: their mean sizes
        # the parts a batch is located in
        self._located_bytes = 0
        self._located_keys = 0
        common = dict(
            unix_socket_path=self.socket_path,
            password=password,
            socket_connect_timeout=min(timeout, 5.0) if timeout else 5.0,
            # Both pools name the job on every new connection; SHADE.LOCATE
            # and MGET go through the ordinary one.
            redis_connect_func=_naming_job(job) if job is not None else None,
        )
        self._redis = redis.Redis(socket_timeout=timeout, **common)
        # SHADE.ORDER blocks until an epoch is published: its own pool, so a
        # long wait never trips the ordinary commands' read timeout.
        self._blocking = redis.Redis(
            socket_timeout=_SERVER_ORDER_LIMIT + _ORDER_SOCKET_MARGIN, **common
        )

    # -- plumbing -------------------------------------------------------

    def _execute(self, *args: Any, blocking: bool = False) -> Any:
        conn = self._blocking if blocking else self._redis
        return self._retrying(args, lambda: conn.execute_command(*args))

    def _execute_samples(self, command: str, dataset: str, ids: Sequence[int]) -> Any:
        """``command`` with the keys of ids, packed by _pack_samples."""
        packed = _pack_samples(command, dataset, ids)
        return self._retrying((command, sample_key(dataset, ids[0])), lambda: self._roundtrip(packed))

    def _roundtrip(self, packed: bytes) -> Any:
        """Sends one packed command on a connection of the pool and reads
        its reply, as redis-py's execute_command does for unpacked ones."""
        with self._pooled() as conn:
            conn.send_packed_command([packed])
            return conn.read_response()

    @contextlib.contextmanager
    def _pooled(self) -> Iterator[Any]:
        """A connection of the ordinary pool for an exchange this client
        makes itself (packed commands, a batch's parts), given back after;
        closed first where the exchange failed other than by an error
        reply (which is read whole and leaves the connection fit)."""
        pool = self._redis.connection_pool
        conn = pool.get_connection("")
        try:
            yield conn
        except redis.ResponseError:
            raise
        except BaseException:
            conn.disconnect()
            raise
        finally:
            pool.release(conn)

    def _retrying(self, args: Sequence[Any], call: Callable[[], Any]) -> Any:
        """call's reply, call retried while the peer is unreachable (up to
        retry_for); redis-py's errors raised as this package's
        (_shade_errors)."""
        deadline = None
        delay = 0.05
        while True:
            try:
                with self._shade_errors(args):
                    reply = call()
                if deadline is not None:
                    log.warning("shade peer at %s answers again", self.socket_path)
                return reply
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.retry_for
                    log.warning(
                        "shade peer at %s unreachable (%s); retrying %s for up to %.1fs",
                        self.socket_path, e, args[0], self.retry_for,
                    )
                if now >= deadline:
                    raise PeerUnavailable(
                        f"no shade-peer answers on {self.socket_path} (retried {args[0]} for "
                        f"{self.retry_for:.1f}s; is shade-peer running with --socket "
                        f"{self.socket_path}?): {e}"
                    ) from e
                time.sleep(min(delay, deadline - now))
                delay = min(delay * 2, 1.0)

    @contextlib.contextmanager
    def _shade_errors(self, args: Sequence[Any]) -> Iterator[None]:
        """Raises redis-py's errors in its body as this package's, naming
        args (the command and its first argument); the connection's own
        failures (ConnectionError, TimeoutError, OSError) go on as they
        are, for the caller to retry."""
        try:
            yield
        except redis.AuthenticationError as e:  # a ConnectionError in redis-py
            raise AuthError(f"{args[0]}: peer at {self.socket_path}: {e}", "AUTH") from None
        except (redis.ConnectionError, redis.TimeoutError):
            raise
        except redis.ResponseError as e:
            raise _request_error(e, args) from None
        except redis.DataError as e:  # an argument redis-py cannot send
            raise InvalidArgument(f"{args[0]}: {e}") from None
        except redis.RedisError as e:  # a reply redis-py could not read
            raise ProtocolError(f"{args[0]}: peer at {self.socket_path}: {e}") from e

    # -- samples --------------------------------------------------------

    def get(self, dataset: str, i: int) -> bytes:
        """Bytes of sample ``i`` of ``dataset`` (read through on a miss).
        Raises SampleError for an index out of range or an unknown dataset."""
        key = sample_key(dataset, i)
        try:
            value = self._execute("GET", key)
        except AuthError:
            raise
        except RequestError as e:
            raise SampleError(f"sample {key}: {e}") from None
        if value is None:
            raise SampleError(f"no sample {key} (index out of range or unknown dataset)")
        return value

    def mget(self, dataset: str, ids: Values) -> List[bytes]:
        """Bytes of every sample in ``ids``, in order, in one round trip
        (SHADE.LOCATE and copies from the peer's memory where it is mapped,
        MGET otherwise). Raises SampleError naming the first sample that
        failed or is missing."""
        ids = [int(i) for i in _as_list(ids)]
        if not ids:
            return []
        values = None
        m = self._shared()
        if m is not None:
            values = self._locate(m, dataset, ids)
        if values is None:
            values = self._execute_samples("MGET", dataset, ids)
        for k, v in enumerate(values):
            if v.__class__ is not bytes:
                key = sample_key(dataset, ids[k])
                if v is None:
                    raise SampleError(f"no sample {key} (index out of range or unknown dataset)")
                raise SampleError(f"sample {key}: {v}")
        return values

    # -- shared memory ---------------------------------------------------

    @property
    def shared_memory(self) -> bool:
        """Whether samples the peer holds are read from its memory (mapping
        it now if that has not been tried yet)."""
        return self._shared() is not None

    def _shared(self) -> Optional[shm.Mapping]:
        m = self._mapping
        if m is not None or not self._shm_on or time.monotonic() < self._map_retry_at:
            return m
        with self._map_lock:
            if self._mapping is None and self._shm_on and time.monotonic() >= self._map_retry_at:
                try:
                    self._mapping = shm.map_peer_memory(self.socket_path, self._password,
                                                        self._map_timeout)
                except shm.MapError as e:
                    if e.refused and e.code != "NOAUTH":
                        self._shm_on = False  # the peer cannot share: MGET for good
                        log.info("shade peer at %s does not share its memory (%s); using MGET",
                                 self.socket_path, e)
                    self._map_retry_at = time.monotonic() + _MAP_RETRY
                except (OSError, ValueError) as e:
                    log.debug("SHADE.MAP on %s failed: %s", self.socket_path, e)
                    self._map_retry_at = time.monotonic() + _MAP_RETRY
            return self._mapping

    def _locate(self, m: shm.Mapping, dataset: str, ids: List[int]) -> Optional[List[Any]]:
        """Values of the samples ids: those the peer holds copied out of
        the mapping m, the rest (and any that moved during the copy) read
        with one MGET; None if the peer's memory is no longer the one
        mapped (it restarted). A batch of more than twice LOCATE_PART's
        bytes (as the samples located so far measure) is located a part at
        a time, the next part asked for before this one is copied: the
        peer checks the next part's samples while this process copies this
        part's."""
        values: List[Any] = [None] * len(ids)
        step = self._locate_step(len(ids))
        done = 0
        if step < len(ids):
            done = self._locate_in_parts(m, dataset, ids, step, values)
            if done is None:
                return None
        if done < len(ids):  # in one command, retried while the peer is away
            reply = self._execute_samples("SHADE.LOCATE", dataset, ids[done:])
            if not self._copy_located(m, reply, values, done, len(ids)):
                return None
        rest = [k for k, v in enumerate(values) if v is None]
        if rest:
            again = self._execute_samples("MGET", dataset, [ids[k] for k in rest])
            for k, v in zip(rest, again):
                values[k] = v
        return values

    def _locate_step(self, n: int) -> int:
        """Keys per SHADE.LOCATE for a batch of n: n unless the samples
        located so far say the batch holds more than twice LOCATE_PART."""
        per_key = self._located_bytes / self._located_keys if self._located_keys else 0
        if per_key * n <= 2 * LOCATE_PART:
            return n
        return max(1, int(LOCATE_PART // per_key))

    def _locate_in_parts(self, m: shm.Mapping, dataset: str, ids: List[int], step: int,
                         values: List[Any]) -> Optional[int]:
        """Locates and copies ids step at a time on one connection, one
        SHADE.LOCATE ahead of the copies, filling values as _copy_located
        does. Returns how many ids it saw to (all, or those before the
        connection failed), or None if the peer's memory is no longer m."""
        args = ("SHADE.LOCATE", sample_key(dataset, ids[0]))
        done = 0
        try:
            with self._shade_errors(args), self._pooled() as conn:
                try:
                    conn.send_packed_command([_pack_samples("SHADE.LOCATE", dataset, ids[:step])])
                    while done < len(ids):
                        reply = conn.read_response()
                        after = done + step
                        if after < len(ids):
                            conn.send_packed_command([_pack_samples("SHADE.LOCATE", dataset, ids[after:after + step])])
                        done, start = min(after, len(ids)), done
                        if not self._copy_located(m, reply, values, start, done):
                            return None
                finally:
                    if done < len(ids):
                        # A reply may still be on its way: the connection
                        # is not fit for the next command.
                        conn.disconnect()
            return done
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return done

    def _copy_located(self, m: shm.Mapping, reply: Any, values: List[Any], start: int, stop: int) -> bool:
        """Copies the samples a SHADE.LOCATE reply for the keys of
        values[start:stop] locates out of m into those places; a sample
        not held, or moved during its copy, is left None (to read over the
        socket). False if the reply is from a memory other than m (the peer
        restarted): the mapping is dropped, to be made again next time."""
        if not isinstance(reply, list) or len(reply) != 2 or reply[0] != m.id:
            with self._map_lock:
                if self._mapping is m:
                    self._mapping = None  # map the new memory next time
            return False
        n = stop - start
        locs = reply[1]
        if len(locs) != shm.LOCATION_SIZE * n:
            raise RequestError(f"SHADE.LOCATE: {len(locs)}-byte reply for {n} keys")
        words = memoryview(locs).cast("Q").tolist()
        copies, moved = m.copy_located(words)
        values[start:stop] = copies
        located = n - words[0::shm.LOCATION_WORDS].count(0)
        self.shared_copies += located - moved
        self.shared_moved += moved
        self._located_bytes += sum(words[3::shm.LOCATION_WORDS])
        self._located_keys += located
        return True

    def manifest(self, dataset: str) -> List[str]:
        """Relative paths of the dataset's samples in index order."""
        return [p.decode() for p in self._execute("SHADE.MANIFEST", dataset)]

    def labels(self, dataset: str) -> List[int]:
        """Class index of every sample, from the manifest's first path
        component among the sorted class folder names (as ImageFolder)."""
        return labels_from_manifest(self.manifest(dataset))

    # -- the job --------------------------------------------------------

    @overload
    def order(self, dataset: str, epoch: int, rank: int, world: int,
              timeout_ms: Optional[float] = None,
              with_weights: Literal[False] = False) -> List[int]: ...

    @overload
    def order(self, dataset: str, epoch: int, rank: int, world: int,
              timeout_ms: Optional[float] = None, *,
              with_weights: Literal[True]) -> Tuple[List[int], List[float]]: ...

    def order(self, dataset: str, epoch: int, rank: int, world: int,
              timeout_ms: Optional[float] = None,
              with_weights: bool = False) -> Union[List[int], Tuple[List[int], List[float]]]:
        """This rank's slice of the epoch's order (sample ids; may repeat).

        Blocks until the epoch is published: epoch 0 at once, epoch e+1 when
        all ranks sent done(e). Raises OrderTimeout when ``timeout_ms`` (or
        the peer's own limit, 10 minutes) passes first.

        ``with_weights=True`` returns ``(ids, weights)``: two lists of equal
        length, ``weights[k]`` the importance weight ω = 1/(N·p) of the draw
        ``ids[k]`` (N samples in the dataset, p the probability the sampler
        drew it with; 1.0 for a uniform order), so that the mean of
        ``loss * ω`` over an epoch is an unbiased estimate of the mean loss
        over the dataset. It sends ``SHADE.ORDER ... WITHWEIGHTS``. A peer
        that predates WITHWEIGHTS refuses it (an error reply, and no
        ``"sampler"`` in its SHADE.STATS); the order is then asked without it
        and every weight is 1.0, and this client does not send WITHWEIGHTS
        again (``weights_refused``; one log line says so)."""
        args: List[Any] = ["SHADE.ORDER", dataset, int(epoch), int(rank), int(world)]
        if timeout_ms is not None:
            args.append(max(1, int(timeout_ms)))
        if not with_weights:
            return self._order(args, weighted=False)
        if not self._weights_refused:
            try:
                return self._order(args + ["WITHWEIGHTS"], weighted=True)
            except RequestError as e:
                if e.code != "ERR" or self._knows_weights(dataset):
                    raise  # a refusal of the request itself, not of WITHWEIGHTS
                self._weights_refused = True
                log.info("shade peer at %s predates SHADE.ORDER WITHWEIGHTS (%s); every "
                         "importance weight is 1.0", self.socket_path, e)
        ids = self._order(args, weighted=False)
        return ids, [1.0] * len(ids)

    def _order(self, args: List[Any], weighted: bool) -> Any:
        """The order asked ``PACKED``: the ids (and weights) as binary in
        one bulk string each, read in one call where an element per id
        costs about a microsecond each in Python (0.3 s for 426,667 ids,
        0.7 s with weights). See _packed_or_text for a peer that predates
        PACKED."""
        return self._packed_or_text(
            "SHADE.ORDER",
            lambda: _packed_order(self._execute(*args, "PACKED", *self._job_args, blocking=True),
                                  weighted),
            lambda: _text_order(self._execute(*args, *self._job_args, blocking=True), weighted))

    def _packed_or_text(self, command: str, packed: Callable[[], Any],
                        text: Callable[[], Any]) -> Any:
        """packed(), a command sent PACKED, unless the peer refused PACKED
        before. A peer that predates PACKED refuses it with an ERR reply:
        text(), the same command with an element per id, then runs
        instead, and if it answers, this client sends that peer everything
        with an element per id from then on (``packed_refused``); an error
        that text() gets too was about the command itself, and is raised."""
        if self._packed_refused:
            return text()
        try:
            return packed()
        except RequestError as e:
            if e.code != "ERR":
                raise
            result = text()
            self._packed_refused = True
            log.info("shade peer at %s predates %s PACKED (%s); from now on it is sent an "
                     "element per id", self.socket_path, command, e)
            return result

    @property
    def packed_refused(self) -> bool:
        """True once the peer refused SHADE.ORDER ... PACKED or SHADE.REPORT
        ... PACKED (an older peer): orders then come an element per id, and
        reports go an argument per id and loss."""
        return self._packed_refused

    def _knows_weights(self, dataset: str) -> bool:
        """Whether the peer speaks SHADE.ORDER WITHWEIGHTS: peers that do
        name their sampler in SHADE.STATS (``"sampler"``); older ones do not.
        Asked only after an error reply, so that it is told from the peer's
        version rather than from the error's text."""
        try:
            return "sampler" in self.stats(dataset)
        except RequestError:
            return True  # cannot tell: keep the order's own error

    @property
    def weights_refused(self) -> bool:
        """True once the peer refused SHADE.ORDER WITHWEIGHTS (an older
        peer): ``order(with_weights=True)`` then gives weights of 1.0."""
        return self._weights_refused

    def report(self, dataset: str, epoch: int, ids: Values, losses: Values) -> int:
        """Per-sample losses of one trained minibatch, keyed by the ids that
        were trained. ``ids``/``losses`` may be lists, numpy arrays or
        tensors. Returns the number of samples merged. NaN/inf losses or ids
        out of range raise RequestError and nothing of that part is merged."""
        ids = [int(i) for i in _as_list(ids)]
        losses = [float(x) for x in _as_list(losses)]
        if len(ids) != len(losses):
            raise InvalidArgument(f"report: {len(ids)} ids but {len(losses)} losses")
        merged = 0
        for s in range(0, len(ids), REPORT_CHUNK):
            merged += self._report(dataset, int(epoch), ids[s:s + REPORT_CHUNK],
                                   losses[s:s + REPORT_CHUNK])
        return merged

    def _report(self, dataset: str, epoch: int, ids: List[int], losses: List[float]) -> int:
        """One SHADE.REPORT, sent ``PACKED`` (the ids and losses as binary,
        two arguments in all) where an argument per id and per loss costs
        the trainer about a millisecond per 256 pairs. See _packed_or_text
        for a peer that predates PACKED. Ids that do not fit a uint32 go
        with an argument each, for the peer to refuse them."""
        def text() -> int:
            return self._text_report(dataset, epoch, ids, losses)
        try:
            packed = [_pack(_U32, ids), _pack("d", losses)]
        except OverflowError:
            return text()
        return self._packed_or_text(
            "SHADE.REPORT",
            lambda: int(self._execute("SHADE.REPORT", dataset, epoch, "PACKED", *packed,
                                      *self._job_args)),
            text)

    def _text_report(self, dataset: str, epoch: int, ids: List[int], losses: List[float]) -> int:
        args: List[Any] = ["SHADE.REPORT", dataset, epoch]
        for i, loss in zip(ids, losses):
            args.append(str(i))
            args.append(repr(loss))
        return int(self._execute(*args, *self._job_args))

    def done(self, dataset: str, epoch: int, rank: int) -> None:
        """This rank finished ``epoch`` of the client's job. Idempotent."""
        self._execute("SHADE.DONE", dataset, int(epoch), int(rank), *self._job_args)

    def reset(self, dataset: str) -> None:
        """Start the client's job on ``dataset`` over (epoch 0, any world);
        its scores are kept. A job the mesh does not know yet has nothing
        to reset. A finished job's reset also tells every peer to stop
        keeping samples for the order it would have read next."""
        self._execute("SHADE.RESET", dataset, *self._job_args)

    def stats(self, dataset: Optional[str] = None) -> Dict[str, Any]:
        """SHADE.STATS as a dict (one dataset, or all for None). Its keys
        are the JSON names of the Go package protocol/stats."""
        args = ["SHADE.STATS"] + ([dataset] if dataset is not None else [])
        doc = self._execute(*args)
        try:
            return json.loads(doc)
        except (TypeError, ValueError) as e:
            raise ProtocolError(f"SHADE.STATS: not a JSON document: {e}") from None

    def job_stats(self, dataset: str) -> Optional[Dict[str, Any]]:
        """The SHADE.STATS entry of this client's job on ``dataset`` (its
        world, latest_epoch, reads, hits, source_reads, source_bytes... on
        this peer), or None where the peer does not know the job (yet)."""
        return find_job(self.stats(dataset)["datasets"][0], self.job)

    def ping(self) -> Any:
        """PING: True (redis-py's reading of PONG)."""
        return self._execute("PING")

    def close(self) -> None:
        """Unmap the peer's memory and close the connections. The client
        must not be used afterwards; calling close again does nothing."""
        with self._map_lock:
            self._shm_on = False
            m, self._mapping = self._mapping, None
            if m is not None:
                m.close()
        self._redis.close()
        self._blocking.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.job is None:
            return f"shade.Client({self.socket_path!r})"
        return f"shade.Client({self.socket_path!r}, job={self.job!r})"


def labels_from_manifest(paths: Sequence[str]) -> List[int]:
    """Class indices of ImageFolder-style paths ("<class>/<file>")."""
    tops = []
    for p in paths:
        top, sep, _ = p.partition("/")
        if not sep:
            raise InvalidArgument(f"manifest path {p!r} is not inside a class folder")
        tops.append(top)
    index = {c: k for k, c in enumerate(sorted(set(tops)))}
    return [index[t] for t in tops]


def find_job(dataset_stats: Dict[str, Any], job: Optional[str]) -> Optional[Dict[str, Any]]:
    """The entry of ``job`` (None: the default job) in one dataset of a
    SHADE.STATS document (``stats["datasets"][k]``), or None where it is not
    there. A peer that predates jobs has only ``"job"``, its default job."""
    jobs = dataset_stats.get("jobs")
    if jobs is None:
        return dataset_stats.get("job") if job in (None, DEFAULT_JOB) else None
    name = DEFAULT_JOB if job is None else job
    return next((j for j in jobs if j.get("name") == name), None)


def _request_error(e: redis.ResponseError, args: Sequence[Any]) -> RequestError:
    msg = str(e)
    code = "ERR"
    if isinstance(e, redis.ReadOnlyError):
        code = "READONLY"
    else:
        head = msg.split(" ", 1)[0]
        if head in ("TIMEOUT", "WRONGTYPE", "NOPROTO", "WRONGPASS", "NOAUTH"):
            code = head
    where = " ".join(str(a) for a in args[:2])
    cls = {"TIMEOUT": OrderTimeout, "WRONGPASS": AuthError, "NOAUTH": AuthError}.get(code, RequestError)
    return cls(f"{where}: {msg}", code)


def _text_order(reply: Any, weighted: bool) -> Any:
    """The ids, or (ids, weights), of a SHADE.ORDER reply with an element
    per id."""
    if weighted:
        return _weighted_order(reply)
    if not isinstance(reply, list):
        raise ProtocolError(f"SHADE.ORDER: want an array of ids, got {type(reply).__name__}")
    try:
        return [int(x) for x in reply]
    except (TypeError, ValueError) as e:
        raise ProtocolError(f"SHADE.ORDER: {e}") from None


def _weighted_order(reply: Any) -> Tuple[List[int], List[float]]:
    """(ids, weights) of a SHADE.ORDER ... WITHWEIGHTS reply: a 2-element
    array [ids, weights], the weights decimal floats as bulk strings."""
    if not isinstance(reply, list) or len(reply) != 2 or not all(
            isinstance(part, list) for part in reply):
        raise ProtocolError(f"SHADE.ORDER WITHWEIGHTS: want [ids, weights], got {type(reply).__name__}")
    try:
        ids = [int(x) for x in reply[0]]
        weights = [float(w) for w in reply[1]]
    except (TypeError, ValueError) as e:
        raise ProtocolError(f"SHADE.ORDER WITHWEIGHTS: {e}") from None
    if len(ids) != len(weights):
        raise ProtocolError(f"SHADE.ORDER WITHWEIGHTS: {len(ids)} ids but {len(weights)} weights")
    _check_weights(weights)
    return ids, weights


def _packed_order(reply: Any, weighted: bool) -> Any:
    """The ids, or (ids, weights), of a SHADE.ORDER ... PACKED reply: a bulk
    string of little-endian uint32 ids, and with WITHWEIGHTS a 2-element
    array of that and one of little-endian float32 weights."""
    what = "SHADE.ORDER WITHWEIGHTS PACKED" if weighted else "SHADE.ORDER PACKED"
    parts = reply if weighted else [reply]
    if not isinstance(parts, list) or len(parts) != (2 if weighted else 1) or not all(
            isinstance(part, bytes) and len(part) % 4 == 0 for part in parts):
        raise ProtocolError(f"{what}: want {'two bulk strings' if weighted else 'a bulk string'} "
                            f"of 4-byte items, got {type(reply).__name__}")
    ids = _unpack(_U32, parts[0])
    if not weighted:
        return ids
    weights = _unpack("f", parts[1])
    if len(ids) != len(weights):
        raise ProtocolError(f"{what}: {len(ids)} ids but {len(weights)} weights")
    _check_weights(weights)
    return ids, weights


# The array type code of a 4-byte unsigned integer ("I" wherever Python
# runs today).
_U32 = "I" if array.array("I").itemsize == 4 else "L"


def _pack(code: str, values: List[Any]) -> bytes:
    """values as little-endian items of array type code _U32 or "d"
    (float64). OverflowError for an id that does not fit."""
    a = array.array(code, values)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def _unpack(code: str, raw: bytes) -> List[Any]:
    """The little-endian items of raw (array type code _U32 or "f") as a
    list."""
    a = array.array(code)
    a.frombytes(raw)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tolist()


def _check_weights(weights: List[float]) -> None:
    """Raises ProtocolError unless every weight is a positive finite
    number. The sum is NaN or infinite if any weight is (float32 weights
    cannot add up to infinity), so two passes at C speed check it."""
    if weights and not (math.isfinite(sum(weights)) and min(weights) > 0):
        raise ProtocolError("SHADE.ORDER WITHWEIGHTS: a weight that is not a positive finite number")


def finite_pairs(ids: Values, losses: Values) -> Tuple[List[int], List[float], int]:
    """(ids, losses, dropped): the pairs whose loss is finite, as lists, and
    how many were left out."""
    ids, losses = [int(i) for i in _as_list(ids)], [float(x) for x in _as_list(losses)]
    if len(ids) != len(losses):
        raise InvalidArgument(f"{len(ids)} ids but {len(losses)} losses")
    keep = [k for k, x in enumerate(losses) if math.isfinite(x)]
    if len(keep) == len(losses):
        return ids, losses, 0
    return [ids[k] for k in keep], [losses[k] for k in keep], len(losses) - len(keep)
