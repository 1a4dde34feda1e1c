package testsupport

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time this process has spent so far, user and
// system, all its threads: a benchmark that takes it before and after its
// loop reports the work done per operation, which other processes' load
// on a small machine disturbs less than the time an operation takes.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
