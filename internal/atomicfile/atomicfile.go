// Package atomicfile writes a file so that its readers see the old
// contents or the new, never a part: the data goes to a temporary file
// beside the target, is synced, and is renamed into place.
//
// It is a leaf: it imports only the standard library.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data, with permissions perm. On an error the
// temporary file is removed and path is left as it was.
func Write(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
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
