package dataset

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeFiles creates each file (a '/'-separated path relative to root)
// with content of its own name, so every file has a distinct size.
func writeFiles(t *testing.T, root string, names ...string) {
	t.Helper()
	for _, name := range names {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func mustScan(t *testing.T, dir string) *Manifest {
	t.Helper()
	m, err := Scan(dir, nil)
	if err != nil {
		t.Fatalf("Scan(%s): %v", dir, err)
	}
	return m
}

// imageFolderTree is a class tree with the names that trip naive walks:
// classes "a" and "a b" and "B", nested folders whose sorted-path order is
// not depth-first order, numeric-looking names, and hidden entries.
var imageFolderTree = []string{
	"a/2.png",
	"a/10.png",
	"a/sub/1.png",
	"a/sub/deeper/1.png",
	"a/sub b/1.png",
	"a/sub-x/1.png",
	"a/sub.x/0.png",
	"a b/x.png",
	"B/z.png",
	"B/y.png",
	"c/only/nested/deep.png",
	"a/.hidden.png",
	".git/config",
	"a/.cache/1.png",
	".DS_Store",
}

// imageFolderOrder is torchvision's ImageFolder order for imageFolderTree.
var imageFolderOrder = []string{
	"B/y.png",
	"B/z.png",
	"a/10.png",
	"a/2.png",
	"a/sub/1.png",
	"a/sub b/1.png",
	"a/sub-x/1.png",
	"a/sub.x/0.png",
	"a/sub/deeper/1.png",
	"a b/x.png",
	"c/only/nested/deep.png",
}

func TestScanImageFolderOrder(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, imageFolderTree...)
	m := mustScan(t, root)
	if !slices.Equal(m.Names.Strings(), imageFolderOrder) {
		t.Fatalf("order:\n got %q\nwant %q", m.Names.Strings(), imageFolderOrder)
	}
	for i, name := range m.Names.All() {
		if m.Sizes.At(i) != int64(len(name)) {
			t.Errorf("size of %s = %d, want %d", name, m.Sizes.At(i), len(name))
		}
	}
	if got, want := m.Classes(), []string{"B", "a", "a b", "c"}; !slices.Equal(got, want) {
		t.Errorf("Classes() = %q, want %q", got, want)
	}
	if m.Len() != len(imageFolderOrder) {
		t.Errorf("Len() = %d", m.Len())
	}
	var total int64
	for _, n := range imageFolderOrder {
		total += int64(len(n))
	}
	if m.TotalBytes() != total {
		t.Errorf("TotalBytes() = %d, want %d", m.TotalBytes(), total)
	}
	if len(m.Version) != 32 {
		t.Errorf("Version %q is not 32 hex digits", m.Version)
	}
}

// TestScanMatchesPython checks Scan against the very expression
// torchvision's make_dataset uses, when a Python is at hand.
func TestScanMatchesPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found; the fixed expectations of TestScanImageFolderOrder still apply")
	}
	root := t.TempDir()
	writeFiles(t, root, imageFolderTree...)
	writeFiles(t, root, "top.txt", "Top.txt", "caf\u00e9/1.png", "cafe/1.png", "ca\u00dfe/x/1.png", "\u65e5\u672c/1.png",
		"bad/\xff.png", "bad/\ue000.png", "bad/\u00e9.png", "bad/\xc3.png") // invalid UTF-8 sorts as Python's surrogateescape
	const script = `
import os, sys
root = sys.argv[1]
vis = lambda n: not n.startswith('.')
out = sorted(e.name for e in os.scandir(root) if e.is_file() and vis(e.name))
for c in sorted(e.name for e in os.scandir(root) if e.is_dir() and vis(e.name)):
    cdir = os.path.join(root, c)
    for r, _, fnames in sorted(os.walk(cdir, followlinks=True)):
        rel = os.path.relpath(r, root)
        if not all(vis(p) for p in rel.split('/')):
            continue
        for f in sorted(fnames):
            if vis(f):
                out.append(rel + '/' + f)
sys.stdout.write('\n'.join(out))
`
	cmd := exec.Command(python, "-c", script, root)
	cmd.Env = append(os.Environ(), "PYTHONIOENCODING=utf-8:surrogateescape")
	outb, err := cmd.Output()
	if err != nil {
		t.Skipf("python3 failed: %v", err)
	}
	want := strings.Split(string(outb), "\n")
	if got := mustScan(t, root).Names.Strings(); !slices.Equal(got, want) {
		t.Fatalf("Scan disagrees with Python:\n got %q\nwant %q", got, want)
	}
}

func TestScanFlatAndMixed(t *testing.T) {
	flat := t.TempDir()
	writeFiles(t, flat, "b.bin", "a.bin", "10.bin", "9.bin", ".hidden")
	if got, want := mustScan(t, flat).Names.Strings(), []string{"10.bin", "9.bin", "a.bin", "b.bin"}; !slices.Equal(got, want) {
		t.Errorf("flat: got %q, want %q", got, want)
	}
	if c := mustScan(t, flat).Classes(); len(c) != 0 {
		t.Errorf("flat: Classes() = %q, want none", c)
	}

	mixed := t.TempDir()
	writeFiles(t, mixed, "z.txt", "cls/1.png", "a.txt", "A/1.png")
	if got, want := mustScan(t, mixed).Names.Strings(), []string{"a.txt", "z.txt", "A/1.png", "cls/1.png"}; !slices.Equal(got, want) {
		t.Errorf("mixed: got %q, want %q", got, want)
	}
}

