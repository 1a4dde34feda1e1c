package orders

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/sampling"
)

// BenchmarkCut cuts parts of an order of 1.28 M reads, 1,000 ranks of
// 1,280, as a relay does at 1,000 peers: 16 members' own parts, and 4
// groups' parts of 17 members each; and picks out a member's reads from
// it (Reads), as a holder of the whole does for its cache's lookahead. The samples fall into 271
// partitions of two owners each, a sample's partition read from a table
// as ring.Samples holds them (a run at a time, as ring.Samples.PartitionsOf
// reads them); the members are owners.
func BenchmarkCut(b *testing.B) {
	const n, world, partitions, peers = 1280000, 1000, 271, 1000
	names := make([]string, peers)
	for i := range names {
		names[i] = fmt.Sprintf("peer-%04d", i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	partition := make([]uint16, n)
	for i := range partition {
		partition[i] = uint16(rng.IntN(partitions))
	}
	owners := make([][]string, partitions)
	for g := range owners {
		owners[g] = []string{names[rng.IntN(peers)], names[rng.IntN(peers)]}
	}
	where := sampling.Placement{Groups: partitions, Group: func(id uint32) int { return int(partition[id]) }, Owners: func(g int) []string { return owners[g] },
		GroupEach: func(ids []uint32, groups []int32) { // as ring.Samples.PartitionsOf
			for k, id := range ids {
				groups[k] = int32(partition[id])
			}
		}}
	p := &wire.PublishMsg{World: world, Epoch: 1}
	perm := rng.Perm(n)
	for r := range world {
		s := make(wire.U32s, n/world)
		for i := range s {
			s[i] = uint32(perm[r*(n/world)+i])
		}
		p.Slices = append(p.Slices, s)
		p.Ranks = append(p.Ranks, names[r])
	}
	var owning []string
	seen := map[string]bool{}
	for _, o := range owners {
		for _, name := range o {
			if !seen[name] {
				seen[name] = true
				owning = append(owning, name)
			}
		}
	}
	b.Run("members=16", func(b *testing.B) {
		members := owning[:16]
		for b.Loop() {
			Cut(p, members, where.OwnedBy(members))
		}
	})
	b.Run("groups=4x17", func(b *testing.B) {
		var groups [][]string
		for i := range 4 {
			groups = append(groups, owning[i*17:(i+1)*17])
		}
		for b.Loop() {
			CutGroups(p, groups, where.OwnedByAny(groups))
		}
	})
	b.Run("reads", func(b *testing.B) {
		var reads []uint32
		for b.Loop() {
			reads = reads[:0]
			Reads(p, where.OwnedBy(owning[:1]), func(id uint32) { reads = append(reads, id) })
		}
	})
}
