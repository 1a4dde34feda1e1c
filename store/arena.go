package store

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// arenaOptions are the ways tests may map an arena other than New's; the
// zero value is New's.
type arenaOptions struct {
	anonymous  bool // private anonymous memory, as where memfd_create is unavailable
	smallPages bool // 4 KiB pages only: no ask for huge pages
}

// mapArena maps size bytes of pre-faulted shared memory backed by a memfd
// called name, in huge pages where the kernel gives them (prefault), and
// returns the mapping and the memfd. Where memfd_create is unavailable, or
// opt.anonymous is set, it falls back to private anonymous memory and
// returns fd -1.
func mapArena(name string, size int, opt arenaOptions) ([]byte, int, error) {
	const prot = unix.PROT_READ | unix.PROT_WRITE
	fd, err := -1, error(unix.ENOSYS)
	if !opt.anonymous {
		fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	}
	if err != nil {
		mem, err := unix.Mmap(-1, 0, size, prot, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, -1, fmt.Errorf("store: mmap %d anonymous bytes: %w", size, err)
		}
		if err := prefault(mem, !opt.smallPages); err != nil {
			unix.Munmap(mem)
			return nil, -1, fmt.Errorf("store: pre-fault %d anonymous bytes: %w", size, err)
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
	mem, err := unix.Mmap(fd, 0, size, prot, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("store: mmap memfd %q of %d bytes: %w", name, size, err)
	}
	if err := prefault(mem, !opt.smallPages); err != nil {
		unix.Munmap(mem)
		unix.Close(fd)
		return nil, -1, fmt.Errorf("store: pre-fault memfd %q of %d bytes: %w", name, size, err)
	}
	return mem, fd, nil
}

// prefault asks for mem in transparent huge pages if huge is set (2 MiB
// on x86-64, and on arm64 with 4 KiB base pages), then faults all of it
// in (prefaultOn, on up to prefaultThreads threads). With one TLB entry per
// 2 MiB instead of one per 4 KiB, a read of a value out of the CPU's
// caches no longer waits for a page walk first, and the page tables of a
// 100 GiB arena take 0.4 MiB instead of 200.
//
// The ask must come before the first fault: a page faulted in 4 KiB stays
// so. The kernel grants it where its settings allow: for a memfd,
// /sys/kernel/mm/transparent_hugepage/shmem_enabled at advise, within_size
// or always; for anonymous memory, .../enabled at madvise or always.
// Elsewhere, or where no free 2 MiB can be found, the arena gets 4 KiB
// pages, as before; HugePageBytes says which.
func prefault(mem []byte, huge bool) error {
	if huge {
		// EINVAL: a kernel without transparent huge pages. 4 KiB pages do.
		_ = unix.Madvise(mem, unix.MADV_HUGEPAGE)
	}
	return prefaultOn(mem, min(prefaultThreads, runtime.GOMAXPROCS(0)))
}

// prefaultPart is the least memory prefaultOn gives a thread of its own:
// a thread for less costs more than it saves.
const prefaultPart = 64 << 20

// prefaultThreads is the most threads prefault faults in on. Past four,
// the kernel's page allocation goes no faster, and each thread more only
// adds CPU: on a node of 16 cores (BenchmarkPrefault, 1 GiB in 4 KiB
// pages), 0.42 s on one thread, 0.21 s on 4, 0.20 on 8 and 0.21 on 16,
// for 0.42, 0.74, 1.55 and 3.28 s of CPU; a peer with a 32 GiB cache
// answered its first PING 7.0-7.2 s after launch on 16 threads, having
// spent 109-110 s of CPU, and 5.6-6.6 s after it on 4, for 21-24 s.
const prefaultThreads = 4

// prefaultOn faults mem in, in parts of whole huge pages on up to threads
// threads at once. The kernel allocates and zeroes each page as it faults
// it in, one page after another on the thread that asks: 0.9 s a GiB of
// a memfd in 4 KiB pages on one thread here (BenchmarkPrefault), so a
// peer with a cache of 100 GiB took a minute and a half to start; the
// threads share that work. It returns the first error of a part: ENOMEM
// where the memory is not there.
func prefaultOn(mem []byte, threads int) error {
	parts := max(1, min(threads, len(mem)/prefaultPart))
	if parts == 1 {
		return populate(mem)
	}
	size := (len(mem)/parts + smallestHugePage - 1) / smallestHugePage * smallestHugePage
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for k := 0; k < parts && k*size < len(mem); k++ {
		part := mem[k*size : min((k+1)*size, len(mem))]
		wg.Go(func() { errs[k] = populate(part) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// populate faults part in.
func populate(part []byte) error {
	err := unix.Madvise(part, unix.MADV_POPULATE_WRITE)
	if err != unix.EINVAL {
		return err // nil, or ENOMEM: the memory is not there
	}
	// Before Linux 5.14: a write to every page faults it in.
	for i := 0; i < len(part); i += unix.Getpagesize() {
		part[i] = 0
	}
	return nil
}

// smallestHugePage is the smallest huge page of the architectures the
// store runs on (2 MiB: x86-64, and arm64 with 4 KiB base pages).
const smallestHugePage = 2 << 20

// hugePageBytes returns how many bytes of mem the kernel maps in huge
// pages, from the mappings' AnonHugePages and ShmemPmdMapped in
// /proc/self/smaps; 0 where that cannot be read. Reading it walks the
// page tables of the whole process: it is for once a mapping, not for
// every Stats, and not for a mapping too small to hold a huge page.
func hugePageBytes(mem []byte) int64 {
	if len(mem) < smallestHugePage {
		return 0
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0
	}
	defer f.Close()
	lo := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
	hi := lo + uint64(len(mem))
	// in is how much of the mapping whose fields follow lies inside mem:
	// a mapping merged with a neighbour counts no more than that.
	var total, in int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if start, end, ok := mappingRange(line); ok {
			in = max(0, int64(min(end, hi))-int64(max(start, lo)))
			continue
		}
		if in == 0 {
			continue
		}
		name, rest, _ := strings.Cut(line, ":")
		if name != "AnonHugePages" && name != "ShmemPmdMapped" {
			continue
		}
		if kb, ok := kilobytes(rest); ok {
			total += min(kb<<10, in)
		}
	}
	return total
}

// mappingRange parses the first line of a mapping in /proc/self/smaps,
// "start-end perms offset dev inode path", in hexadecimal addresses; ok
// is false for the lines of its fields ("Size:  4 kB").
func mappingRange(line string) (start, end uint64, ok bool) {
	field, _, _ := strings.Cut(line, " ")
	a, b, found := strings.Cut(field, "-")
	if !found {
		return 0, 0, false
	}
	start, err1 := strconv.ParseUint(a, 16, 64)
	end, err2 := strconv.ParseUint(b, 16, 64)
	return start, end, err1 == nil && err2 == nil
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
