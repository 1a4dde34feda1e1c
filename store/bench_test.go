package store

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/shade-mesh/shade/protocol/crc32c"
	"github.com/shade-mesh/shade/protocol/shm"
)

var benchSizes = []int{4 << 10, 100 << 10}

const benchArena = 256 << 20

// benchKeys returns enough keys to fill about half of the bench arena with
// values of size bytes, so Puts replace entries in a steady state.
func benchKeys(size int) [][]byte {
	n := benchArena / 2 / size
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "imagenet/train/%d", i)
	}
	return keys
}

func BenchmarkPut(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			s := newStore(b, Config{Capacity: benchArena})
			keys := benchKeys(size)
			value := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := s.Put(keys[i%len(keys)], value); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func fillBench(b *testing.B, size int, skipVerify bool) (*Store, [][]byte) {
	s := newStore(b, Config{Capacity: benchArena, SkipVerify: skipVerify})
	keys := benchKeys(size)
	value := make([]byte, size)
	for _, k := range keys {
		if err := s.Put(k, value); err != nil {
			b.Fatal(err)
		}
	}
	return s, keys
}

func BenchmarkGet(b *testing.B) {
	for _, size := range benchSizes {
		for _, skip := range []bool{false, true} {
			name := fmt.Sprintf("%dKiB", size>>10)
			if skip {
				name += "/SkipVerify"
			}
			b.Run(name, func(b *testing.B) { benchGet(b, size, skip) })
		}
	}
}

func benchGet(b *testing.B, size int, skipVerify bool) {
	s, keys := fillBench(b, size, skipVerify)
	dst := make([]byte, 0, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		var ok bool
		if dst, ok = s.Get(dst[:0], keys[i%len(keys)]); !ok {
			b.Fatal("miss")
		}
		i++
	}
}

func BenchmarkGetParallel(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			s, keys := fillBench(b, size, false)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				dst := make([]byte, 0, size)
				i := 0
				for pb.Next() {
					var ok bool
					if dst, ok = s.Get(dst[:0], keys[i%len(keys)]); !ok {
						b.Error("miss")
						return
					}
					i += 7
				}
			})
		})
	}
}

func BenchmarkView(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			s, keys := fillBench(b, size, false)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			i, n := 0, 0
			for b.Loop() {
				s.View(keys[i%len(keys)], func(v []byte, _ uint64) { n += len(v) })
				i++
			}
		})
	}
}

// BenchmarkVerifyInPlace checks 100 KiB values that are not in the CPU's
// cache (200 MiB of them, visited in a shuffled order) four ways: the
// checksum in place as it reads the value, the cache lines touched first
// and then the checksum, verifiedInPlace (the one of those two it picks
// for this CPU), a copy out, then the checksum of the copy, and the copy
// with its checksum in one pass (crc32c.Append: what Append does).
func BenchmarkVerifyInPlace(b *testing.B) {
	// 100 KiB values out of the CPU's caches (200 MB), and 4 KiB values
	// as a GET benchmark's 1,000 keys hold them (4 MiB: the last level).
	for _, sz := range []struct{ size, n int }{{100 << 10, 2000}, {4 << 10, 1000}} {
		b.Run(fmt.Sprintf("%dKiB", sz.size>>10), func(b *testing.B) { benchVerify(b, sz.size, sz.n) })
	}
}

func benchVerify(b *testing.B, size, n int) {
	mem := make([]byte, size*n)
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	values := make([][]byte, n)
	for i, j := range rand.Perm(n) {
		values[i] = mem[j*size : (j+1)*size]
	}
	sums := make([]uint64, n)
	for i, v := range values {
		sums[i] = shm.Checksum(v)
	}
	buf := make([]byte, size)
	for _, way := range []struct {
		name  string
		check func(v []byte, sum uint64) bool
	}{
		{"checksum", func(v []byte, sum uint64) bool { return shm.Checksum(v) == sum }},
		{"touch+checksum", touchedThenVerified},
		{"verifiedInPlace", verifiedInPlace},
		{"copy+checksum", func(v []byte, sum uint64) bool { return shm.Checksum(buf[:copy(buf, v)]) == sum }},
		{"crc32c.Append", func(v []byte, sum uint64) bool { _, c := crc32c.Append(buf[:0], v); return uint64(c) == sum }},
	} {
		b.Run(way.name, func(b *testing.B) {
			b.SetBytes(int64(size))
			i := 0
			for b.Loop() {
				if !way.check(values[i%n], sums[i%n]) {
					b.Fatal("checksum mismatch")
				}
				i++
			}
		})
	}
}

// BenchmarkLendBatch lends batches of 16 random 4 KiB values, as an MGET
// or a pipeline of GETs asks for them, and gives them back: "none" lends
// them in turn; "prefetch" hints all 16 first (Prefetch), as the socket
// hints a pipeline; "ahead" hints each key 16 reads before it is lent
// (Prefetch), and "index" also hints its index 32 reads before
// (PrefetchIndex), as an MGET's keys are hinted. The keys are
func BenchmarkLendBatch(b *testing.B) {
	const size, batch = 4 << 10, lendBatch
	s, all := fillBench(b, size, false)
	for _, n := range []int{1000, len(all)} {
		keys := all[:n]
		r := rand.New(rand.NewPCG(1, uint64(n)))
		order := make([][]byte, 1<<16)
		for i := range order {
			order[i] = keys[r.IntN(n)]
		}
		for _, hint := range []string{"none", "prefetch", "ahead", "index"} {
			b.Run(fmt.Sprintf("keys=%d/%s", n, hint), func(b *testing.B) {
				b.SetBytes(size * batch)
				lendBatches(b, s, order, hint)
			})
		}
	}
}

