package store

// canPrefetch: this architecture has prefetchLines.
const canPrefetch = true

// prefetchLines asks the CPU to load the n 64-byte lines from p into its
// caches (PREFETCHT0), without waiting for them. A prefetch never faults,
// but callers keep p and the lines inside the arena anyway.
//
//go:noescape
func prefetchLines(p *byte, n int)
