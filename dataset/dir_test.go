package dataset

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func openTestDir(t *testing.T, names ...string) *Dir {
	t.Helper()
	root := t.TempDir()
	writeFiles(t, root, names...)
	d, err := OpenDir(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDirRead(t *testing.T) {
	d := openTestDir(t, "b/1.png", "a/2.png", "a/1.png", "empty/placeholder")
	if err := os.WriteFile(d.Path(3), nil, 0o644); err != nil { // empty/placeholder: now 0 bytes
		t.Fatal(err)
	}
	d, err := OpenDir(d.Root(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != 4 || d.Manifest().Len() != 4 {
		t.Fatalf("Len() = %d", d.Len())
	}
	for i, name := range d.Manifest().Names.All() {
		want, err := os.ReadFile(filepath.Join(d.Root(), name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.Read(i, nil)
		if err != nil {
			t.Fatalf("Read(%d): %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Read(%d) = %q, want %q", i, got, want)
		}
		// Appends to the caller's buffer.
		prefix := []byte("prefix:")
		got, err = d.Read(i, prefix)
		if err != nil || string(got) != "prefix:"+string(want) {
			t.Errorf("Read(%d, prefix) = %q, %v", i, got, err)
		}
	}
}

func TestDirReadOutOfRange(t *testing.T) {
	d := openTestDir(t, "a/1.png")
	for _, i := range []int{-1, 1, 1 << 40} {
		dst := []byte("keep")
		got, err := d.Read(i, dst)
		if !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Read(%d): %v, want ErrOutOfRange", i, err)
		}
		if string(got) != "keep" {
			t.Errorf("Read(%d) returned %q, want dst unchanged", i, got)
		}
	}
	if d.Path(5) != "" {
		t.Error("Path out of range is not empty")
	}
}

func TestDirReadChanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(path string) error
	}{
		{"deleted", os.Remove},
		{"grown", func(p string) error { return os.WriteFile(p, []byte("a/1.png and more"), 0o644) }},
		{"shrunk", func(p string) error { return os.WriteFile(p, []byte("a/"), 0o644) }},
		{"emptied", func(p string) error { return os.WriteFile(p, nil, 0o644) }},
		{"now a folder", func(p string) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Mkdir(p, 0o755)
		}},
		{"parent now a file", func(p string) error {
			dir := filepath.Dir(p)
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			return os.WriteFile(dir, []byte("x"), 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := openTestDir(t, "a/1.png", "a/2.png")
			if err := tc.change(d.Path(0)); err != nil {
				t.Fatal(err)
			}
			dst := make([]byte, 3, 64)
			copy(dst, "abc")
			got, err := d.Read(0, dst)
			if !errors.Is(err, ErrChanged) {
				t.Fatalf("Read: %v, want ErrChanged", err)
			}
			if !strings.Contains(err.Error(), "1.png") {
				t.Errorf("error %q does not name the file", err)
			}
			if string(got) != "abc" {
				t.Errorf("Read returned %q, want dst unchanged", got)
			}
		})
	}
}

// TestDirReadSizeChangesWhileReading reads files of the kernel's whose
// contents are not the size their fstat gives, as a file that grew or
// shrank between the fstat and the read would be: a /proc file is 0 bytes
// by fstat and longer to read, a /sys file 4,096 bytes and shorter. Each
// is refused as changed, with dst as it was given. A FIFO in a sample's
// place is refused without blocking the open.
func TestDirReadSizeChangesWhileReading(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		size int64
		want string
	}{
		{"/proc/self/status", 0, "grew while being read"},
		{"/sys/kernel/mm/transparent_hugepage/enabled", 4096, "shrank while being read"},
		{fifo, 0, "no longer a regular file"},
	} {
		var st syscall.Stat_t
		if err := syscall.Stat(tc.path, &st); err != nil || (tc.path != fifo && st.Size != tc.size) {
			t.Logf("%s: %v, %d bytes by stat: not the case this test needs", tc.path, err, st.Size)
			continue
		}
		d := &Dir{root: filepath.Dir(tc.path), m: &Manifest{Names: mustNames(t, filepath.Base(tc.path)), Sizes: NewSizes([]int64{tc.size})}}
		dst := []byte("abc")
		got, err := d.Read(0, dst)
		if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("Read(%s) = %v, want ErrChanged: %s, naming the path", tc.path, err, tc.want)
		}
		if string(got) != "abc" {
			t.Errorf("Read(%s) returned %d bytes, want dst unchanged (abc)", tc.path, len(got))
		}
	}
}

func TestDirReadSameSizeRewriteIsNotDetected(t *testing.T) {
	// Documented limit: only sizes are checked; callers checksum.
	d := openTestDir(t, "a/1.png")
	if err := os.WriteFile(d.Path(0), []byte("A/1.PNG"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := d.Read(0, nil)
	if err != nil || string(got) != "A/1.PNG" {
		t.Errorf("Read = %q, %v", got, err)
	}
}

func TestDirConcurrentReads(t *testing.T) {
	var names []string
	for c := range 4 {
		for i := range 25 {
			names = append(names, fmt.Sprintf("class%d/%03d-%s.bin", c, i, strings.Repeat("x", i)))
		}
	}
	d := openTestDir(t, names...)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			var buf []byte
			for k := range 400 {
				i := (k*7 + w) % d.Len()
				var err error
				buf, err = d.Read(i, buf[:0])
				if err != nil {
					errs <- err
					return
				}
				if string(buf) != d.Manifest().Names.At(i) {
					errs <- fmt.Errorf("Read(%d) = %q, want %q", i, buf, d.Manifest().Names.At(i))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func BenchmarkDirRead(b *testing.B) {
	root := b.TempDir()
	payload := bytes.Repeat([]byte{7}, 4096)
	for i := range 256 {
		p := filepath.Join(root, "c", fmt.Sprintf("%03d", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, payload, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	d, err := OpenDir(root, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	var buf []byte
	for i := 0; b.Loop(); i++ {
		if buf, err = d.Read(i%d.Len(), buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}