func TestScanEmpty(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, ".only-hidden", "emptyclass/.x")
	if err := os.Mkdir(filepath.Join(root, "nothing"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Scan(root, nil); !errors.Is(err, ErrEmpty) {
		t.Errorf("Scan of a tree without samples: %v, want ErrEmpty", err)
	}
	if _, err := OpenDir(t.TempDir(), nil); !errors.Is(err, ErrEmpty) {
		t.Errorf("OpenDir of an empty folder: %v, want ErrEmpty", err)
	}
	if _, err := Scan(filepath.Join(root, "missing"), nil); err == nil {
		t.Error("Scan of a missing folder succeeded")
	}
	if _, err := Scan(filepath.Join(root, ".only-hidden"), nil); err == nil {
		t.Error("Scan of a file succeeded")
	}
}

func TestScanProgress(t *testing.T) {
	root := t.TempDir()
	var names []string
	for i := range 2500 {
		names = append(names, fmt.Sprintf("c%d/%05d", i%3, i))
	}
	writeFiles(t, root, names...)
	var calls []int
	m, err := Scan(root, func(done int) { calls = append(calls, done) })
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1000, 2000, 2500}; !slices.Equal(calls, want) {
		t.Errorf("progress calls %v, want %v", calls, want)
	}
	if m.Len() != 2500 {
		t.Errorf("Len() = %d", m.Len())
	}
	for _, name := range names[2000:] {
		if err := os.Remove(filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	calls = nil
	if _, err := Scan(root, func(done int) { calls = append(calls, done) }); err != nil {
		t.Fatal(err)
	}
	if want := []int{1000, 2000}; !slices.Equal(calls, want) {
		t.Errorf("progress calls %v, want %v: the total once", calls, want)
	}
}

func TestVersion(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, "a/1.png", "a/2.png", "b/1.png")
	v0 := mustScan(t, root).Version
	if v := mustScan(t, root).Version; v != v0 {
		t.Fatalf("rescan changed the version: %s -> %s", v0, v)
	}

	// Same size, new content and mtime: same version (sizes and names only).
	p := filepath.Join(root, "a", "1.png")
	if err := os.WriteFile(p, []byte("A/1.png"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v := mustScan(t, root).Version; v != v0 {
		t.Errorf("same-size rewrite changed the version")
	}

	// A size change changes it, and restoring the size restores it.
	if err := os.WriteFile(p, []byte("a/1.png+"), 0o644); err != nil {
		t.Fatal(err)
	}
	v1 := mustScan(t, root).Version
	if v1 == v0 {
		t.Errorf("size change kept the version")
	}
	if err := os.WriteFile(p, []byte("a/1.png"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v := mustScan(t, root).Version; v != v0 {
		t.Errorf("restored size: version %s, want %s", v, v0)
	}

	// A rename with the same size changes it.
	if err := os.Rename(filepath.Join(root, "b", "1.png"), filepath.Join(root, "b", "3.png")); err != nil {
		t.Fatal(err)
	}
	if v := mustScan(t, root).Version; v == v0 {
		t.Errorf("rename kept the version")
	}

	// Adding a hidden file does not.
	if err := os.Rename(filepath.Join(root, "b", "3.png"), filepath.Join(root, "b", "1.png")); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, root, "a/.thumbs")
	if v := mustScan(t, root).Version; v != v0 {
		t.Errorf("a hidden file changed the version")
	}

	// The encoding is unambiguous: moving a byte from a name to a size,
	// or splitting one name in two, gives a different version.
	v := func(sizes []int64, names ...string) string { return VersionOf(mustNames(t, names...), sizes) }
	if v([]int64{1}, "ab") == v([]int64{1}, "a") ||
		v([]int64{1, 1}, "a", "b") == v([]int64{1}, "ab") ||
		v(nil) == v([]int64{0}, "") {
		t.Error("VersionOf collides on distinct manifests")
	}
}

func TestPyCompare(t *testing.T) {
	ordered := []string{
		"", "A", "B", "a", "a b", "a-b", "a.b", "a/b", "ab", "z",
		"\u00e9", "\u65e5",
		"\xff",       // invalid UTF-8: U+DCFF, below U+E000
		"\ue000",     // private use, above the surrogates
		"\U0001F600", // beyond the BMP
	}
	for i := range ordered {
		for j := range ordered {
			got := pyCompare(ordered[i], ordered[j])
			if (i < j) != (got < 0) || (i == j) != (got == 0) {
				t.Errorf("pyCompare(%q, %q) = %d", ordered[i], ordered[j], got)
			}
		}
	}
}
