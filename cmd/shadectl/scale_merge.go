package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/internal/cputime"
	meshleader "github.com/shade-mesh/shade/mesh/leader"
	"github.com/shade-mesh/shade/mesh/outbox"
	"github.com/shade-mesh/shade/mesh/ring"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/protocol/samplekey"
	"github.com/shade-mesh/shade/sampling"
	"github.com/shade-mesh/shade/transport/peer"
)

// encodeFrame encodes v as a peer-protocol frame into dst's storage, as
// the transport does for every call: a pooled msgpack encoder with its
// default options, after a header.
func encodeFrame(dst []byte, v any) ([]byte, error) {
	w := bytes.NewBuffer(dst[:0])
	w.Write(make([]byte, wire.FrameHeader))
	enc := msgpack.GetEncoder()
	enc.Reset(w)
	err := enc.Encode(v)
	msgpack.PutEncoder(enc)
	return w.Bytes(), err
}

// decodeFrame decodes a frame's body as the leader's node does: the
// transport checks the msgpack structure, the mesh unmarshals.
func decodeFrame(frame []byte, v any) error {
	body := frame[wire.FrameHeader:]
	if err := peer.CheckMsgpack(body); err != nil {
		return err
	}
	return msgpack.Unmarshal(body, v)
}

// meter accumulates the wall time, the process's CPU time (every core's,
// where a step runs on several goroutines) and the heap allocations of a
// step.
type meter struct {
	Dur, CPU      time.Duration
	Allocs, Bytes uint64
	// Faults are the process's page faults while the step ran: first
	// touches of memory the heap grew by or took back from the system,
	// whose cost depends on the machine (in a virtual machine whose host
	// maps the guest's memory lazily, many times a bare host's).
	Faults int64
}

func (m *meter) run(fn func() error) error {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	cpu, faults := cputime.Process(), cputime.Faults()
	start := time.Now()
	err := fn()
	m.Dur += time.Since(start)
	m.CPU += cputime.Process() - cpu
	m.Faults += cputime.Faults() - faults
	runtime.ReadMemStats(&b)
	m.Allocs += b.Mallocs - a.Mallocs
	m.Bytes += b.TotalAlloc - a.TotalAlloc
	return err
}

// mergeStep is one step of the leader's work for an epoch.
type mergeStep struct {
	Name string
	meter
	// Times is how often the measured work repeats per epoch: the step's
	// cost per epoch is meter times Times (1 when measured whole).
	Times float64
	// Messages and WireBytes are what the step sends per epoch, in frames
	// and bytes (each copy to each peer counted).
	Messages  float64
	WireBytes float64
	// Between marks the steps between the last DONE of an epoch and the
	// next order: the ranks wait for them.
	Between bool
	Note    string
}

func (s mergeStep) perEpoch() time.Duration { return time.Duration(float64(s.Dur) * s.Times) }

func (s mergeStep) cpuPerEpoch() time.Duration { return time.Duration(float64(s.CPU) * s.Times) }

// mergeResult is the leader half of shadectl scale.
type mergeResult struct {
	Samples, World, Batch, Peers int
	Epoch                        time.Duration // the budget: one epoch at the assumed throughput
	Throughput                   float64       // samples/s, all ranks together
	Steps                        []*mergeStep
	Scored                       int
	HeapInuse                    uint64
	PlainSplit                   time.Duration // sampling.Split of the same order, for comparison
	HashSamples                  time.Duration // ring.NewSamples of the dataset, once per dataset
	// PublishSends are the order's copies the leader sends, PublishHops
	// the hops it takes to reach every member (1: sent to each directly),
	// PublishPieces the pieces each copy is relayed in (1: whole).
	PublishSends, PublishHops, PublishPieces int
	// TableFrame is the size of one replication frame.
	TableFrame int
	// Slices are the ranks' parts of the next epoch's order.
	Slices [][]uint32
	// Prepared are the steps of a dataset's epoch 0 made once, as its
	// leader starts leading, before any job asks (mesh's firstOrder);
	// FirstDraw those of a job's epoch 0 made with its draw, as the first
	// rank joins; First those made at the last join: where the ranks'
	// joins span the draw, the last to join waits for these alone (none
	// is in Steps: once a dataset or a job). FirstPieces are the pieces
	// each copy is relayed in.
	Prepared, FirstDraw, First []*mergeStep
	FirstPieces                int
	// Member is what a member other than the leader does with the order
	// (nil in a mesh of one).
	Member *memberOrder
}

