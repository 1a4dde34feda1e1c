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

// Ahead drives hints in two steps for a loop that handles count items in
// turn and is about to handle the i-th: far(j) about 2*d items before the
// j-th is handled (a first load, such as an index slot), then near(j)
// about d items before (a load that needs the first, such as the entry
// the slot points to). At i == 0 it gives the first items both; over the
// loop each item gets each hint once. Where Enabled is false it calls
// neither, so that a caller does no work to find what to hint.
func Ahead(count, i, d int, far, near func(j int)) {
	if !Enabled {
		return
	}
	if i == 0 {
		for j := range min(count, 2*d) {
			far(j)
		}
		for j := range min(count, d) {
			near(j)
		}
	}
	if j := i + 2*d; j < count {
		far(j)
	}
	if j := i + d; j < count {
		near(j)
	}
}
