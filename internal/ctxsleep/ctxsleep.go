// Package ctxsleep waits for a while or until a context ends, whichever
// comes first: the pause between a retry's attempts, or a poll's reads.
//
// It is a leaf: it imports nothing of this module.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends, and reports whether d passed (false:
// ctx ended first). Its timer is stopped either way.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
