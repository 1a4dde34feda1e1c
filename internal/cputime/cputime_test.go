package cputime

import (
	"testing"
	"time"
)

// TestProcessCountsWork: spinning on the CPU shows in Process, which never
// goes back. The spin stops once Process has grown by 20 ms, or after 10 s
// of wall time if it does not grow.
func TestProcessCountsWork(t *testing.T) {
	before := Process()
	var x uint64
	for deadline := time.Now().Add(10 * time.Second); Process()-before < 20*time.Millisecond && time.Now().Before(deadline); {
		for i := range 100000 {
			x += uint64(i) ^ x
		}
	}
	if grew := Process() - before; grew < 20*time.Millisecond {
		t.Fatalf("CPU time grew by %v over 10 s of spinning (x %d)", grew, x)
	}
}

// TestSwitchesCountsSleeps sleeps a millisecond at a time: with nothing
// else to run, the thread that ran this goroutine sleeps too, and each
// such sleep is a switch. It stops once 10 have been counted.
func TestSwitchesCountsSleeps(t *testing.T) {
	before := Switches()
	for deadline := time.Now().Add(10 * time.Second); Switches()-before < 10 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if grew := Switches() - before; grew < 10 {
		t.Fatalf("thread switches grew by %d over 10 s of sleeping a millisecond at a time", grew)
	}
}
