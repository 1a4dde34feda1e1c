package ctxsleep_test

import (
	"context"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/ctxsleep"
)

// Sleep reports a pause that passed, and returns false at once for a
// context that has ended, however long the pause asked.
func TestSleep(t *testing.T) {
	if !ctxsleep.Sleep(context.Background(), time.Millisecond) {
		t.Fatal("a pause of 1 ms under a live context said its context ended")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ctxsleep.Sleep(ctx, time.Hour) {
		t.Fatal("a pause under an ended context said it passed")
	}
}
