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

import mmap
import os
import platform
import socket

SUPPORTED = platform.machine() in ("x86_64", "AMD64")

#: bytes of one key's location in a SHADE.LOCATE reply (shm.LocationSize)
LOCATION_SIZE = 40


class MapError(Exception):
    """SHADE.MAP failed; ``refused`` is True when the peer answered with an
    error (it cannot share its memory, or the password is wrong)."""

    def __init__(self, message, refused=False, code="ERR"):
        super().__init__(message)
        self.refused = refused
        self.code = code


class Moved(Exception):
    """A located sample was evicted or replaced while it was copied."""


class Mapping:
    """The peer's cache memory, mapped read-only."""

    def __init__(self, fd, size, ident):
        self.size = size
        self.id = ident
        self._mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        # Native 8-byte items: one aligned load per generation read. Every
        # generation word lies in the whole words at the start (the cache
        # size need not be a multiple of 8).
        self._words = memoryview(self._mm)[:size - size % 8].cast("Q")

    def copy(self, loc):
        """The bytes at a location (gen, gen_offset, offset, length, ...);
        raises Moved if the block changed during the copy."""
        gen, gen_off, off, length = loc[0], loc[1], loc[2], loc[3]
        if gen_off % 8 or gen_off > self.size - 8 or off + length > self.size:
            raise ValueError(f"location {list(loc)!r} outside a {self.size}-byte mapping")
        word = gen_off // 8
        if self._words[word] != gen:
            raise Moved()
        data = self._mm[off:off + length]
        if self._words[word] != gen:
            raise Moved()
        return data


def _read_reply_line(sock, buf):
    while b"\r\n" not in buf:
        chunk = sock.recv(256)
        if not chunk:
            raise MapError("connection closed during SHADE.MAP")
        buf += chunk
    line, _, rest = buf.partition(b"\r\n")
    return line, rest


def map_peer_memory(socket_path, password=None, timeout=5.0):
    """Run SHADE.MAP on a connection of its own and map what it sends."""
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
