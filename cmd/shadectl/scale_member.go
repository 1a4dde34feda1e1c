package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	meshleader "github.com/shade-mesh/shade/mesh/leader"
	"github.com/shade-mesh/shade/mesh/orders"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/sampling"
	"github.com/shade-mesh/shade/transport/peer"
)

// memberOrder is what the members other than the leader do with an
// epoch's order drawn ahead (which shade-peer does by default at this
// scale; an order the ranks wait for goes whole to every member, piece
// by piece, see mesh's partsFit), as mesh does it. In a relayed mesh the
// members the leader sends to directly, and the relays below them that
// pass it on to other relays, hold the whole order: each receives it,
// passes it on, decodes and checks it and picks out the reads of its own
// samples for its cache policy; a relay that would pass the whole on to
// a relay with no more than wire.PartsWithin the fanout members below it
// cuts that relay its group's part instead (orders.CutGroups, mesh's
// partsOf: wire.PublishMsg.Below), and a member with none below it its
// own part. A group's head installs its group's part as its own and cuts
// each member below it its part from it. Those members get their part
// alone (wire.PublishMsg.Part): their ranks' slices and weights, and the
// reads of their samples.
type memberOrder struct {
	Name  string // the member measured
	Ranks int    // its ranks
	Reads int    // the reads of its samples in the order
	// Shape is who holds what: Holders the whole, Heads their groups'
	// parts, Parts their own (of the members other than the leader).
	Shape relayShape
	// Cut is how many parts a group's head cuts in one pass, GroupCut
	// how many groups' parts a holder does.
	Cut, GroupCut int
	// Whole are a holder's steps, Group those of a group's head, Part
	// those of a member that gets its part.
	Whole, Group, Part []*mergeStep
	// WholeBytes, GroupBytes and PartBytes are the messages' sizes.
	WholeBytes, GroupBytes, PartBytes int
	// PartOverPiece says the measured member's part is larger than a
	// relay piece: mesh sends it the whole instead (so does a relay to
	// every member with as many ranks); GroupOverPiece says so of its
	// group's part.
	PartOverPiece, GroupOverPiece bool
}

// relayShape is who holds what of an order the leader sends to its
// other members, as mesh relays it: Holders hold it whole (Cutters of
// them cut parts or groups' parts), Heads hold their groups' parts and
// Parts their own; the last part is Hops hops from the leader (0 with
// none).
type relayShape struct{ Holders, Cutters, Heads, Parts, Hops int }

// shapeOf counts relayShape for others members: relayed (past fanout
// members, or in pieces), the leader hands the order to the heads of
// wire.RelayGroups, each passing it on to its group the same way; where
// parts are cut (cut: a member's part likely fits a piece), a relay's
// group of one member gets its part, a group of wire.GroupWithin the
// fanout members or fewer its group's part, whose head hands the rest
// their parts, and a relay with PartsWithin members or fewer to pass it
// on to hands them all their parts. Epoch 0 and orders not relayed go
// whole to every member.
func shapeOf(others, fanout int, relayed, cut bool) relayShape {
	var sh relayShape
	if !relayed {
		sh.Holders = others
		return sh
	}
	within := wire.PartsWithin(fanout)
	var walk func(n, depth int, relay bool)
	walk = func(n, depth int, relay bool) {
		cuts := relay && cut
		if cuts && n > 0 && n <= within {
			sh.Parts += n
			sh.Hops = max(sh.Hops, depth)
			sh.Cutters++
			return
		}
		k := min(max(fanout, 1), n)
		cutter := false
		for i := range k {
			size := n / k
			if i < n%k {
				size++
			}
			switch {
			case cuts && size == 1:
				sh.Parts++
				sh.Hops = max(sh.Hops, depth)
				cutter = true
			case cuts && size <= wire.GroupWithin(fanout):
				sh.Heads++
				sh.Parts += size - 1
				sh.Hops = max(sh.Hops, depth+1)
				cutter = true
			default:
				sh.Holders++
				walk(size-1, depth+1, true)
			}
		}
		if cutter {
			sh.Cutters++
		}
	}
	walk(others, 1, false)
	return sh
}

