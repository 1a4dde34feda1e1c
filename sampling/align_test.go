package sampling

import (
	"bytes"
	"cmp"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAlignKeepsTheSamplesAndLinesCommonOnesUp: an aligned order is a
// permutation of the order; two orders aligned with one seed and epoch
// hold the samples each holds once at about the same place; another
// epoch orders them otherwise.
func TestAlignKeepsTheSamplesAndLinesCommonOnesUp(t *testing.T) {
	const n = 20000
	rng := rand.New(rand.NewPCG(1, 2))
	draw := func() []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = uint32(rng.IntN(n))
		}
		return out
	}
	a, b := draw(), draw()
	sortedA := slices.Sorted(slices.Values(a))
	Align(a, 7, 3)
	if !slices.Equal(slices.Sorted(slices.Values(a)), sortedA) {
		t.Fatal("Align changed the order's samples")
	}
	Align(b, 7, 3)
	// Samples drawn once in each order: the same key placed them.
	placeA, placeB := singlePlaces(a), singlePlaces(b)
	var common []uint32
	for id := range placeA {
		if _, ok := placeB[id]; ok {
			common = append(common, id)
		}
	}
	if len(common) < n/10 {
		t.Fatalf("only %d common samples", len(common))
	}
	worst := 0
	for _, id := range common {
		worst = max(worst, abs(placeA[id]-placeB[id]))
	}
	// Places of one key among n uniform keys differ by a few sqrt(n).
	if worst > n/20 {
		t.Errorf("a common sample's places differ by up to %d of %d", worst, n)
	}
	c := slices.Clone(a)
	Align(c, 7, 4)
	if slices.Equal(a, c) {
		t.Error("epochs 3 and 4 are aligned alike")
	}
	d := slices.Clone(a)
	Align(d, 7, 3)
	if !slices.Equal(a, d) {
		t.Error("Align is not a function of (seed, epoch) and the samples")
	}
}

// singlePlaces maps each sample that order holds once to its place.
func singlePlaces(order []uint32) map[uint32]int {
	count := make(map[uint32]int)
	for _, id := range order {
		count[id]++
	}
	out := make(map[uint32]int)
	for i, id := range order {
		if count[id] == 1 {
			out[id] = i
		}
	}
	return out
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// TestAlignAsByComparison checks Align against the comparison sort it
// replaced, sample for sample: orders of ids below their length (copies
// counted in a table) and far above it (in a map), with repeats.
func TestAlignAsByComparison(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	for trial := range 200 {
		n := rng.IntN(3000)
		span := uint32(1 + rng.IntN(n+1))
		if trial%4 == 3 {
			span = 1 << 31
		}
		order := make([]uint32, n)
		for i := range order {
			order[i] = uint32(rng.Int64N(int64(span)))
		}
		want := slices.Clone(order)
		alignByComparison(want, 11, trial)
		Align(order, 11, trial)
		if !slices.Equal(order, want) {
			t.Fatalf("trial %d (%d ids below %d): aligned %v, the comparison sort gives %v", trial, n, span, order, want)
		}
	}
}

// TestRadixSortByKeyThenVal: pairs come out by key, then val, whether
// the sort passes over every digit (stable: pairs of one key keep the
// order they went in, here ascending val) or leaves the low digits to the
// runs that share the high ones (vals in any order), for keys that share
// digits, keys alike in their high bits, and keys that are not.
func TestRadixSortByKeyThenVal(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 1))
	for _, keyOf := range []func() uint64{
		func() uint64 { return uint64(rng.IntN(4)) << 40 },
		func() uint64 { return uint64(rng.IntN(3))<<50 | uint64(rng.IntN(5)) },
		func() uint64 { return rng.Uint64() >> uint(rng.IntN(64)) },
	} {
		for _, low := range []int{0, radixLow, 4, radixDigits - 1} {
			const n = 5000
			keys, vals := make([]uint64, n), make([]uint32, n)
			for i := range keys {
				keys[i], vals[i] = keyOf(), uint32(i)
			}
			if low > 0 {
				rng.Shuffle(n, func(i, j int) { vals[i], vals[j] = vals[j], vals[i] })
			}
			type pair struct {
				k uint64
				v uint32
			}
			want := make([]pair, n)
			for i := range want {
				want[i] = pair{keys[i], vals[i]}
			}
			slices.SortFunc(want, func(a, b pair) int {
				if c := cmp.Compare(a.k, b.k); c != 0 {
					return c
				}
				return cmp.Compare(a.v, b.v)
			})
			radixSort(keys, vals, make([]uint64, n), make([]uint32, n), new(radixCounts), low, 1)
			for i := range want {
				if keys[i] != want[i].k || vals[i] != want[i].v {
					t.Fatalf("low digit %d, place %d: (%x, %d), want (%x, %d)", low, i, keys[i], vals[i], want[i].k, want[i].v)
				}
			}
		}
	}
}

