package dataset

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func mustNames(t testing.TB, names ...string) Names {
	t.Helper()
	n, err := NamesOf(names)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNames: names of every length up to MaxNameBytes, the empty one
// among them, across several blocks, read back by At, All and Strings.
func TestNames(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var want []string
	for i := range 3*namesRun<<namesBlockBits + 17 {
		var name string
		switch {
		case i%50_000 == 7:
			name = strings.Repeat("x", MaxNameBytes) // the longest
		case i%9 == 0:
			name = "" // empty
		default:
			name = fmt.Sprintf("class-%d/%0*d.png", rng.IntN(10), rng.IntN(40), i)
		}
		want = append(want, name)
	}
	n := mustNames(t, want...)
	if n.Len() != len(want) {
		t.Fatalf("Len %d, want %d", n.Len(), len(want))
	}
	for i, w := range want {
		if got := n.At(i); got != w {
			t.Fatalf("At(%d) = %.40q (%d bytes), want %.40q (%d bytes)", i, got, len(got), w, len(w))
		}
	}
	if !slices.Equal(n.Strings(), want) {
		t.Fatal("Strings differs")
	}
	k := 0
	for i, name := range n.All() {
		if i != k || name != want[i] {
			t.Fatalf("All yields %d %.40q at step %d", i, name, k)
		}
		k++
	}
	if k != len(want) {
		t.Fatalf("All yields %d names, want %d", k, len(want))
	}
	if (Names{}).Len() != 0 || len((Names{}).Strings()) != 0 {
		t.Fatal("the zero Names is not empty")
	}
}

// A builder's names read back while it builds, across blocks, and Grow
// changes nothing but room.
func TestBuilderBytes(t *testing.T) {
	var b NamesBuilder
	b.Grow(10, 100)
	n := 1<<builderBlockBits + 3
	size := 0
	for i := range n {
		name := fmt.Sprint(i)
		if i%7 == 0 {
			name = "" // empty names, one of them a block's first
		}
		if err := b.Add(name); err != nil {
			t.Fatal(err)
		}
		size += len(name)
	}
	if b.Size() != size {
		t.Fatalf("Size %d, want %d", b.Size(), size)
	}
	for _, i := range []int{0, 1, 6, 7, 8, 1<<builderBlockBits - 1, 1 << builderBlockBits, 1<<builderBlockBits + 1, n - 1} {
		want := fmt.Sprint(i)
		if i%7 == 0 {
			want = ""
		}
		if got := string(b.Bytes(i)); got != want {
			t.Fatalf("Bytes(%d) = %q, want %q", i, got, want)
		}
	}
	names := b.Names()
	if names.Len() != n || names.At(1<<builderBlockBits+1) != fmt.Sprint(1<<builderBlockBits+1) {
		t.Fatalf("Names: %d names, one at the second block %q", names.Len(), names.At(1<<builderBlockBits+1))
	}
}

// Names front-coded read back: a name that is the one before cut short
// or the same again, ones sharing more bytes than a count says (255),
// the longest after one that shares all but its last byte, empty ones
// within a run and first in one; and names in order, sharing their start,
// cost a few bytes each.
func TestNamesFrontCoded(t *testing.T) {
	long := strings.Repeat("p", 300)
	want := []string{"a/b/c", "a/b", "a/b", "", "a/b/c", long + "1", long + "2", long, long + "22", "",
		strings.Repeat("y", MaxNameBytes-1) + "z", strings.Repeat("y", MaxNameBytes), "y", "", "", "x"}
	for i := range 1000 {
		want = append(want, fmt.Sprintf("train/%04d/%08d", i/300, i))
	}
	n := mustNames(t, want...)
	for i, w := range want {
		if got := n.At(i); got != w {
			t.Fatalf("At(%d) = %.40q (%d bytes), want %.40q (%d bytes)", i, got, len(got), w, len(w))
		}
	}
	if !slices.Equal(n.Strings(), want) {
		t.Fatal("Strings differs")
	}
	seq := make([]string, 100_000)
	for i := range seq {
		seq[i] = fmt.Sprintf("train/%04d/%08d", i/4000, i)
	}
	n = mustNames(t, seq...)
	if per := float64(len(n.data)+4*len(n.runs)+8*len(n.bases)) / float64(len(seq)); per > 6 {
		t.Fatalf("names of 19 bytes in order: %.1f bytes a name, want at most 6", per)
	}
	for i, name := range n.All() {
		if name != seq[i] {
			t.Fatalf("All: %d is %q, want %q", i, name, seq[i])
		}
	}
}

// Names of random bytes, each sharing a random start with the one before
// (all of it, none, or cut short), read back by At and All.
func TestNamesRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for round := range 200 {
		want := make([]string, rng.IntN(300))
		prev := ""
		for i := range want {
			b := []byte(prev[:rng.IntN(len(prev)+1)])
			if rng.IntN(3) == 0 {
				b = b[:0]
			}
			for range rng.IntN(20 + 2*round) {
				b = append(b, byte(rng.IntN(256)))
			}
			if rng.IntN(10) == 0 {
				b = b[:rng.IntN(len(b)+1)]
			}
			want[i] = string(b)
			prev = want[i]
		}
		names := mustNames(t, want...)
		for i, w := range want {
			if got := names.At(i); got != w {
				t.Fatalf("round %d: At(%d) = %q, want %q", round, i, got, w)
			}
		}
		if got := names.Strings(); !slices.Equal(got, want) {
			t.Fatalf("round %d: All differs", round)
		}
	}
}