// memberSteps measures memberOrder for member, a node other than the
// leader, with pub, the order as published, and raw, its encoding, sent
// to members in that many pieces (1: whole), as the leader's steps sent
// it; members are the mesh's, the leader first, and fanout the relay
// fanout. Transport steps are real calls between two peer-transport
// nodes in this process (callPair), both ends' CPU counted: a holder
// receives one copy of the order and, on average, passes one on, so
// both ends of one copy are what an average holder's transport does; a
// part's call, and a group's part's, is counted to the member that gets
// it, its sender's end too.
func memberSteps(pub *wire.PublishMsg, raw []byte, where sampling.Placement, member string, pieces, samples, maxWorld, replicas int, members []string, fanout, piece int) (*memberOrder, error) {
	within := wire.PartsWithin(fanout)
	mo := &memberOrder{Name: member, WholeBytes: len(raw), Cut: within, GroupCut: max(fanout, 1)}
	cutting := piece <= 0 || wire.PartsFit(len(raw), replicas, len(members), piece)
	mo.Shape = shapeOf(len(members)-1, fanout, len(members)-1 > fanout || pieces > 1, cutting)
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
	_ = step(&mo.Whole, "holder: reads of its samples", "orders.Reads with sampling.Placement.OwnedBy of the holder, as mesh hands the cache policy's lookahead each order").run(func() error {
		var reads []uint64 // 8 bytes each, as mesh's lookahead keeps them (policy.ID)
		mo.Reads = orders.Reads(&got, where.OwnedBy([]string{member}), func(id uint32) { reads = append(reads, uint64(id)) })
		return nil
	})
	// The groups' parts a holder cuts: the member's group first (the
	// member and those after it, as many as its head hands parts to),
	// and as many groups more as the fanout.
	at := max(slices.Index(members, member), 1)
	var groups [][]string
	for g := range mo.GroupCut {
		start := at + g*(1+within)
		if start >= len(members) {
			break
		}
		groups = append(groups, members[start:min(start+1+within, len(members))])
	}
	var groupParts []*wire.PublishMsg
	cut := step(&mo.Whole, cutStep, fmt.Sprintf("orders.CutGroups of %d groups' parts of up to %d members each in one pass (mesh's partsOf), dealt in spans on up to %d goroutines (GOMAXPROCS), by a relay above groups' heads", len(groups), 1+within, runtime.GOMAXPROCS(0)))
	_ = cut.run(func() error {
		groupParts = orders.CutGroups(&got, groups, where.OwnedByAny(groups))
		return nil
	})
	// Per holder: the holders that cut are Cutters of them.
	cut.Times = float64(mo.Shape.Cutters) / float64(max(mo.Shape.Holders, 1))

	// A group's head: the member, with its group's part.
	rec := partReceiver{pair: pair, where: where, member: member, samples: samples, maxWorld: maxWorld, reads: mo.Reads}
	group, groupRaw, err := rec.receive(&mo.Group, groupParts[0], wire.MethodRelay, partSteps{
		in: "group: its part in (transport)", via: "MethodRelay of MethodPublishPart", sender: "its sender's",
		decode: groupDecodeStep, decodeNote: "msgpack.Unmarshal of the group's part, leader.Check",
		reads: "group: reads of its samples", readsNote: "orders.Reads of the group's part with sampling.Placement.OwnedBy of the head: the reads its relay picked out for the group, those the head owns",
	})
	if err != nil {
		return nil, err
	}
	mo.GroupBytes = len(groupRaw)
	mo.GroupOverPiece = piece > 0 && groupParts[0].EncodedSize() > piece
	names := groups[0][1:]
	var parts []*wire.PublishMsg
	_ = step(&mo.Group, groupCutStep, fmt.Sprintf("orders.Cut of its %d members' parts from the group's part in one pass (mesh's serveGroupPart)", len(names))).run(func() error {
		parts = orders.Cut(group, names, where.OwnedBy(names))
		return nil
	})
	// Check the parts against those cut from the whole.
	fromWhole := orders.Cut(&got, names, where.OwnedBy(names))
	for i := range parts {
		if !slices.Equal(parts[i].Reads, fromWhole[i].Reads) {
			return nil, fmt.Errorf("%s's part cut from its group's has %d reads, from the whole %d", names[i], len(parts[i].Reads), len(fromWhole[i].Reads))
		}
	}

	// A member that gets its part: the member's own, as its relay would
	// cut it (it has the same reads whoever cuts it).
	own := orders.Cut(&got, []string{member}, where.OwnedBy([]string{member}))[0]
	_, partRaw, err := rec.receive(&mo.Part, own, wire.MethodPublishPart, partSteps{
		in: "part: in (transport)", via: "MethodPublishPart", sender: "the relay's",
		decode: "part: decoded, checked", decodeNote: "msgpack.Unmarshal of the part, leader.Check",
		reads: "part: reads of its samples", readsNote: "orders.Reads of the part: the reads its relay picked out, those it owns",
	})
	if err != nil {
		return nil, err
	}
	mo.PartBytes = len(partRaw)
	mo.PartOverPiece = piece > 0 && own.EncodedSize() > piece
	return mo, nil
}

