package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, roots, floor int64
		base, want         int
	}{
		{10 * mib, 0, 64 * mib, 100, 540},        // goal 64 MiB
		{10 * mib, 2 * mib, 64 * mib, 100, 450},  // the roots count: 10 + 12 * 4.5 = 64
		{32 * mib, 0, 64 * mib, 100, 100},        // the floor: 64 MiB
		{64 * mib, 0, 64 * mib, 100, 100},        // at the floor: the base
		{500 * mib, 4 * mib, 64 * mib, 100, 100}, // a large live heap: the base
		{40 * mib, 0, 64 * mib, 200, 200},        // never under the base
		{0, 0, 64 * mib, 100, 1600},              // nothing live: the runtime's minimum bounds it
		{1 << 10, 0, 64 * mib, 100, 1600},        // a tiny heap: the same
		{1 << 10, 8 * mib, 64 * mib, 100, 799},   // a tiny heap, the roots bound it
		{16 * mib, 0, 16 * mib * 11, 100, 1000},  // goal 11 times the live heap
		{16*mib + 1, 0, 16 * mib * 11, 100, 999}, // rounded down: goal just under
		{100 * mib, 0, 0, 100, 100},              // no floor
		{100 * mib, 0, 64 * mib, 50, 50},         // a base under 100 stays
		{1 * mib, 0, 64 * mib, 5000, 5000},       // never under the base
	} {
		if got := Percent(c.live, c.roots, c.floor, c.base); got != c.want {
			t.Errorf("Percent(%d, %d, %d, %d) = %d, want %d", c.live, c.roots, c.floor, c.base, got, c.want)
		}
	}
}

// TestFloorFollowsTheLiveHeap: after each collection the percent is the
// one Percent gives for the live heap then; stop puts back the base.
func TestFloorFollowsTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const floor = 256 << 20
	adjusted := make(chan int, 16)
	stop := Floor{Bytes: floor, Base: 100, adjusted: func(p int) { adjusted <- p }}.Start()
	var keep [][]byte
	for round := range 3 {
		keep = append(keep, make([]byte, 16<<20)) // more live heap each round
		runtime.GC()
		got := <-adjusted // the collection's cleanup
		if now := metric("/gc/gogc:percent"); now != int64(got) {
			t.Errorf("round %d: the runtime's percent is %d, the floor set %d", round, now, got)
		}
		// The runtime's goal for the next collection is the floor.
		if goal := metric("/gc/heap/goal:bytes"); goal < floor*95/100 || goal > floor*105/100 {
			t.Errorf("round %d: heap goal %d with %d bytes live, percent %d; want about %d", round, goal, metric("/gc/heap/live:bytes"), got, floor)
		}
	}
	runtime.KeepAlive(keep)
	// A small live heap: the goal is the floor still, not the runtime's
	// minimum scaled by a large percent.
	keep = nil
	runtime.GC()
	got := <-adjusted
	if goal := metric("/gc/heap/goal:bytes"); goal < floor*95/100 || goal > floor*105/100 {
		t.Errorf("small heap: goal %d with %d bytes live, percent %d; want about %d", goal, metric("/gc/heap/live:bytes"), got, floor)
	}
	stop()
	if now := metric("/gc/gogc:percent"); now != 100 {
		t.Errorf("after stop the percent is %d, want the base, 100", now)
	}
	runtime.GC()
	runtime.GC()
	select {
	case p := <-adjusted:
		t.Errorf("percent %d set after stop", p)
	default:
	}
	if now := metric("/gc/gogc:percent"); now != 100 {
		t.Errorf("collections after stop changed the percent to %d", now)
	}
}

func metric(name string) int64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}
