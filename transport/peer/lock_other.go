//go:build !unix

package peer

import (
	"errors"
	"os"
	"path/filepath"
	"time"
)

// lockDir takes an exclusive lock on dir by creating a lock file, waiting
// while another holder has it, and returns its release. A lock file older
// than a minute is taken to be left by a dead process and removed.
func lockDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, ".lock")
	deadline := time.Now().Add(30 * time.Second)
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err == nil {
			f.Close()
			return func() { os.Remove(path) }, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, err
		}
		if info, err := os.Stat(path); err == nil && time.Since(info.ModTime()) > time.Minute {
			os.Remove(path)
			continue
		}
		if time.Now().After(deadline) {
			return nil, errors.New("timed out waiting for " + path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
