package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	meshleader "github.com/shade-mesh/shade/mesh/leader"
	"github.com/shade-mesh/shade/mesh/orders"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/sampling"
)

// memberOrder is what the members other than the leader do with an
// epoch's order drawn ahead (which shade-peer does by default at this
// scale; an order the ranks wait for goes whole to every member, piece
// by piece, see mesh's partsFit), as mesh does it. In a relayed mesh a
// member with others to pass the order on to (a relay), and one the
// leader sends to directly, holds the whole order: it receives it,
// passes it on, decodes and checks it and picks out the reads of its own
// samples for its cache policy; a relay also cuts the parts of the
// members it hands them to (orders.Cut, mesh's partsOf): those with none
// below them, or all of its group where that is wire.PartsWithin the
// fanout. Those members get their part alone (wire.PublishMsg.Part):
// their ranks' slices and weights, and the reads of their samples.
type memberOrder struct {
	Name  string // the member measured
	Ranks int    // its ranks
	Reads int    // the reads of its samples in the order
	// Holders hold the whole order, Parts get their parts (of the
	// members other than the leader), the last of them PartHops hops
	// from the leader; Cut is how many parts a relay cuts in one pass.
	Holders, Parts, PartHops, Cut int
	// Whole are a holder's steps, Part those of a member that gets its
	// part.
	Whole, Part []*mergeStep
	// WholeBytes and PartBytes are the messages' sizes.
	WholeBytes, PartBytes int
	// PartOverPiece says the measured member's part is larger than a
	// relay piece: mesh sends it the whole instead (so does a relay to
	// every member with as many ranks).
	PartOverPiece bool
}

// relayShape counts, of the members others that the leader sends an
// order to, those that hold it whole and those that get their parts, as
// mesh relays it: relayed (past fanout members, or in pieces), the
// leader hands it to the heads of wire.RelayGroups, each passing it on
// to its group the same way; where parts are cut (cut: a member's part
// likely fits a piece), a relay's group of one member gets its part, and
// a relay with wire.PartsWithin the fanout members or fewer to pass it
// on to hands them all their parts. hops is how many hops the last part
// takes from the leader (0 with none). Epoch 0 and orders not relayed
// go whole to every member.
func relayShape(others, fanout int, relayed, cut bool) (holders, parts, hops int) {
	if !relayed {
		return others, 0, 0
	}
	var walk func(n, depth int, relay bool)
	walk = func(n, depth int, relay bool) {
		if relay && cut && n > 0 && n <= wire.PartsWithin(fanout) {
			parts += n
			hops = max(hops, depth)
			return
		}
		k := min(max(fanout, 1), n)
		for i := range k {
			size := n / k
			if i < n%k {
				size++
			}
			if size == 1 && relay && cut {
				parts++
				hops = max(hops, depth)
				continue
			}
			holders++
			walk(size-1, depth+1, true)
		}
	}
	walk(others, 1, false)
	return holders, parts, hops
}

