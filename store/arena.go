package store

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// mapArena maps size bytes of pre-faulted shared memory backed by a memfd
// called name, and returns the mapping and the memfd. Where memfd_create is
// unavailable, or useMemfd is false, it falls back to private anonymous
// memory and returns fd -1.
func mapArena(name string, size int, useMemfd bool) ([]byte, int, error) {
	const prot = unix.PROT_READ | unix.PROT_WRITE
	fd, err := -1, error(unix.ENOSYS)
	if useMemfd {
		fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	}
	if err != nil {
		mem, err := unix.Mmap(-1, 0, size, prot, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
		if err != nil {
			return nil, -1, fmt.Errorf("store: mmap %d anonymous bytes: %w", size, err)
		}
		return mem, -1, nil
	}
	// Only this process writes the arena: readers get read-only
	// descriptors (Store.SharedFd), and mode 0400 stops them reopening one
	// for writing through /proc/<pid>/fd.
	if err := unix.Fchmod(fd, 0o400); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("store: fchmod memfd %q: %w", name, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("store: ftruncate memfd %q to %d bytes: %w", name, size, err)
	}
	mem, err := unix.Mmap(fd, 0, size, prot, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("store: mmap memfd %q of %d bytes: %w", name, size, err)
	}
	return mem, fd, nil
}

// unmapArena releases what mapArena returned.
func unmapArena(mem []byte, fd int) error {
	var errs []error
	if err := unix.Munmap(mem); err != nil {
		errs = append(errs, fmt.Errorf("store: munmap: %w", err))
	}
	if fd >= 0 {
		if err := unix.Close(fd); err != nil {
			errs = append(errs, fmt.Errorf("store: close memfd: %w", err))
		}
	}
	return errors.Join(errs...)
}
