package mesh

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/protocol/shm"
	"github.com/shade-mesh/shade/transport/peer"
)

// TestOfferedSampleCheckedAsCopiedIn: n0 offers n1 (a co-owner of every
// sample) samples over the peer transport. A sample whose bytes do not
// match the checksum it came with (a byte changed on the way, or a wrong
// sum) is refused with a checksum error, counted in n1's checksum errors,
// and leaves nothing behind: not in n1's store, not in its policy; one
// whose bytes match is kept, and a read at n1 returns its bytes.
func TestOfferedSampleCheckedAsCopiedIn(t *testing.T) {
	m := startMesh(t, 2, meshOpts{samples: 20, minSize: 4 << 10, maxSize: 8 << 10, replicas: 2, configure: func(_ int, c *Config) {
		c.Cluster.Prefetch = -1 // nothing read ahead: n1 holds only what is offered
	}})
	n0, n1 := m.byName("n0").node, m.byName("n1").node
	ds := n1.ordered[0]
	offer := func(id uint32, value []byte, sum uint64) error {
		t.Helper()
		req := &wire.OfferReq{Items: []wire.OfferItem{{Dataset: ds.name, Version: ds.manifest.Version, ID: id, Sum: sum, Value: value}}}
		parts, err := req.Parts()
		if err != nil {
			t.Fatal(err)
		}
		return n0.cluster.callName(context.Background(), n1.Name(), wire.MethodOffer, parts, nil)
	}
	kept := func(id uint32) (inStore, inPolicy bool) {
		n1.lockPolicy()
		defer n1.polMu.Unlock()
		return n1.store.Has([]byte(keyOfSample(ds, id))), n1.pol.Resident(sampleID(ds, int(id)))
	}
	checksumErrors := func() int64 { return ds.counters.Total().ChecksumErrors }
	before := checksumErrors()
	for id := range uint32(3) {
		value := bytes.Clone(m.files[id])
		sum := shm.Checksum(value)
		if id == 0 {
			value[len(value)/2] ^= 0x20 // changed on the way
		} else if id == 1 {
			sum ^= 1
		}
		err := offer(id, value, sum)
		inStore, inPolicy := kept(id)
		if id < 2 {
			if peer.CodeOf(err) != peer.CodeBadRequest || !strings.Contains(err.Error(), ErrChecksum.Error()) {
				t.Errorf("sample %d with bytes and sum that differ: %v, want a checksum error", id, err)
			}
			if inStore || inPolicy {
				t.Errorf("sample %d with bytes and sum that differ: in the store %v, in the policy %v", id, inStore, inPolicy)
			}
			continue
		}
		if err != nil || !inStore || !inPolicy {
			t.Fatalf("sample %d: %v; in the store %v, in the policy %v", id, err, inStore, inPolicy)
		}
	}
	if n := checksumErrors() - before; n != 2 {
		t.Errorf("checksum errors counted at n1: %d, want the 2 offers refused", n)
	}
	got, err := m.byName("n1").client(t).Get(context.Background(), keyOfSample(ds, 2)).Bytes()
	if err != nil || !bytes.Equal(got, m.files[2]) {
		t.Fatalf("GET of the offered sample at n1: %d bytes, %v; want its %d bytes", len(got), err, len(m.files[2]))
	}
}
