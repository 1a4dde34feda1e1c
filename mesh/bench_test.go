package mesh

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/internal/cputime"
	"github.com/shade-mesh/shade/internal/redcon"
	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh/ring"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/protocol/shm"
	"github.com/shade-mesh/shade/transport"
	"github.com/shade-mesh/shade/transport/peer"
)

// BenchmarkSocketSetGet pipelines SET and GET of 4 KiB and 100 KiB values
// through a real trainer socket, 16 commands a round trip, as
// redis-benchmark -P 16 does. The go-redis client runs in the same
// process, so its work counts too; ns/op is per command.
func BenchmarkSocketSetGet(b *testing.B) {
	p := startPeer(b, Config{CacheSize: 256 << 20}, transport.SocketConfig{})
	c := p.client(b)
	ctx := context.Background()
	for _, size := range []struct {
		name  string
		bytes int
	}{{"4KiB", 4 << 10}, {"100KiB", 100 << 10}} {
		val := make([]byte, size.bytes)
		for _, op := range []string{"set", "get"} {
			b.Run(size.name+"/"+op, func(b *testing.B) {
				b.SetBytes(int64(size.bytes))
				for i := 0; i < b.N; i += 16 {
					pipe := c.Pipeline()
					for j := 0; j < 16; j++ {
						key := "key:" + strconv.Itoa((i+j)%1000)
						if op == "set" {
							pipe.Set(ctx, key, val, 0)
						} else {
							pipe.Get(ctx, key)
						}
					}
					if _, err := pipe.Exec(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkNodeSet sets 1,000 keys of 4 KiB over and over, as a loader
// refreshing its values does, on the node alone (no socket): the policy's
// and the store's work of a SET that replaces a value. ns/op is per SET.
func BenchmarkNodeSet(b *testing.B) {
	p := startPeer(b, Config{CacheSize: 256 << 20}, transport.SocketConfig{})
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = []byte("key:" + strconv.Itoa(i))
	}
	val := make([]byte, 4<<10)
	b.SetBytes(int64(len(val)))
	for i := 0; b.Loop(); i++ {
		if ok, err := p.node.Set(keys[i%len(keys)], val); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkOwnedReads picks out the reads of an order that the node owns,
// as the cache policy's lookahead does with every epoch's order: 1,000
// ranks of 1,280 reads over a dataset of 5,000 samples on a mesh of 3,
// each read's owners looked up by the sample (ownersView) against its
// partition's looked up once (ownsSample). ns/op is per order.
func BenchmarkOwnedReads(b *testing.B) {
	_, peers, _ := StartMeshForTest(b, 3, testsupport.DatasetSpec{Samples: 5000, MinSize: 10, MaxSize: 20, Seed: 1}, 2, func(int, *Config) {})
	n := peers[0].Node
	ds := n.ordered[0]
	// The samples are hashed in the background once the ring forms.
	testsupport.WaitFor(b, 10*time.Second, "the dataset's samples are hashed", func() bool { return ds.samples.Load() != nil })
	const world, per = 1000, 1280
	slices := make([][]uint32, world)
	for r := range slices {
		slices[r] = make([]uint32, per)
		for i := range slices[r] {
			slices[r][i] = uint32((i*world + r) % 5000)
		}
	}
	for _, c := range []struct {
		name string
		ours func() func(ids []uint32, masks []uint64)
	}{
		{"by-sample", func() func(ids []uint32, masks []uint64) {
			return func(ids []uint32, masks []uint64) {
				for k, id := range ids {
					masks[k] = 0
					if contains(n.ownersView(ds, id), n.cfg.Name) {
						masks[k] = 1
					}
				}
			}
		}},
		{"by-partition", func() func(ids []uint32, masks []uint64) { return n.ownsSample(ds) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			column, masks := make([]uint32, world), make([]uint64, world)
			for b.Loop() {
				ours, owned := c.ours(), 0
				for k := range per {
					for r, s := range slices {
						column[r] = s[k]
					}
					ours(column, masks)
					for _, m := range masks {
						if m != 0 {
							owned++
						}
					}
				}
				if owned == 0 {
					b.Fatal("the node owns none of the reads")
				}
			}
		})
	}
}

// BenchmarkAnswerFetch answers fetches of samples held in memory, as an
// owner answers another peer's read-ahead, refill or MGET: each value's
// checksum checked as it is copied into the reply. "100KiB": fetches of
// 256 of 2,000 samples of 100 KiB (200 MiB); "1KiB": fetches of 64 of
// 100,000 samples of 1 KiB (100 MiB), where finding each sample in the
// cache memory is much of the work. Both hold more than the CPU's
// caches, and each fetch asks for random samples. ns/op is per fetch.
func BenchmarkAnswerFetch(b *testing.B) {
	for _, c := range []struct {
		name                 string
		samples, size, batch int
	}{{"100KiB", 2000, 100 << 10, 256}, {"1KiB", 100_000, 1 << 10, 64}} {
		b.Run(c.name, func(b *testing.B) {
			n := warmedNode(b, c.samples, c.size)
			ctx := context.Background()
			ds, err := n.dataset("ds")
			if err != nil {
				b.Fatal(err)
			}
			req := &wire.FetchReq{Dataset: "ds", Version: ds.manifest.Version, IDs: make([]uint32, c.batch)}
			rng := rand.New(rand.NewPCG(1, 2))
			b.SetBytes(int64(c.batch * c.size))
			for b.Loop() {
				for i := range req.IDs {
					req.IDs[i] = uint32(rng.IntN(c.samples))
				}
				items, release, err := n.answerFetch(ctx, "", req)
				if err != nil {
					b.Fatal(err)
				}
				for _, it := range items {
					if !it.Hit || len(it.Value) != c.size {
						b.Fatalf("a sample not answered from memory: %+v", it.Err)
					}
				}
				release()
			}
		})
	}
}

// warmedNode starts a node with a cache of 256 MiB serving dataset "ds"
// of samples values of size bytes, and loads every one into its cache.
func warmedNode(b *testing.B, samples, size int) *Node {
	_, peers, _ := StartMeshForTest(b, 1, testsupport.DatasetSpec{Samples: samples, MinSize: size, MaxSize: size, Seed: 1}, 1,
		func(_ int, c *Config) { c.CacheSize = 256 << 20 })
	n := peers[0].Node
	if held, err := n.Warm(context.Background(), "ds"); err != nil || held != samples {
		b.Fatalf("warmed %d of %d samples: %v", held, samples, err)
	}
	return n
}

// BenchmarkRelayOrder publishes an order of 1.28 M samples with their
// weights (10 MiB encoded) from the leader of 13 nodes in one process,
// over loopback QUIC, through relays of fanout 2 (3 hops), and times it
// until every node has installed it: "whole" relays the order whole, as
// a relay passed it on before it went in pieces, "pieces" in pieces of
// 1 MiB (mesh's default). The nodes share this machine's cores, so it
// measures the relays' work on the CPU, not links of a real network
// (shadectl scale models those).
func BenchmarkRelayOrder(b *testing.B) {
	const samples, nodes = 300, 13
	for _, c := range []struct {
		name  string
		piece int
	}{{"whole", 64 << 20}, {"pieces", 0}} {
		b.Run(c.name, func(b *testing.B) {
			m := startMesh(b, nodes, meshOpts{samples: samples, configure: func(i int, cfg *Config) {
				cfg.Cluster.RelayFanout, cfg.Cluster.RelayPiece = 2, c.piece
			}})
			lead := m.leader(b)
			slices, weights := benchSlices(samples)
			version := lead.node.ordered[0].manifest.Version
			b.SetBytes(int64(8 * 2 * benchHalf * (nodes - 1)))
			epoch := 0
			for b.Loop() {
				p := &wire.PublishMsg{Dataset: "ds", Job: "bench", Version: version, Gen: 1, Epoch: epoch,
					Term: lead.node.lead.highest(), World: 2, Slices: slices, Weights: weights, Ranks: []string{"", ""}}
				lead.node.publish(p, nil)
				waitInstalled(b, m, lead, epoch)
				epoch++
			}
		})
	}
}

// BenchmarkGetParts is a new leader's ask for the newest order a peer
// holds, one of 1.28 M samples with their weights (10 MiB encoded), in
// parts of a 2 MiB frame (6 parts): two nodes in one process, over
// loopback QUIC. ns/op is per whole answer, asked, put together and
// decoded.
func BenchmarkGetParts(b *testing.B) {
	const samples = 300
	m := startMesh(b, 2, meshOpts{samples: samples, configure: func(_ int, cfg *Config) {
		cfg.Cluster.MaxFrame = 2 << 20
	}})
	lead := m.leader(b)
	other := m.peers[0]
	if other == lead {
		other = m.peers[1]
	}
	slices, weights := benchSlices(samples)
	p := &wire.PublishMsg{Dataset: "ds", Job: "bench", Version: lead.node.ordered[0].manifest.Version, Gen: 1,
		Term: lead.node.lead.highest(), World: 2, Slices: slices, Weights: weights, Ranks: []string{"", ""}}
	lead.node.publish(p, nil)
	waitInstalled(b, m, lead, 0)
	body, err := p.Encode()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var got wire.PublishMsg
		err := lead.node.getParts(context.Background(), other.node.Name(), wire.GetPartReq{Order: &wire.GetOrderReq{Dataset: "ds", Job: "bench"}}, &got, 30*time.Second)
		if err != nil || len(got.Slices) != 2 || len(got.Slices[0]) != benchHalf {
			b.Fatalf("got %d slices (%v)", len(got.Slices), err)
		}
	}
}

// benchHalf is each of the two ranks' share of benchSlices' order.
const benchHalf = 640_000

// benchSlices returns an order of 1.28 M random samples of samples, in
// two slices, with random weights.
func benchSlices(samples int) ([]wire.U32s, []wire.F32s) {
	rng := rand.New(rand.NewPCG(1, 2))
	slices, weights := make([]wire.U32s, 2), make([]wire.F32s, 2)
	for r := range slices {
		slices[r], weights[r] = make(wire.U32s, benchHalf), make(wire.F32s, benchHalf)
		for i := range benchHalf {
			slices[r][i], weights[r][i] = uint32(rng.IntN(samples)), 0.25+rng.Float32()*3.75
		}
	}
	return slices, weights
}

// waitInstalled waits until every node but lead holds epoch's order of
// job "bench", looking every millisecond.
func waitInstalled(b *testing.B, m *testMesh, lead *testPeer, epoch int) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(time.Minute)
	for {
		all := true
		for _, p := range m.peers {
			if p == lead {
				continue
			}
			js := p.node.ordered[0].lookupJob("bench")
			if js == nil || js.book.Kept(epoch) == nil {
				all = false
				break
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("epoch %d not relayed to every node within a minute", epoch)
		}
		<-tick.C
	}
}

// BenchmarkPeerReads is what hedged reads cost when no peer fails: two
// meshes of 3 nodes side by side, one hedging with the learned wait (the
// default) and one never hedging, each serving 5,000 samples of 50-800
// bytes with 64 KiB of cache a node, so most reads go to a peer or the
// source. 32 readers on the nodes in turn read random samples (Get).
// ns/op is per read; hedged/op is the second requests a read sent.
func BenchmarkPeerReads(b *testing.B) {
	spec := testsupport.DatasetSpec{Samples: 5000, MinSize: 50, MaxSize: 800, Seed: 1}
	for _, mode := range []struct {
		name  string
		after time.Duration
	}{{"hedged", 0}, {"never", -1}} {
		benchPeerReads(b, mode.name, spec, func(c *Config) {
			c.CacheSize = 64 << 10
			c.Cluster.HedgeAfter = mode.after
		})
	}
}

// BenchmarkPeerReadsThrough is BenchmarkPeerReads with samples of 100
// KiB, without hedging, and 6 MiB of cache a node (a tenth of the
// dataset's two copies): most reads go to the source at one of their
// owners, which admits the sample (evicting another), offers it to the
// other owner, which admits it too, and answers the node that asked
// where that is another.
func BenchmarkPeerReadsThrough(b *testing.B) {
	benchPeerReads(b, "100KiB", testsupport.DatasetSpec{Samples: 600, MinSize: 100 << 10, MaxSize: 100 << 10, Seed: 1}, func(c *Config) {
		c.CacheSize = 6 << 20
		c.Cluster.HedgeAfter = -1
	})
}

// BenchmarkSlowSourceReads is BenchmarkPeerReads with samples of 1,000
// bytes and 64 KiB of cache a node (nearly every read is read through)
// over a source that answers each read 5 ms after it is asked: reads that
// wait behind a request to an owner reading through (Node.fetches) wait
// at most fetchBatchWait, which p50-us and p99-us show.
func BenchmarkSlowSourceReads(b *testing.B) {
	benchPeerReads(b, "5ms", testsupport.DatasetSpec{Samples: 3000, MinSize: 1000, MaxSize: 1000, Seed: 1}, func(c *Config) {
		c.CacheSize = 64 << 10
		c.SourceThrottle.Latency = 5 * time.Millisecond
		c.SourceThrottle.Concurrency = 64
	})
}

// BenchmarkRemoteHits reads samples held in memory at their owners from
// a node of a mesh of 3 that owns none of them (2 owners a sample, every
// node's share warmed into a cache that holds it all): a read is a
// request to an owner over QUIC and the owner's copy out of its memory, no
// source read and no admission. "1-reader" reads one sample after
// another from one node (ns/op is then a read's latency: a request a
// read), "16-per-cpu" from all three nodes at once (the reads that come
// while a node's request to an owner is in flight go to it together:
// Node.fetches); "mget-64" MGETs 64 of them at a time from one node, as
// a trainer's minibatch without the shared memory (Node.MGet asks for
// all of them at once). ns/op is per read (an MGET for "mget-64",
// with ns/sample beside it), cpu-us/op the CPU that the three nodes, all
// in this process, spent on it, and requests/op the requests between
// them.
func BenchmarkRemoteHits(b *testing.B) {
	const samples = 5000
	_, peers, _ := StartMeshForTest(b, 3, testsupport.DatasetSpec{Samples: samples, MinSize: 50, MaxSize: 800, Seed: 1}, 2,
		func(_ int, c *Config) { c.CacheSize = 64 << 20 })
	ctx := context.Background()
	others := make([][]uint32, len(peers)) // per node, the samples it does not own
	for i, p := range peers {
		ds := p.Node.ordered[0]
		testsupport.WaitFor(b, 10*time.Second, "the dataset's samples are hashed", func() bool { return ds.samples.Load() != nil })
		if _, err := p.Node.Warm(ctx, "ds"); err != nil {
			b.Fatal(err)
		}
		for id := range uint32(samples) {
			if !contains(p.Node.ownersView(ds, id), p.Node.cfg.Name) {
				others[i] = append(others[i], id)
			}
		}
	}
	totals := func() (peerHits, sourceReads, requests int64) {
		for _, p := range peers {
			t := p.Node.ordered[0].stats().Total
			peerHits, sourceReads = peerHits+t.PeerHits, sourceReads+t.SourceReads
			for _, st := range p.Node.cluster.wire.PeerStats() {
				requests += int64(st.Requests)
			}
		}
		return peerHits, sourceReads, requests
	}
	reads := func(b *testing.B, i int, more func() bool) {
		ids := others[i]
		readRandomSamples(b, peers[i].Node, uint64(i), func(rng *rand.Rand) uint32 { return ids[rng.IntN(len(ids))] }, more, nil)
	}
	measured := func(b *testing.B, run func()) {
		peerHits0, sourceReads0, requests0 := totals()
		cpu := cputime.Process()
		run()
		b.StopTimer()
		b.ReportMetric(float64((cputime.Process()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
		peerHits, sourceReads, requests := totals()
		b.ReportMetric(float64(peerHits-peerHits0)/float64(b.N), "peer-hits/op")
		b.ReportMetric(float64(sourceReads-sourceReads0)/float64(b.N), "source-reads/op")
		b.ReportMetric(float64(requests-requests0)/float64(b.N), "requests/op")
	}
	b.Run("1-reader", func(b *testing.B) {
		measured(b, func() { reads(b, 0, b.Loop) })
	})
	b.Run("16-per-cpu", func(b *testing.B) {
		var next atomic.Int64
		b.SetParallelism(16)
		measured(b, func() {
			b.RunParallel(func(pb *testing.PB) { reads(b, int(next.Add(1))%len(peers), pb.Next) })
		})
	})
	b.Run("mget-64", func(b *testing.B) {
		ids := others[0]
		ds, n := peers[0].Node.ordered[0], peers[0].Node
		rng := rand.New(rand.NewPCG(3, 4))
		keys := make([][]byte, 64)
		measured(b, func() {
			for b.Loop() {
				for i := range keys {
					keys[i] = []byte(keyOfSample(ds, ids[rng.IntN(len(ids))]))
				}
				batch := n.MGet(context.Background(), keys)
				var dst []byte
				for i := range keys {
					var found bool
					var err error
					if dst, found, err = batch.Append(i, dst[:0], nil); err != nil || !found {
						b.Fatalf("key %s: found %v, %v", keys[i], found, err)
					}
				}
				batch.Close()
			}
		})
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/64, "ns/sample")
	})
}

// readRandomSamples reads the samples of n's first dataset that pick draws (a
// generator seeded with seed), through n, until more says stop; each must
// be found, and be of its manifest's size. took, unless nil, is told how
// long each read took.
func readRandomSamples(b *testing.B, n *Node, seed uint64, pick func(*rand.Rand) uint32, more func() bool, took func(time.Duration)) {
	ds := n.ordered[0]
	rng := rand.New(rand.NewPCG(seed, 1))
	ctx := context.Background()
	var dst []byte
	for more() {
		id := pick(rng)
		start := time.Now()
		v, ok, err := n.Get(ctx, []byte(keyOfSample(ds, id)), dst[:0])
		if err != nil || !ok || len(v) != int(ds.manifest.Sizes.At(int(id))) {
			b.Errorf("read of sample %d: %v, found %v, %d bytes", id, err, ok, len(v))
			return
		}
		if took != nil {
			took(time.Since(start))
		}
		dst = v
	}
}

// benchPeerReads runs sub-benchmark name: random samples of spec read
// from the nodes of a mesh of 3 (2 owners a sample, each node configured
// by configure), 16 readers a CPU; cpu-us/op is the CPU the three nodes,
// all in this process, spent a read, p50-us and p99-us percentiles of a
// read's latency.
func benchPeerReads(b *testing.B, name string, spec testsupport.DatasetSpec, configure func(c *Config)) {
	_, peers, _ := StartMeshForTest(b, 3, spec, 2, func(_ int, c *Config) { configure(c) })
	b.Run(name, func(b *testing.B) {
		hedged := func() (n int64) {
			for _, p := range peers {
				n += p.Node.ordered[0].stats().Total.Hedged
			}
			return n
		}
		before, cpu := hedged(), cputime.Process()
		var next atomic.Int64
		var mu sync.Mutex
		var took []time.Duration
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			i := next.Add(1)
			n := peers[int(i)%len(peers)].Node
			samples := n.ordered[0].len
			var mine []time.Duration
			readRandomSamples(b, n, uint64(i), func(rng *rand.Rand) uint32 { return uint32(rng.IntN(samples)) }, pb.Next,
				func(d time.Duration) { mine = append(mine, d) })
			mu.Lock()
			took = append(took, mine...)
			mu.Unlock()
		})
		b.ReportMetric(float64((cputime.Process()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
		b.ReportMetric(float64(hedged()-before)/float64(b.N), "hedged/op")
		if len(took) > 0 { // else every reader failed, and said why
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-us")
		}
	})
}

// BenchmarkHeldBatches answers batches of 64 random 4 KiB samples held in
// memory, as a minibatch asks for them: "locate" finds where each lies
// (SHADE.LOCATE, for a trainer that maps the memory), "lend" lends each
// in place, its checksum checked (an MGET answered on an event loop);
// each batch then settled, as the socket settles it once the reply is
// sent (ns-to-reply: the part before, which a trainer waits for). The
// node holds 32,768 samples (128 MiB, more than the CPU's cache). ns/op
// is per batch.
func BenchmarkHeldBatches(b *testing.B) {
	const samples, size, batch = 32768, 4 << 10, 64
	n := warmedNode(b, samples, size)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([][]byte, batch)
	draw := func() {
		for i := range keys {
			keys[i] = []byte("ds/" + strconv.Itoa(rng.IntN(samples)))
		}
	}
	var toReply time.Duration
	settle := func(b *testing.B, start time.Time) {
		toReply += time.Since(start)
		n.Settle()
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(toReply.Nanoseconds())/float64(b.N), "ns-to-reply/op")
		toReply = 0
	}
	b.Run("locate", func(b *testing.B) {
		for b.Loop() {
			draw()
			start := time.Now()
			_, locs := n.Locate(ctx, keys)
			for _, l := range locs {
				if l.Len != size {
					b.Fatal("a sample not located")
				}
			}
			settle(b, start)
		}
		report(b)
	})
	b.Run("lend", func(b *testing.B) {
		b.SetBytes(batch * size)
		var held []transport.Held
		for b.Loop() {
			draw()
			start := time.Now()
			var ok bool
			if held, ok = n.LendHeldPrefix(ctx, keys, 8<<20, held[:0]); !ok || len(held) != len(keys) {
				b.Fatal("a sample not held")
			}
			for _, h := range held {
				n.Return(h.Loan.Token)
			}
			settle(b, start)
		}
		report(b)
	})
}

// BenchmarkHeldGets answers pipelines of 16 GETs of free-form 4 KiB
// values held in memory, as an event loop answers redis-benchmark -P 16:
// each pipeline's keys hinted first (transport.PrefetchAhead), then each
// value lent in place with its checksum checked, its reply's bulk header
// appended as the loop appends it, and the loan given back; the pipeline
// then settled. No socket: the node's and the store's part of a GET alone. "1000" is 4 MiB of
// values, "100000" 400 MiB, out of the CPU's caches. The policy is
// shade-peer's default. ns/op is per GET.
func BenchmarkHeldGets(b *testing.B) {
	const size, pipeline = 4 << 10, 16
	for _, keys := range []int{1000, 100000} {
		b.Run(strconv.Itoa(keys), func(b *testing.B) {
			p := startPeer(b, Config{CacheSize: 1 << 30, Policy: "order"}, transport.SocketConfig{})
			val := make([]byte, size)
			names := make([][]byte, keys)
			for i := range names {
				names[i] = []byte("key:" + strconv.Itoa(i))
				if ok, err := p.node.Set(names[i], val); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(1, 2))
			batch := make([][]byte, pipeline)
			reply := make([]byte, 0, 1<<10)
			b.SetBytes(size)
			b.ResetTimer()
			for i := 0; i < b.N; i += pipeline {
				for j := range batch {
					batch[j] = names[rng.IntN(keys)]
					p.node.Prefetch(batch[j])
				}
				for _, key := range batch {
					r, loan, found, held, err := p.node.LendHeld(ctx, key, reply[:0], redcon.AppendBulkHeader)
					if err != nil || !found || !held || len(r) == 0 {
						b.Fatal(found, held, err)
					}
					reply = r[:0] // kept for the next, as the loop keeps its reply buffer
					if loan.Value != nil {
						p.node.Return(loan.Token)
					}
				}
				p.node.Settle() // as the loop does once the pipeline's replies are out
			}
		})
	}
}

// BenchmarkAdmit admits samples read through into a node's cache from
// several goroutines at once, as a node's source readers do: 64 samples
// of 100 KiB, read once (6.4 MiB: they stay in the CPU's last-level
// cache, as a value just read is), and a cache of 2 MiB (about 20 of
// them), so nearly every admission evicts. An admission takes the node's
// policy lock, which every decision of the policy and every report of
// hits also takes; run it with -cpu 1,2,... to see how admissions scale
// with cores. ns/op is per admission tried; admitted/op the share the
// policy admitted.
func BenchmarkAdmit(b *testing.B) {
	n, ds, values := admitBench(b)
	keys := make([][]byte, len(values))
	for i := range values {
		keys[i] = []byte(keyOfSample(ds, uint32(i)))
	}
	var next, admitted atomic.Int64
	b.SetBytes(admitSize)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1) * 29 % admitSamples) // each id again only after the others
			if cached, _ := n.admit(sampleID(ds, i), keys[i], values[i], ds); cached {
				admitted.Add(1)
			}
		}
	})
	b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
}

// admitSamples samples of admitSize bytes, in a cache of 2 MiB.
const admitSamples, admitSize = 64, 100 << 10

// admitBench starts the one node of BenchmarkAdmit and
// BenchmarkAdmitOffered and returns its dataset's samples, each read
// from the source once.
func admitBench(b *testing.B) (*Node, *datasetState, [][]byte) {
	_, peers, _ := StartMeshForTest(b, 1, testsupport.DatasetSpec{Samples: admitSamples, MinSize: admitSize, MaxSize: admitSize, Seed: 1}, 1,
		func(_ int, c *Config) { c.CacheSize = 2 << 20 })
	n := peers[0].Node
	ds := n.ordered[0]
	values := make([][]byte, admitSamples)
	for i := range values {
		v, err := n.readSource(ds, i)
		if err != nil {
			b.Fatal(err)
		}
		values[i] = v
	}
	return n, ds, values
}

// BenchmarkAdmitOffered is a co-owner admitting samples offered to it
// (mesh.admitOffered, as serveOffer takes each item of an offer): 64
// samples of 100 KiB with their checksums, in the CPU's last-level cache
// as a request just read is, into a cache of 2 MiB, so nearly every
// admission evicts. ns/op is per offer; admitted/op the share the policy
// admitted.
func BenchmarkAdmitOffered(b *testing.B) {
	n, ds, values := admitBench(b)
	items := make([]wire.OfferItem, len(values))
	for i, v := range values {
		items[i] = wire.OfferItem{Dataset: ds.name, Version: ds.manifest.Version, ID: uint32(i), Sum: shm.Checksum(v), Value: v}
	}
	admitted := 0
	b.SetBytes(admitSize)
	for i := 0; b.Loop(); i++ {
		it := &items[i*29%admitSamples] // each id again only after the others
		if err := n.admitOffered(it); err != nil {
			b.Fatal(err)
		}
		if n.store.Has([]byte(keyOfSample(ds, it.ID))) {
			admitted++
		}
	}
	b.ReportMetric(float64(admitted)/float64(b.N), "admitted/op")
}

// BenchmarkForwardReports is a node forwarding its ranks' minibatch
// reports (256 samples each) to the leader, two nodes in one process over
// loopback QUIC: per minibatches a request. One is what a node sent at
// every 25 ms flush where a rank trains 2,500 samples a second (a
// minibatch each 102 ms); 5 what it sends once reports wait
// wire.ReportsEvery (a second, in a mesh of 1,000) or its rank's done (an
// epoch of 1,280 samples). ns/op and cpu-us/op (both ends: the request,
// the leader's merge and its queueing of the scores) are per minibatch.
func BenchmarkForwardReports(b *testing.B) {
	const samples, batch = 20000, 256
	m := startMesh(b, 2, meshOpts{samples: samples, minSize: 1, maxSize: 8})
	lead := m.leader(b)
	var from *testPeer
	for _, p := range m.peers {
		if p != lead {
			from = p
		}
	}
	testsupport.WaitFor(b, 20*time.Second, "a leader", func() bool { return lead.node.lead.leading() })
	rng := rand.New(rand.NewPCG(1, 2))
	for _, per := range []int{1, 5} {
		b.Run("batches="+strconv.Itoa(per), func(b *testing.B) {
			req := &wire.ReportReq{}
			for range per {
				rb := wire.ReportBatch{Dataset: "ds", IDs: make([]uint32, batch), Losses: make(wire.F32s, batch)}
				for i := range batch {
					rb.IDs[i], rb.Losses[i] = uint32(rng.IntN(samples)), float32(rng.ExpFloat64())
				}
				req.Batches = append(req.Batches, rb)
			}
			ctx := context.Background()
			cpu := cputime.Process()
			for b.Loop() {
				if err := from.node.cluster.callName(ctx, lead.node.Name(), wire.MethodReport, req, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*per), "ns/batch")
			b.ReportMetric(float64((cputime.Process()-cpu).Microseconds())/float64(b.N*per), "cpu-us/batch")
		})
	}
}

// BenchmarkReportDone is a rank's done at its epoch's end with its node's
// reports still queued (minibatches of 256), two nodes in one process
// over loopback QUIC: "separate" sends the reports and then the done
// (MethodReport, MethodDone: as nodes did before MethodReportDone, and do
// with a leader that lacks it), "carried" sends them in one request
// (Node.reportDone). The done is of an epoch the leader has moved past,
// so the leader's work is the merge, the queueing of the scores and the
// decoding. ns/op and cpu-us/op (both ends) are per done.
func BenchmarkReportDone(b *testing.B) {
	const samples, batch = 20000, 256
	m := startMesh(b, 2, meshOpts{samples: samples, minSize: 1, maxSize: 8})
	lead := m.leader(b)
	from := m.byName("n1")
	if lead.node.Name() != "n0" {
		b.Fatalf("leader %s, want n0", lead.node.Name())
	}
	ctx := context.Background()
	if _, err := from.client(b).Do(ctx, "SHADE.ORDER", "ds", 0, 0, 1).Int64Slice(); err != nil {
		b.Fatal(err)
	}
	if err := from.node.Done(ctx, "ds", "", 0, 0); err != nil {
		b.Fatal(err)
	}
	gen, _, _ := from.node.ordered[0].def.book.Head()
	req := &wire.DoneReq{Dataset: "ds", Gen: gen, Epoch: 0, Rank: 0, Node: from.node.Name()}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, per := range []int{1, 5} {
		queue := func() {
			for range per {
				rb := wire.ReportBatch{Dataset: "ds", IDs: make([]uint32, batch), Losses: make(wire.F32s, batch)}
				for i := range batch {
					rb.IDs[i], rb.Losses[i] = uint32(rng.IntN(samples)), float32(rng.ExpFloat64())
				}
				from.node.out.QueueReport(rb)
			}
		}
		for _, how := range []string{"separate", "carried"} {
			b.Run("batches="+strconv.Itoa(per)+"/"+how, func(b *testing.B) {
				cpu := cputime.Process()
				for b.Loop() {
					queue()
					var resp wire.DoneResp
					var err error
					if how == "carried" {
						_, err = from.node.reportDone(ctx, req, &resp)
					} else {
						// The reports in a request of their own, then the done.
						c, _ := from.node.out.ClaimReports()
						from.node.settle(c, from.node.sendReports(ctx, c.Batches))
						err = from.node.askLeader(ctx, wire.MethodDone, req, &resp)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				if q := from.node.out.QueuedReports(); q != 0 {
					b.Fatalf("%d minibatches left queued", q)
				}
				b.ReportMetric(float64((cputime.Process()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
			})
		}
	}
}

// BenchmarkEpochEnd: six ranks, three on n1 and three on n2, each ask for
// an epoch's order, report a minibatch and send SHADE.DONE, then ask for
// the next, epoch after epoch, with no training between: an op is an
// epoch. "together": each rank goes on as soon as it can; "in-turn": a
// rank sends its done only once the rank before it has had its answer,
// so that the first five wait for the next order each epoch, as ranks
// that finish apart do. It reports the requests the leader n0 took an
// epoch (joins, dones with reports or without, reports), and the process
// CPU (all three nodes) an epoch.
func BenchmarkEpochEnd(b *testing.B) {
	const world, perNode = 6, 3
	log := &doneLog{calls: map[peer.Method]int{}, pairs: map[peer.Method]int{}}
	m := startMesh(b, 3, meshOpts{samples: 6000, minSize: 1, maxSize: 8, configure: func(_ int, c *Config) {
		c.Cluster.handlers = log.handlers()
		c.Cluster.Prefetch = -1
	}})
	if lead := m.leader(b); lead.node.Name() != "n0" {
		b.Fatalf("leader %s, want n0", lead.node.Name())
	}
	ctx := context.Background()
	type rank struct {
		p *testPeer
		c *redis.Client
	}
	var ranks []rank
	for r := range world {
		p := m.byName([]string{"n1", "n2"}[r/perNode])
		ranks = append(ranks, rank{p, p.client(b)})
	}
	// epochs runs n epochs from the next; inTurn orders the ranks' dones.
	next := 0
	epochs := func(b *testing.B, n int, inTurn bool) {
		answered := make([][]chan struct{}, n) // [epoch][rank]: its done answered
		for i := range answered {
			answered[i] = make([]chan struct{}, world)
			for r := range answered[i] {
				answered[i][r] = make(chan struct{})
			}
		}
		var wg sync.WaitGroup
		for r, rk := range ranks {
			wg.Go(func() {
				i := 0
				defer func() { // on an error, the ranks after it are not held
					for ; i < n; i++ {
						close(answered[i][r])
					}
				}()
				for ; i < n; i++ {
					e := next + i
					slice, err := rk.c.Do(ctx, "SHADE.ORDER", "ds", e, r, world).Int64Slice()
					if err != nil {
						b.Errorf("rank %d: SHADE.ORDER of epoch %d: %v", r, e, err)
						return
					}
					ids, losses := make([]uint32, min(len(slice), 256)), make([]float64, min(len(slice), 256))
					for k := range ids {
						ids[k], losses[k] = uint32(slice[k]), 1.5
					}
					if err := rk.p.node.Report("ds", "", e, ids, losses); err != nil {
						b.Error(err)
						return
					}
					if inTurn && r > 0 {
						<-answered[i][r-1]
					}
					if err := rk.c.Do(ctx, "SHADE.DONE", "ds", e, r).Err(); err != nil {
						b.Errorf("rank %d: SHADE.DONE of epoch %d: %v", r, e, err)
						return
					}
					close(answered[i][r])
				}
			})
		}
		wg.Wait()
		next += n
	}
	epochs(b, 1, false) // epoch 0: the ranks join
	requests := func() int {
		n := 0
		for _, m := range []peer.Method{wire.MethodJoin, wire.MethodDone, wire.MethodReportDone, wire.MethodReport} {
			calls, _ := log.count(m)
			n += calls
		}
		return n
	}
	for _, how := range []struct {
		name   string
		inTurn bool
	}{{"together", false}, {"in-turn", true}} {
		b.Run(how.name, func(b *testing.B) {
			before, cpu := requests(), cputime.Process()
			b.ResetTimer()
			epochs(b, b.N, how.inTurn)
			b.ReportMetric(float64(requests()-before)/float64(b.N), "leader-requests/epoch")
			b.ReportMetric(float64((cputime.Process()-cpu).Microseconds())/float64(b.N), "cpu-us/epoch")
		})
	}
}

// BenchmarkFollowRingScores times a node's pass that brings its scores of
// a dataset's samples to a new ring (Node.followRingScores): the ring of
// ten members loses one, or, the next time, gets it back, and the node
// takes the scores of the samples it came to own from its table, or
// forgets those it no longer owns. 100,000 samples, every one scored, at
// the partition count of a new mesh: a pass costs a lookup of each
// partition's owners (16,381, the same for any dataset) and a test of
// each sample. (Writing the dataset's 100,000 files takes most of the
// benchmark's time.)
func BenchmarkFollowRingScores(b *testing.B) {
	const samples = 100_000
	_, peers, _ := StartMeshForTest(b, 1, testsupport.DatasetSpec{Samples: samples, MinSize: 8, MaxSize: 8, Seed: 1}, 2,
		func(int, *Config) {})
	n := peers[0].Node
	ds := n.ordered[0]
	if n.scorer == nil {
		b.Fatal("the default policy weighs no scores")
	}
	ids, losses := allIDs(samples), make([]float64, samples)
	for i := range losses {
		losses[i] = float64(i%13) + 0.1
	}
	if err := ds.def.scores.Report(ids, losses, 1); err != nil {
		b.Fatal(err)
	}
	full, less := ringLessOne(b, n, ds, 10)
	for i := 0; b.Loop(); i++ {
		ds.ring.Store([]*ring.Ring{full, less}[i%2])
		n.followRingScores(context.Background(), ds)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/samples, "ns/sample")
}

// BenchmarkLeaderSendsGainedScores is the leader's part when a member of
// a mesh of 1,000 dies (sendRingScores without its messages): the samples
// each member gained (gains). 100,000 samples at the advised 64,513
// partitions; the pass over the samples grows with them, the look at the
// partitions' owners does not.
func BenchmarkLeaderSendsGainedScores(b *testing.B) {
	const samples, members = 100_000, 1000
	_, peers, _ := StartMeshForTest(b, 1, testsupport.DatasetSpec{Samples: samples, MinSize: 8, MaxSize: 8, Seed: 1}, 2,
		func(_ int, c *Config) { c.Cluster.Partitions = ring.Advised(members) })
	n := peers[0].Node
	ds := n.ordered[0]
	full, less := ringLessOne(b, n, ds, members)
	var took, sent int
	for b.Loop() {
		gainers, gained := n.gains(context.Background(), ds, full, less)
		took, sent = len(gainers), 0
		for _, ids := range gained {
			sent += len(ids)
		}
	}
	b.ReportMetric(float64(took), "members")
	b.ReportMetric(float64(sent), "samples")
}

// ringLessOne returns a ring of ds's partition count, two replicas, of
// node n and members-1 others, and the same ring less one of the others,
// once ds's samples are hashed for that count.
func ringLessOne(b *testing.B, n *Node, ds *datasetState, members int) (full, less *ring.Ring) {
	names := []string{n.Name()}
	for i := range members - 1 {
		names = append(names, "m"+strconv.Itoa(i))
	}
	full, err := ring.New(ring.Config{Partitions: ds.ring.Load().Config().Partitions, Replicas: 2}, names)
	if err != nil {
		b.Fatal(err)
	}
	if less, err = full.Update(slices.Delete(slices.Clone(names), members/2, members/2+1)); err != nil {
		b.Fatal(err)
	}
	testsupport.WaitFor(b, 10*time.Second, "the samples hashed", func() bool { return ds.samples.Load().Fits(full) })
	return full, less
}
