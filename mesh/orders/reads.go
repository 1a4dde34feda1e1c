package orders

import (
	"math/bits"
	"runtime"
	"sync"

	"github.com/shade-mesh/shade/mesh/wire"
)

// Reads calls visit with each id of p's slices that owned says a node
// owns (any name of its test: sampling.Placement.OwnedBy), in the order
// the ranks are expected to read them: they read their slices side by
// side, so position k of every slice comes before position k+1 of any.
// Of a member's part (wire.PublishMsg.Part) it visits the reads its
// relay picked out for the member, those owned still says are owned. It
// returns how many it visited. This is what a node hands its cache
// policy's lookahead for each epoch's order.
func Reads(p *wire.PublishMsg, owned func(ids []uint32, masks []uint64), visit func(id uint32)) int {
	n := 0
	var masks [readBlock]uint64
	inBlocks(p, func(block []uint32) {
		owned(block, masks[:len(block)])
		for k, id := range block {
			if masks[k] != 0 {
				visit(id)
				n++
			}
		}
	})
	return n
}

// inBlocks calls fn with the ids Reads looks at, in its order, readBlock
// at a time: a part's reads, or every id of the whole's slices. A caller
// that looks each one's owners up (a sample's partition, at random in a
// table of megabytes) does so for a block, in one call of its test,
// before it acts on them: the lookups then overlap each other, where
// between each and the next the caller's branches on its result, or a
// call of a test for each, held them a few at a time. fn must not keep
// the block.
func inBlocks(p *wire.PublishMsg, fn func(block []uint32)) {
	inBlocksOf(p, 0, positions(p), fn)
}

// positions is how many places inBlocksOf can start and end at in p's
// reads: a part's reads, or the positions of the whole's longest slice
// (position k of every slice is one place).
func positions(p *wire.PublishMsg) int {
	if p.Part != "" {
		return len(p.Reads)
	}
	longest := 0
	for _, s := range p.Slices {
		longest = max(longest, len(s))
	}
	return longest
}

// inBlocksOf is inBlocks of the places from up to to (positions).
func inBlocksOf(p *wire.PublishMsg, from, to int, fn func(block []uint32)) {
	if p.Part != "" {
		for ids := p.Reads[from:to]; len(ids) > 0; {
			k := min(len(ids), readBlock)
			fn(ids[:k:k])
			ids = ids[k:]
		}
		return
	}
	var block [readBlock]uint32
	n := 0
	inReadOrder(p.Slices, from, to, func(id uint32) {
		block[n] = id
		if n++; n == readBlock {
			fn(block[:])
			n = 0
		}
	})
	if n > 0 {
		fn(block[:n])
	}
}

// inReadOrder calls visit with every id of an order's slices at
// positions from up to to, in the order the ranks are expected to read
// them: position k of every slice before position k+1 of any.
func inReadOrder(slices []wire.U32s, from, to int, visit func(id uint32)) {
	for k := from; k < to; k++ {
		for _, s := range slices {
			if k < len(s) {
				visit(s[k])
			}
		}
	}
}

// readBlock is how many reads Reads and Cut look up before they act on
// them (inBlocks).
const readBlock = 256

// minCutSpan is the fewest reads a goroutine of a cut deals: a cut of a
// whole order at 1,000 peers (1.28 M reads) runs on as many goroutines as
// GOMAXPROCS allows, up to 9; a group's head's cut of its members' parts
// (its group's 44 K reads) on one.
const minCutSpan = 1 << 17

// Cut returns the parts of the order p for the named members (at most
// 64; wire.PublishMsg.Part), one each, in one pass over the order:
// member i's part holds the slices and weights of the ranks p.Ranks puts
// on it and the reads of the samples it owns, those whose mask from
// ownedBy (sampling.Placement.OwnedBy of names) has bit i set, in the
// order Reads visits them. p is the whole order, or a
// group's part (wire.PublishMsg.Below) whose reads hold the members'.
// The parts share p's slices and weights: read only.
func Cut(p *wire.PublishMsg, names []string, ownedBy func(ids []uint32, masks []uint64)) []*wire.PublishMsg {
	groups := make([][]string, len(names))
	for i := range names {
		groups[i] = names[i : i+1 : i+1]
	}
	return CutGroups(p, groups, ownedBy)
}

// CutGroups is Cut of groups' parts (at most 64 groups, none empty):
// group i's part is for its first member, with the rest Below it, and
// holds the slices and weights of the ranks on any of them and the reads
// whose ownedBy has bit i set (any of them owns the sample). A group of
// one gets a member's part. The parts share p's slices and weights, and
// each its group's slice for Below: read only.
//
// A cut of many reads (minCutSpan a goroutine; a whole order at 1,000
// peers) deals them in spans of their order on up to GOMAXPROCS
// goroutines, so ownedBy must be safe for concurrent use (as
// sampling.Placement.OwnedBy's tests are). A cut is bound by its
// lookups of the reads' owners, at random in a table of megabytes; each
// core waits on its own.
func CutGroups(p *wire.PublishMsg, groups [][]string, ownedBy func(ids []uint32, masks []uint64)) []*wire.PublishMsg {
	parts := make([]*wire.PublishMsg, len(groups))
	index := make(map[string]int)
	for i, group := range groups {
		for _, name := range group {
			index[name] = i
		}
		parts[i] = &wire.PublishMsg{Dataset: p.Dataset, Job: p.Job, Version: p.Version, Gen: p.Gen, Epoch: p.Epoch, Term: p.Term,
			World: p.World, Ahead: p.Ahead, Ranks: p.Ranks, Slices: make([]wire.U32s, len(p.Slices)), Part: group[0], Size: p.Len()}
		if len(group) > 1 {
			parts[i].Below = group[1:]
		}
		if len(p.Weights) > 0 {
			parts[i].Weights = make([]wire.F32s, len(p.Weights))
		}
	}
	for r, node := range p.Ranks {
		i, ok := index[node]
		if !ok || r >= len(p.Slices) || !p.HasSlice(r) {
			continue
		}
		parts[i].Slices[r] = p.Slices[r]
		if r < len(p.Weights) {
			parts[i].Weights[r] = p.Weights[r]
		}
	}
	// The reads are dealt in spans of their order, one a goroutine, each
	// span's reads of each part joined in order after.
	places, count := positions(p), p.Len() // a whole's reads
	if p.Part != "" {
		count = len(p.Reads)
	}
	spans := max(1, min(runtime.GOMAXPROCS(0), count/minCutSpan))
	reads := make([][]wire.U32s, spans)
	var wg sync.WaitGroup
	for c := range spans {
		wg.Go(func() {
			out := make([]wire.U32s, len(parts))
			var masks [readBlock]uint64
			inBlocksOf(p, places*c/spans, places*(c+1)/spans, func(block []uint32) {
				ownedBy(block, masks[:len(block)])
				for k, m := range masks[:len(block)] {
					for ; m != 0; m &= m - 1 {
						i := bits.TrailingZeros64(m)
						out[i] = append(out[i], block[k])
					}
				}
			})
			reads[c] = out
		})
	}
	wg.Wait()
	for i, part := range parts {
		if spans == 1 {
			part.Reads = reads[0][i]
			continue
		}
		n := 0
		for _, span := range reads {
			n += len(span[i])
		}
		part.Reads = make(wire.U32s, 0, n)
		for _, span := range reads {
			part.Reads = append(part.Reads, span[i]...)
		}
	}
	return parts
}
