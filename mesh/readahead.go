package mesh

import (
	"context"

	"github.com/shade-mesh/shade/mesh/readahead"
	"github.com/shade-mesh/shade/mesh/wire"
)

// The node gives its read-ahead (package readahead) the owners, fetches,
// source reads and residency it needs, and each dataset describes its
// samples and newest order.
var (
	_ readahead.Host    = raHost{}
	_ readahead.Dataset = (*datasetState)(nil)
)

// raHost is the node as the read-ahead's Host.
type raHost struct{ n *Node }

func (h raHost) Resident(key []byte) bool { return h.n.store.Has(key) }

func (h raHost) Owners(ds readahead.Dataset, id uint32) []string {
	return h.n.owners(ds.(*datasetState), id)
}

func (h raHost) Preferred(owners []string) []string { return h.n.preferred(owners) }

func (h raHost) Fetch(ctx context.Context, owner string, ds readahead.Dataset, ids []uint32, memoryOnly bool) ([]wire.FetchItem, error) {
	defer h.n.asking(owner, len(ids))()
	return h.n.fetchFrom(ctx, owner, ds.(*datasetState), ids, fetchMode{memoryOnly: memoryOnly})
}

func (h raHost) ReadSource(ds readahead.Dataset, id uint32) ([]byte, error) {
	return h.n.readSource(ds.(*datasetState), int(id))
}

// Key implements readahead.Dataset: the cache key of sample id.
func (ds *datasetState) Key(id uint32) string { return keyOfSample(ds, id) }

// Size implements readahead.Dataset: the size of sample id in bytes.
func (ds *datasetState) Size(id uint32) int64 { return ds.manifest.Sizes.At(int(id)) }
