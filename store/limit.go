package store

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// headroom is the memory New leaves under the process's limit, beyond
// what the process holds already, for the rest of the process (its Go
// heap, which shade-peer lets grow to 64 MiB between collections, see
// internal/gcfloor; stacks and buffers to come): an arena that reaches
// closer to the limit has the kernel kill the process as the arena is
// faulted in.
const headroom = 96 << 20

// memoryLimit returns the most memory this process may use, and where
// that limit is set: the tightest of its memory cgroup's limit and its
// ancestors' (cgroup v2 memory.max, v1 memory.limit_in_bytes) and the
// machine's memory (MemTotal). limit is 0 where none can be read. root
// is prefixed to every path read ("" for this system's; tests give a
// directory that mimics /proc and /sys).
func memoryLimit(root string) (limit int64, where string) {
	if kb, ok := procKB(filepath.Join(root, "/proc/meminfo"), "MemTotal"); ok {
		limit, where = kb<<10, "the machine's memory"
	}
	for _, c := range memoryCgroups(root) {
		for dir := c.dir; ; dir = filepath.Dir(dir) {
			if n, ok := readLimit(filepath.Join(root, dir, c.file)); ok && (limit == 0 || n < limit) {
				limit, where = n, filepath.Join(dir, c.file)
			}
			if dir == c.mount || dir == "/" || dir == "." {
				break
			}
		}
	}
	return limit, where
}

// memoryCgroup is a directory of this process's memory cgroup, below the
// mount point of its hierarchy, with the name of its limit file.
type memoryCgroup struct {
	mount, dir, file string
}

// memoryCgroups finds this process's memory cgroups: the v1 hierarchy
// with the memory controller and the v2 one, where they are mounted. A
// cgroup whose directory is not visible (a container sees its own cgroup
// as the mount's root) is looked for from its nearest visible ancestor.
func memoryCgroups(root string) []memoryCgroup {
	paths := map[string]string{} // "v1" or "v2" -> the process's cgroup path
	f, err := os.Open(filepath.Join(root, "/proc/self/cgroup"))
	if err != nil {
		return nil
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		switch {
		case len(parts) != 3:
		case parts[0] == "0" && parts[1] == "":
			paths["v2"] = parts[2]
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			paths["v1"] = parts[2]
		}
	}
	f.Close()
	f, err = os.Open(filepath.Join(root, "/proc/self/mountinfo"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []memoryCgroup
	sc = bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mount-point options ... - fstype source super-options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, after := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(after) < 3 {
			continue
		}
		mountRoot, mount := fields[3], fields[4]
		var c memoryCgroup
		switch {
		case after[0] == "cgroup2" && paths["v2"] != "":
			c = memoryCgroup{mount: mount, dir: paths["v2"], file: "memory.max"}
		case after[0] == "cgroup" && slices.Contains(strings.Split(after[2], ","), "memory") && paths["v1"] != "":
			c = memoryCgroup{mount: mount, dir: paths["v1"], file: "memory.limit_in_bytes"}
		default:
			continue
		}
		rel, err := filepath.Rel(mountRoot, c.dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			rel = "."
		}
		c.dir = filepath.Join(mount, rel)
		for c.dir != mount {
			if _, err := os.Stat(filepath.Join(root, c.dir)); err == nil {
				break
			}
			c.dir = filepath.Dir(c.dir)
		}
		out = append(out, c)
	}
	return out
}

// readLimit reads a cgroup memory limit file; ok is false for none ("max",
// or v1's page-rounded 2^63) and for a file that cannot be read.
func readLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0, false
	}
	return n, true
}

// resident returns the memory this process holds now that the kernel
// cannot reclaim, in bytes: its resident anonymous and shared pages
// (RssAnon and RssShmem in /proc/self/status, an arena already faulted in
// among them), not the file pages it maps, which the kernel drops and
// reads again under pressure; 0 where they cannot be read. root is as
// memoryLimit's.
func resident(root string) int64 {
	kb, _ := procKB(filepath.Join(root, "/proc/self/status"), "RssAnon", "RssShmem")
	return kb << 10
}

// procKB returns the sum of the named fields of a /proc file of
// "name: N kB" lines, in kB, read in one pass; ok is false where none of
// them is there.
func procKB(path string, fields ...string) (kb int64, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, _ := strings.Cut(sc.Text(), ":")
		if !slices.Contains(fields, name) {
			continue
		}
		if n, parsed := kilobytes(rest); parsed {
			kb, ok = kb+n, true
		}
	}
	return kb, ok
}

// kilobytes parses the value of a /proc/meminfo, status or smaps field,
// such as "   24683656 kB", in kB.
func kilobytes(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(s), " kB"), 10, 64)
	return n, err == nil
}
