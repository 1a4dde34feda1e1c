package sampling

import (
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
