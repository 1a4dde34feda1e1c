package leader

import (
	"testing"

	"github.com/shade-mesh/shade/mesh/wire"
)

// BenchmarkCheck checks an order of 1.28 M samples among 1,000 ranks,
// with weights, as every member that takes the whole order does each
// epoch, a relay before it cuts the parts of the members below it.
func BenchmarkCheck(b *testing.B) {
	const n, world = 1280000, 1000
	p := &wire.PublishMsg{Dataset: "imagenet", Version: "v1", Epoch: 1, World: world, Ranks: make([]string, world)}
	for r := range world {
		s, w := make(wire.U32s, n/world), make(wire.F32s, n/world)
		for i := range s {
			s[i], w[i] = uint32(i*world+r), 1.5
		}
		p.Slices, p.Weights = append(p.Slices, s), append(p.Weights, w)
	}
	b.SetBytes(8 * n)
	for b.Loop() {
		if err := Check(p, "v1", n, world); err != nil {
			b.Fatal(err)
		}
	}
}
