package gcfloor

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
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
//
// The collector is off until the floor's first adjustment, so that
// allocating the first round's buffer starts no collection of its own:
// each collection is then one the test asks for, and each adjustment
// follows one. The adjustments say which collection they follow, and the
// test checks it.
func TestFloorFollowsTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	const floor = 256 << 20
	type adjustment struct {
		percent int
		cycles  uint64
	}
	adjusted := make(chan adjustment, 16)
	stop := Floor{Bytes: floor, Base: 100, adjusted: func(p int, cycles uint64) { adjusted <- adjustment{p, cycles} }}.Start()
	// collect runs a collection and returns the percent the floor set
	// after it.
	collect := func(what string) int {
		runtime.GC()
		done := uint64(metric("/gc/cycles/total:gc-cycles"))
		select {
		case a := <-adjusted:
			if a.cycles != done {
				t.Fatalf("%s: the percent set follows collection %d, not the test's, %d", what, a.cycles, done)
			}
			return a.percent
		case <-time.After(10 * time.Second): // a failure, not a wait
			t.Fatalf("%s: no percent set after the collection", what)
			return 0
		}
	}
	var keep [][]byte
	for round := range 3 {
		keep = append(keep, make([]byte, 16<<20)) // more live heap each round
		got := collect(fmt.Sprintf("round %d", round))
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
	got := collect("small heap")
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
	case a := <-adjusted:
		t.Errorf("percent %d set after stop", a.percent)
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
