// Package cputime reads the CPU time this process has spent: what
// shadectl scale charges to each step it models, and what benchmarks
// report per operation (a figure that other processes' load on a small
// machine disturbs less than the time an operation takes); and how often
// its threads were switched out, where a Go program's hand-offs between
// goroutines wake sleeping threads; and how many pages it touched for the
// first time, which the kernel had to map (and, in a virtual machine whose
// host maps the guest's memory lazily, the host too).
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

// Switches is how many times this process's threads have been switched
// out so far, all of them: to sleep or wait (a thread that the Go
// scheduler woke to run a goroutine and that found nothing more to run
// sleeps again), or preempted; 0 where the system does not say.
func Switches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Nvcsw + ru.Nivcsw)
}

// Faults is how many page faults this process has taken so far that the
// kernel served without reading from disk (minor faults): most are a
// first write to memory the process was given but had not touched, such
// as a heap the Go runtime grew or took back from the system; 0 where the
// system does not say.
func Faults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Minflt)
}
