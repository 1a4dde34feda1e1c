//go:build unix

package peer

import (
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive lock on dir, shared with other processes and
// with other calls in this one (flock locks belong to the open file), and
// returns its release. The kernel drops it if the process dies.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