func TestNameTooLong(t *testing.T) {
	var b NamesBuilder
	if err := b.Add("a"); err != nil {
		t.Fatal(err)
	}
	err := b.Add(strings.Repeat("y", MaxNameBytes+1))
	if !errors.Is(err, ErrNameTooLong) || !strings.Contains(err.Error(), "65536 bytes") {
		t.Fatalf("Add of %d bytes: %v, want ErrNameTooLong saying the length", MaxNameBytes+1, err)
	}
	if n := b.Names(); n.Len() != 1 || n.At(0) != "a" {
		t.Fatalf("after a refused name the builder holds %q", n.Strings())
	}
	if _, err := NamesOf([]string{"ok", strings.Repeat("z", 70_000)}); !errors.Is(err, ErrNameTooLong) {
		t.Fatalf("NamesOf: %v, want ErrNameTooLong", err)
	}
}

// A manifest's version is the one every earlier build computed from the
// same names and sizes (the hash below is the []string VersionOf's):
// peers of different builds must agree on it.
func TestVersionUnchangedByPacking(t *testing.T) {
	got := VersionOf(mustNames(t, "T-shirt/0.png", "Trouser/1.png", "", "日本/ü.bin"), []int64{784, 0, 1, 1 << 40})
	if want := "d115f01b3be5882100a0e02c7dec12f4"; got != want {
		t.Fatalf("VersionOf = %s, want %s", got, want)
	}
}

// BenchmarkManifestMemory: the Go heap a manifest of 1,000,000 names of
// an ImageNet-like shape holds, as Names and, for comparison, as the
// []string manifests held before.
func BenchmarkManifestMemory(b *testing.B) {
	const n = 1_000_000
	name := func(i int) string { return fmt.Sprintf("n%08d/n%08d_%d.JPEG", i/1300, i/1300, i) }
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	b.Run("packed", func(b *testing.B) {
		for b.Loop() {
			before := heap()
			var nb NamesBuilder
			for i := range n {
				if err := nb.Add(name(i)); err != nil {
					b.Fatal(err)
				}
			}
			names := nb.Names()
			b.ReportMetric(float64(heap()-before)/n, "heap-B/name")
			runtime.KeepAlive(names)
		}
	})
	b.Run("strings", func(b *testing.B) {
		for b.Loop() {
			before := heap()
			var names []string
			for i := range n {
				names = append(names, name(i))
			}
			names = slices.Clip(names)
			b.ReportMetric(float64(heap()-before)/n, "heap-B/name")
			runtime.KeepAlive(names)
		}
	})
}

// BenchmarkNamesAt reads names of 1,000,000 of an ImageNet-like shape
// at random, as a source's reads do, and all of them in order.
func BenchmarkNamesAt(b *testing.B) {
	const n = 1_000_000
	var nb NamesBuilder
	for i := range n {
		if err := nb.Add(fmt.Sprintf("n%08d/n%08d_%d.JPEG", i/1300, i/1300, i)); err != nil {
			b.Fatal(err)
		}
	}
	names := nb.Names()
	b.Run("at", func(b *testing.B) {
		b.ReportAllocs()
		rng := rand.New(rand.NewPCG(1, 2))
		for b.Loop() {
			if len(names.At(rng.IntN(n))) == 0 {
				b.Fatal("empty")
			}
		}
	})
	b.Run("all", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			total := 0
			for _, name := range names.AllBytes() {
				total += len(name)
			}
			if total == 0 {
				b.Fatal("empty")
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/name")
	})
}

// A block of Names holds runs of the longest names that share nothing
// within 32 bits of its start.
func TestNamesBlockFits(t *testing.T) {
	if most := uint64(1<<namesBlockBits) * namesRun * (1 + 3 + MaxNameBytes); most >= 1<<32 {
		t.Fatalf("a block's runs may span %d bytes", most)
	}
}