// memberSteps measures memberOrder for member, a node other than the
// leader, with pub, the order as published, and raw, its encoding, sent
// to members in that many pieces (1: whole), as the leader's steps sent
// it; members are the mesh's, the leader first, and fanout the relay
// fanout. Transport steps are real calls between two peer-transport
// nodes in this process (callPair), both ends' CPU counted: a holder
// receives one copy of the order and, on average, passes one on, so
// both ends of one copy are what an average holder's transport does; a
// part's call is counted to the member that gets it, its relay's end
// too.
func memberSteps(pub *wire.PublishMsg, raw []byte, where sampling.Placement, member string, pieces, samples, maxWorld, replicas int, members []string, fanout, piece int) (*memberOrder, error) {
	mo := &memberOrder{Name: member, WholeBytes: len(raw), Cut: wire.PartsWithin(fanout)}
	cutting := piece <= 0 || wire.PartsFit(len(raw), replicas, len(members), piece)
	mo.Holders, mo.Parts, mo.PartHops = relayShape(len(members)-1, fanout, len(members)-1 > fanout || pieces > 1, cutting)
	for _, node := range pub.Ranks {
		if node == member {
			mo.Ranks++
		}
	}
	step := func(list *[]*mergeStep, name, note string) *mergeStep {
		s := &mergeStep{Name: name, Times: 1, Note: note}
		*list = append(*list, s)
		return s
	}
	pair, err := newCallPair()
	if err != nil {
		return nil, err
	}
	defer pair.close()

	// A holder: the whole order.
	in := step(&mo.Whole, "holder: order in and on (transport)",
		fmt.Sprintf("%d calls of %s (the order's pieces), 4 at a time; both ends' CPU: one copy in and, on average, one passed on", pieces, scaleBytes(float64(len(raw))/float64(pieces))))
	b, err := binOfSize(len(raw) / pieces)
	if err != nil {
		return nil, err
	}
	if err := pair.measure(in, wire.MethodPublish, b, pieces, 4); err != nil {
		return nil, err
	}
	var got wire.PublishMsg
	if err := step(&mo.Whole, decodeStep, "msgpack.Unmarshal of the assembled order, leader.Check (as mesh.checkPublish)").run(func() error {
		if err := msgpack.Unmarshal(raw, &got); err != nil {
			return err
		}
		return meshleader.Check(&got, got.Version, samples, maxWorld)
	}); err != nil {
		return nil, err
	}
	_ = step(&mo.Whole, "holder: reads of its samples", "orders.Reads with sampling.Placement.Owns, as mesh hands the cache policy's lookahead each order").run(func() error {
		var reads []uint64 // 8 bytes each, as mesh's lookahead keeps them (policy.ID)
		mo.Reads = orders.Reads(&got, where.Owns(member), func(id uint32) { reads = append(reads, uint64(id)) })
		return nil
	})
	// The parts a relay cuts: the member's and those of the members after
	// it, as many as a relay hands theirs to (wire.PartsWithin).
	at := max(slices.Index(members, member), 1)
	names := slices.Clone(members[at:min(at+mo.Cut, len(members))])
	var parts []*wire.PublishMsg
	cut := step(&mo.Whole, cutStep, fmt.Sprintf("orders.Cut of %d members' parts in one pass (mesh's partsOf), by a relay with members that get parts", len(names)))
	_ = cut.run(func() error {
		parts = orders.Cut(&got, names, where.OwnedBy(names))
		return nil
	})
	// Per holder: the relays that cut parts are about parts/fanout of
	// the holders.
	cut.Times = float64(mo.Parts) / float64(max(len(names), 1)) / float64(max(mo.Holders, 1))

	// A member that gets its part.
	partRaw, err := parts[0].Encode()
	if err != nil {
		return nil, err
	}
	mo.PartBytes = len(partRaw)
	mo.PartOverPiece = piece > 0 && parts[0].EncodedSize() > piece
	const partCalls = 20 // one a member an epoch; 20 measured
	pin := step(&mo.Part, "part: in (transport)", fmt.Sprintf("1 call of %s (MethodPublishPart); both ends' CPU, the relay's too; %d measured", scaleBytes(float64(len(partRaw))), partCalls))
	pin.Times = 1.0 / partCalls
	if b, err = binOfSize(len(partRaw)); err != nil {
		return nil, err
	}
	if err := pair.measure(pin, wire.MethodPublishPart, b, partCalls, 1); err != nil {
		return nil, err
	}
	var back wire.PublishMsg
	if err := step(&mo.Part, "part: decoded, checked", "msgpack.Unmarshal of the part, leader.Check").run(func() error {
		if err := msgpack.Unmarshal(partRaw, &back); err != nil {
			return err
		}
		return meshleader.Check(&back, back.Version, samples, maxWorld)
	}); err != nil {
		return nil, err
	}
	if err := step(&mo.Part, "part: reads of its samples", "orders.Reads of the part: the reads its relay picked out, those it owns").run(func() error {
		var reads []uint64
		if n := orders.Reads(&back, where.Owns(member), func(id uint32) { reads = append(reads, uint64(id)) }); n != mo.Reads {
			return fmt.Errorf("the part has %d reads of the member's samples, the whole order %d", n, mo.Reads)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return mo, nil
}

// decodeStep and cutStep name a holder's steps that decode and check
// the order, and that cut parts: what a member with a part waits for
// after its relay has the whole.
const (
	decodeStep = "holder: order decoded, checked"
	cutStep    = "relay: parts cut"
)

// printMember prints what the members do with each epoch's order, a
// holder's and a part's, against the epoch.
func printMember(w io.Writer, mo *memberOrder, epoch time.Duration) {
	if mo == nil {
		return
	}
	fmt.Fprintf(w, "\n== the members other than the leader (%s measured, %d rank(s)): %d hold each epoch's order whole (%s), %d get their parts (%s: their ranks' slices and weights, the reads of their samples; %d for %s), cut by their relays\n",
		mo.Name, mo.Ranks, mo.Holders, scaleBytes(float64(mo.WholeBytes)), mo.Parts, scaleBytes(float64(mo.PartBytes)), mo.Reads, mo.Name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tmeasured\tcpu\tx\tallocs\talloc bytes\t")
	var whole, part, cut, cutShare time.Duration
	for _, s := range slices.Concat(mo.Whole, mo.Part) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3g\t%d\t%s\t\n", s.Name, round(s.Dur), round(s.CPU), s.Times, int64(float64(s.Allocs)*s.Times), scaleBytes(float64(s.Bytes)*s.Times))
	}
	for _, s := range mo.Whole {
		whole += s.cpuPerEpoch()
		if s.Name == cutStep {
			cut, cutShare = s.CPU, s.cpuPerEpoch()
		}
	}
	for _, s := range mo.Part {
		part += s.cpuPerEpoch()
	}
	tw.Flush()
	for _, s := range slices.Concat(mo.Whole, mo.Part) {
		if s.Note != "" {
			fmt.Fprintf(w, "  %s: %s\n", s.Name, s.Note)
		}
	}
	if mo.PartOverPiece {
		fmt.Fprintf(w, "  %s's part (%s) is larger than a relay piece: its relay sends it the whole order instead, piece by piece; the figures below count parts as if every member got its own\n",
			mo.Name, scaleBytes(float64(mo.PartBytes)))
	}
	members := max(mo.Holders+mo.Parts, 1)
	average := (whole*time.Duration(mo.Holders) + part*time.Duration(mo.Parts)) / time.Duration(members)
	allWhole := whole - cutShare
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tmeasured\tbudget\tratio\t")
	fmt.Fprintf(tw, "holder CPU per epoch for the order (a relay's share of cutting parts in)\t%s\t%s (one core, the epoch)\t%s\t\n", round(whole), round(epoch), ratio(whole.Seconds(), epoch.Seconds()))
	fmt.Fprintf(tw, "  a relay that cuts parts: all of its cutting\t%s\t\t%s\t\n", round(cut), ratio(cut.Seconds(), epoch.Seconds()))
	fmt.Fprintf(tw, "member with its part: CPU per epoch\t%s\t%s (one core, the epoch)\t%s\t\n", round(part), round(epoch), ratio(part.Seconds(), epoch.Seconds()))
	fmt.Fprintf(tw, "average member CPU per epoch (%d holders, %d parts)\t%s\t%s (one core, the epoch)\t%s\t\n", mo.Holders, mo.Parts, round(average), round(epoch), ratio(average.Seconds(), epoch.Seconds()))
	fmt.Fprintf(tw, "  every member whole (before parts) over the average\t%s\t\t%s\t\n", round(allWhole), ratio(allWhole.Seconds(), average.Seconds()))
	tw.Flush()
}
