package cputime

import (
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// TestSwitchesCountsHandoffs passes a byte back and forth between two
// goroutines over two pipes, each waiting in a blocking read for the
// other's write: a thread that waits in the kernel for another is switched
// out, as the Go scheduler's threads are at the hand-offs between
// goroutines that Switches is there to count. In strict turns at least one
// of the two reads of a round trip finds its pipe empty, so 1,000 round
// trips must count at least 1,000 switches (2,013-2,055 here; counting
// preemptions alone, 372-814).
func TestSwitchesCountsHandoffs(t *testing.T) {
	var ping, pong [2]int
	for _, p := range []*[2]int{&ping, &pong} {
		if err := syscall.Pipe(p[:]); err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(p[0])
	}
	defer syscall.Close(pong[1])
	echoed := make(chan struct{})
	go func() { // echoes each byte until ping's writing end is closed
		defer close(echoed)
		b := make([]byte, 1)
		for pipeIO(syscall.Read, ping[0], b) && pipeIO(syscall.Write, pong[1], b) {
		}
	}()
	defer func() { syscall.Close(ping[1]); <-echoed }()
	before := Switches()
	b := []byte{1}
	const rounds = 1000
	for range rounds {
		if !pipeIO(syscall.Write, ping[1], b) || !pipeIO(syscall.Read, pong[0], b) {
			t.Fatal("the echo ended")
		}
	}
	if grew := Switches() - before; grew < rounds {
		t.Fatalf("thread switches grew by %d over %d round trips through blocking pipes, want one a round trip at least", grew, rounds)
	}
}

// pipeIO moves one byte with op (syscall.Read or Write) on fd, again where
// a signal interrupted it; false at the pipe's end or on an error.
func pipeIO(op func(int, []byte) (int, error), fd int, b []byte) bool {
	for {
		n, err := op(fd, b)
		if err != syscall.EINTR {
			return n == 1 && err == nil
		}
	}
}

// TestFaultsCountsFirstTouches: writing once to each page of a fresh
// anonymous mapping faults each page in, so 256 pages must count 256
// faults at least (huge pages are refused for it, so that one fault does
// not map 512 pages).
func TestFaultsCountsFirstTouches(t *testing.T) {
	const pages = 256
	size := pages * syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	_ = unix.Madvise(mem, unix.MADV_NOHUGEPAGE) // not every kernel has huge pages
	before := Faults()
	for i := 0; i < size; i += syscall.Getpagesize() {
		mem[i] = 1
	}
	if grew := Faults() - before; grew < pages {
		t.Fatalf("page faults grew by %d over first writes to %d pages, want one a page at least", grew, pages)
	}
}