// step returns the step of that name, nil if there is none.
func (r *mergeResult) step(name string) *mergeStep {
	for _, s := range r.Steps {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// scaleJob is the leader's setup for one simulated job.
type scaleJob struct {
	dataset  string
	samples  int
	world    int
	batch    int
	rankRate float64 // samples per second one rank trains
	seed     uint64
	// budget is the leader's replication budget, bytes per second
	// (shade-peer --replicate-budget).
	budget float64
	// encodes is how many copies of a broadcast are encoded to measure
	// one; the cost is extrapolated to every peer.
	encodes int
	// fanout is the members the leader hands an order to when the mesh has
	// more (shade-peer's relay fanout, wire.DefaultRelayFanout).
	fanout int
	// piece is the size of the pieces a relayed order goes in
	// (wire.DefaultRelayPiece, mesh.ClusterConfig.RelayPiece).
	piece int
	// cached is the share of the dataset the mesh caches: the samples the
	// leader's draw prefers (shade-peer --boost).
	cached float64
}

// simulateMerge runs the leader's work for one epoch of a job of world
// ranks over r's members: it merges the minibatch reports of epoch 0
// (losses drawn at random, arriving as the ranks' nodes forward them),
// queues and sends the merged scores to the samples' owners, replicates
// the score table, and draws, splits and encodes epoch 1's PADS order.
// The leader is the member with the lowest name, as a mesh elects it.
func simulateMerge(job scaleJob, r *ring.Ring, progress func(string, ...any)) (*mergeResult, error) {
	members := r.Members()
	leader := members[0]
	peers := len(members)
	throughput := float64(job.world) * job.rankRate
	res := &mergeResult{
		Samples: job.samples, World: job.world, Batch: job.batch, Peers: peers,
		Throughput: throughput,
		Epoch:      time.Duration(float64(job.samples) / throughput * float64(time.Second)),
	}
	rng := rand.New(rand.NewPCG(job.seed, 0x1ead))

	// The job: ranks on distinct peers where there are enough.
	rankNode := make([]string, job.world)
	perm := rng.Perm(peers)
	for rank := range rankNode {
		rankNode[rank] = members[perm[rank%peers]]
	}
	// The node hashes every sample into its partition once, when the
	// dataset's first ring is built (mesh.hashSamples); owner lookups are
	// then a table read.
	start := time.Now()
	samples, err := ring.NewSamples(r.Config().Partitions, job.samples, func(dst []byte, i int) []byte {
		return samplekey.Append(dst, job.dataset, i)
	})
	if err != nil {
		return nil, err
	}
	res.HashSamples = time.Since(start)
	// Where the leader's split finds the owners, as mesh.Node.placement.
	where := sampling.Placement{
		Groups:    r.Config().Partitions,
		Group:     func(id uint32) int { return samples.Partition(id) },
		GroupEach: samples.PartitionsOf,
		Owners:    r.PartitionOwners,
		Masks:     r.OwnerMasks,
		Key:       r,
	}
	// The job's table and sampler as shade-peer makes them by default
	// (mesh.Node.jobConfig): magnitude scores; PADS with the uniform floor,
	// the coverage floor, the weight cap and the boost of cached samples;
	// draws coupled with the dataset's other jobs (DrawSeed).
	table := sampling.NewTable(job.samples, 0, sampling.ScoreMagnitude)
	alignSeed := job.seed // the dataset's seed, as alignedScores has it
	samplerConfig := sampling.Config{Seed: job.seed, PADS: true, UniformFloor: -1, CoverageEpochs: -1,
		MaxWeight: sampling.PeerMaxWeight, Boost: sampling.PeerBoost, DrawSeed: alignSeed | 1}
	sampler := sampling.NewSampler(job.samples, samplerConfig)
	order, err := sampler.Order(0, table)
	if err != nil {
		return nil, err
	}
	slices0, err := sampling.Split(order, job.world)
	if err != nil {
		return nil, err
	}

	// What the ranks' nodes send: each forwards the minibatches a rank
	// reported in one window as one request, once due for a mesh of this
	// size (outbox.PeekReportsDue: a window of wire.ReportsEvery), and a
	// rank's last with its done (mesh's MethodReportDone); requests from
	// all nodes interleave. Reports from ranks on the leader's own node
	// are merged without crossing the wire.
	reportsEvery := wire.ReportsEvery(peers)
	perRequest := max(1, int(job.rankRate*reportsEvery.Seconds())/job.batch)
	type request struct {
		frame   []byte
		done    bool               // a wire.DoneReq with the reports
		batches []wire.ReportBatch // local: not encoded
	}
	var requests []request
	dones := 0
	pos := make([]int, job.world)
	for left := true; left; {
		left = false
		for rank, slice := range slices0 {
			var req wire.ReportReq
			for range perRequest {
				if pos[rank] >= len(slice) {
					break
				}
				end := min(pos[rank]+job.batch, len(slice))
				b := wire.ReportBatch{Dataset: job.dataset, Epoch: 0, IDs: slice[pos[rank]:end], Losses: make(wire.F32s, end-pos[rank])}
				for i := range b.Losses {
					b.Losses[i] = float32(rng.ExpFloat64())
				}
				req.Batches = append(req.Batches, b)
				pos[rank] = end
			}
			if len(req.Batches) == 0 {
				continue
			}
			left = true
			if rankNode[rank] == leader {
				requests = append(requests, request{batches: req.Batches})
				continue
			}
			var msg any = &req
			done := pos[rank] >= len(slice)
			if done {
				msg = &wire.DoneReq{Dataset: job.dataset, Gen: 1, Epoch: 0, Rank: rank, Node: rankNode[rank], Reports: req.Batches}
				dones++
			}
			frame, err := encodeFrame(nil, msg)
			if err != nil {
				return nil, err
			}
			requests = append(requests, request{frame: frame, done: done})
		}
	}
	progress("leader %s: %d requests with reports of epoch 0 from %d ranks, %d of them dones", leader, len(requests), job.world, dones)

	step := func(name string, times float64, between bool, note string) *mergeStep {
		s := &mergeStep{Name: name, Times: times, Between: between, Note: note}
		res.Steps = append(res.Steps, s)
		return s
	}
	decodeStep := step("decode reports", 1, false, "msgpack check + unmarshal, as the node serves a report")
	var wireIn float64
	remote := 0 // requests from other members
	batches := make([][]wire.ReportBatch, len(requests))
	// A running leader decodes into memory its collector gave back, not
	// memory the process never touched: the requests are decoded once
	// untimed first, and that garbage collected, as the queue is filled
	// once untimed below.
	for _, q := range requests {
		if q.frame != nil {
			if _, err := decodeReports(q.frame, q.done); err != nil {
				return nil, err
			}
		}
	}
	runtime.GC()
	if err := decodeStep.run(func() error {
		for i, q := range requests {
			if q.frame == nil {
				batches[i] = q.batches
				continue
			}
			remote++
			var err error
			if batches[i], err = decodeReports(q.frame, q.done); err != nil {
				return err
			}
			wireIn += float64(len(q.frame))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	decodeStep.Note += fmt.Sprintf("; %d requests (a rank's reports of %v each; %d carried by dones), %s in", len(requests), reportsEvery, dones, scaleBytes(wireIn))
	requests = nil

	// The leader's work per request: merge (Table.Report) and queue the new
	// scores for the samples' owners; every 25 ms of training the queued
	// scores go out, one message per owner. Merging is measured over all
	// requests at once; queueing and sending in 25 ms windows.
	mergeStepM := step("merge (Table.Report)", 1, false, fmt.Sprintf("minibatches of %d, sampling.Table.Report, each batch's new scores read back as it is merged (mesh.queueScores); into a table whose every sample was scored an epoch before, as a running leader's", job.batch))
	queueStep := step("queue scores for owners", 1, false, "partition per sample (ring.Samples) + lists in merge order, as mesh.queueScores (outbox.QueueScores, wire.ScoreQueue)")
	flushStep := step("send scores to owners", 1, false, "")
	tieRng := rand.New(rand.NewPCG(job.seed, 0)) // the dataset's tie-breaking source
	// The leader's flush comes every 25 ms of training while scores wait,
	// and sends them once due for a mesh of this size (TakeScoresDue),
	// on a clock of the samples trained.
	flushSamples := max(1, int(throughput*wire.FlushEvery.Seconds()))
	q := newScoreQueue(where, leader, peers, r.Config().Replicas)
	// A running leader merges into a table whose every sample was
	// scored an epoch before: each merge reads the sample's old score
	// (a miss in a table of megabytes), where into a new table it only
	// writes. The epoch is merged once untimed first, as the queue is
	// filled once untimed below.
	if _, err := mergeReports(table, batches, tieRng); err != nil {
		return nil, err
	}
	var merged [][][]float32
	if err := mergeStepM.run(func() (err error) { merged, err = mergeReports(table, batches, tieRng); return err }); err != nil {
		return nil, err
	}
	// The queue and its flushes over the epoch's minibatches, on a clock
	// of the samples trained from start. A running leader's queue keeps
	// its lists' memory from take to take: the epoch is queued once
	// untimed first (warm), so that the measured one does not time the
	// lists' growth from empty.
	//
	// What is queued when an epoch ends waits for the next take, as in a
	// running leader: the measured epoch starts with what the untimed one
	// left, and its takes carry some of what it queued itself. Its sends
	// are scaled to the steady state (the frames, bytes and time of its
	// takes over the samples they carried, times the samples an epoch
	// queues); an epoch with no take due in it is taken whole at its end.
	trained, takes, queued, carried := 0, 0, 0, 0
	pendingQueued := 0 // queued since the last take, across epochs
	epochOf := func(start time.Time, queueStep, flushStep *mergeStep) (time.Time, error) {
		trained, takes, queued, carried = 0, 0, 0, 0
		now := func() time.Time {
			return start.Add(time.Duration(float64(trained) / throughput * float64(time.Second)))
		}
		flush := func(last bool) error {
			msgs, bytes, err := q.flush(table, now(), last)
			if msgs > 0 {
				takes++
				carried += pendingQueued
				pendingQueued = 0
			}
			flushStep.Messages += float64(msgs)
			flushStep.WireBytes += float64(bytes)
			return err
		}
		// The queueing is measured over the whole epoch, its flushes
		// measured within it and taken out: a meter around each of the
		// epoch's 5,000 minibatches cost more than the queueing (it reads
		// the runtime's memory statistics, which stops the world).
		pending := 0
		before := flushStep.meter
		if err := queueStep.run(func() error {
			for i, bs := range batches {
				for j, b := range bs {
					q.add(b.Dataset, b.IDs, merged[i][j])
					queued += len(b.IDs)
					pendingQueued += len(b.IDs)
					pending += len(b.IDs)
					trained += len(b.IDs)
					if pending >= flushSamples {
						pending = 0
						if err := flushStep.run(func() error { return flush(false) }); err != nil {
							return err
						}
					}
				}
			}
			return nil
		}); err != nil {
			return now(), err
		}
		queueStep.Dur -= flushStep.Dur - before.Dur
		queueStep.CPU -= flushStep.CPU - before.CPU
		queueStep.Allocs -= flushStep.Allocs - before.Allocs
		queueStep.Bytes -= flushStep.Bytes - before.Bytes
		queueStep.Faults -= flushStep.Faults - before.Faults
		if takes == 0 {
			return now(), flushStep.run(func() error { return flush(true) })
		}
		return now(), nil
	}
	end, err := epochOf(time.Unix(0, 0), &mergeStep{}, &mergeStep{})
	if err != nil {
		return nil, err
	}
	if _, err := epochOf(end, queueStep, flushStep); err != nil {
		return nil, err
	}
	if carried > 0 {
		scale := float64(queued) / float64(carried)
		flushStep.Times *= scale
		flushStep.Messages *= scale
		flushStep.WireBytes *= scale
	}
	queueStep.Note += ", its lists' memory kept from an untimed epoch before, as a running leader keeps it"
	flushStep.Note = fmt.Sprintf("a flush every 25 ms (%d samples trained) while scores wait; sent once due for %d peers (outbox.TakeScoresDue: every %v, or %d samples a member): %.2f times an epoch in the steady state (%d in the measured epoch, carrying %d of %d samples queued in an epoch), one scores message per owner, as mesh.flushScores",
		flushSamples, peers, wire.ScoresEvery(peers), wire.ScoresPerOwner, float64(takes)*flushStep.Times, takes, carried, queued)
	batches, merged = nil, nil
	res.Scored = table.NumScored()
	progress("merged %d samples (%d scored)", job.samples, res.Scored)

	// Replication, as mesh.replicateTables: while the table changes, every
	// 500 ms the leader encodes it once and sends it to the two standbys
	// (the next in line to lead), and to every other member as often as
	// the replication budget allows.
	rounds := float64(res.Epoch) / float64(wire.ReplicateEvery)
	marshalStep := step("replicate: marshal table", rounds, false, fmt.Sprintf("Table.MarshalBinary, every 500 ms: %.0f rounds per epoch", rounds))
	var tb []byte
	if err := marshalStep.run(func() (err error) { tb, err = table.MarshalBinary(); return err }); err != nil {
		return nil, err
	}
	encodes := min(job.encodes, peers-1)
	rep := &wire.ReplicateReq{Dataset: job.dataset, Version: "v1", Term: 1, Table: tb}
	repOnce := step("replicate: encode message", rounds, false, "msgpack, once a round (mesh.sendEach)")
	var raw msgpack.RawMessage
	if err := repOnce.run(func() (err error) { raw, err = msgpack.Marshal(rep); return err }); err != nil {
		return nil, err
	}
	// Frames per epoch: the standbys every round; everyone else in full
	// rounds spaced so that a round's bytes fit the budget.
	standbys := min(wire.TableStandbys, peers-1)
	others := peers - 1 - standbys
	full := min(rounds, res.Epoch.Seconds()*job.budget/float64(len(raw)*(peers-1)))
	frames := rounds*float64(standbys) + full*float64(others)
	repStep := step("replicate: frame per member", frames/float64(max(encodes, 1)), false,
		fmt.Sprintf("%d standbys every round, the other %d in %.1f full rounds (budget %s/s)", standbys, others, full, scaleBytes(job.budget)))
	var frame int
	_ = repStep.run(func() error { frame = frameBroadcast(raw, encodes); return nil })
	repStep.Messages = frames
	repStep.WireBytes = repStep.Messages * float64(frame)
	res.TableFrame = frame

	// The next epoch's order, as the leader draws it (leader.Draw through
	// mesh's alignedScores): drawn with weights, preferring the samples
	// the mesh caches (a random share job.cached of them), aligned,
	// split by locality, and each id's weight put beside it.
	resident := make([]uint64, (job.samples+63)/64)
	for i := range job.samples {
		if rng.Float64() < job.cached {
			resident[i/64] |= 1 << (i % 64)
		}
	}
	// Every node but the leader tells it which samples it caches: the
	// cached samples it owns, with each of its ranks' dones and every
	// wire.ResidentEvery (mesh.reportResident), as wire.PackResident
	// makes them. The leader checks each, keeps each node's newest, and
	// ORs them into the samples its draw prefers (leader.Job.residentOf).
	owned := make(map[string][]uint32, peers)
	for id := range job.samples {
		if resident[id/64]&(1<<(id%64)) != 0 {
			for _, o := range where.Owners(where.Group(uint32(id))) {
				owned[o] = append(owned[o], uint32(id))
			}
		}
	}
	var setFrames [][]byte
	var setBytes float64
	words := make([]uint64, len(resident))
	for _, m := range members {
		if m == leader {
			continue
		}
		clear(words)
		for _, id := range owned[m] {
			words[id/64] |= 1 << (id % 64)
		}
		set := wire.PackResident(words, job.samples)
		frame, err := encodeFrame(nil, &wire.ResidentReq{Dataset: job.dataset, Gen: 1, Node: m, Bits: set.Bits, Sparse: set.Sparse})
		if err != nil {
			return nil, err
		}
		setFrames = append(setFrames, frame)
		setBytes += float64(len(frame))
	}
	setsIn := float64(job.world) + float64(len(setFrames))*res.Epoch.Seconds()/wire.ResidentEvery.Seconds()
	setsStep := step("resident sets: decode, check", setsIn/float64(max(len(setFrames), 1)), false,
		fmt.Sprintf("a set with each rank's done and from each node every %v: %.0f an epoch, %s each on average (%s in)",
			wire.ResidentEvery, setsIn, scaleBytes(setBytes/float64(max(len(setFrames), 1))), scaleBytes(setBytes*setsIn/float64(max(len(setFrames), 1)))))
	sets := make(map[string]wire.ResidentSet, len(setFrames))
	if err := setsStep.run(func() error {
		for _, f := range setFrames {
			var req wire.ResidentReq
			if err := decodeFrame(f, &req); err != nil {
				return err
			}
			if err := req.ResidentSet().Check(job.samples); err != nil {
				return err
			}
			sets[req.Node] = req.ResidentSet()
		}
		return nil
	}); err != nil {
		return nil, err
	}
	own := make([]uint64, len(resident)) // the leader's own, which it copies (mesh.Node.residentWords)
	for _, id := range owned[leader] {
		own[id/64] |= 1 << (id % 64)
	}
	unionStep := step("resident sets into the draw", 1, true, "the leader's own copied, each node's newest set ORed in (leader.UnionResident)")
	_ = unionStep.run(func() error {
		words = meshleader.UnionResident(slices.Clone(own), sets, job.samples)
		return nil
	})
	if !slices.Equal(words, resident) {
		return nil, fmt.Errorf("the nodes' resident sets do not make the mesh's cached samples")
	}
	orderStep := step("draw order (PADS)", 1, true, fmt.Sprintf("sampling.Sampler.DrawUnordered (aligned next), epoch 1: weights, max weight %g, boost %g of the %.0f%% cached, coupled draws",
		float64(sampling.PeerMaxWeight), float64(sampling.PeerBoost), 100*job.cached))
	var drawn sampling.Drawn
	if err := orderStep.run(func() (err error) { drawn, err = sampler.DrawUnordered(1, table, resident); return err }); err != nil {
		return nil, err
	}
	alignStep := step("align order", 1, true, "sampling.Align, as every job's order is (mesh alignedScores)")
	_ = alignStep.run(func() error { sampling.Align(drawn.Order, alignSeed, 1); return nil })
	// The leader's locality split in its two halves (leader.unsplit):
	// each sample's partition, which needs no rank and is looked up with
	// epoch 0's draw as the first rank joins, and the dealing among the
	// ranks, which the last rank to join waits for.
	groupStep := step("split: partitions", 1, true, "each place's partition looked up: sampling.GroupOrder, with the draw")
	var grouped sampling.Grouped
	if err := groupStep.run(func() (err error) { grouped, err = sampling.GroupOrder(drawn.Order, where); return err }); err != nil {
		return nil, err
	}
	splitStep := step("split: dealt to ranks", 1, true, "owners looked up once per partition, places dealt: sampling.Grouped.Split, as the leader runs it")
	var parts [][]uint32
	if err := splitStep.run(func() (err error) {
		parts, err = grouped.Split(job.world, rankNode, where)
		return err
	}); err != nil {
		return nil, err
	}
	weighStep := step("weights to slices", 1, true, "sampling.SliceWeights: each id's weight beside it")
	var weights [][]float32
	_ = weighStep.run(func() error { weights = sampling.SliceWeights(parts, drawn.Weight); return nil })
	start = time.Now()
	if _, err := sampling.Split(drawn.Order, job.world); err != nil {
		return nil, err
	}
	res.PlainSplit = time.Since(start)
	stateStep := step("sampler state", 1, true, "sampling.Sampler.MarshalBinary, carried in the order")
	var state []byte
	if err := stateStep.run(func() (err error) { state, err = sampler.MarshalBinary(); return err }); err != nil {
		return nil, err
	}
	pub := &wire.PublishMsg{Dataset: job.dataset, Version: "v1", Gen: 0, Epoch: 1, Term: 1, World: job.world,
		Slices: wire.PackSlices(parts), Weights: wire.PackWeights(weights), Sampler: state, Ranks: rankNode}
	pubOnce := step("publish: encode message", 1, true, "msgpack into a buffer of its size (wire.PublishMsg.Encode), once for every member (mesh.publish)")
	if err := pubOnce.run(func() (err error) { raw, err = pub.Encode(); return err }); err != nil {
		return nil, err
	}
	// mesh.publish: to every other member, or past RelayFanout of them
	// to that many relays (wire.RelayGroups), each with its group to pass
	// the order on to.
	receivers := members[1:] // the leader is members[0]
	sends, hops := len(receivers), 1
	var groups [][]string
	if sends > job.fanout {
		groups = wire.RelayGroups(receivers, job.fanout)
		sends, hops = len(groups), wire.RelayHops(len(receivers), job.fanout)
	}
	// sendOrder measures s, the order raw sent as mesh.publish sends it,
	// and returns the pieces of each copy.
	sendOrder := func(s *mergeStep, raw []byte) (int, error) {
		var frame int
		pieces := 1
		if groups != nil && job.piece > 0 && len(raw) > job.piece {
			pieces = (len(raw) + job.piece - 1) / job.piece
		}
		switch {
		case groups == nil:
			s.Note = fmt.Sprintf("to every member: a header each before the encoded order, which is not copied: %d, %d measured", sends, min(encodes, sends))
			_ = s.run(func() error { frame = frameBroadcast(raw, min(encodes, sends)); return nil })
		case pieces == 1:
			s.Note = fmt.Sprintf("to %d relays (wire.RelayParts: a head naming each one's group, then the order, not copied), %d hops to reach %d members; %d measured",
				sends, hops, len(receivers), min(encodes, sends))
			if err := s.run(func() error {
				for _, g := range groups[:min(encodes, sends)] {
					parts, err := wire.RelayParts(g[1:], wire.MethodPublish, raw)
					if err != nil {
						return err
					}
					frame = frameBroadcast(parts[0], 1) + len(parts[1])
				}
				return nil
			}); err != nil {
				return 0, err
			}
		default:
			s.Note = fmt.Sprintf("to %d relays in %d pieces of %s (wire.RelayPieceParts: a head naming each one's group and the piece's place, then the piece, not copied), %d hops to reach %d members; %d measured",
				sends, pieces, scaleBytes(float64(job.piece)), hops, len(receivers), min(encodes, sends))
			whole := wire.WholeAssembly(raw, job.piece)
			if err := s.run(func() error {
				for _, g := range groups[:min(encodes, sends)] {
					frame = 0
					for i := range pieces {
						parts, err := wire.RelayPieceParts(g[1:], wire.MethodPublish, whole, i)
						if err != nil {
							return err
						}
						frame += frameBroadcast(parts[0], 1) + len(parts[1])
					}
				}
				return nil
			}); err != nil {
				return 0, err
			}
		}
		s.Messages = float64(sends)
		s.WireBytes = s.Messages * float64(frame)
		return pieces, nil
	}
	pubStep := step("publish: send", float64(sends)/float64(max(min(encodes, sends), 1)), true, "")
	pieces, err := sendOrder(pubStep, raw)
	if err != nil {
		return nil, err
	}
	res.PublishHops, res.PublishSends, res.PublishPieces = hops, sends, pieces
	res.Slices = parts

	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapInuse = ms.HeapInuse
	// Epoch 0 (mesh's firstOrder, leader.Job.drawFirstLocked): a
	// dataset's epoch 0 is a permutation, aligned as every order is, the
	// same for each of its jobs but for where it starts (a rotation), and
	// every weight 1. Its leader aligns it and groups it by partition
	// once, as it starts leading (Prepared); a job's is that order
	// rotated to its phase, drawn as its first rank joins (FirstDraw),
	// and, at the last join, dealt among the ranks, its weights looked at
	// (all 1: none published), encoded and sent (First).
	once := func(steps *[]*mergeStep, name, note string) *mergeStep {
		s := &mergeStep{Name: name, Times: 1, Note: note}
		*steps = append(*steps, s)
		return s
	}
	var prepared []uint32
	_ = once(&res.Prepared, "epoch 0 prepared: align", "sampling.AlignedPermutation: once a dataset, as its leader starts leading").run(func() error {
		prepared = sampling.AlignedPermutation(job.samples, alignSeed, 0)
		return nil
	})
	var preparedGroups sampling.Grouped
	if err := once(&res.Prepared, "epoch 0 prepared: partitions", "sampling.GroupOrder of the aligned order, with it").run(func() (err error) {
		preparedGroups, err = sampling.GroupOrder(prepared, where)
		return err
	}); err != nil {
		return nil, err
	}
	sampler0 := sampling.NewSampler(job.samples, samplerConfig)
	var drawn0 sampling.Drawn
	var state0 []byte
	var grouped0 sampling.Grouped
	if err := once(&res.FirstDraw, "epoch 0: draw", "the prepared order as it is (a job alone on its dataset: phase 0; one that starts where another is copies it rotated, sampling.Grouped.Rotated), taken as drawn (sampling.Sampler.DrawPermutation: every weight 1), the sampler's state encoded").run(func() (err error) {
		grouped0 = preparedGroups
		if drawn0, err = sampler0.DrawPermutation(0, grouped0.Order()); err != nil {
			return err
		}
		state0, err = sampler0.MarshalBinary()
		return err
	}); err != nil {
		return nil, err
	}
	first := func(name, note string) *mergeStep { return once(&res.First, name, note) }
	var parts0 [][]uint32
	if err := first("epoch 0: dealt to ranks", "sampling.Grouped.Split of epoch 0's order, grouped with its draw").run(func() (err error) {
		parts0, err = grouped0.Split(job.world, rankNode, where)
		return err
	}); err != nil {
		return nil, err
	}
	var weights0 [][]float32
	_ = first("epoch 0: weights", "sampling.SliceWeights: every weight 1 (none drawn), none published").run(func() error {
		weights0 = sampling.SliceWeights(parts0, drawn0.Weight)
		return nil
	})
	pub0 := &wire.PublishMsg{Dataset: job.dataset, Version: "v1", Gen: 0, Epoch: 0, Term: 1, World: job.world,
		Slices: wire.PackSlices(parts0), Weights: wire.PackWeights(weights0), Sampler: state0, Ranks: rankNode}
	var raw0 []byte
	if err := first("epoch 0: encode message", "wire.PublishMsg.Encode, once for every member").run(func() (err error) { raw0, err = pub0.Encode(); return err }); err != nil {
		return nil, err
	}
	send0 := first("epoch 0: send", "")
	send0.Times = pubStep.Times
	if res.FirstPieces, err = sendOrder(send0, raw0); err != nil {
		return nil, err
	}
	progress("order of epoch 1 drawn, split and encoded")

	// The transport's own work for the requests above, which the steps
	// do not count: each kind measured by real calls of its average size.
	// A rank's done carries its node's resident set: the sets that come
	// with the dones add to those requests' bytes; the rest come alone.
	avg := func(bytes, n float64) int { return int(bytes / max(n, 1)) }
	setSize := avg(setBytes, float64(len(setFrames)))
	withDones := min(float64(dones), setsIn)
	kinds := []transportKind{
		{name: "transport: reports in", method: wire.MethodReportDone, count: float64(remote), size: avg(wireIn+withDones*float64(setSize), float64(remote)), limit: 2000, parallel: 8},
		{name: "transport: scores out", method: wire.MethodScores, count: flushStep.Messages, size: avg(flushStep.WireBytes, flushStep.Messages), limit: 2000, parallel: 8},
		{name: "transport: resident sets in", method: wire.MethodResident, count: setsIn - withDones, size: setSize, limit: 2000, parallel: 8},
		{name: "replicate: transport", method: wire.MethodReplicate, count: repStep.Messages, size: res.TableFrame, limit: 16, parallel: 4},
		{name: "publish: transport", method: wire.MethodPublish, count: pubStep.Messages * float64(pieces), size: avg(pubStep.WireBytes, pubStep.Messages*float64(pieces)), limit: 64, parallel: 4, between: true},
	}
	if err := transportSteps(res, kinds); err != nil {
		return nil, err
	}
	progress("the transport's work measured")

	// A member that trains a rank, and is not the leader.
	member := ""
	for _, node := range rankNode {
		if node != leader {
			member = node
			break
		}
	}
	if member != "" {
		if res.Member, err = memberSteps(pub, raw, where, member, pieces, job.samples, job.world, r.Config().Replicas, members, job.fanout, job.piece); err != nil {
			return nil, err
		}
		progress("a member's work with the order measured")
	}
	return res, nil
}

// decodeReports decodes one forwarded report request as the leader's node
// serves it: a wire.ReportReq, or a wire.DoneReq carrying them (done).
func decodeReports(frame []byte, done bool) ([]wire.ReportBatch, error) {
	if done {
		var req wire.DoneReq
		if err := decodeFrame(frame, &req); err != nil {
			return nil, err
		}
		return req.Reports, nil
	}
	var req wire.ReportReq
	if err := decodeFrame(frame, &req); err != nil {
		return nil, err
	}
	return req.Batches, nil
}

// mergeReports merges minibatches into the table as the leader does,
// request by request, and reads each batch's new scores back, as
// mesh.queueScores does once a batch is merged; it returns them, request
// by request and batch by batch.
func mergeReports(table *sampling.Table, requests [][]wire.ReportBatch, rng *rand.Rand) ([][][]float32, error) {
	merged := make([][][]float32, len(requests))
	for i, bs := range requests {
		merged[i] = make([][]float32, len(bs))
		for j, b := range bs {
			if err := table.Report(b.IDs, wire.Widen(b.Singles()), rng); err != nil {
				return nil, err
			}
			scores := make([]float32, len(b.IDs))
			for k, id := range b.IDs {
				scores[k] = float32(table.Score(id)) // as scores.Table.ScoresOf
			}
			merged[i][j] = scores
		}
	}
	return merged, nil
}

// scoreQueue is the leader's queue of merged scores for the samples'
// owners: the node's own wire.ScoreQueue, flushed by encoding the
// messages a node would send.
type scoreQueue struct {
	where           wire.Placement
	leader          string
	peers, replicas int
	o               outbox.Outbox
	local           []uint32 // the leader's own share
	frame           []byte
	seq             uint32 // the minibatches merged: each one's stamp
}

func newScoreQueue(where wire.Placement, leader string, peers, replicas int) *scoreQueue {
	return &scoreQueue{where: where, leader: leader, peers: peers, replicas: replicas}
}

// add queues the samples of one merged minibatch for their owners, with
// their new scores and stamps, as mesh.queueScores does.
func (q *scoreQueue) add(dataset string, ids []uint32, scores []float32) {
	q.seq++
	m := wire.Stamped(1, q.seq, ids, scores)
	q.local = append(q.local, q.o.QueueScores(q.where, q.leader, wire.JobKey{Dataset: dataset}, m)...)
}

// flush encodes one scores message per owner and dataset, as the leader
// sends them (mesh.flushScores), once the queue is due at now (all of it
// where last); it returns the frames and bytes.
func (q *scoreQueue) flush(table *sampling.Table, now time.Time, last bool) (frames, bytes int, err error) {
	taken := q.o.TakeScoresDue(now, q.peers, q.replicas, true)
	if last && taken == nil {
		taken = q.o.TakeScores(true)
	}
	for _, byOwner := range taken {
		mean := table.Mean()
		for _, req := range byOwner {
			req.Mean = mean
			if q.frame, err = encodeFrame(q.frame, req); err != nil {
				return frames, bytes, err
			}
			frames++
			bytes += len(q.frame)
		}
	}
	// The leader's own share: its policy takes the scores from the table.
	scores := make([]float64, len(q.local))
	for i, id := range q.local {
		scores[i] = table.Score(id)
	}
	q.local = q.local[:0]
	return frames, bytes, nil
}

// frameBroadcast frames an encoded message n times, as a broadcast does for
// each member: mesh.publish encodes it once, and peer.Node.Call writes a
// msgpack.RawMessage to the stream after a header of its own, without
// copying it (QUIC then copies it into packets, as it does every byte;
// that is not in these figures). It returns the frame's length.
func frameBroadcast(raw msgpack.RawMessage, n int) (size int) {
	for range n {
		header := make([]byte, wire.FrameHeader)
		binary.BigEndian.PutUint32(header, uint32(wire.FrameHeader-4+len(raw)))
		binary.BigEndian.PutUint16(header[4:], uint16(wire.MethodPublish))
		size = len(header) + len(raw)
	}
	return size
}

// scaleBytes formats a byte count with a binary unit.
func scaleBytes(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", b)
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}
