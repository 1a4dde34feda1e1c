package shards

import (
	"fmt"
	"io"
	"math"

	"github.com/shade-mesh/shade/internal/binfile"
)

// The index's state file, as this package writes it (internal/binfile):
// the check, the number of samples and each sample: its key, its shard,
// its start, its end less its start, its number of members and each
// member's extension, offset and size. Reading it takes a tenth of what
// decoding the JSON of earlier builds took (BenchmarkLoadIndex); that
// form is still read.
const indexMagic = "shade-shards-index/2\n"

// writeIndex writes samples, of the shards check identifies, in the
// index file's form.
func writeIndex(w io.Writer, check string, samples []sample) error {
	bw := binfile.NewWriter(w, indexMagic)
	bw.String(check)
	bw.Uvarint(uint64(len(samples)))
	for _, smp := range samples {
		bw.String(smp.Key)
		bw.Uvarint(uint64(smp.Shard))
		bw.Uvarint(uint64(smp.Start))
		bw.Uvarint(uint64(smp.End - smp.Start))
		bw.Uvarint(uint64(len(smp.Members)))
		for _, m := range smp.Members {
			bw.String(m.Ext)
			bw.Uvarint(uint64(m.Off))
			bw.Uvarint(uint64(m.Size))
		}
	}
	return bw.Close()
}

// readIndex reads an index file of size bytes from r: its samples, if it
// is whole and of the shards check identifies.
func readIndex(r io.Reader, size int64, check string) ([]sample, error) {
	br, err := binfile.NewReader(r, size, indexMagic)
	if err != nil {
		return nil, err
	}
	if got := br.String(math.MaxUint16); br.Err() == nil && got != check {
		return nil, fmt.Errorf("%w: an index of other shards", binfile.ErrFile)
	}
	// A sample takes at least 5 bytes and a member 3: no count read from a
	// damaged file makes more room than the rest of the file could fill.
	n := br.Uvarint(uint64(br.Left() / 5))
	samples := make([]sample, 0, n)
	exts := map[string]string{} // each extension's string made once
	for range n {
		smp := sample{Key: br.String(math.MaxUint16), Shard: int(br.Uvarint(math.MaxInt32)), Start: br.Int()}
		smp.End = smp.Start + int64(br.Uvarint(uint64(math.MaxInt64-smp.Start)))
		smp.Members = make([]member, br.Uvarint(uint64(br.Left()/3)))
		for k := range smp.Members {
			ext := br.Bytes(math.MaxUint16)
			e, ok := exts[string(ext)]
			if !ok {
				e = string(ext)
				exts[e] = e
			}
			smp.Members[k] = member{Ext: e, Off: br.Int(), Size: br.Int()}
		}
		if br.Err() != nil {
			return nil, br.Err()
		}
		samples = append(samples, smp)
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	return samples, nil
}
