package prefetch

import "unsafe"

// Enabled reports whether this architecture has a prefetch instruction
// wired up (PREFETCHT0); callers skip the work of finding what to hint
// where it does not.
const Enabled = true

//go:noescape
func lines(p unsafe.Pointer, n int)
