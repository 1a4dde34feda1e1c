package policy

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// randomIDs returns n ids drawn at random from 0..universe-1, always the
// same for the same seed.
func randomIDs(n, universe int, seed uint64) []ID {
	rng := rand.New(rand.NewPCG(seed, seed))
	ids := make([]ID, n)
	for i := range ids {
		ids[i] = ID(rng.IntN(universe))
	}
	return ids
}

// benchIDs returns n random ids over a universe of 10*residents ids.
func benchIDs(n, residents int) []ID { return randomIDs(n, 10*residents, 42) }

// fullAPP returns an APP holding residents unit-size items 0..residents-1,
// scored randomly, with every id of the universe scored, over a full Budget.
func fullAPP(residents int) (*APP, *Budget) {
	rng := rand.New(rand.NewPCG(7, 7))
	a := NewAPP(Options{})
	b := NewBudget(int64(residents))
	for id := range ID(10 * residents) {
		a.SetScore(id, math.Log(10+63*rng.Float64()))
	}
	for id := range ID(residents) {
		// Admit straight into the heap: a Miss would refuse the unimportant.
		g := a.ghosts.touch(id)
		a.heap.push(id, appKey{score: g.score(), freq: 1}, g.nscore)
		a.ghosts.admitted(id)
		b.Admit(id, 1)
	}
	return a, b
}

// BenchmarkAPPMiss: misses of random non-resident ids against a full cache,
// each evicting one resident when the newcomer is more important.
func BenchmarkAPPMiss(b *testing.B) {
	for _, residents := range []int{10_000, 100_000} {
		b.Run(strconv.Itoa(residents), func(b *testing.B) {
			a, room := fullAPP(residents)
			ids := benchIDs(1<<16, residents)
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				id := ids[i&(len(ids)-1)]
				i++
				if a.Resident(id) {
					a.Hit(id)
				} else if a.Miss(id, 1, room) {
					room.Admit(id, 1)
				}
			}
		})
	}
}

// residentIDs returns 1<<16 random ids of the residents 0..residents-1
// that fullAPP and fill admit.
func residentIDs(residents int) []ID { return randomIDs(1<<16, residents, 1) }

// BenchmarkAPPHit: hits on random residents, each re-keying one heap entry.
func BenchmarkAPPHit(b *testing.B) {
	for _, residents := range []int{10_000, 100_000} {
		b.Run(strconv.Itoa(residents), func(b *testing.B) {
			a, _ := fullAPP(residents)
			ids := residentIDs(residents)
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				a.Hit(ids[i&(len(ids)-1)])
				i++
			}
		})
	}
}

// BenchmarkOrderAwareHit: reads of random residents that follow the
// order (every read a hit), as a trainer reads an epoch whose samples the
// cache holds; the order (1<<16 reads) begins again when read through,
// untimed: an epoch's order is as long as the dataset's epoch, and its
// installing, timed by BenchmarkOrderAwareBeginEpoch, is spread over it.
func BenchmarkOrderAwareHit(b *testing.B) {
	for _, residents := range []int{10_000, 100_000} {
		b.Run(strconv.Itoa(residents), func(b *testing.B) {
			o := NewOrderAware(Options{})
			fill(o, residents)
			readOrder(b, o, residentIDs(residents), o.Hit, false)
		})
	}
}

// BenchmarkOrderAwareBeginEpoch: an order of 1<<16 reads of random
// residents installed over a full cache, every resident re-keyed by its
// first read in it.
func BenchmarkOrderAwareBeginEpoch(b *testing.B) {
	for _, residents := range []int{10_000, 100_000} {
		b.Run(strconv.Itoa(residents), func(b *testing.B) {
			o := NewOrderAware(Options{})
			fill(o, residents)
			order := residentIDs(residents)
			b.ReportAllocs()
			epoch := 0
			for b.Loop() {
				o.BeginEpoch(epoch, order)
				epoch++
			}
		})
	}
}

