//go:build race

package redcon

import "syscall"

// raceReleaseIO tells the race detector that what this goroutine did
// happens before what a reader of the socket does next, as a write
// through package syscall tells it (the loop writes with a raw writev):
// a zero-length write to no descriptor, in race builds only.
func raceReleaseIO() { syscall.Write(-1, nil) }

// readFd reads through syscall.Read, which tells the race detector that
// the writer's side of the socket happens before the commands read.
func readFd(fd int, b []byte) (int, error) { return syscall.Read(fd, b) }
