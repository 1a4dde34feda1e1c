package counters

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/protocol/stats"
)

func TestAdvanceOnlyForward(t *testing.T) {
	d := New(10)
	if got := d.Current().Number(); got != 0 {
		t.Fatalf("new counters count against epoch %d, want 0", got)
	}
	for _, tc := range []struct{ advance, want int }{{2, 2}, {1, 2}, {2, 2}, {5, 5}, {0, 5}} {
		d.Advance(tc.advance)
		if got := d.Current().Number(); got != tc.want {
			t.Fatalf("after Advance(%d) the current epoch is %d, want %d", tc.advance, got, tc.want)
		}
	}
	var got []int
	for _, e := range d.Snapshot().Epochs {
		got = append(got, e.Epoch)
	}
	if want := []int{0, 2, 5}; !slices.Equal(got, want) {
		t.Fatalf("epochs %v, want %v", got, want)
	}
}

func TestTotalsSumEpochs(t *testing.T) {
	d := New(10)
	d.Current().Hits.Add(3)
	d.Missed(1, true) // peer hit
	d.Missed(2, false)
	d.Current().SourceBytes.Add(100)
	d.Advance(1)
	d.Current().Hits.Add(2)
	d.Missed(2, false) // seen before: a capacity miss
	d.Missed(3, false)
	d.Current().Evictions.Add(4)
	d.Current().SourceBytes.Add(50)

	s := d.Snapshot()
	if s.Epoch != 1 || len(s.Epochs) != 2 {
		t.Fatalf("snapshot at epoch %d with %d epochs, want 1 and 2", s.Epoch, len(s.Epochs))
	}
	e0, e1 := s.Epochs[0], s.Epochs[1]
	if e0.Hits != 4 || e0.LocalHits != 3 || e0.PeerHits != 1 || e0.ColdMisses != 1 || e0.CapacityMisses != 0 {
		t.Errorf("epoch 0: %+v", e0)
	}
	if e1.Hits != 2 || e1.ColdMisses != 1 || e1.CapacityMisses != 1 || e1.Evictions != 4 {
		t.Errorf("epoch 1: %+v", e1)
	}
	want := stats.Epoch{Epoch: -1, Hits: 6, LocalHits: 5, PeerHits: 1, ColdMisses: 2, CapacityMisses: 1,
		Evictions: 4, SourceBytes: 150, HitRatio: 6.0 / 9}
	if s.Total != want {
		t.Errorf("total %+v, want %+v", s.Total, want)
	}
	if got := d.Total(); got != want {
		t.Errorf("Total() %+v, want %+v", got, want)
	}
}

func TestHitRatio(t *testing.T) {
	for _, tc := range []struct {
		e    stats.Epoch
		want float64
	}{
		{stats.Epoch{}, 0},
		{stats.Epoch{Hits: 3}, 1},
		{stats.Epoch{ColdMisses: 2}, 0},
		{stats.Epoch{Hits: 1, ColdMisses: 1, CapacityMisses: 2}, 0.25},
		{stats.Epoch{Hits: 1, ColdMisses: 1, PrefetchHits: 5, Evictions: 9}, 0.5},
	} {
		if got := HitRatio(tc.e); got != tc.want {
			t.Errorf("HitRatio(%+v) = %v, want %v", tc.e, got, tc.want)
		}
	}
	c := &Epoch{}
	c.Hits.Add(1)
	c.PeerHits.Add(2)
	c.CapacityMisses.Add(1)
	if s := c.Snapshot(); s.Hits != 3 || s.HitRatio != 0.75 {
		t.Errorf("snapshot %+v: want 3 hits and ratio 0.75", s)
	}
}

func TestHistogramBuckets(t *testing.T) {
	var h Histogram
	for _, d := range []time.Duration{
		50 * time.Microsecond,  // bucket 0 (≤100µs)
		100 * time.Microsecond, // bucket 0: bounds are inclusive
		101 * time.Microsecond, // bucket 1
		3 * time.Millisecond,   // bucket 5 (≤5ms)
		time.Second,            // bucket 11 (≤1s)
		2 * time.Second,        // the last bucket
	} {
		h.Observe(d)
	}
	s := h.Snapshot()
	want := []int64{2, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1}
	if len(s.Bounds) != 12 || !slices.Equal(s.Counts, want) {
		t.Fatalf("bounds %v counts %v, want 12 bounds and %v", s.Bounds, s.Counts, want)
	}
	if wantSum := 3.003251; s.Sum < wantSum-1e-9 || s.Sum > wantSum+1e-9 {
		t.Errorf("sum %v s, want %v", s.Sum, wantSum)
	}
}

func TestDeciles(t *testing.T) {
	d := New(1)
	d.CountDecile(0, true)
	d.CountDecile(9, false)
	d.CountDecile(9, true)
	s := d.Snapshot()
	if !slices.Equal(s.DecileReads, []int64{1, 0, 0, 0, 0, 0, 0, 0, 0, 2}) || !slices.Equal(s.DecileHits, []int64{1, 0, 0, 0, 0, 0, 0, 0, 0, 1}) {
		t.Fatalf("decile reads %v hits %v", s.DecileReads, s.DecileHits)
	}
}

// TestConcurrent counts from many goroutines while epochs advance and
// snapshots are taken; run it with -race.
func TestConcurrent(t *testing.T) {
	const workers, reads = 8, 1000
	d := New(workers * reads)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range reads {
				d.Current().Hits.Add(1)
				d.Missed(w*reads+i, i%2 == 0)
				d.CountDecile(i%Deciles, true)
				d.SourceLatency.Observe(time.Duration(i) * time.Microsecond)
				if i%100 == 0 {
					d.Advance(i / 100)
					_ = d.Snapshot()
				}
			}
		}()
	}
	wg.Wait()
	tot := d.Snapshot().Total
	if tot.LocalHits != workers*reads || tot.PeerHits != workers*reads/2 || tot.ColdMisses != workers*reads/2 || tot.CapacityMisses != 0 {
		t.Fatalf("total %+v", tot)
	}
	var n int64
	for _, c := range d.SourceLatency.Snapshot().Counts {
		n += c
	}
	if n != workers*reads {
		t.Fatalf("histogram holds %d observations, want %d", n, workers*reads)
	}
}

// TestImports: the package imports, beyond the standard library, only
// protocol/stats.
func TestImports(t *testing.T) {
	testsupport.CheckImports(t, "github.com/shade-mesh/shade/protocol/stats")
}
