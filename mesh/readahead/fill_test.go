package readahead

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shade-mesh/shade/mesh/wire"
)

// sizedDataset is dataset with samples of size bytes.
type sizedDataset struct {
	dataset
	size int
}

func (d *sizedDataset) Size(uint32) int64 { return int64(d.size) }

// sizedHost is host whose source gives sample i as size bytes of byte(i),
// yielding first so that the cursors move while reads are under way. The
// values are made once: a read costs little beside its copy into the
// buffer, and most of a fetch's time is that copy.
type sizedHost struct {
	host
	values [256][]byte
}

func newSizedHost(size int) *sizedHost {
	h := &sizedHost{}
	for i := range h.values {
		h.values[i] = bytes.Repeat([]byte{byte(i)}, size)
	}
	return h
}

func (h *sizedHost) ReadSource(_ Dataset, id uint32) ([]byte, error) {
	h.reads.Add(1)
	runtime.Gosched()
	return h.values[byte(id)], nil
}

// TestFillsRacingReleases: orders replace each other while their samples
// are being fetched, so entries are released while their bytes are
// copied into the buffer, and the next order's entries reserve the same
// samples again. Every sample taken is its own bytes, and once the
// cursors stop the buffer holds nothing: no entry of a released sample,
// no reservation left open.
func TestFillsRacingReleases(t *testing.T) {
	const size = 256 << 10
	h := newSizedHost(size)
	ds := &sizedDataset{size: size}
	r := New(Config{Self: "me", Prefetch: 32, Memory: 16 << 20, SourceReads: 4, BufferName: "readahead-test", HedgeAfter: -1}, h)
	defer r.Close()
	took := 0
	for gen := uint64(1); gen <= 200; gen++ {
		// Each order shares half its samples with the one before: a
		// sample is released and reserved again, and samples no later
		// order holds must leave the buffer too.
		slice := make([]uint32, 64)
		for i := range slice {
			slice[i] = uint32(gen*32) + uint32(i)
		}
		ds.gen.Store(gen)
		r.FollowPublished(ds, &wire.PublishMsg{Gen: gen, Slices: []wire.U32s{slice}, Ranks: []string{"me"}})
		// The cursor's worker picks the window's entries; a read before
		// that would move the cursor past its sample, and read it itself.
		// Once picked, Take waits for each fetch.
		for try := 0; ; try++ {
			if _, entries := r.Len(); entries > 0 {
				break
			}
			if try == 1e6 {
				t.Fatalf("order %d: no entry picked", gen)
			}
			runtime.Gosched()
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for g := range 2 {
			wg.Go(func() {
				for p := g; p < 8; p += 2 {
					v, _, ok := r.Take(context.Background(), ds, slice[p])
					if !ok {
						continue
					}
					if !bytes.Equal(v, h.values[byte(slice[p])]) {
						t.Errorf("order %d: sample %d taken with wrong bytes", gen, slice[p])
					}
					mu.Lock()
					took++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	buf := r.buf
	if took < 200*8/2 {
		t.Fatalf("%d samples taken from the buffer, want most of the 8 of each order", took)
	}
	ds.gen.Store(1000) // a newer order: the last cursor stops
	waitFor(t, "the buffer empty once the cursors stop", func() bool {
		cursors, entries := r.Len()
		st := buf.Stats()
		return cursors == 0 && entries == 0 && st.Entries == 0 && st.Loans == 0 && st.UsedBytes == 0
	})
	if st := r.Stats(); st.Bytes != 0 {
		t.Fatalf("%d bytes charged with no entry held", st.Bytes)
	}
	t.Logf("%d samples taken, %d fetched, %d read from the source", took, r.Stats().Fetched, h.reads.Load())
}

// BenchmarkTakeDuringFills: ranks read their slices through the
// read-ahead while its workers fill the buffer ahead of them with samples
// of 100 KiB, from a source that costs nothing, so that the time is the
// read-ahead's: Take, the cursors' moves, the copies into and out of the
// buffer, and whatever waits for the read-ahead's lock. A read the
// read-ahead did not have reads the source. ns/op is a sample read;
// taken is the share of reads served from the buffer.
func BenchmarkTakeDuringFills(b *testing.B) {
	const size = 100 << 10
	for _, ranks := range []int{1, 2} {
		b.Run(fmt.Sprintf("ranks=%d", ranks), func(b *testing.B) {
			h := newSizedHost(size)
			ds := &sizedDataset{size: size}
			r := New(Config{Self: "me", Prefetch: 64, Memory: 64 << 20, SourceReads: 4,
				BufferName: "readahead-bench", HedgeAfter: -1}, h)
			defer r.Close()
			per := b.N/ranks + 1
			p := &wire.PublishMsg{Gen: 1}
			for k := range ranks {
				slice := make([]uint32, per)
				for i := range slice {
					slice[i] = uint32(k*per + i)
				}
				p.Slices = append(p.Slices, slice)
				p.Ranks = append(p.Ranks, "me")
			}
			ds.gen.Store(1)
			b.ResetTimer()
			r.FollowPublished(ds, p)
			var taken atomic.Int64
			var wg sync.WaitGroup
			for k := range ranks {
				wg.Go(func() {
					for _, id := range p.Slices[k] {
						if _, _, ok := r.Take(context.Background(), ds, id); ok {
							taken.Add(1)
							continue
						}
						v, _ := h.ReadSource(ds, id)
						_ = bytes.Clone(v)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(taken.Load())/float64(ranks*per), "taken")
		})
	}
}

// BenchmarkClaimDuringFollow: an order of 1,280,000 samples installed on
// a node of 8 ranks (FollowPublished: each rank's slice of 160,000
// indexed for its cursor) while a reader claims samples the read-ahead
// does not hold, as every read of a sample not cached does. ns/op is one
// FollowPublished; claim-max-us the longest a claim took meanwhile.
func BenchmarkClaimDuringFollow(b *testing.B) {
	const ranks, per = 8, 160_000
	h := &host{}
	ds := &dataset{}
	r := New(Config{Self: "me", Prefetch: 64, Memory: 16 << 20, SourceReads: 1, BufferName: "readahead-bench"}, h)
	defer r.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	var longest time.Duration
	for b.Loop() {
		gen := ds.gen.Add(1)
		p := &wire.PublishMsg{Gen: gen}
		for range ranks {
			slice := make([]uint32, per)
			for i := range slice {
				slice[i] = rng.Uint32N(ranks * per)
			}
			p.Slices = append(p.Slices, slice)
			p.Ranks = append(p.Ranks, "me")
		}
		stop := make(chan struct{})
		var claims sync.WaitGroup
		claims.Go(func() {
			for id := uint32(ranks * per); ; id++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				r.Claim(ds, id) // past the slices: never held
				longest = max(longest, time.Since(start))
			}
		})
		r.FollowPublished(ds, p)
		close(stop)
		claims.Wait()
	}
	b.ReportMetric(float64(longest.Microseconds()), "claim-max-us")
}
