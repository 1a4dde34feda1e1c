"""Zero-copy reads: samples held by the local shade-peer copied straight out
of its memory.

SHADE.MAP, sent alone on a connection of its own, answers [size, id] with a
read-only descriptor of the peer's cache memory attached (SCM_RIGHTS); the
client maps it. SHADE.LOCATE key... then answers [id, locations], where
locations holds five little-endian uint64 per key: gen, gen_offset, offset,
length, CRC-32C checksum, with gen 0 for a sample not held (read with MGET). A held
sample is copied between two loads of the 8-byte generation word at
gen_offset and kept only if both equal gen: the peer changes a block's
generation before it can reuse the block, and never gives a block a
generation it used before, so an eviction racing the copy is always caught
and the sample is read again with MGET.

The check relies on stores becoming visible in program order and on aligned
8-byte loads being atomic, as on x86-64; elsewhere the client uses MGET.

The reference for this protocol (the exchange, the 40-byte location record,
the mapping and its copy check, the CRC-32C checksum) is the Go package
protocol/shm, file protocol/shm/shm.go in the Shade repository; this module
follows it. It checks generations only, not the checksum (the Go reader's
Mapping.CopyUnverified).
"""

from __future__ import annotations

import mmap
import os
import platform
import socket
from typing import List, Optional, Sequence, Tuple, Union

from .errors import MapError, Moved, ProtocolError

__all__ = ["SUPPORTED", "LOCATION_SIZE", "Mapping", "MapError", "Moved", "map_peer_memory"]

#: whether the zero-copy path can run here (see the module doc)
SUPPORTED: bool = platform.machine() in ("x86_64", "AMD64")

#: bytes of one key's location in a SHADE.LOCATE reply (shm.LocationSize)
LOCATION_SIZE: int = 40
#: native 8-byte words of one location: generation, generation's offset,
#: offset, length, checksum
LOCATION_WORDS: int = LOCATION_SIZE // 8


class Mapping:
    """The peer's cache memory, mapped read-only (Go: shm.Mapping).

    ``copy`` may be called from several threads; ``close`` must not run
    while another thread copies (the Client guards it with its lock)."""

    def __init__(self, fd: int, size: int, ident: int) -> None:
        """Map ``size`` bytes of the memory behind ``fd``; ``ident`` is the
        memory's id as the peer reported it. The caller keeps ``fd``."""
        self.size = size
        self.id = ident
        self._mm: Optional[mmap.mmap] = mmap.mmap(fd, size, flags=mmap.MAP_SHARED,
                                                  prot=mmap.PROT_READ)
        # Native 8-byte items: one aligned load per generation read. Every
        # generation word lies in the whole words at the start (the cache
        # size need not be a multiple of 8).
        self._words: Optional[memoryview] = memoryview(self._mm)[:size - size % 8].cast("Q")

    @property
    def closed(self) -> bool:
        """Whether close has run."""
        return self._mm is None

    def close(self) -> None:
        """Unmap the memory. Calling it again does nothing; ``copy`` raises
        ProtocolError afterwards."""
        if self._mm is None:
            return
        self._words.release()
        self._words = None
        mm, self._mm = self._mm, None
        mm.close()

    def __enter__(self) -> "Mapping":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def copy(self, loc: Sequence[int]) -> bytes:
        """The bytes at a location (gen, gen_offset, offset, length, ...);
        raises Moved if the block changed during the copy, ProtocolError
        for a location outside the mapping (or a closed mapping). The
        generation check alone guards the copy, as Go's
        Mapping.CopyUnverified does."""
        copies, _ = self.copy_located([loc[0], loc[1], loc[2], loc[3], 0])
        if copies[0] is None:  # moved, or generation 0: no block
            raise Moved()
        return copies[0]

    def copy_located(self, words: Sequence[int]) -> Tuple[List[Optional[bytes]], int]:
        """Copies of the locations in words (LOCATION_WORDS each, a
        SHADE.LOCATE reply's as native 8-byte words) and how many moved:
        the bytes at each location, None where the location is empty (gen
        0: not held) or the block changed during the copy (moved).
        ProtocolError as copy raises it. copy for a batch, in one pass."""
        mm, gens, size = self._mm, self._words, self.size
        if mm is None or gens is None:
            raise ProtocolError("copy from a closed mapping")
        copies: List[Optional[bytes]] = [None] * (len(words) // LOCATION_WORDS)
        moved = 0
        for k in range(len(copies)):
            i = LOCATION_WORDS * k
            gen = words[i]
            if gen == 0:
                continue
            gen_off, off, length = words[i + 1], words[i + 2], words[i + 3]
            if gen_off % 8 or gen_off > size - 8 or off + length > size:
                raise ProtocolError(f"location {list(words[i:i + 4])!r} outside a {size}-byte mapping")
            word = gen_off >> 3
            try:
                if gens[word] == gen:
                    data = mm[off:off + length]
                    if gens[word] == gen:
                        copies[k] = data
                        continue
            except ValueError:  # closed by another thread meanwhile
                raise ProtocolError("mapping closed during a copy") from None
            moved += 1
        return copies, moved


def _read_reply_line(sock: socket.socket, buf: bytes) -> Tuple[bytes, bytes]:
    while b"\r\n" not in buf:
        chunk = sock.recv(256)
        if not chunk:
            raise MapError("connection closed during SHADE.MAP")
        buf += chunk
    line, _, rest = buf.partition(b"\r\n")
    return line, rest


def map_peer_memory(socket_path: str, password: Union[str, bytes, None] = None,
                    timeout: float = 5.0) -> Mapping:
    """Run SHADE.MAP on a connection of its own and map what it sends.
    Raises MapError, or OSError or ValueError where the socket or the
    mapping fails."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(socket_path)
        buf = b""
        if password:
            p = password.encode() if isinstance(password, str) else password
            s.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(p), p))
            line, buf = _read_reply_line(s, buf)
            if line.startswith(b"-"):
                text = line[1:].decode(errors="replace")
                raise MapError(f"AUTH: {text}", refused=True, code=text.split(" ", 1)[0])
        s.sendall(b"*1\r\n$9\r\nSHADE.MAP\r\n")
        data, fds, _, _ = socket.recv_fds(s, 256, 1)
        try:
            buf += data
            if buf.startswith(b"-"):
                line, _ = _read_reply_line(s, buf)
                text = line[1:].decode(errors="replace")
                raise MapError(f"SHADE.MAP: {text}", refused=True, code=text.split(" ", 1)[0])
            while buf.count(b"\r\n") < 3:
                chunk = s.recv(256)
                if not chunk:
                    raise MapError("connection closed during SHADE.MAP")
                buf += chunk
            head, size, ident = buf.split(b"\r\n")[:3]
            if head != b"*2" or not size.startswith(b":") or not ident.startswith(b":"):
                raise MapError(f"SHADE.MAP: malformed reply {buf[:64]!r}")
            if len(fds) != 1:
                raise MapError(f"SHADE.MAP: {len(fds)} descriptors came with the reply, want 1")
            return Mapping(fds[0], int(size[1:]), int(ident[1:]))
        finally:
            for fd in fds:
                os.close(fd)