// lendBatches lends the keys of order in batches of lendBatch for b.Loop's
// iterations, hinted as hint says (BenchmarkLendBatch), and gives each
// batch back. order's length is a multiple of lendBatch.
func lendBatches(b *testing.B, s *Store, order [][]byte, hint string) {
	var loans [lendBatch]uint64
	i := 0
	for b.Loop() {
		next := order[i : i+lendBatch]
		if hint == "prefetch" {
			for _, k := range next {
				s.Prefetch(k)
			}
		}
		for j, k := range next {
			switch at := i + j; hint {
			case "index":
				s.PrefetchIndex(order[(at+2*lendBatch)%len(order)])
				fallthrough
			case "ahead":
				s.Prefetch(order[(at+lendBatch)%len(order)])
			}
			_, v, loan, ok := s.Lend(nil, k, nil, 1)
			if !ok || v == nil {
				b.Fatal("miss")
			}
			loans[j] = loan
		}
		for _, l := range loans {
			s.Return(l)
		}
		i = (i + lendBatch) % len(order)
	}
}

// lendBatch is the batch of BenchmarkLendBatch and BenchmarkLendPages: an
// MGET's keys, or a pipeline's GETs.
const lendBatch = 16

// BenchmarkLendPages lends batches of 16 random 4 KiB values out of the
// CPU's caches (100,000 keys: 400 MiB), each batch hinted first as the
// socket's event loop hints a pipeline (Prefetch), from an arena in 4 KiB
// pages and from one that asks for huge pages. Both are anonymous memory,
// whose kernel setting grants huge pages by default where the memfd's
// does not; the TLB works alike on both. It reports the bytes the kernel
// mapped in huge pages: 0 for the second where the kernel refused them.
func BenchmarkLendPages(b *testing.B) {
	const size, batch, n = 4 << 10, lendBatch, 100_000
	for _, pages := range []struct {
		name  string
		small bool
	}{{"4KiB", true}, {"huge", false}} {
		b.Run("pages="+pages.name, func(b *testing.B) {
			s, err := newStoreWith(Config{Capacity: 512 << 20}, arenaOptions{anonymous: true, smallPages: pages.small})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			keys := benchKeys(size)[:0]
			value := make([]byte, size)
			for i := range n {
				keys = append(keys, fmt.Appendf(nil, "imagenet/train/%d", i))
				if err := s.Put(keys[i], value); err != nil {
					b.Fatal(err)
				}
			}
			r := rand.New(rand.NewPCG(1, n))
			order := make([][]byte, 1<<16)
			for i := range order {
				order[i] = keys[r.IntN(n)]
			}
			b.SetBytes(size * batch)
			lendBatches(b, s, order, "prefetch")
			b.ReportMetric(float64(s.Stats().HugePageBytes), "huge-bytes")
		})
	}
}

// BenchmarkIndexFill fills an empty index with n random hashes, as a
// shard's index fills while the cache warms (196,608 entries a shard is
// 12.6 million samples in the default 64 shards), and reports the longest
// single set of a fill, the median over fills: the longest a shard's
// readers and writers wait for its lock while its index grows; and the
// bytes of slots the full index holds an entry.
func BenchmarkIndexFill(b *testing.B) {
	for _, n := range []int{12_288, 196_608, 1_572_864} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, uint64(n)))
			hashes := make([]uint64, n)
			for i := range hashes {
				hashes[i] = r.Uint64()
			}
			var (
				worst []time.Duration
				x     index
			)
			defer x.reset()
			for b.Loop() {
				x.reset()
				longest := time.Duration(0)
				for i, h := range hashes {
					start := time.Now()
					x.set(h, uint64(i))
					longest = max(longest, time.Since(start))
				}
				worst = append(worst, longest)
			}
			slices.Sort(worst)
			b.ReportMetric(float64(worst[len(worst)/2].Nanoseconds())/1e3, "worst-set-us")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/set")
			slots := 0
			for tab := range tablesOf(x.d.Load()) {
				slots += len(tab.slots)
			}
			b.ReportMetric(float64(slots*int(unsafe.Sizeof(slot{})))/float64(n), "bytes/entry")
		})
	}
}

// BenchmarkIndexGet looks up random hashes in an index of n entries, in
// runs of 64 as an owner answers a fetch: "none" in turn, "ahead" each
// slot hinted 16 lookups before (prefetchSlot). ns/op is per run.
func BenchmarkIndexGet(b *testing.B) {
	const run = 64
	for _, n := range []int{12_288, 1_572_864} {
		r := rand.New(rand.NewPCG(2, uint64(n)))
		hashes := make([]uint64, n)
		var x index
		defer x.reset()
		for i := range hashes {
			hashes[i] = r.Uint64()
			x.set(hashes[i], uint64(i))
		}
		order := make([]uint64, 1<<16)
		for i := range order {
			order[i] = hashes[r.IntN(n)]
		}
		for _, way := range []string{"none", "ahead"} {
			b.Run(fmt.Sprintf("entries=%d/%s", n, way), func(b *testing.B) {
				i := 0
				for b.Loop() {
					for j := range run {
						if way == "ahead" {
							x.prefetchSlot(order[(i+j+16)%len(order)])
						}
						if _, ok := x.get(order[(i+j)%len(order)]); !ok {
							b.Fatal("miss")
						}
					}
					i = (i + run) % len(order)
				}
			})
		}
	}
}
