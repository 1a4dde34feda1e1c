// Package shm is the shared-memory protocol between a shade-peer and the
// trainers on its node: the location record, its 40-byte codec, the
// read-only mapping of the peer's cache memory, and the checksum every
// cached sample carries. It is the reference for every implementation of
// the protocol; the Python client (client/python/shade/shm.py) cites this
// file. It imports no server package: the peer's store and transport and
// the Go client all import it.
//
// The exchange, over the peer's Unix socket (Redis protocol):
//
//   - SHADE.MAP, sent as the first command of its pipeline on a connection
//     of its own, answers an array [size, id]; a read-only descriptor of the
//     memory that holds the cached samples rides with the reply as
//     SCM_RIGHTS ancillary data. The trainer maps it (MapShared).
//   - SHADE.LOCATE key [key ...] answers an array [id, locations]: id names
//     the memory (a trainer whose mapping has another id maps again: the
//     peer restarted), and locations is a bulk string of LocationSize bytes
//     per key, each a Location encoded by AppendLocation. Gen 0 means the
//     sample is not held there; the trainer reads those with MGET. The
//     others it copies out of the mapping (Mapping.Copy); a sample that
//     moved during the copy is read with MGET too.
package shm

import (
	"encoding/binary"
	"errors"

	"github.com/shade-mesh/shade/protocol/crc32c"
)

// Errors of Mapping.Copy; test them with errors.Is.
var (
	// ErrMoved: a located value was freed (evicted or replaced) before or
	// while it was copied; the copy is discarded and the reader must ask
	// again.
	ErrMoved = errors.New("shm: value moved while copied")
	// ErrChecksum: a value copied out of a shared arena does not match
	// its checksum.
	ErrChecksum = errors.New("shm: checksum mismatch")
)

// Checksum is the checksum every cached value carries: CRC-32C
// (Castagnoli), which CPUs compute in hardware (SSE4.2, ARMv8 CRC32; with
// vector carry-less multiplication, package crc32c, about 50 GB/s on a
// current x86 core with AVX-512), held in 64 bits. The store puts it
// beside every value and verifies it on every read, the mesh checks it on
// every sample that crosses a socket, and Location.Sum carries it.
func Checksum(b []byte) uint64 { return uint64(crc32c.Checksum(b)) }

// Copy copies src into dst, which must be at least as long, and returns
// Checksum(src), reading src once where the CPU can (crc32c.Copy).
func Copy(dst, src []byte) uint64 { return uint64(crc32c.Copy(dst, src)) }

// Location says where a value lies in the peer's arena, for a reader that
// maps the arena (MapShared) and copies the value out itself. All offsets
// are from the start of the arena.
//
// The block can be freed as soon as it is located. A reader therefore
// loads the 8-byte word at GenOff (atomically, little-endian) before and
// after copying Len bytes from Off, and keeps the copy only if both loads
// equal Gen: the peer changes a block's generation before the block can be
// reused, and no block ever gets a generation twice. The guarantee relies
// on stores becoming visible in program order, as on amd64.
type Location struct {
	Gen    uint64 // the block's generation when located: odd, < 2^63; 0: not held
	GenOff uint64 // where the block's generation word lies (8 bytes, aligned)
	Off    uint64 // where the value starts
	Len    uint64 // value length in bytes
	Sum    uint64 // Checksum of the value
}

// LocationSize is the bytes of one encoded Location, as in a SHADE.LOCATE
// reply: Gen, GenOff, Off, Len, Sum, a little-endian uint64 each.
const LocationSize = 40

// AppendLocation appends the LocationSize-byte encoding of l to b and
// returns the result.
func AppendLocation(b []byte, l Location) []byte {
	b = binary.LittleEndian.AppendUint64(b, l.Gen)
	b = binary.LittleEndian.AppendUint64(b, l.GenOff)
	b = binary.LittleEndian.AppendUint64(b, l.Off)
	b = binary.LittleEndian.AppendUint64(b, l.Len)
	return binary.LittleEndian.AppendUint64(b, l.Sum)
}

// DecodeLocation decodes the Location encoded in the first LocationSize
// bytes of b. It panics if b is shorter; the caller checks the length of a
// whole reply first.
func DecodeLocation(b []byte) Location {
	_ = b[LocationSize-1]
	u := func(k int) uint64 { return binary.LittleEndian.Uint64(b[8*k:]) }
	return Location{Gen: u(0), GenOff: u(1), Off: u(2), Len: u(3), Sum: u(4)}
}