// fill admits the unit-size ids 0..residents-1 into p over a Budget they
// fill, which it returns.
func fill(p Policy, residents int) *Budget {
	room := NewBudget(int64(residents))
	for id := range ID(residents) {
		p.Miss(id, 1, room)
		room.Admit(id, 1)
	}
	return room
}

// readOrder times read of each id of order in turn, installing the order
// again (BeginEpoch) each time it is read through, timed or not.
func readOrder(b *testing.B, o *OrderAware, order []ID, read func(ID), timeInstall bool) {
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if i&(len(order)-1) == 0 {
			if !timeInstall {
				b.StopTimer()
			}
			o.BeginEpoch(i>>16, order)
			if !timeInstall {
				b.StartTimer()
			}
		}
		read(order[i&(len(order)-1)])
		i++
	}
}

// BenchmarkAPPSetScore: score updates of random residents.
func BenchmarkAPPSetScore(b *testing.B) {
	a, _ := fullAPP(100_000)
	rng := rand.New(rand.NewPCG(3, 3))
	b.ReportAllocs()
	for b.Loop() {
		a.SetScore(ID(rng.IntN(100_000)), math.Log(10+63*rng.Float64()))
	}
}

// BenchmarkOrderAwareRead: reads that follow a published order of 2^16
// random ids against a full cache of residents unit-size items; every 2^16
// reads the order is installed again, its O(reads+residents) cost included.
func BenchmarkOrderAwareRead(b *testing.B) {
	for _, residents := range []int{10_000, 100_000} {
		b.Run(strconv.Itoa(residents), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(7, 7))
			o := NewOrderAware(Options{})
			for id := range ID(10 * residents) {
				o.SetScore(id, math.Log(10+63*rng.Float64()))
			}
			room := fill(o, residents)
			readOrder(b, o, benchIDs(1<<16, residents), func(id ID) {
				if o.Resident(id) {
					o.Hit(id)
				} else if o.Miss(id, 1, room) {
					room.Admit(id, 1)
				}
			}, true)
		})
	}
}

// BenchmarkOrderAwareMergeEpoch: one job's order of 60,000 random ids
// merged, as one of 3 jobs, into an order holding the other 2 jobs'
// 120,000 unconsumed reads, over a full cache of 10,000 residents. The
// BeginEpoch that restores the order before each merge is not timed.
func BenchmarkOrderAwareMergeEpoch(b *testing.B) {
	const reads, jobs, residents = 60_000, 3, 10_000
	rng := rand.New(rand.NewPCG(9, 9))
	o := NewOrderAware(Options{})
	room := NewBudget(residents)
	for id := range ID(residents) {
		o.SetScore(id, math.Log(10+63*rng.Float64()))
		o.Miss(id, 1, room)
		room.Admit(id, 1)
	}
	others := make([]ID, (jobs-1)*reads)
	for i := range others {
		others[i] = ID(rng.IntN(10 * residents))
	}
	mine := make([]ID, reads)
	for i := range mine {
		mine[i] = ID(rng.IntN(10 * residents))
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		o.BeginEpoch(0, others)
		b.StartTimer()
		o.MergeEpoch(1, mine, 0, jobs-1)
	}
}

// BenchmarkReplay measures a whole replay per policy, with an order
// published every 20,000 reads.
func BenchmarkReplay(b *testing.B) {
	tr := withEpochs(randomTrace(5, 200_000, 20_000, true, true), 20_000)
	_, ws := WorkingSet(tr)
	for _, name := range allNames {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				Replay(build(b, name, tr), tr, ws/10)
			}
		})
	}
}

