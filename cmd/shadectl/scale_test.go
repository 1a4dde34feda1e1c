package main

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/shade-mesh/shade/mesh/ring"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/protocol/samplekey"
	"github.com/shade-mesh/shade/sampling"
	"golang.org/x/sys/unix"
)

// Small sizes: 50 peers, 100k samples, R = 2, the node's 271 partitions.
const (
	testPeers   = 50
	testSamples = 100_000
	testDataset = "imagenet"
)

// moveFactor bounds a moved fraction against its ideal 1/N. consistent
// moves whole partitions (about 5 per peer at 50 peers) and its bounded
// load cascades a few more primaries; each moves a copy (replicas, placed
// by rendezvous hashing, move about their ideal).
const moveFactor = 4

func TestScaleSampleKeyIsTheNodes(t *testing.T) {
	for _, id := range []uint32{0, 1, 9, 10, 1_279_999, 1<<32 - 1} {
		if got, want := string(scaleSampleKey(nil, testDataset, id)), samplekey.Format(testDataset, int(id)); got != want {
			t.Fatalf("key of %d = %q, want %q", id, got, want)
		}
	}
}

func TestScaleRingMoves(t *testing.T) {
	res, err := simulateRing(ring.Config{}, testPeers, testSamples, 3, testDataset, 1, scalePeerName, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if res.Config.Partitions != ring.DefaultPartitions || res.Config.Replicas != ring.DefaultReplicas {
		t.Fatalf("config %+v, want the node's defaults", res.Config)
	}
	if len(res.Joins) != 3 || len(res.Leaves) != 3 {
		t.Fatalf("%d joins, %d leaves, want 3 each", len(res.Joins), len(res.Leaves))
	}
	// 50 peers of 271 partitions: at most ceil(5·1.25) = 7 each; 51 and 49
	// peers make it the same.
	atCap := 0
	for _, n := range res.Ring.Load() {
		if n == 7 {
			atCap++
		}
	}
	if res.Cap != 7 || res.CapJoin != 7 || res.CapLeave != 7 || res.AtCap != atCap || atCap == 0 {
		t.Errorf("bounded load %+v; want 7 before, after a join and after a leave, and %d peers at it", res.boundedLoad, atCap)
	}
	for _, c := range res.Joins {
		ideal := 1.0 / (testPeers + 1)
		if c.Copies > moveFactor*ideal || c.Primary > moveFactor*ideal {
			t.Errorf("join of %s moved %.4f of copies, %.4f of primaries; ideal %.4f, bound %dx", c.Peer, c.Copies, c.Primary, ideal, moveFactor)
		}
		if c.Held == 0 || c.Copies == 0 {
			t.Errorf("join of %s: holds %d copies, moved %.4f: a joiner takes a share", c.Peer, c.Held, c.Copies)
		}
	}
	for _, c := range res.Leaves {
		ideal := 1.0 / testPeers
		if c.Copies > moveFactor*ideal || c.Primary > moveFactor*ideal {
			t.Errorf("leave of %s moved %.4f of copies, %.4f of primaries; ideal %.4f, bound %dx", c.Peer, c.Copies, c.Primary, ideal, moveFactor)
		}
		// Every copy the departed peer held has a new holder.
		if c.Held == 0 || c.Recipients == 0 || c.Largest <= 0 || c.Largest > 1 {
			t.Errorf("leave of %s: held %d, %d recipients, largest share %v", c.Peer, c.Held, c.Recipients, c.Largest)
		}
		if c.After.Peers != testPeers-1 || c.After.Empty != 0 {
			t.Errorf("after %s left: %+v", c.Peer, c.After)
		}
	}
	if res.Before.Peers != testPeers || res.Before.Max < 1 || res.Before.Mean != float64(ring.DefaultReplicas*testSamples)/testPeers {
		t.Errorf("spread before: %+v", res.Before)
	}
}

// TestScaleRingOwners checks the rings the simulation compares: every
// sample has R distinct owners, a departed peer owns none, and the ring
// Update derives equals the one New builds.
func TestScaleRingOwners(t *testing.T) {
	names := make([]string, testPeers)
	for i := range names {
		names[i] = scalePeerName(i)
	}
	base, err := ring.New(ring.Config{}, names)
	if err != nil {
		t.Fatal(err)
	}
	gone := names[17]
	rest := slices.Delete(slices.Clone(names), 17, 18)
	left, err := base.Update(rest)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := ring.New(ring.Config{}, rest)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte(nil)
	for id := range uint32(testSamples) {
		key = scaleSampleKey(key[:0], testDataset, id)
		for _, r := range []*ring.Ring{base, left} {
			owners := r.Owners(key)
			if len(owners) != ring.DefaultReplicas || owners[0] == owners[1] {
				t.Fatalf("sample %d: owners %v, want %d distinct", id, owners, ring.DefaultReplicas)
			}
		}
		if owners := left.Owners(key); slices.Contains(owners, gone) {
			t.Fatalf("sample %d still owned by departed %s: %v", id, gone, owners)
		}
		if a, b := left.Owners(key), fresh.Owners(key); !slices.Equal(a, b) {
			t.Fatalf("sample %d: Update gives %v, New %v", id, a, b)
		}
	}
	counts := partitionSamples(base, testDataset, testSamples)
	if c := compareRings(base, base, counts, "", false); c.Primary != 0 || c.Owners != 0 || c.Copies != 0 {
		t.Fatalf("a ring against itself moved %+v", c)
	}
	sum := 0
	for _, n := range counts {
		sum += n
	}
	if sum != testSamples {
		t.Fatalf("partition counts sum to %d, want %d", sum, testSamples)
	}
}

func TestScaleMerge(t *testing.T) {
	names := make([]string, 20)
	for i := range names {
		names[i] = scalePeerName(i)
	}
	r, err := ring.New(ring.Config{}, names)
	if err != nil {
		t.Fatal(err)
	}
	const world = 4
	job := scaleJob{dataset: testDataset, samples: testSamples, world: world, batch: 256, rankRate: 2500, seed: 1, encodes: 2, fanout: 4, piece: 4096, cached: 0.5}
	res, err := simulateMerge(job, r, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scored != testSamples {
		t.Fatalf("%d samples scored after an epoch of reports, want %d", res.Scored, testSamples)
	}
	if len(res.Slices) != world {
		t.Fatalf("%d slices, want %d", len(res.Slices), world)
	}
	total := 0
	for rank, s := range res.Slices {
		if len(s) != testSamples/world {
			t.Fatalf("slice %d has %d ids, want %d", rank, len(s), testSamples/world)
		}
		for _, id := range s {
			if id >= testSamples {
				t.Fatalf("id %d out of range", id)
			}
		}
		total += len(s)
	}
	if total != testSamples {
		t.Fatalf("order of %d ids, want %d", total, testSamples)
	}
	for _, name := range []string{"decode reports", "merge (Table.Report)", "queue scores for owners", "send scores to owners",
		"replicate: encode message", "replicate: frame per member", "draw order (PADS)", "align order", "split: partitions", "split: dealt to ranks", "weights to slices",
		"publish: encode message", "publish: send",
		"transport: reports in", "transport: scores out", "transport: resident sets in", "replicate: transport", "publish: transport"} {
		s := res.step(name)
		if s == nil || s.Dur <= 0 {
			t.Fatalf("step %q missing or not measured: %+v", name, s)
		}
	}
	// Epoch 0's own steps, once a job: its order has no weights, so it is
	// sent in fewer bytes than epoch 1's, to as many relays.
	var first []string
	for _, s := range slices.Concat(res.Prepared, res.FirstDraw, res.First) {
		if s.Dur <= 0 {
			t.Fatalf("epoch 0's step %q not measured: %+v", s.Name, s)
		}
		first = append(first, s.Name)
	}
	if !slices.Equal(first, []string{"epoch 0 prepared: align", "epoch 0 prepared: partitions", "epoch 0: draw", "epoch 0: dealt to ranks", "epoch 0: weights", "epoch 0: encode message", "epoch 0: send"}) {
		t.Fatalf("epoch 0's steps %q", first)
	}
	if send0, send1 := res.First[3], res.step("publish: send"); send0.Messages != send1.Messages || send0.WireBytes >= send1.WireBytes || send0.WireBytes < 4*4*testSamples {
		t.Fatalf("epoch 0 sent %v copies, %v bytes; epoch 1 %v, %v: want as many copies of fewer bytes, at least 4 a sample", send0.Messages, send0.WireBytes, send1.Messages, send1.WireBytes)
	}
	// 19 other members, 4 at a time: 4 relays, and 2 hops (4 + 16 >= 19),
	// the order (at least 4 bytes an id) in pieces of 4 KiB.
	s := res.step("publish: send")
	if pieces := res.PublishPieces; s.Messages != 4 || pieces < 4*testSamples/4096 || s.WireBytes < 4*4*testSamples || res.PublishHops != 2 {
		t.Fatalf("publish: %v copies in %d pieces, %v bytes, %d hops; want 4 copies of at least 4 bytes per id in pieces of 4 KiB, 2 hops", s.Messages, pieces, s.WireBytes, res.PublishHops)
	}
	// The order's pieces cross the transport while the ranks wait for it.
	if s := res.step("publish: transport"); !s.Between || s.CPU <= 0 {
		t.Fatalf("publish: transport: %+v, want measured while the ranks wait", s)
	}
	// Every scored sample's new score goes to its owners but the leader.
	if s := res.step("send scores to owners"); s.Messages == 0 || s.WireBytes < float64(testSamples) {
		t.Fatalf("scores: %v frames, %v bytes", s.Messages, s.WireBytes)
	}
	// A member with a rank, not the leader: every step measured, a
	// holder's and a part's; the reads of its samples are those the ring
	// gives it; its part is its rank's slice and those reads, smaller
	// than the whole order.
	mo := res.Member
	if mo == nil || mo.Name == r.Members()[0] || mo.Ranks < 1 || len(mo.Whole) != 4 || len(mo.Group) != 4 || len(mo.Part) != 3 || mo.Shape.Holders+mo.Shape.Heads+mo.Shape.Parts != len(r.Members())-1 {
		t.Fatalf("member: %+v", mo)
	}
	for _, s := range slices.Concat(mo.Whole, mo.Group, mo.Part) {
		if s.Dur <= 0 {
			t.Fatalf("member step %q not measured", s.Name)
		}
	}
	samples, err := ring.NewSamples(r.Config().Partitions, testSamples, func(dst []byte, i int) []byte { return samplekey.Append(dst, testDataset, i) })
	if err != nil {
		t.Fatal(err)
	}
	owned := 0
	for _, s := range res.Slices {
		for _, id := range s {
			if slices.Contains(r.SampleOwners(samples, id), mo.Name) {
				owned++
			}
		}
	}
	if mo.Reads != owned || owned == 0 {
		t.Fatalf("member %s: %d reads of its samples, the ring gives it %d", mo.Name, mo.Reads, owned)
	}
	if mo.PartBytes < 4*(testSamples/world+owned) || mo.PartBytes >= mo.GroupBytes || mo.GroupBytes >= mo.WholeBytes {
		t.Fatalf("member: part of %d bytes, its group's %d, whole %d; want at least its slice and reads, less than its group's, less than the whole", mo.PartBytes, mo.GroupBytes, mo.WholeBytes)
	}
}

func TestScaleLocalitySplit(t *testing.T) {
	// Samples 0..99: even ids owned by node a, odd by b; ranks 0, 1 on a,
	// rank 2 on c.
	order := make([]uint32, 100)
	for i := range order {
		order[i] = uint32(i)
	}
	owners := func(id uint32) []string {
		if id%2 == 0 {
			return []string{"a"}
		}
		return []string{"b"}
	}
	parts, err := sampling.LocalitySplit(order, 3, []string{"a", "a", "c"}, sampling.OwnersPlacement(len(order), owners))
	if err != nil {
		t.Fatal(err)
	}
	var all []uint32
	for r, p := range parts {
		if len(p) != 34 {
			t.Fatalf("slice %d has %d ids, want 34", r, len(p))
		}
		all = append(all, p...)
	}
	// The order padded by wrap-around to 102: 0..99, then 0 and 1.
	want := append(slices.Clone(order), 0, 1)
	slices.Sort(want)
	slices.Sort(all)
	if !slices.Equal(all, want) {
		t.Fatalf("ids %v, want %v", all, want)
	}
	// a's ranks have room for all 51 even ids: none goes to rank 2 on c.
	for _, id := range parts[2] {
		if id%2 == 0 {
			t.Fatalf("rank 2 on c got %d, owned by a, where a's ranks had room", id)
		}
	}
}

func TestScaleCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	err := runScale([]string{"--peers", "30", "--samples", "20000", "--trials", "2", "--world", "2", "--encodes", "1"}, &out, &errOut)
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, errOut.String())
	}
	for _, want := range []string{"30 peers, 20000 samples", "primary moved", "copies moved", "max/mean",
		"survivors receiving", "leader time per epoch", "the next order's CPU", "leader egress per epoch", "mean/ideal",
		"drawn an epoch ahead", "drawn ahead by default?", "leader CPU per epoch, all steps, all cores", "page faults"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := runScale([]string{"--peers", "12", "--samples", "20000", "--trials", "2", "--only", "ring", "--names", "gpu%02d.rack"}, &out, &errOut); err != nil {
		t.Fatalf("--names: %v\nstderr: %s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "gpu12.rack") || strings.Contains(out.String(), "peer-") {
		t.Errorf("--names gpu%%02d.rack: the peers are not named by it:\n%s", out.String())
	}
	// 271 partitions: a peer of 12 is primary of at most ceil(22·1.25) = 28,
	// of 13 at most ceil(20·1.25) = 25, of 11 at most ceil(24·1.25) = 30.
	if want := "a peer is primary of at most 28 partitions"; !strings.Contains(out.String(), want) ||
		!strings.Contains(out.String(), "a join makes it 25, a leave makes it 30") {
		t.Errorf("output lacks the bounded load, %q and where a join and a leave take it:\n%s", want, out.String())
	}
	// 271 partitions for 12 peers: under a quarter of the 16,381 advised.
	if want := "few partitions: 271 for 12 members, where 16381 are advised"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
	for _, args := range [][]string{{"--peers", "1"}, {"--only", "nothing"}, {"--cached", "1.5"}, {"--cached", "NaN"}, {"--relay-fanout", "0"}, {"--names", "peer"}, {"--names", "peer-%d-%d"}, {"--names", "peer-%s"}, {"extra"}} {
		if err := runScale(args, &out, &errOut); err == nil {
			t.Errorf("runScale(%q) succeeded", args)
		}
	}
}

// TestMeterCountsFaults: a step that writes to memory the process has
// never touched is charged the page faults that maps it, one a page at
// least; a step that touches nothing new is charged none of a step's
// before it.
func TestMeterCountsFaults(t *testing.T) {
	const pages = 128
	size := pages * syscall.Getpagesize()
	var m meter
	if err := m.run(func() error {
		mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			return err
		}
		defer syscall.Munmap(mem)
		_ = unix.Madvise(mem, unix.MADV_NOHUGEPAGE) // one fault a page
		for i := 0; i < size; i += syscall.Getpagesize() {
			mem[i] = 1
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if m.Faults < pages {
		t.Fatalf("a step that wrote to %d new pages was charged %d page faults", pages, m.Faults)
	}
	var idle meter
	_ = idle.run(func() error { return nil })
	if idle.Faults >= pages {
		t.Fatalf("a step that touched nothing was charged %d page faults", idle.Faults)
	}
}

// TestRelayShape: the holders, groups' heads and parts the model counts
// are those of the groups the leader and its relays cut
// (wire.RelayGroups), as mesh's passGroups cuts them: a relay's group of
// one member gets its part, a group of wire.GroupWithin members or
// fewer its group's part, whose head hands the rest theirs; the leader's
// members and every other group's head hold the whole.
func TestRelayShape(t *testing.T) {
	var walk func(names []string, fanout int, relay bool) (holders, heads, parts int)
	walk = func(names []string, fanout int, relay bool) (holders, heads, parts int) {
		within := wire.PartsWithin(fanout)
		if relay && len(names) <= within {
			return 0, 0, len(names)
		}
		for _, g := range wire.RelayGroups(names, fanout) {
			switch {
			case relay && len(g) == 1:
				parts++
			case relay && len(g) <= wire.GroupWithin(fanout):
				heads, parts = heads+1, parts+len(g)-1
			default:
				h, gh, p := walk(g[1:], fanout, true)
				holders, heads, parts = holders+1+h, heads+gh, parts+p
			}
		}
		return holders, heads, parts
	}
	for _, c := range []struct{ others, fanout int }{{4, 2}, {4, 4}, {8, 2}, {12, 2}, {19, 4}, {999, 4}, {999, 16}, {999, 17}, {100, 1}, {7, 3}, {4, 1}} {
		names := make([]string, c.others)
		for i := range names {
			names[i] = fmt.Sprintf("n%04d", i)
		}
		wh, wg, wp := walk(names, c.fanout, false)
		if sh := shapeOf(c.others, c.fanout, true, true); sh.Holders != wh || sh.Heads != wg || sh.Parts != wp {
			t.Errorf("%d members, fanout %d: %+v; the groups give %d holders, %d heads, %d parts", c.others, c.fanout, sh, wh, wg, wp)
		}
	}
	// At 1,000 peers and fanout 4: the leader's 4 and the 16 relays
	// below them hold the whole, 64 groups' heads their groups' parts.
	if sh := shapeOf(999, 4, true, true); sh != (relayShape{Holders: 20, Cutters: 16, Heads: 64, Parts: 915, Hops: 4}) {
		t.Errorf("999 members, fanout 4: %+v", sh)
	}
	// TestRelayHandsItsWholeGroupTheirParts's mesh and
	// TestRelayHandsAGroupItsPart's (mesh package).
	if sh := shapeOf(8, 2, true, true); sh != (relayShape{Holders: 2, Cutters: 2, Parts: 6, Hops: 2}) {
		t.Errorf("8 members, fanout 2: %+v; want 2 holders cutting 6 parts, 2 hops", sh)
	}
	if sh := shapeOf(4, 1, true, true); sh != (relayShape{Holders: 2, Cutters: 1, Heads: 1, Parts: 1, Hops: 4}) {
		t.Errorf("4 members, fanout 1: %+v; want 2 holders, a group's head and a part 4 hops down", sh)
	}
	if sh := shapeOf(999, 4, true, false); sh.Holders != 999 || sh.Heads+sh.Parts != 0 {
		t.Errorf("999 members, no parts cut: %+v; want 999 holders and no parts", sh)
	}
	if sh := shapeOf(3, 4, false, true); sh.Holders != 3 || sh.Heads+sh.Parts != 0 {
		t.Errorf("3 members sent directly: %+v; want 3 holders and no parts", sh)
	}
}
