package dataset

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// Dir is a dataset backed by a directory tree: its manifest is Scan's, and
// sample i is the bytes of the file Manifest().Names[i].
//
// A Dir is immutable after OpenDir and safe for concurrent use; each Read
// opens the file afresh and holds no descriptor between calls.
type Dir struct {
	root string // absolute and clean
	m    *Manifest
}

// OpenDir scans dir (see Scan; progress may be nil) and returns the source
// for it. A directory with no samples gives ErrEmpty.
func OpenDir(dir string, progress func(int)) (*Dir, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	m, err := Scan(root, progress)
	if err != nil {
		return nil, err
	}
	return &Dir{root: root, m: m}, nil
}

// Root returns the directory's absolute path.
func (d *Dir) Root() string { return d.root }

// Manifest returns the manifest built by OpenDir. It is shared: callers
// must not modify it.
func (d *Dir) Manifest() *Manifest { return d.m }

// Len returns the number of samples.
func (d *Dir) Len() int { return len(d.m.Names) }

// Path returns the file path of sample i, or "" if i is out of range.
func (d *Dir) Path(i int) string {
	if i < 0 || i >= len(d.m.Names) {
		return ""
	}
	return d.root + string(os.PathSeparator) + filepath.FromSlash(d.m.Names[i])
}

// Read appends the bytes of sample i to dst and returns the extended slice;
// dst is the caller's and may be nil. It reads exactly Manifest().Sizes[i]
// bytes or fails:
//
//   - i out of range: an error wrapping ErrOutOfRange;
//   - the file vanished, is no longer a regular file, or its size differs
//     from the manifest's (before or while reading): an error wrapping
//     ErrChanged that names the path;
//   - any other I/O error as it is.
//
// On error the returned slice is dst with its original length (bytes past
// it, up to its capacity, may have been overwritten), never a partial or
// different-size sample. A file rewritten in place with the same size is
// not detected here; callers checksum what they cache.
func (d *Dir) Read(i int, dst []byte) ([]byte, error) {
	if i < 0 || i >= len(d.m.Names) {
		return dst, fmt.Errorf("%w: %d (dataset has %d samples)", ErrOutOfRange, i, len(d.m.Names))
	}
	path := d.Path(i)
	want := d.m.Sizes[i]
	// O_NONBLOCK so that a FIFO swapped in for the file cannot block the
	// open; it is refused below, and is a no-op for regular files.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) {
			return dst, fmt.Errorf("%w: %w", ErrChanged, err)
		}
		return dst, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return dst, fmt.Errorf("dataset: %w", err)
	}
	if !info.Mode().IsRegular() {
		return dst, fmt.Errorf("%w: %s is no longer a regular file", ErrChanged, path)
	}
	if info.Size() != want {
		return dst, fmt.Errorf("%w: %s is %d bytes, the manifest says %d", ErrChanged, path, info.Size(), want)
	}
	n := len(dst)
	out := slices.Grow(dst, int(want))[:n+int(want)]
	if _, err := io.ReadFull(f, out[n:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return dst, fmt.Errorf("%w: %s shrank while being read (the manifest says %d bytes)", ErrChanged, path, want)
		}
		return dst, fmt.Errorf("dataset: %w", err)
	}
	// One more read must find the end: the file may have grown since Stat.
	var probe [1]byte
	switch k, err := f.Read(probe[:]); {
	case k > 0:
		return dst, fmt.Errorf("%w: %s grew while being read (the manifest says %d bytes)", ErrChanged, path, want)
	case err != io.EOF:
		if err == nil {
			err = io.ErrNoProgress
		}
		return dst, fmt.Errorf("dataset: %s: %w", path, err)
	}
	return out, nil
}