// BenchmarkHits: runs of 64 hits on random residents, as a node tells its
// policy of a minibatch's reads from memory: "each" calls Hit for each,
// "hits" calls Hits for the run (hinting the CPU ahead). 1,000,000
// residents (a large cache's samples: their table and heap out of the
// CPU's caches) and 10,000 (in them). "order+epoch" is OrderAware with
// an order installed, eight reads of each resident, whose hits also
// follow each resident's chain of places in the order. ns/op is per run.
func BenchmarkHits(b *testing.B) {
	const run = 64
	for _, residents := range []int{10_000, 100_000, 1_000_000} {
		for _, name := range []string{"app", "order", "order+epoch"} {
			var p Policy
			switch name {
			case "app":
				p, _ = fullAPP(residents)
			case "order":
				p = NewOrderAware(Options{})
				fill(p, residents)
			case "order+epoch":
				o := NewOrderAware(Options{})
				fill(o, residents)
				o.BeginEpoch(0, randomIDs(8*residents, residents, 3))
				p = o
			}
			ids := residentIDs(residents)
			for _, way := range []string{"each", "hits"} {
				b.Run(name+"/"+strconv.Itoa(residents)+"/"+way, func(b *testing.B) {
					i := 0
					for b.Loop() {
						next := ids[i : i+run]
						i = (i + run) & (len(ids) - 1)
						if way == "hits" {
							Hits(p, next)
							continue
						}
						for _, id := range next {
							p.Hit(id)
						}
					}
				})
			}
		}
	}
}

// BenchmarkFill admits n new ids into an empty policy with room for all,
// as a node's policy fills while its cache warms, timing each Miss, and
// reports the longest Miss of a fill (the median over fills): the
// longest the node's reads wait for the policy's lock while it grows;
// and the policy's memory outside the Go heap a resident (OffHeap).
func BenchmarkFill(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		for _, name := range []string{"app", "order"} {
			b.Run(name+"/"+strconv.Itoa(n), func(b *testing.B) {
				var worst []time.Duration
				var off int64
				for b.Loop() {
					p, _ := New(name, Options{})
					room := NewBudget(int64(n))
					longest := time.Duration(0)
					for id := range ID(n) {
						start := time.Now()
						if !p.Miss(id, 1, room) {
							b.Fatalf("id %d refused with room for it", id)
						}
						longest = max(longest, time.Since(start))
						room.Admit(id, 1)
					}
					worst = append(worst, longest)
					off = p.(OffHeap).OffHeapBytes()
				}
				slices.Sort(worst)
				b.ReportMetric(float64(worst[len(worst)/2].Nanoseconds())/1e6, "worst-miss-ms")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/miss")
				b.ReportMetric(float64(off)/float64(n), "offheap-B/resident")
			})
		}
	}
}

// BenchmarkScores scores n ids no cache holds, as a node's policy learns
// the importance of every sample of a dataset from its trainers'
// reports, and reports what the policy then holds for each id: on the Go
// heap (its live heap after a collection, against before the policy was
// made) and outside it (OffHeap), and the time of a SetScore. With
// "order+epoch", OrderAware then installs an epoch's order that reads
// each id once (the time of a SetScore includes it).
func BenchmarkScores(b *testing.B) {
	for _, n := range []int{1_000_000, 4_000_000} {
		for _, name := range []string{"app", "order", "order+epoch"} {
			b.Run(name+"/"+strconv.Itoa(n), func(b *testing.B) {
				var heap, off float64
				order := make([]ID, n)
				for i := range order {
					order[i] = ID(i)
				}
				rand.New(rand.NewPCG(5, 5)).Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
				for b.Loop() {
					b.StopTimer()
					before := liveHeap()
					b.StartTimer()
					p, _ := New(strings.TrimSuffix(name, "+epoch"), Options{})
					s := p.(Scorer)
					for id := range ID(n) {
						s.SetScore(id, float64(id%1000))
					}
					if name == "order+epoch" {
						p.(Lookahead).BeginEpoch(0, order)
					}
					b.StopTimer()
					heap = float64(liveHeap() - before)
					off = float64(p.(OffHeap).OffHeapBytes())
					runtime.KeepAlive(p)
					b.StartTimer()
				}
				b.ReportMetric(heap/float64(n), "heap-B/id")
				b.ReportMetric(off/float64(n), "offheap-B/id")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/score")
			})
		}
	}
}

// liveHeap is the Go heap's live bytes after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
