// Package prefetch asks the CPU to start loading memory into its caches
// ahead of a read, for a caller about to read many places in turn whose
// loads would otherwise wait for memory one at a time (a lookup of a key,
// then of its block; a hit's slot in a table, then its entry).
package prefetch

import "unsafe"

// Lines asks the CPU to load the n 64-byte lines from p into its caches
// and returns without waiting for them. A prefetch never faults, so p
// may point at memory that is being freed or replaced meanwhile (the hint
// is then wasted); callers keep it inside memory they hold all the same.
// Where Enabled is false it does nothing.
func Lines(p unsafe.Pointer, n int) { lines(p, n) }
