//go:build !race

package redcon

import (
	"syscall"
	"unsafe"
)

// raceReleaseIO: see loop_race.go.
func raceReleaseIO() {}

// readFd reads from the non-blocking fd with a raw read(2), which never
// blocks and so need not tell the scheduler (see pollNow). Race builds
// read through syscall.Read instead (loop_race.go).
func readFd(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}
