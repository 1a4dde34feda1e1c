package leader

import (
	"fmt"
	"testing"

	"github.com/shade-mesh/shade/mesh/wire"
)

// BenchmarkResidentOf: what a draw's preferred samples cost the leader at
// a rank on each of 1,000 peers and 1,280,000 samples, each peer caching
// its share with two replicas (2,560 samples), as the peers send them (a
// list, the shorter) and as bitmaps. wire-B/node is what a peer's done
// carries.
func BenchmarkResidentOf(b *testing.B) {
	const samples, nodes = 1_280_000, 1000
	for _, form := range []string{"list", "bitmap"} {
		b.Run(form, func(b *testing.B) {
			others := make(map[string]wire.ResidentSet, nodes)
			size := 0
			for k := range nodes {
				words := make([]uint64, (samples+63)/64)
				for i := k; i < samples; i += nodes / 2 {
					words[i/64] |= 1 << (i % 64)
				}
				set := wire.PackResident(words, samples)
				if form == "bitmap" {
					bits := make([]byte, (samples+7)/8)
					for i := range bits {
						bits[i] = byte(words[i/8] >> (8 * (i % 8)))
					}
					set = wire.ResidentSet{Bits: bits}
				}
				size += len(set.Bits) + len(set.Sparse)
				others[fmt.Sprint(k)] = set
			}
			j := &Job{}
			for b.Loop() {
				j.residentOf(others, samples)
			}
			b.ReportMetric(float64(size)/nodes, "wire-B/node")
		})
	}
}
