// Package cputime reads the CPU time this process has spent: what
// shadectl scale charges to each step it models, and what benchmarks
// report per operation (a figure that other processes' load on a small
// machine disturbs less than the time an operation takes).
//
// It is a leaf: it imports nothing of this module.
package cputime

import (
	"syscall"
	"time"
)

// Process is the CPU time this process has used so far, user and system,
// all its threads on every core; 0 where the system does not say.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
