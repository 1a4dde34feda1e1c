package store

import (
	"os"
	"slices"
	"strings"
	"testing"
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
