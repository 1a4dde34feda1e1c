//go:build unix

package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestScanSymlinks(t *testing.T) {
	outside := t.TempDir()
	writeFiles(t, outside, "elsewhere/1.png", "elsewhere/2.png", "big.bin")
	root := t.TempDir()
	writeFiles(t, root, "a/1.png")
	symlink(t, filepath.Join(outside, "big.bin"), filepath.Join(root, "a", "0-link.png")) // file link: followed
	symlink(t, filepath.Join(outside, "elsewhere"), filepath.Join(root, "linked"))        // folder link as a class
	symlink(t, filepath.Join(outside, "elsewhere"), filepath.Join(root, "a", "sub"))      // folder link inside a class
	symlink(t, filepath.Join(root, "missing"), filepath.Join(root, "a", "dangling.png"))  // skipped
	if err := syscall.Mkfifo(filepath.Join(root, "a", "fifo.png"), 0o644); err != nil {   // not a regular file: skipped
		t.Fatal(err)
	}
	m := mustScan(t, root)
	want := []string{"a/0-link.png", "a/1.png", "a/sub/1.png", "a/sub/2.png", "linked/1.png", "linked/2.png"}
	if !slices.Equal(m.Names.Strings(), want) {
		t.Fatalf("got %q, want %q", m.Names.Strings(), want)
	}
	if m.Sizes.At(0) != int64(len("big.bin")) {
		t.Errorf("a file link's size is its target's: got %d", m.Sizes.At(0))
	}
	d, err := OpenDir(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Read(0, nil)
	if err != nil || string(b) != "big.bin" {
		t.Errorf("Read through a link = %q, %v", b, err)
	}
}

func TestScanSymlinkLoops(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, root string)
	}{
		{"self", func(t *testing.T, root string) {
			symlink(t, "self.png", filepath.Join(root, "a", "self.png"))
		}},
		{"pair", func(t *testing.T, root string) {
			symlink(t, "y", filepath.Join(root, "a", "x"))
			symlink(t, "x", filepath.Join(root, "a", "y"))
		}},
		{"to parent", func(t *testing.T, root string) {
			symlink(t, "..", filepath.Join(root, "a", "up"))
		}},
		{"to root", func(t *testing.T, root string) {
			symlink(t, root, filepath.Join(root, "a", "deep", "root"))
		}},
		{"class is root", func(t *testing.T, root string) {
			symlink(t, ".", filepath.Join(root, "again"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, "a/1.png", "a/deep/2.png")
			tc.build(t, root)
			if _, err := Scan(root, nil); !errors.Is(err, ErrSymlinkLoop) {
				t.Errorf("Scan: %v, want ErrSymlinkLoop", err)
			}
		})
	}

	// Two links to one folder are not a loop: both are walked.
	root := t.TempDir()
	writeFiles(t, root, "shared/1.png")
	symlink(t, "shared", filepath.Join(root, "shared2"))
	if err := os.Mkdir(filepath.Join(root, "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, "../shared", filepath.Join(root, "c", "s1"))
	symlink(t, "../shared", filepath.Join(root, "c", "s2"))
	want := []string{"c/s1/1.png", "c/s2/1.png", "shared/1.png", "shared2/1.png"}
	if got := mustScan(t, root).Names.Strings(); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestScanUnreadableFolderFails(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads any folder")
	}
	root := t.TempDir()
	writeFiles(t, root, "a/1.png", "b/1.png")
	if err := os.Chmod(filepath.Join(root, "b"), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "b"), 0o755) })
	if _, err := Scan(root, nil); err == nil {
		t.Error("Scan skipped an unreadable folder silently")
	}
}
