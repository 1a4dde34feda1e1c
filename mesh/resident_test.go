package mesh

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shade-mesh/shade/dataset"
)

// synthetic is a dataset of n samples of 16 bytes, sample i holding i,
// made in memory: a source as large as a real one without its files.
type synthetic struct{ m *dataset.Manifest }

func newSynthetic(tb testing.TB, n int) *synthetic {
	tb.Helper()
	var names dataset.NamesBuilder
	sizes := make([]int64, n)
	for i := range n {
		if err := names.Add(fmt.Sprintf("%08d.bin", i)); err != nil {
			tb.Fatal(err)
		}
		sizes[i] = 16
	}
	return &synthetic{m: &dataset.Manifest{Names: names.Names(), Sizes: dataset.NewSizes(sizes), Version: "synthetic"}}
}

func (s *synthetic) Manifest() *dataset.Manifest { return s.m }

// syntheticNode starts a node, closed when the test ends, with a cache of
// cacheSize bytes and a synthetic dataset of n samples.
func syntheticNode(tb testing.TB, n int, cacheSize int64) (*Node, *synthetic, *datasetState) {
	tb.Helper()
	src := newSynthetic(tb, n)
	node, err := New(Config{Name: "n", CacheSize: cacheSize, Datasets: []DatasetConfig{{Name: "ds", Source: src}}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { node.Close() })
	return node, src, node.ordered[0]
}

func (s *synthetic) Read(i int, dst []byte) ([]byte, error) {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(i))
	return binary.LittleEndian.AppendUint64(dst, ^uint64(i)), nil
}

// BenchmarkResidentWords: the bitmap of the samples a node caches, which
// a node with ranks sends with each rank's done and the leader reads for
// each draw (cache-aware draws, --boost), at 1,280,000 samples with every
// other one cached.
func BenchmarkResidentWords(b *testing.B) {
	const samples = 1_280_000
	n, src, ds := syntheticNode(b, samples, 256<<20)
	var value []byte
	for i := 0; i < samples; i += 2 {
		value, _ = src.Read(i, value[:0])
		if cached, _ := n.admit(sampleID(ds, i), []byte(keyOfSample(ds, uint32(i))), value, ds); !cached {
			b.Fatalf("sample %d not admitted", i)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		words := n.residentWords(ds)
		if words[0] != 0x5555555555555555 {
			b.Fatalf("first word %x", words[0])
		}
	}
}

// TestResidentBitsFollowThePolicy: the bitmap of cached samples is the
// policy's residency, sample by sample, through admissions, evictions
// (a cache that holds a fraction of what is read) and deletes, and the
// count of cached samples is its number of bits.
func TestResidentBitsFollowThePolicy(t *testing.T) {
	const samples = 3000
	n, src, ds := syntheticNode(t, samples, 64<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(when string) {
		t.Helper()
		words, bits := n.residentWords(ds), 0
		n.lockPolicy()
		defer n.polMu.Unlock()
		for i := range samples {
			in := words[i/64]&(1<<(i%64)) != 0
			if in != n.pol.Resident(sampleID(ds, i)) {
				t.Fatalf("%s: sample %d in the bitmap %v, resident %v", when, i, in, !in)
			}
			if in {
				bits++
			}
		}
		if int64(bits) != ds.resident.Load() || bits == 0 {
			t.Fatalf("%s: %d samples in the bitmap, %d counted", when, bits, ds.resident.Load())
		}
	}
	var value []byte
	for round := range 4 {
		for range samples {
			i := rng.IntN(samples)
			value, _ = src.Read(i, value[:0])
			n.admit(sampleID(ds, i), []byte(keyOfSample(ds, uint32(i))), value, ds)
		}
		check(fmt.Sprintf("round %d", round))
		for range samples / 10 {
			n.Delete([]byte(keyOfSample(ds, uint32(rng.IntN(samples)))))
		}
		check(fmt.Sprintf("round %d, after deletes", round))
	}
	if st := n.store.Stats(); int64(st.Entries) != ds.resident.Load() {
		t.Fatalf("the store holds %d entries, %d counted", st.Entries, ds.resident.Load())
	}
}

// TestResidentSetsReachTheLeader: a node's done carries what it caches to
// the leader over the mesh, as a bitmap where that is shorter (every
// sample cached) and as a list where that is (a small cache of many
// samples), and the leader counts that node's cached samples in its
// draws.
func TestResidentSetsReachTheLeader(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples int
		cache   int64
		list    bool
	}{{"bitmap", 200, 0, false}, {"list", 5000, 48 << 10, true}} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMesh(t, 2, meshOpts{samples: tc.samples, minSize: 10, maxSize: 20, configure: func(_ int, c *Config) {
				c.Boost = 3
				if tc.cache > 0 {
					c.CacheSize = tc.cache
				}
			}})
			f, lead := m.follower(t), m.leader(t)
			c := f.client(t)
			ctx := context.Background()
			if _, err := trainEpoch(ctx, c, m.files, "", 0, 0, 1, func(id int64) float64 { return 0.1 + float64(id%7) }); err != nil {
				t.Fatal(err)
			}
			set := f.node.residentSet(f.node.ordered[0])
			if set.Empty() || (len(set.Sparse) > 0) != tc.list {
				t.Fatalf("the follower's set: a bitmap of %d bytes, a list of %d; want a list: %v", len(set.Bits), len(set.Sparse), tc.list)
			}
			if err := c.Do(ctx, "SHADE.DONE", "ds", 0, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if got := lead.node.ordered[0].def.leaderJob().Status().Resident; !slices.Equal(got, []string{f.node.Name()}) {
				t.Fatalf("the leader counts the cached samples of %v; want %s's", got, f.node.Name())
			}
		})
	}
}
