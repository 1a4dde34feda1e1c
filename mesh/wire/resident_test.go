package wire

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPackResident: a set packed and read back is the set, in the
// shorter of the two forms, for datasets of sizes that end mid-byte and
// mid-word and sets from none to all.
func TestPackResident(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 7, 64, 65, 1000, 100_003} {
		for _, density := range []float64{0, 0.0005, 0.01, 0.2, 1} {
			t.Run(fmt.Sprintf("%d/%v", n, density), func(t *testing.T) {
				words := make([]uint64, (n+63)/64)
				count := 0
				for i := range n {
					if rng.Float64() < density {
						words[i/64] |= 1 << (i % 64)
						count++
					}
				}
				s := PackResident(words, n)
				if err := s.Check(n); err != nil {
					t.Fatal(err)
				}
				if s.Empty() != (count == 0) {
					t.Fatalf("%d samples set, Empty %v", count, s.Empty())
				}
				if len(s.Bits) > 0 && (len(s.Bits) != (n+7)/8 || len(s.Sparse) > 0) {
					t.Fatalf("bitmap of %d bytes (and a list of %d) for %d samples", len(s.Bits), len(s.Sparse), n)
				}
				if len(s.Sparse) >= (n+7)/8 {
					t.Fatalf("a list of %d bytes where the bitmap takes %d", len(s.Sparse), (n+7)/8)
				}
				back := make([]uint64, len(words))
				s.OrInto(back)
				if !slices.Equal(back, words) {
					t.Fatal("the set read back differs")
				}
			})
		}
	}
	// A set of one sample in 1,280,000 of a node's share: two thousand
	// samples take about 4 KB as a list, against 160,000 as a bitmap.
	words := make([]uint64, (1_280_000+63)/64)
	for i := 0; i < 1_280_000; i += 500 {
		words[i/64] |= 1 << (i % 64)
	}
	if s := PackResident(words, 1_280_000); len(s.Sparse) == 0 || len(s.Sparse) > 2*2560 {
		t.Fatalf("2,560 samples of 1,280,000: a list of %d bytes, a bitmap of %d", len(s.Sparse), len(s.Bits))
	}
}

// TestResidentSetCheckRefuses: a set of both forms, a bitmap too long, a
// list cut short, naming a sample past the dataset, or with a gap that
// would overflow, is refused.
func TestResidentSetCheckRefuses(t *testing.T) {
	for name, s := range map[string]ResidentSet{
		"both":            {Bits: []byte{1}, Sparse: []byte{0}},
		"bitmap too long": {Bits: make([]byte, 3)},
		"cut short":       {Sparse: []byte{0x80}},
		"past the end":    {Sparse: []byte{3, 12}},
		"huge gap":        {Sparse: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		"gaps add past":   {Sparse: []byte{9, 9}},
	} {
		if err := s.Check(16); !errors.Is(err, ErrResident) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := (ResidentSet{Sparse: []byte{3, 11}}).Check(17); err != nil {
		t.Errorf("samples 3 and 15 of 17: %v", err)
	}
	if err := (ResidentSet{Bits: []byte{0, 0, 1}}).Check(17); err != nil {
		t.Errorf("sample 16 of 17: %v", err)
	}
	if err := (ResidentSet{Bits: []byte{0, 0, 1 << 1}}).Check(17); !errors.Is(err, ErrResident) {
		t.Errorf("a bitmap naming sample 17 of 17: %v", err)
	}
}

// FuzzResidentSet: any bytes, as a list or a bitmap, are refused by Check
// or read without a fault into a dataset's words; a set read back and
// packed again names the same samples.
func FuzzResidentSet(f *testing.F) {
	f.Add([]byte{3, 12}, false, 16)
	f.Add([]byte{0xff, 0x01}, true, 16)
	f.Add([]byte{0x80, 0x80, 0x01}, false, 100_000)
	f.Fuzz(func(t *testing.T, b []byte, bitmap bool, n int) {
		n = 1 + abs(n)%200_000
		s := ResidentSet{Sparse: b}
		if bitmap {
			s = ResidentSet{Bits: b}
		}
		if s.Check(n) != nil {
			return
		}
		words := make([]uint64, (n+63)/64)
		s.OrInto(words)
		again := make([]uint64, len(words))
		PackResident(words, n).OrInto(again)
		if !slices.Equal(words, again) {
			t.Fatal("packed again, the set differs")
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