// partReceiver measures a member receiving a part of an order (its own,
// or its group's): a real call of its size between two peer-transport
// nodes in this process, both ends' CPU; msgpack.Unmarshal and
// leader.Check; the reads of the member's samples in it, which must be
// reads, those the whole order has.
type partReceiver struct {
	pair              *callPair
	where             sampling.Placement
	member            string
	samples, maxWorld int
	reads             int
}

// partSteps names the steps partReceiver measures, and what they say.
type partSteps struct {
	in, via, sender, decode, decodeNote, reads, readsNote string
}

// receive measures part arriving by method into list's steps, named as
// names says, and returns it decoded and encoded.
func (r partReceiver) receive(list *[]*mergeStep, part *wire.PublishMsg, method peer.Method, names partSteps) (*wire.PublishMsg, []byte, error) {
	step := func(name, note string) *mergeStep {
		s := &mergeStep{Name: name, Times: 1, Note: note}
		*list = append(*list, s)
		return s
	}
	raw, err := part.Encode()
	if err != nil {
		return nil, nil, err
	}
	const calls = 20 // one a member an epoch; 20 measured
	in := step(names.in, fmt.Sprintf("1 call of %s (%s); both ends' CPU, %s too; %d measured", scaleBytes(float64(len(raw))), names.via, names.sender, calls))
	in.Times = 1.0 / calls
	b, err := binOfSize(len(raw))
	if err != nil {
		return nil, nil, err
	}
	if err := r.pair.measure(in, method, b, calls, 1); err != nil {
		return nil, nil, err
	}
	var got wire.PublishMsg
	if err := step(names.decode, names.decodeNote).run(func() error {
		if err := msgpack.Unmarshal(raw, &got); err != nil {
			return err
		}
		return meshleader.Check(&got, got.Version, r.samples, r.maxWorld)
	}); err != nil {
		return nil, nil, err
	}
	if err := step(names.reads, names.readsNote).run(func() error {
		var reads []uint64 // 8 bytes each, as mesh's lookahead keeps them (policy.ID)
		if n := orders.Reads(&got, r.where.OwnedBy([]string{r.member}), func(id uint32) { reads = append(reads, uint64(id)) }); n != r.reads {
			return fmt.Errorf("%s has %d reads of the member's samples, the whole order %d", names.decode, n, r.reads)
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	return &got, raw, nil
}

// decodeStep and cutStep name a holder's steps that decode and check
// the order, and that cut parts: what a member with a part waits for
// after its relay has the whole.
const (
	decodeStep      = "holder: order decoded, checked"
	cutStep         = "relay: groups' parts cut"
	groupDecodeStep = "group: its part decoded, checked"
	groupCutStep    = "group: its members' parts cut"
)

// printMember prints what the members do with each epoch's order, a
// holder's, a group's head's and a part's, against the epoch.
func printMember(w io.Writer, mo *memberOrder, epoch time.Duration) {
	if mo == nil {
		return
	}
	sh := mo.Shape
	fmt.Fprintf(w, "\n== the members other than the leader (%s measured, %d rank(s)): %d hold each epoch's order whole (%s), %d their groups' parts (%s, each for a head and up to %d members below it), %d their own parts (%s: their ranks' slices and weights, the reads of their samples; %d for %s)\n",
		mo.Name, mo.Ranks, sh.Holders, scaleBytes(float64(mo.WholeBytes)), sh.Heads, scaleBytes(float64(mo.GroupBytes)), mo.Cut, sh.Parts, scaleBytes(float64(mo.PartBytes)), mo.Reads, mo.Name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tmeasured\tcpu\tx\tallocs\talloc bytes\tpage faults\t")
	all := slices.Concat(mo.Whole, mo.Group, mo.Part)
	for _, s := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3g\t%d\t%s\t%d\t\n", s.Name, round(s.Dur), round(s.CPU), s.Times, int64(float64(s.Allocs)*s.Times), scaleBytes(float64(s.Bytes)*s.Times), int64(float64(s.Faults)*s.Times))
	}
	sum := func(steps []*mergeStep) (total time.Duration) {
		for _, s := range steps {
			total += s.cpuPerEpoch()
		}
		return total
	}
	whole, group, part := sum(mo.Whole), sum(mo.Group), sum(mo.Part)
	var cut, cutShare time.Duration
	for _, s := range mo.Whole {
		if s.Name == cutStep {
			cut, cutShare = s.CPU, s.cpuPerEpoch()
		}
	}
	tw.Flush()
	for _, s := range all {
		if s.Note != "" {
			fmt.Fprintf(w, "  %s: %s\n", s.Name, s.Note)
		}
	}
	if mo.PartOverPiece || mo.GroupOverPiece {
		fmt.Fprintf(w, "  %s's part (%s) or its group's (%s) is larger than a relay piece: its relay sends the whole order instead, piece by piece; the figures below count parts as if every member got its own\n",
			mo.Name, scaleBytes(float64(mo.PartBytes)), scaleBytes(float64(mo.GroupBytes)))
	}
	members := max(sh.Holders+sh.Heads+sh.Parts, 1)
	average := (whole*time.Duration(sh.Holders) + group*time.Duration(sh.Heads) + part*time.Duration(sh.Parts)) / time.Duration(members)
	allWhole := whole - cutShare
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tmeasured\tbudget\tratio\t")
	fmt.Fprintf(tw, "holder CPU per epoch for the order (a relay's share of cutting groups' parts in)\t%s\t%s (one core, the epoch)\t%s\t\n", round(whole), round(epoch), ratio(whole.Seconds(), epoch.Seconds()))
	fmt.Fprintf(tw, "  a relay that cuts groups' parts: all of its cutting\t%s\t\t%s\t\n", round(cut), ratio(cut.Seconds(), epoch.Seconds()))
	fmt.Fprintf(tw, "group's head with its group's part: CPU per epoch\t%s\t%s (one core, the epoch)\t%s\t\n", round(group), round(epoch), ratio(group.Seconds(), epoch.Seconds()))
	fmt.Fprintf(tw, "member with its part: CPU per epoch\t%s\t%s (one core, the epoch)\t%s\t\n", round(part), round(epoch), ratio(part.Seconds(), epoch.Seconds()))
	fmt.Fprintf(tw, "average member CPU per epoch (%d holders, %d groups' heads, %d parts)\t%s\t%s (one core, the epoch)\t%s\t\n", sh.Holders, sh.Heads, sh.Parts, round(average), round(epoch), ratio(average.Seconds(), epoch.Seconds()))
	fmt.Fprintf(tw, "  every member whole (before parts) over the average\t%s\t\t%s\t\n", round(allWhole), ratio(allWhole.Seconds(), average.Seconds()))
	tw.Flush()
}
