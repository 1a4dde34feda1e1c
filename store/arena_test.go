package store

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shade-mesh/shade/internal/cputime"
)

// TestArenaHugePages maps an arena on each path (a memfd, and the
// anonymous fallback) where the kernel's settings give huge pages to
// memory that asks for them, and checks that the arena got them and that
// Stats says so. Where the settings refuse them, the path is skipped.
func TestArenaHugePages(t *testing.T) {
	for _, path := range []struct {
		name    string
		opt     arenaOptions
		setting string // the kernel's switch for this kind of memory
		grants  []string
	}{
		{"memfd", arenaOptions{}, "/sys/kernel/mm/transparent_hugepage/shmem_enabled", []string{"advise", "within_size", "always", "force"}},
		{"anonymous", arenaOptions{anonymous: true}, "/sys/kernel/mm/transparent_hugepage/enabled", []string{"madvise", "always"}},
	} {
		t.Run(path.name, func(t *testing.T) {
			if on := selected(t, path.setting); !slices.Contains(path.grants, on) {
				t.Skipf("%s is %q: no huge pages for this memory", path.setting, on)
			}
			const capacity = 16 << 20
			s, err := newStoreWith(Config{Capacity: capacity}, path.opt)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if !path.opt.anonymous && s.Fd() < 0 {
				t.Skip("memfd unavailable; anonymous arena")
			}
			// The mapping need not start on a 2 MiB boundary, so its ends
			// may be in 4 KiB pages, and where the kernel finds no free
			// 2 MiB it falls back to 4 KiB pages: at least half the arena,
			// where an arena faulted before the ask gets none.
			huge := s.Stats().HugePageBytes
			if huge < capacity/2 || huge > capacity || huge%smallestHugePage != 0 {
				t.Fatalf("%d bytes of a %d-byte arena in huge pages; want at least %d, in 2 MiB pages",
					huge, capacity, capacity/2)
			}
			if got := hugePageBytes(s.mem); got != huge {
				t.Fatalf("huge pages now %d bytes, at New %d", got, huge)
			}
		})
	}
}

// selected returns the bracketed choice of a kernel setting file such as
// "always [madvise] never", or skips the test where there is none.
func selected(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Skipf("no transparent huge pages: %v", err)
	}
	_, rest, ok := strings.Cut(string(b), "[")
	on, _, ok2 := strings.Cut(rest, "]")
	if !ok || !ok2 {
		t.Skipf("%s: no selected value in %q", file, b)
	}
	return on
}

// residentPages counts the pages of mem that are in memory (mincore).
func residentPages(t testing.TB, mem []byte) int {
	t.Helper()
	vec := make([]byte, (len(mem)+os.Getpagesize()-1)/os.Getpagesize())
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(mem))), uintptr(len(mem)),
		uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestPrefaultOnFaultsEveryPage: prefaultOn faults in every page of
// memfd mappings of sizes that its parts do not divide, on one thread
// and on several, and none beyond the mapping.
func TestPrefaultOnFaultsEveryPage(t *testing.T) {
	page := os.Getpagesize()
	for _, size := range []int{page, prefaultPart - page, 3*prefaultPart + 5*page, 7*prefaultPart/2 + smallestHugePage + page} {
		for _, threads := range []int{1, 2, 3, 8} {
			fd, err := unix.MemfdCreate("prefault-test", unix.MFD_CLOEXEC)
			if err != nil {
				t.Skipf("memfd_create: %v", err)
			}
			// Mapped a page longer than the part faulted: that page must
			// stay out.
			if err := unix.Ftruncate(fd, int64(size+page)); err != nil {
				t.Fatal(err)
			}
			mem, err := unix.Mmap(fd, 0, size+page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			unix.Close(fd)
			if err != nil {
				t.Fatal(err)
			}
			if n := residentPages(t, mem); n != 0 {
				t.Fatalf("%d pages resident before the fault", n)
			}
			// In 4 KiB pages whatever the kernel's shmem setting: a huge
			// page would fault in the page past the part with the last
			// pages of it.
			_ = unix.Madvise(mem, unix.MADV_NOHUGEPAGE)
			if err := prefaultOn(mem[:size], threads); err != nil {
				t.Fatal(err)
			}
			if got, want := residentPages(t, mem[:size]), size/page; got != want {
				t.Errorf("%d bytes on %d threads: %d of %d pages resident", size, threads, got, want)
			}
			if n := residentPages(t, mem[size:]); n != 0 {
				t.Errorf("%d bytes on %d threads: the page past them faulted in", size, threads)
			}
			unix.Munmap(mem)
		}
	}
}

// BenchmarkPrefault faults in a memfd arena of 1 GiB (in 4 KiB pages or
// huge pages, as the kernel's shmem setting gives them) on one thread, on
// each power of two up to as many as Go runs, and on that many, side by
// side; s/GiB is the time to start a peer spends on each GiB of its
// cache, cpu-s/GiB the CPU it spends on it (every thread's).
func BenchmarkPrefault(b *testing.B) {
	const size = 1 << 30
	var counts []int
	for t := 1; t < runtime.GOMAXPROCS(0); t *= 2 {
		counts = append(counts, t)
	}
	counts = append(counts, runtime.GOMAXPROCS(0))
	for _, threads := range counts {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			var cpu time.Duration // the process's, while faulting in
			for b.Loop() {
				b.StopTimer()
				fd, err := unix.MemfdCreate("prefault-bench", unix.MFD_CLOEXEC)
				if err != nil {
					b.Skipf("memfd_create: %v", err)
				}
				if err := unix.Ftruncate(fd, size); err != nil {
					b.Fatal(err)
				}
				mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
				unix.Close(fd)
				if err != nil {
					b.Fatal(err)
				}
				_ = unix.Madvise(mem, unix.MADV_HUGEPAGE)
				b.StartTimer()
				t0 := cputime.Process()
				if err := prefaultOn(mem, threads); err != nil {
					b.Fatal(err)
				}
				cpu += cputime.Process() - t0
				b.StopTimer()
				unix.Munmap(mem)
				b.StartTimer()
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/GiB")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/GiB")
		})
	}
}
