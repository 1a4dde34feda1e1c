package dataset

import "syscall"

// OpenForRead opens path read-only. The sources read a file, or a shard's
// part of one, for every sample they are asked for, with the system calls
// themselves (OpenForRead, Fstat, the read, syscall.Close): an os.File
// adds a try at the poller, which regular files refuse, and an object of
// its own, and on the read-through path that was a third of the calls
// for every sample missed. O_NONBLOCK so that a FIFO put in a file's
// place cannot block the open: the caller refuses what Fstat says is not
// a regular file (for regular files it changes nothing).
func OpenForRead(path string) (int, error) {
	return IgnoringEINTR(func() (int, error) {
		return syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	})
}

// Fstat returns what fstat says of fd.
func Fstat(fd int) (syscall.Stat_t, error) {
	var st syscall.Stat_t
	_, err := IgnoringEINTR(func() (int, error) { return 0, syscall.Fstat(fd, &st) })
	return st, err
}

// IgnoringEINTR calls f, a system call, until it fails with an error
// other than EINTR (the Go runtime's signals interrupt system calls), as
// package os does for its own.
func IgnoringEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != syscall.EINTR {
			return n, err
		}
	}
}
