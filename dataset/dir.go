package dataset

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// Dir is a dataset backed by a directory tree: its manifest is Scan's, and
// sample i is the bytes of the file Manifest().Names.At(i).
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
func (d *Dir) Len() int { return d.m.Len() }

// Path returns the file path of sample i, or "" if i is out of range.
func (d *Dir) Path(i int) string {
	if i < 0 || i >= d.m.Len() {
		return ""
	}
	return d.root + string(os.PathSeparator) + filepath.FromSlash(d.m.Names.At(i))
}

// Read appends the bytes of sample i to dst and returns the extended slice;
// dst is the caller's and may be nil. It reads exactly Manifest().Sizes.At(i)
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
	if i < 0 || i >= d.m.Len() {
		return dst, fmt.Errorf("%w: %d (dataset has %d samples)", ErrOutOfRange, i, d.m.Len())
	}
	path := d.Path(i)
	want := int(d.m.Sizes.At(i))
	// Four system calls (see OpenForRead): open, fstat, one read, close.
	fd, err := OpenForRead(path)
	if err != nil {
		err = &fs.PathError{Op: "open", Path: path, Err: err}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) {
			return dst, fmt.Errorf("%w: %w", ErrChanged, err)
		}
		return dst, fmt.Errorf("dataset: %w", err)
	}
	defer syscall.Close(fd)
	st, err := Fstat(fd)
	if err != nil {
		return dst, fmt.Errorf("dataset: %w", &fs.PathError{Op: "stat", Path: path, Err: err})
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG { // a FIFO, a folder, a device
		return dst, fmt.Errorf("%w: %s is no longer a regular file", ErrChanged, path)
	}
	if st.Size != int64(want) {
		return dst, fmt.Errorf("%w: %s is %d bytes, the manifest says %d", ErrChanged, path, st.Size, want)
	}
	// One byte more than the manifest's is asked for, so that a file
	// that grew since the fstat is seen in the same read; a read of a
	// regular file that returns fewer bytes than asked for has reached
	// its end.
	n := len(dst)
	out := slices.Grow(dst, want+1)[:n+want+1]
	got := 0
	for {
		k, err := IgnoringEINTR(func() (int, error) { return syscall.Read(fd, out[n+got:]) })
		if err != nil {
			return dst, fmt.Errorf("dataset: %w", &fs.PathError{Op: "read", Path: path, Err: err})
		}
		got += k
		switch {
		case got > want:
			return dst, fmt.Errorf("%w: %s grew while being read (the manifest says %d bytes)", ErrChanged, path, want)
		case k == 0 && got < want:
			return dst, fmt.Errorf("%w: %s shrank while being read (the manifest says %d bytes)", ErrChanged, path, want)
		case k == 0 || got == want:
			return out[:n+want], nil
		}
	}
}
