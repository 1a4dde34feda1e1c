package store

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fakeSystem writes files under a temporary root, by path: the /proc and
// /sys that memoryLimit reads.
func fakeSystem(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for path, body := range files {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	meminfo24G = "MemTotal:       24683656 kB\nMemFree:        1000 kB\n"
	// A hybrid layout: v1 memory controller, v2 mounted without it.
	mountsV1 = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	mountsV2 = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
)

func TestMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		limit int64
		where string
	}{
		{"v1: the cgroup's own limit", map[string]string{
			"proc/meminfo":        meminfo24G,
			"proc/self/mountinfo": mountsV1,
			"proc/self/cgroup":    "4:memory:/jobs/a\n1:name=systemd:/\n0::/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":        "9223372036854771712\n",
			"sys/fs/cgroup/memory/jobs/memory.limit_in_bytes":   "9223372036854771712\n",
			"sys/fs/cgroup/memory/jobs/a/memory.limit_in_bytes": "1073741824\n",
		}, 1 << 30, "/sys/fs/cgroup/memory/jobs/a/memory.limit_in_bytes"},
		{"v1: a parent's tighter limit", map[string]string{
			"proc/meminfo":        meminfo24G,
			"proc/self/mountinfo": mountsV1,
			"proc/self/cgroup":    "4:memory:/jobs/a\n",
			"sys/fs/cgroup/memory/jobs/memory.limit_in_bytes":   "536870912\n",
			"sys/fs/cgroup/memory/jobs/a/memory.limit_in_bytes": "1073741824\n",
		}, 512 << 20, "/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes"},
		{"v1 in a container: its cgroup is the mount's root", map[string]string{
			"proc/meminfo":        meminfo24G,
			"proc/self/mountinfo": strings.ReplaceAll(mountsV1, "0:32 / /sys/fs/cgroup/memory", "0:32 /docker/c1 /sys/fs/cgroup/memory"),
			"proc/self/cgroup":    "4:memory:/docker/c1\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "2147483648\n",
		}, 2 << 30, "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
		{"v1: the cgroup's directory not visible", map[string]string{
			"proc/meminfo":        meminfo24G,
			"proc/self/mountinfo": mountsV1,
			"proc/self/cgroup":    "4:memory:/process_api/x\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":             "9223372036854771712\n",
			"sys/fs/cgroup/memory/process_api/memory.limit_in_bytes": "3221225472\n",
		}, 3 << 30, "/sys/fs/cgroup/memory/process_api/memory.limit_in_bytes"},
		{"v2: max here, a number above", map[string]string{
			"proc/meminfo":                          meminfo24G,
			"proc/self/mountinfo":                   mountsV2,
			"proc/self/cgroup":                      "0::/system.slice/shade-peer.service\n",
			"sys/fs/cgroup/system.slice/memory.max": "4294967296\n",
			"sys/fs/cgroup/system.slice/shade-peer.service/memory.max": "max\n",
		}, 4 << 30, "/sys/fs/cgroup/system.slice/memory.max"},
		{"no cgroup limit: the machine's memory", map[string]string{
			"proc/meminfo":        meminfo24G,
			"proc/self/mountinfo": mountsV2,
			"proc/self/cgroup":    "0::/\n",
		}, 24683656 << 10, "the machine's memory"},
		{"nothing readable", map[string]string{}, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			limit, where := memoryLimit(fakeSystem(t, c.files))
			if limit != c.limit || where != c.where {
				t.Fatalf("limit %d (%s), want %d (%s)", limit, where, c.limit, c.where)
			}
		})
	}
}

// TestNewRefusesMoreThanTheLimit runs New in a process of its own, in a
// memory cgroup of 256 MiB made for it, for an arena of 512 MiB, and for
// two of 128 MiB: the first large one and the second small one must fail
// with a clear error instead of the kernel killing the process as the
// arena is faulted in. Skipped where no memory cgroup can be made.
func TestNewRefusesMoreThanTheLimit(t *testing.T) {
	if os.Getenv("STORE_TEST_LIMIT_CHILD") != "" {
		_, err := New(Config{Capacity: 512 << 20})
		fmt.Printf("New: %v\n", err)
		if !errors.Is(err, ErrInvalidConfig) {
			os.Exit(3)
		}
		// Half the limit fits (with headroom's 96 MiB); another half,
		// beside the first, does not.
		first, err := New(Config{Capacity: 128 << 20})
		if err != nil {
			fmt.Printf("the first 128 MiB: %v\n", err)
			os.Exit(4)
		}
		defer first.Close()
		_, err = New(Config{Capacity: 128 << 20})
		fmt.Printf("New beside another: %v\n", err)
		if !errors.Is(err, ErrInvalidConfig) {
			os.Exit(5)
		}
		return
	}
	var parent memoryCgroup
	for _, c := range memoryCgroups("") {
		if c.file == "memory.limit_in_bytes" || parent.dir == "" {
			parent = c
		}
	}
	if parent.dir == "" {
		t.Skip("no memory cgroup")
	}
	dir := filepath.Join(parent.dir, fmt.Sprintf("shade-store-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a memory cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, parent.file), []byte(fmt.Sprint(256<<20)), 0o644); err != nil {
		t.Skipf("cannot limit a memory cgroup: %v", err)
	}
	// The shell joins the cgroup, then becomes the test binary.
	const cannotJoin = 97
	cmd := exec.Command("sh", "-c", fmt.Sprintf(`echo $$ > "$1/cgroup.procs" || exit %d; exec "$2" -test.run '^TestNewRefusesMoreThanTheLimit$'`, cannotJoin),
		"sh", dir, os.Args[0])
	cmd.Env = append(os.Environ(), "STORE_TEST_LIMIT_CHILD=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signaled():
		t.Fatalf("the child was killed (%v), not refused: %s", exit, out)
	case errors.As(err, &exit) && exit.ExitCode() == cannotJoin:
		t.Skipf("cannot join the memory cgroup: %s", out)
	}
	if err != nil || strings.Count(string(out), "it may use ("+dir) != 2 {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestResident(t *testing.T) {
	root := fakeSystem(t, map[string]string{
		"proc/self/status": "Name:\tshade-peer\nVmPeak:\t 9000000 kB\nVmRSS:\t  123456 kB\nRssAnon:\t   20000 kB\nRssFile:\t    3456 kB\nRssShmem:\t  100000 kB\n",
	})
	if got := resident(root); got != 120000<<10 {
		t.Fatalf("resident %d, want %d (anonymous and shared, not file pages)", got, 120000<<10)
	}
	if got := resident(t.TempDir()); got != 0 {
		t.Fatalf("resident %d where nothing is readable, want 0", got)
	}
	if got := resident(""); got <= 0 {
		t.Fatalf("this process holds %d bytes", got)
	}
}