// alignByComparison is Align as it was first written: the keys sorted by
// comparison, equal keys by id.
func alignByComparison(order []uint32, seed uint64, epoch int) {
	type keyed struct {
		key uint64
		id  uint32
	}
	base := mix64(seed ^ mix64(uint64(epoch)+0x7f4a7c159e3779b9))
	copies := make(map[uint32]uint32)
	ks := make([]keyed, len(order))
	for i, id := range order {
		k := copies[id]
		copies[id] = k + 1
		ks[i] = keyed{key: mix64(base ^ mix64(uint64(id)<<20^uint64(k))), id: id}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		if c := cmp.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	for i, k := range ks {
		order[i] = k.id
	}
}

// BenchmarkAlign aligns an order of 1.28 M samples, as every epoch's
// order is aligned.
func BenchmarkAlign(b *testing.B) {
	const n = 1280000
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]uint32, n)
	for i := range order {
		order[i] = uint32(rng.IntN(n))
	}
	work := make([]uint32, n)
	for b.Loop() {
		copy(work, order)
		Align(work, 7, 1)
	}
}

// TestDrawUnorderedAlignsAsDraw: a draw that skips the shuffle holds the
// same samples, as often, with the same weights, leaves the sampler as
// Draw does, and so comes out of Align as Draw's order does, epoch after
// epoch, with PADS on (the boost, the cap, coupled draws) and off.
func TestDrawUnorderedAlignsAsDraw(t *testing.T) {
	const n = 3000
	resident := make([]uint64, (n+63)/64)
	for i := 0; i < n; i += 3 {
		resident[i/64] |= 1 << (i % 64)
	}
	for _, cfg := range []Config{
		{Seed: 4, PADS: true, UniformFloor: -1, CoverageEpochs: 3, MaxWeight: PeerMaxWeight, Boost: PeerBoost, DrawSeed: 9},
		{Seed: 4, PADS: true, UniformFloor: -1, CoverageEpochs: -1},
		{Seed: 4, UniformFloor: -1, CoverageEpochs: -1},
	} {
		tb := skewedTable(n)
		shuffled, unordered := NewSampler(n, cfg), NewSampler(n, cfg)
		for e := range 4 {
			a, err := shuffled.Draw(e, tb, resident)
			if err != nil {
				t.Fatal(err)
			}
			b, err := unordered.DrawUnordered(e, tb, resident)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(slices.Sorted(slices.Values(a.Order)), slices.Sorted(slices.Values(b.Order))) || !slices.Equal(a.Weight, b.Weight) {
				t.Fatalf("%+v epoch %d: the unordered draw holds other samples or weights", cfg, e)
			}
			Align(a.Order, 7, e)
			Align(b.Order, 7, e)
			if !slices.Equal(a.Order, b.Order) {
				t.Fatalf("%+v epoch %d: aligned orders differ", cfg, e)
			}
			sa, _ := shuffled.MarshalBinary()
			sb, _ := unordered.MarshalBinary()
			if !slices.Equal(sa, sb) {
				t.Fatalf("%+v epoch %d: the samplers' states differ", cfg, e)
			}
		}
	}
}

