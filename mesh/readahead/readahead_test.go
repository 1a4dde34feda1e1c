package readahead

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh/wire"
)

// dataset is a fake Dataset whose sample i is 64 bytes of byte(i).
type dataset struct{ gen atomic.Uint64 }

func (d *dataset) Key(id uint32) string                { return fmt.Sprintf("ds/%d", id) }
func (d *dataset) Size(uint32) int64                   { return 64 }
func (d *dataset) Head(string) (gen uint64, epoch int) { return d.gen.Load(), 0 }

// host is a fake standalone node: it owns every sample and reads it from
// its source.
type host struct{ reads atomic.Int64 }

func (h *host) Resident([]byte) bool               { return false }
func (h *host) Owners(Dataset, uint32) []string    { return []string{"me"} }
func (h *host) Preferred(owners []string) []string { return owners }
func (h *host) ReadSource(_ Dataset, id uint32) ([]byte, error) {
	h.reads.Add(1)
	return bytes.Repeat([]byte{byte(id)}, 64), nil
}
func (h *host) Fetch(context.Context, string, Dataset, []uint32, bool) ([]wire.FetchItem, error) {
	return nil, fmt.Errorf("no peers")
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testsupport.WaitFor(t, 5*time.Second, what, cond)
}

func TestFollowTakeClose(t *testing.T) {
	h := &host{}
	ds := &dataset{}
	r := New(Config{Self: "me", Prefetch: 8, Memory: 1 << 20, SourceReads: 2, BufferName: "readahead-test"}, h)
	slice := []uint32{5, 3, 9, 1, 7, 2, 8, 4, 6, 0}
	p := &wire.PublishMsg{Epoch: 0, Slices: []wire.U32s{slice}, Ranks: []string{"me"}}
	r.FollowPublished(ds, p)
	waitFor(t, "the window read ahead", func() bool {
		for _, id := range slice[:8] {
			if !r.Ready(ds, id) {
				return false
			}
		}
		return true
	})
	if _, next, _, ok := r.Cursor(ds, "", 0); !ok || next != 8 {
		t.Fatalf("cursor: next %d ok %v, want 8", next, ok)
	}
	v, mem, ok := r.Take(context.Background(), ds, slice[0])
	if !ok || mem || !bytes.Equal(v, bytes.Repeat([]byte{byte(slice[0])}, 64)) {
		t.Fatalf("take: %v %v %v", v, mem, ok)
	}
	if pos, _, _, _ := r.Cursor(ds, "", 0); pos != 1 {
		t.Fatalf("cursor at %d after the first read, want 1", pos)
	}
	if _, _, ok := r.Take(context.Background(), ds, 99); ok {
		t.Fatal("took a sample the slice does not hold")
	}
	// A newer order of the dataset stops the cursor.
	ds.gen.Store(1)
	waitFor(t, "the cursor to stop", func() bool {
		n, _ := r.Len()
		return n == 0
	})
	r.Close()
	if _, _, ok := r.Take(context.Background(), ds, slice[1]); ok {
		t.Fatal("took a sample after Close")
	}
	r.Follow(ds, p, 0)
	if n, _ := r.Len(); n != 0 {
		t.Fatal("a cursor started after Close")
	}
	if st := r.Stats(); st.Fetched < 8 {
		t.Fatalf("stats %+v", st)
	}
}

// stalledHost is host whose source reads wait for release, and say when
// they have begun.
type stalledHost struct {
	host
	began   chan uint32
	release chan struct{}
}

func (h *stalledHost) ReadSource(ds Dataset, id uint32) ([]byte, error) {
	select {
	case h.began <- id:
	default:
	}
	<-h.release
	return h.host.ReadSource(ds, id)
}

// TestTakeGivesUpOnASlowFetch: a read that finds its sample still being
// fetched waits for that fetch only until it has run HedgeAfter, then
// reads on its own; with HedgeAfter negative it waits for the fetch.
func TestTakeGivesUpOnASlowFetch(t *testing.T) {
	for _, c := range []struct {
		name  string
		after time.Duration
	}{{"gives up", time.Millisecond}, {"waits", -1}} {
		t.Run(c.name, func(t *testing.T) {
			h := &stalledHost{began: make(chan uint32, 1), release: make(chan struct{})}
			ds := &dataset{}
			r := New(Config{Self: "me", Prefetch: 4, Memory: 1 << 20, SourceReads: 1, BufferName: "readahead-test",
				HedgeAfter: c.after}, h)
			defer r.Close()
			slice := []uint32{5, 3, 9, 1}
			r.FollowPublished(ds, &wire.PublishMsg{Epoch: 0, Slices: []wire.U32s{slice}, Ranks: []string{"me"}})
			id := <-h.began // one slot: the first read is under way, and stalls
			took := make(chan bool, 1)
			go func() {
				_, _, ok := r.Take(context.Background(), ds, id)
				took <- ok
			}()
			if c.after > 0 {
				if ok := <-took; ok {
					t.Fatal("took a sample whose fetch never ended")
				}
				if st := r.Stats(); st.GaveUp != 1 {
					t.Fatalf("gave up on %d fetches, want 1", st.GaveUp)
				}
				close(h.release)
				return
			}
			select {
			case <-took:
				t.Fatal("with HedgeAfter negative, Take did not wait for the fetch")
			case <-time.After(50 * time.Millisecond):
			}
			close(h.release)
			if ok := <-took; !ok {
				t.Fatal("the fetch ended, but Take did not take its bytes")
			}
			if st := r.Stats(); st.GaveUp != 0 {
				t.Fatalf("gave up on %d fetches, want 0", st.GaveUp)
			}
		})
	}
}

// TestSortedPlaces: a slice's places sorted by sample, as a sort of
// id<<32 | place gives them: ids repeated, all alike, spread over every
// byte, none.
func TestSortedPlaces(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cases := map[string][]uint32{"none": nil, "one": {7}, "all alike": {5, 5, 5, 5}}
	for _, n := range []int{2, 100, 70_000} {
		small, wide := make([]uint32, n), make([]uint32, n)
		for i := range n {
			small[i] = rng.Uint32N(uint32(n/2 + 1)) // repeats
			wide[i] = rng.Uint32()                  // every byte differs
		}
		cases[fmt.Sprintf("%d repeating", n)], cases[fmt.Sprintf("%d wide", n)] = small, wide
	}
	for name, slice := range cases {
		want := make([]uint64, len(slice))
		for i, id := range slice {
			want[i] = uint64(id)<<32 | uint64(i)
		}
		slices.Sort(want)
		if got := sortedPlaces(slice); !slices.Equal(got, want) {
			t.Fatalf("%s: places not in order of sample, then place", name)
		}
	}
}
