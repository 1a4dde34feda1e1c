package sampling

import (
	"runtime"
	"sync"
)

// The passes of a draw and of Align over every sample run on several
// goroutines where a pass's result does not depend on how the samples are
// cut: each goroutine takes a contiguous span and writes only its own
// places, and sums whose rounding depends on their order stay on one
// goroutine. An order and its weights are therefore the same to the bit
// for any number of goroutines (TestParallelDrawsAsSequential).

// minSpan is the fewest samples a pass gives one goroutine: below it the
// goroutine costs more than its share of the pass.
const minSpan = 1 << 15

// procs is how many goroutines a pass may use: GOMAXPROCS, unless a test
// sets it.
func procs(set int) int {
	if set > 0 {
		return set
	}
	return runtime.GOMAXPROCS(0)
}

// spans is how many spans of at least minSpan a pass over n items is cut
// into, at most workers (and at least 1).
func spans(n, workers int) int {
	return max(1, min(workers, n/minSpan))
}

// span is the c-th of w near-equal spans of [0, n).
func span(n, w, c int) (lo, hi int) {
	return n * c / w, n * (c + 1) / w
}

// parallel runs fn over the w spans of [0, n), span c on its own
// goroutine (the last on the caller's), and returns once all are done.
func parallel(n, w int, fn func(c, lo, hi int)) {
	if w <= 1 {
		fn(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for c := range w - 1 {
		lo, hi := span(n, w, c)
		wg.Go(func() { fn(c, lo, hi) })
	}
	lo, hi := span(n, w, w-1)
	fn(w-1, lo, hi)
	wg.Wait()
}

// radixCounts is the scratch of a radix sort: one count of each digit per
// span.
type radixCounts []*[radixDigits][1 << radixBits]uint32

// get returns w zeroed counts, reusing the ones it holds.
func (rc *radixCounts) get(w int) radixCounts {
	for len(*rc) < w {
		*rc = append(*rc, new([radixDigits][1 << radixBits]uint32))
	}
	out := (*rc)[:w]
	for _, c := range out {
		*c = [radixDigits][1 << radixBits]uint32{}
	}
	return out
}
