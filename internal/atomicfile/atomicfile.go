// Package atomicfile writes a file so that its readers see the old
// contents or the new, never a part: the data goes to a temporary file
// beside the target, is synced, and is renamed into place.
//
// It is a leaf: it imports only the standard library.
package atomicfile

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with data, with permissions perm. On an error the
// temporary file is removed and path is left as it was.
func Write(path string, data []byte, perm os.FileMode) error {
	return WriteWith(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteWith replaces path with what write writes, with permissions perm,
// through a buffer: a large file need not be built in memory first. On an
// error, write's included, the temporary file is removed and path is left
// as it was.
func WriteWith(path string, perm os.FileMode, write func(w io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		bw := bufio.NewWriterSize(f, 64<<10)
		if err = write(bw); err == nil {
			err = bw.Flush()
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
