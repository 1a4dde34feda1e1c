package orders

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shade-mesh/shade/mesh/ring"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/protocol/samplekey"
	"github.com/shade-mesh/shade/sampling"
)

// BenchmarkCut cuts parts of an order of 1.28 M reads, 1,000 ranks of
// 1,280, as a relay does at 1,000 peers: 16 members' own parts, and 4
// groups' parts of 17 members each; and picks out a member's reads from
// it (Reads), as a holder of the whole does for its cache's lookahead.
// The samples fall into the partitions of a ring of the 1,000 peers with
// two owners each, 271 (a mesh of earlier builds) or 64,513 (the count
// advised for 1,000 peers), placed as mesh's placement places them: a
// sample's partition read from ring.Samples a run at a time, every
// partition's owners found at once by ring.Ring.OwnerMasks.
func BenchmarkCut(b *testing.B) {
	const n, world, peers = 1280000, 1000, 1000
	names := make([]string, peers)
	for i := range names {
		names[i] = fmt.Sprintf("peer-%04d", i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
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
	for _, partitions := range []int{271, 64513} {
		r, err := ring.New(ring.Config{Partitions: partitions, Replicas: 2}, names)
		if err != nil {
			b.Fatal(err)
		}
		samples, err := ring.NewSamples(partitions, n, func(dst []byte, i int) []byte { return samplekey.Append(dst, "imagenet", i) })
		if err != nil {
			b.Fatal(err)
		}
		where := sampling.Placement{Groups: partitions, Group: func(id uint32) int { return samples.Partition(id) },
			GroupEach: samples.PartitionsOf, Owners: r.PartitionOwners, Masks: r.OwnerMasks, Key: r}
		owning := r.Members()
		b.Run(fmt.Sprintf("partitions=%d/members=16", partitions), func(b *testing.B) {
			members := owning[:16]
			for b.Loop() {
				Cut(p, members, where.OwnedBy(members))
			}
		})
		b.Run(fmt.Sprintf("partitions=%d/groups=4x17", partitions), func(b *testing.B) {
			var groups [][]string
			for i := range 4 {
				groups = append(groups, owning[i*17:(i+1)*17])
			}
			for b.Loop() {
				CutGroups(p, groups, where.OwnedByAny(groups))
			}
		})
		b.Run(fmt.Sprintf("partitions=%d/reads", partitions), func(b *testing.B) {
			var reads []uint32
			for b.Loop() {
				reads = reads[:0]
				Reads(p, where.OwnedBy(owning[:1]), func(id uint32) { reads = append(reads, id) })
			}
		})
	}
}
