package shards

import (
	"fmt"
	"io"
	"math"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/internal/binfile"
)

// The index's state file, as this package writes it (internal/binfile):
// the check, the number of samples and each sample: its key, its shard,
// its start, its end less its start, its number of members and each
// member's extension, offset and size. Reading it takes a tenth of what
// decoding the JSON of earlier builds took (BenchmarkLoadIndex); that
// form is still read.
const indexMagic = "shade-shards-index/2\n"

// writeIndex writes the index of the shards check identifies (names are
// its samples' keys) in the index file's form.
func writeIndex(w io.Writer, check string, names dataset.Names, p *packedIndex) error {
	bw := binfile.NewWriter(w, indexMagic)
	bw.String(check)
	bw.Uvarint(uint64(p.len()))
	for i, name := range names.AllBytes() {
		from, to, start, end := p.span(i)
		bw.Bytes(name)
		bw.Uvarint(uint64(p.shardOf(i)))
		bw.Uvarint(uint64(start))
		bw.Uvarint(uint64(end - start))
		bw.Uvarint(uint64(to - from))
		for k := from; k < to; k++ {
			bw.String(p.exts[p.members[k].ext])
			bw.Uvarint(uint64(p.offOf(k)))
			bw.Uvarint(uint64(p.members[k].size))
		}
	}
	return bw.Close()
}

// readIndex reads an index file of size bytes from r into the index of
// st's shards, if it is whole, of the shards as st.check identifies them,
// and every sample lies within its shard.
func readIndex(r io.Reader, size int64, st store) (*indexBuilder, error) {
	br, err := binfile.NewReader(r, size, indexMagic)
	if err != nil {
		return nil, err
	}
	if got := br.String(math.MaxUint16); br.Err() == nil && got != st.check() {
		return nil, fmt.Errorf("%w: an index of other shards", binfile.ErrFile)
	}
	// A sample takes at least 5 bytes and a member 3: no count read from a
	// damaged file makes more room than the rest of the file could fill.
	n := br.Uvarint(uint64(br.Left() / 5))
	b, err := newIndexBuilder(st, int(n))
	if err != nil {
		return nil, err
	}
	var (
		key  []byte
		ms   []member
		left = br.Left() // the samples' bytes
	)
	for i := range n {
		if i == binfile.SizingRecords {
			// The index's room for members and keys, by what the samples
			// read so far hold: it then seldom grows by doubling, nor
			// keeps much room it does not fill.
			b.grow(br.Estimate(len(b.p.members), left)-len(b.p.members), br.Estimate(b.names.Size(), left)-b.names.Size())
		}
		key = append(key[:0], br.Bytes(math.MaxUint16)...)
		shard, start := int(br.Uvarint(math.MaxInt32)), br.Int()
		end := start + int64(br.Uvarint(uint64(math.MaxInt64-start)))
		ms = ms[:0]
		for range br.Uvarint(uint64(br.Left() / 3)) {
			// Each extension's string made once, in the index's table.
			ext := b.exts.names[extID(&b.exts, br.Bytes(math.MaxUint16))]
			ms = append(ms, member{Ext: ext, Off: br.Int(), Size: br.Int()})
			if br.Err() != nil {
				return nil, br.Err()
			}
		}
		if br.Err() != nil {
			return nil, br.Err()
		}
		if len(ms) > 0 && start+ms[len(ms)-1].Off+ms[len(ms)-1].Size != end {
			return nil, fmt.Errorf("%w: sample %d ends at %d, its last member at %d", binfile.ErrFile, b.len(), end, start+ms[len(ms)-1].Off+ms[len(ms)-1].Size)
		}
		if err := b.addBytes(key, shard, start, ms); err != nil {
			return nil, fmt.Errorf("%w: %w", binfile.ErrFile, err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	return b, nil
}
