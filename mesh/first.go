package mesh

import (
	"context"

	"github.com/shade-mesh/shade/sampling"
)

// firstOrder is a dataset's epoch 0 as each of its jobs draws it, made
// once by the leader before any job asks (prepareFirstOrders): epoch 0 is
// a permutation, the samples 0..n-1 in sequence before they are aligned
// (sampling.Sampler.DrawUnordered), so aligned with the dataset's seed
// it is the same for every job, but for where it starts (a job's phase:
// a rotation); a job's sampler takes it as drawn
// (sampling.Sampler.DrawPermutation). grouped is the order with the
// partition of each place looked up (sampling.GroupOrder), which the
// leader otherwise looks up as the first rank joins; nil where the
// orders are split without regard to owners.
type firstOrder struct {
	order   []uint32
	grouped *sampling.Grouped
}

// at returns the order rotated left by k places, for 0 <= k < its
// length, and, where f's groups fit where, its groups rotated alike: f's
// own where k is 0 (a job that starts where no other is), to be read and
// not written (a split does not write its order, nor a Grouped's), new
// copies otherwise.
func (f *firstOrder) at(k int, where *sampling.Placement) ([]uint32, *sampling.Grouped) {
	if where != nil && f.grouped != nil && f.grouped.Fits(*where) {
		g := *f.grouped
		if k != 0 {
			g = g.Rotated(k)
		}
		return g.Order(), &g
	}
	if k <= 0 || k >= len(f.order) {
		return f.order, nil
	}
	return sampling.Rotated(f.order, k), nil
}

// prepareFirstOrders makes each dataset's epoch 0 (firstOrder) in the
// background as this node starts leading, so that the ranks of a job
// that ask for epoch 0 together wait for its split among them, not for
// its alignment (1.28 M samples: 50-70 ms on 2 cores) nor its groups.
// It holds 8 bytes a sample on the leader, dropped when it steps down.
func (n *Node) prepareFirstOrders() {
	if n.cfg.Uniform {
		return // orders are not aligned
	}
	n.goBackground(func(ctx context.Context) {
		for _, ds := range n.ordered {
			if ctx.Err() != nil || !n.lead.leading() {
				return
			}
			if ds.first.Load() == nil {
				n.keepFirstOrder(ds, n.firstOrderOf(ds))
			}
		}
	})
}

// keepFirstOrder stores f as ds's prepared epoch 0 unless one is there,
// and drops it again where this node no longer leads: a stepDown while f
// was made (it stops leading, then drops the prepared orders) may have
// dropped them before f was stored.
func (n *Node) keepFirstOrder(ds *datasetState, f *firstOrder) {
	if ds.first.CompareAndSwap(nil, f) && !n.lead.leading() {
		ds.first.CompareAndSwap(f, nil)
	}
}

// firstOrderOf makes ds's epoch 0 as its jobs draw it (firstOrder).
func (n *Node) firstOrderOf(ds *datasetState) *firstOrder {
	order := sampling.AlignedPermutation(ds.len, n.alignSeed(ds), 0)
	f := &firstOrder{order: order}
	if n.locality() {
		// The ring's partitions are the groups whatever its members; a
		// placement of other groups (no ring yet) leaves the leader to
		// look them up (firstOrder.at).
		if g, err := sampling.GroupOrder(order, n.placement(ds)); err == nil {
			f.grouped = &g
		}
	}
	return f
}
