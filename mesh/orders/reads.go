package orders

import "github.com/shade-mesh/shade/mesh/wire"

// Reads calls visit with each id of p's slices that ours says this node
// owns, in the order the ranks are expected to read them: they read their
// slices side by side, so position k of every slice comes before position
// k+1 of any. It returns how many it visited. This is what a node hands
// its cache policy's lookahead for each epoch's order.
func Reads(p *wire.PublishMsg, ours func(id uint32) bool, visit func(id uint32)) int {
	longest := 0
	for _, s := range p.Slices {
		longest = max(longest, len(s))
	}
	n := 0
	for k := 0; k < longest; k++ {
		for _, s := range p.Slices {
			if k < len(s) && ours(s[k]) {
				visit(s[k])
				n++
			}
		}
	}
	return n
}
