//go:build !amd64

package prefetch

import "unsafe"

// Enabled reports whether this architecture has a prefetch instruction
// wired up; here it has none, and Lines does nothing.
const Enabled = false

func lines(p unsafe.Pointer, n int) {}
