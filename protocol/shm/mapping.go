package shm

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Mapping is a read-only view of another process's arena, made from a
// descriptor that the arena's owner passed over a Unix socket (SHADE.MAP).
// It copies values out by Location, validating each copy. Copy may be
// called concurrently; Close must not run concurrently with any other
// method (the caller guards it, as the Go client does with a lock).
type Mapping struct {
	mem []byte
	id  uint64
}

// MapShared maps size bytes of the arena behind fd read-only. id is the
// arena's ID, as its owner reported it; the caller keeps ownership of fd
// (it may close it once MapShared returns).
func MapShared(fd int, size int64, id uint64) (*Mapping, error) {
	if size <= 0 || uint64(size) > uint64(^uint(0)>>1) {
		return nil, fmt.Errorf("shm: map shared arena: bad size %d", size)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: map shared arena: %w", err)
	}
	if st.Size < size {
		return nil, fmt.Errorf("shm: map shared arena: file holds %d bytes, %d announced", st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map shared arena of %d bytes: %w", size, err)
	}
	return &Mapping{mem: mem, id: id}, nil
}

// ID returns the arena ID given to MapShared.
func (m *Mapping) ID() uint64 { return m.id }

// Copy appends the value at loc to dst and returns the result. It loads
// the block's generation before and after the copy and fails with ErrMoved
// unless both equal loc.Gen, then checks the copy against loc.Sum (a value
// damaged in memory fails with an error wrapping ErrChecksum, never
// returns). A loc that points outside the mapping is an error. On error
// the result is dst, without any byte of the value.
func (m *Mapping) Copy(dst []byte, loc Location) ([]byte, error) {
	return m.copy(dst, loc, true)
}

// CopyUnverified is Copy without the checksum check: only the generation
// check guards the copy, as in a reader without CRC-32C at hand (the
// Python client). Tests use it to show that the generation check alone
// keeps out every wrong byte.
func (m *Mapping) CopyUnverified(dst []byte, loc Location) ([]byte, error) {
	return m.copy(dst, loc, false)
}

func (m *Mapping) copy(dst []byte, loc Location, verify bool) ([]byte, error) {
	size := uint64(len(m.mem))
	if size < 8 || loc.GenOff%8 != 0 || loc.GenOff > size-8 || loc.Off > size || loc.Len > size-loc.Off {
		return dst, fmt.Errorf("shm: location %+v outside a %d-byte arena", loc, size)
	}
	gen := (*uint64)(unsafe.Pointer(&m.mem[loc.GenOff]))
	if atomic.LoadUint64(gen) != loc.Gen {
		return dst, ErrMoved
	}
	start := len(dst)
	dst = append(dst, m.mem[loc.Off:loc.Off+loc.Len]...)
	if atomic.LoadUint64(gen) != loc.Gen {
		return dst[:start], ErrMoved
	}
	if verify && Checksum(dst[start:]) != loc.Sum {
		return dst[:start], fmt.Errorf("%w: shared value at %d (%d bytes)", ErrChecksum, loc.Off, loc.Len)
	}
	return dst, nil
}

// Close unmaps the arena. Calling it again does nothing.
func (m *Mapping) Close() error {
	if m.mem == nil {
		return nil
	}
	err := unix.Munmap(m.mem)
	m.mem = nil
	return err
}
