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

// memberOrder is what one member that is not the leader does with an
// epoch's order: as mesh does it now (the whole order: received, passed
// on, decoded and checked, the reads of its own samples picked out for
// its cache policy), and, for comparison, with only its part of it (its
// ranks' slices and weights, and the reads of its samples, picked out
// by the leader), which mesh does not send.
type memberOrder struct {
	Name  string // the member
	Ranks int    // its ranks
	Reads int    // the reads of its samples in the order
	// Whole are the steps with the whole order, Part those with its part.
	Whole, Part []*mergeStep
	// WholeBytes and PartBytes are the messages' sizes.
	WholeBytes, PartBytes int
}

// memberSteps measures memberOrder for member, a node other than the
// leader, with pub, the order as published, and raw, its encoding, sent
// to members in that many pieces (1: whole), as the leader's steps sent
// it. Transport steps are real calls between two
// peer-transport nodes in this process (callPair), both ends' CPU
// counted: a member receives one copy of the order and, on average,
// passes one on (the relays pass on as many copies as there are members),
// so both ends of one copy are what an average member's transport does.
func memberSteps(pub *wire.PublishMsg, raw []byte, where sampling.Placement, member string, pieces, samples, maxWorld int) (*memberOrder, error) {
	mo := &memberOrder{Name: member, WholeBytes: len(raw)}
	var mine []int
	for r, node := range pub.Ranks {
		if node == member {
			mine = append(mine, r)
		}
	}
	mo.Ranks = len(mine)
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

	// The whole order, as mesh sends it now.
	in := step(&mo.Whole, "member: order in and on (transport)",
		fmt.Sprintf("%d calls of %s (the order's pieces), 4 at a time; both ends' CPU: one copy in and, on average, one passed on", pieces, scaleBytes(float64(len(raw))/float64(pieces))))
	b, err := binOfSize(len(raw) / pieces)
	if err != nil {
		return nil, err
	}
	if err := pair.measure(in, wire.MethodPublish, b, pieces, 4); err != nil {
		return nil, err
	}
	var got wire.PublishMsg
	if err := step(&mo.Whole, "member: order decoded, checked", "msgpack.Unmarshal of the assembled order, leader.Check (as mesh.checkPublish)").run(func() error {
		if err := msgpack.Unmarshal(raw, &got); err != nil {
			return err
		}
		return meshleader.Check(&got, got.Version, samples, maxWorld)
	}); err != nil {
		return nil, err
	}
	var reads []uint64 // 8 bytes each, as mesh's lookahead keeps them (policy.ID)
	_ = step(&mo.Whole, "member: reads of its samples", "orders.Reads with sampling.Placement.Owns, as mesh hands the cache policy's lookahead each order").run(func() error {
		mo.Reads = orders.Reads(&got, where.Owns(member), func(id uint32) { reads = append(reads, uint64(id)) })
		return nil
	})

	// Its part: its ranks' slices and weights, the reads of its samples
	// (as the leader would pick them out), no sampler state.
	part := &wire.PublishMsg{Dataset: pub.Dataset, Job: pub.Job, Version: pub.Version, Gen: pub.Gen, Epoch: pub.Epoch, Term: pub.Term, World: pub.World,
		Ahead: pub.Ahead, Ranks: pub.Ranks, Slices: make([]wire.U32s, pub.World)}
	if len(pub.Weights) > 0 {
		part.Weights = make([]wire.F32s, pub.World)
	}
	for _, r := range mine {
		part.Slices[r] = pub.Slices[r]
		if part.Weights != nil {
			part.Weights[r] = pub.Weights[r]
		}
	}
	owned := make(wire.U32s, len(reads))
	for i, id := range reads {
		owned[i] = uint32(id)
	}
	partRaw, err := msgpack.Marshal(memberPart{part, owned})
	if err != nil {
		return nil, err
	}
	mo.PartBytes = len(partRaw)
	const partCalls = 20 // one a member an epoch; 20 measured
	pin := step(&mo.Part, "member part: in (transport)", fmt.Sprintf("1 call of %s; both ends' CPU; %d measured", scaleBytes(float64(len(partRaw))), partCalls))
	pin.Times = 1.0 / partCalls
	if b, err = binOfSize(len(partRaw)); err != nil {
		return nil, err
	}
	if err := pair.measure(pin, wire.MethodPublish, b, partCalls, 1); err != nil {
		return nil, err
	}
	if err := step(&mo.Part, "member part: decoded", "msgpack.Unmarshal of the part and its reads").run(func() error {
		var back memberPart
		if err := msgpack.Unmarshal(partRaw, &back); err != nil {
			return err
		}
		if !slices.Equal(back.Reads, owned) {
			return fmt.Errorf("the part's reads changed on the way")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return mo, nil
}

// memberPart is a member's part of an order as the model encodes it: its
// ranks' slices and weights (the other ranks' empty, no sampler state),
// and the reads of its samples.
type memberPart struct {
	Order *wire.PublishMsg `msgpack:"o"`
	Reads wire.U32s        `msgpack:"r"`
}

// printMember prints what a member does with each epoch's order, whole
// and as its part, against the epoch.
func printMember(w io.Writer, mo *memberOrder, epoch time.Duration) {
	if mo == nil {
		return
	}
	fmt.Fprintf(w, "\n== a member (%s, %d rank(s), not the leader): each epoch's order whole, as now (%s), and its part alone (%s: its ranks' slices and weights, the %d reads of its samples; shade-peer sends every member the whole order)\n",
		mo.Name, mo.Ranks, scaleBytes(float64(mo.WholeBytes)), scaleBytes(float64(mo.PartBytes)), mo.Reads)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tmeasured\tcpu\tx\tallocs\talloc bytes\t")
	var whole, part time.Duration
	for _, s := range slices.Concat(mo.Whole, mo.Part) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3g\t%d\t%s\t\n", s.Name, round(s.Dur), round(s.CPU), s.Times, int64(float64(s.Allocs)*s.Times), scaleBytes(float64(s.Bytes)*s.Times))
	}
	for _, s := range mo.Whole {
		whole += s.cpuPerEpoch()
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
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tmeasured\tbudget\tratio\t")
	fmt.Fprintf(tw, "member CPU per epoch for the order, whole\t%s\t%s (one core, the epoch)\t%s\t\n", round(whole), round(epoch), ratio(whole.Seconds(), epoch.Seconds()))
	fmt.Fprintf(tw, "member CPU per epoch for its part alone (which shade-peer does not send)\t%s\t%s (one core, the epoch)\t%s\t\n", round(part), round(epoch), ratio(part.Seconds(), epoch.Seconds()))
	fmt.Fprintf(tw, "  whole over part\t\t\t%s\t\n", ratio(whole.Seconds(), part.Seconds()))
	tw.Flush()
}