// TestUniformLowLeavesShortRuns: Align's sort passes over the digits
// that tell n uniform keys apart to runs of about 2 keys, no more.
func TestUniformLowLeavesShortRuns(t *testing.T) {
	for _, c := range []struct{ n, low int }{{1, 5}, {1000, 5}, {1 << 19, 4}, {1280000, 4}, {1 << 22, 3}, {100_000_000, 3}} {
		if got := uniformLow(c.n); got != c.low {
			t.Errorf("n=%d: low digit %d, want %d", c.n, got, c.low)
		}
		if high := 64 - radixBits*uniformLow(c.n); 1<<high < c.n/2 {
			t.Errorf("n=%d: %d high bits leave runs of %d keys", c.n, high, c.n>>high)
		}
	}
}

// TestDrawPermutation: a permutation epoch drawn from an order the caller
// made (AlignedPermutation's, the permutation drawn and aligned) leaves
// the sampler as DrawUnordered does, keeps the order as it is given and
// has no weights (all 1); an epoch PADS draws, an order of another
// length or an epoch out of sequence is refused and leaves the sampler
// as it was.
func TestDrawPermutation(t *testing.T) {
	const n = 500
	for _, pads := range []bool{true, false} {
		cfg := DefaultConfig()
		cfg.PADS = pads
		tb := NewTable(n, 0, ScoreRankLog)
		for id := range n {
			_ = tb.Set(uint32(id), 1+float64(id%7))
		}
		own, given := NewSampler(n, cfg), NewSampler(n, cfg)
		for epoch := range 3 {
			if !given.Permutes(epoch) {
				before, _ := given.MarshalBinary()
				if _, err := given.DrawPermutation(epoch, make([]uint32, n)); !errors.Is(err, ErrNotPermutation) {
					t.Fatalf("PADS %t, epoch %d: err = %v, want ErrNotPermutation", pads, epoch, err)
				}
				if after, _ := given.MarshalBinary(); !bytes.Equal(before, after) {
					t.Fatalf("PADS %t, epoch %d: a refused draw changed the sampler", pads, epoch)
				}
				break
			}
			want, err := own.DrawUnordered(epoch, tb, nil)
			if err != nil {
				t.Fatal(err)
			}
			order := slices.Clone(want.Order)
			Align(order, 3, epoch)
			if !slices.Equal(AlignedPermutation(n, 3, epoch), order) {
				t.Fatalf("epoch %d: AlignedPermutation differs from the aligned permutation drawn", epoch)
			}
			if _, err := given.DrawPermutation(epoch, order[1:]); !errors.Is(err, ErrSizeMismatch) {
				t.Fatalf("an order of %d: err = %v, want ErrSizeMismatch", n-1, err)
			}
			if _, err := given.DrawPermutation(epoch+1, order); !errors.Is(err, ErrEpochOutOfSequence) {
				t.Fatalf("epoch %d asked at %d: err = %v, want ErrEpochOutOfSequence", epoch+1, epoch, err)
			}
			got, err := given.DrawPermutation(epoch, order)
			if err != nil {
				t.Fatal(err)
			}
			if &got.Order[0] != &order[0] || got.Weight != nil || slices.ContainsFunc(want.Weight, func(w float32) bool { return w != 1 }) {
				t.Fatalf("PADS %t, epoch %d: the order copied or weights given", pads, epoch)
			}
			a, _ := own.MarshalBinary()
			b, _ := given.MarshalBinary()
			if !bytes.Equal(a, b) || own.Next() != given.Next() {
				t.Fatalf("PADS %t, epoch %d: the sampler's state differs from DrawUnordered's", pads, epoch)
			}
		}
	}
}
