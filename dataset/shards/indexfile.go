package shards

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/shade-mesh/shade/protocol/crc32c"
)

// The index's state file, as this package writes it: the line
// indexMagic; then, as uvarints and strings (a uvarint length and the
// bytes), the check, the number of samples and each sample: its key, its
// shard, its start, its end less its start, its number of members and
// each member's extension, offset and size; then the CRC-32C of every
// byte before it, 4 bytes little-endian. A file that breaks any of it,
// or has bytes after it, is not used (the shards are indexed again).
// Reading it takes a fraction of what decoding the JSON of earlier
// builds took (BenchmarkLoadIndex); that form is still read.
const indexMagic = "shade-shards-index/2\n"

// writeIndex writes samples, of the shards check identifies, in the
// index file's form.
func writeIndex(w io.Writer, check string, samples []sample) error {
	cw := &crcWriter{w: bufio.NewWriterSize(w, 64<<10)}
	var b []byte
	b = append(b, indexMagic...)
	b = appendString(b, check)
	b = binary.AppendUvarint(b, uint64(len(samples)))
	for _, smp := range samples {
		b = appendString(b, smp.Key)
		b = binary.AppendUvarint(b, uint64(smp.Shard))
		b = binary.AppendUvarint(b, uint64(smp.Start))
		b = binary.AppendUvarint(b, uint64(smp.End-smp.Start))
		b = binary.AppendUvarint(b, uint64(len(smp.Members)))
		for _, m := range smp.Members {
			b = appendString(b, m.Ext)
			b = binary.AppendUvarint(b, uint64(m.Off))
			b = binary.AppendUvarint(b, uint64(m.Size))
		}
		if len(b) >= 32<<10 {
			if _, err := cw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	if _, err := cw.Write(b); err != nil {
		return err
	}
	if _, err := cw.w.Write(binary.LittleEndian.AppendUint32(nil, cw.crc)); err != nil {
		return err
	}
	return cw.w.Flush()
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// crcWriter writes to w and sums what it wrote.
type crcWriter struct {
	w   *bufio.Writer
	crc uint32
}

func (c *crcWriter) Write(p []byte) (int, error) {
	c.crc = crc32c.Update(c.crc, p)
	return c.w.Write(p)
}

// errIndexFile is an index file that is not of this form, or not whole.
var errIndexFile = errors.New("shards: index file")

// readIndex reads an index file of size bytes from r: its samples, if it
// is whole and of the shards check identifies.
func readIndex(r io.Reader, size int64, check string) ([]sample, error) {
	sum := &summing{r: r}
	ir := &indexReader{r: bufio.NewReaderSize(sum, 64<<10)}
	magic := make([]byte, len(indexMagic))
	if _, err := io.ReadFull(ir, magic); err != nil || string(magic) != indexMagic {
		return nil, fmt.Errorf("%w: not of this form", errIndexFile)
	}
	if got := ir.string(); ir.err == nil && got != check {
		return nil, fmt.Errorf("%w: of other shards", errIndexFile)
	}
	// A sample takes at least 5 bytes and a member 3: no count read from a
	// damaged file makes more room than the rest of the file could fill.
	n := ir.uvarint(uint64(max(0, size-ir.n) / 5))
	samples := make([]sample, 0, n)
	exts := map[string]string{} // each extension's string made once
	for range n {
		smp := sample{Key: ir.string(), Shard: int(ir.uvarint(math.MaxInt32)), Start: ir.int()}
		if span := ir.int(); span <= math.MaxInt64-smp.Start {
			smp.End = smp.Start + span
		} else if ir.err == nil {
			ir.err = fmt.Errorf("%w: sample %s ends past 2^63", errIndexFile, smp.Key)
		}
		smp.Members = make([]member, ir.uvarint(uint64(max(0, size-ir.n)/3)))
		for k := range smp.Members {
			ext := ir.bytes()
			e, ok := exts[string(ext)]
			if !ok {
				e = string(ext)
				exts[e] = e
			}
			smp.Members[k] = member{Ext: e, Off: ir.int(), Size: ir.int()}
		}
		if ir.err != nil {
			return nil, ir.err
		}
		samples = append(samples, smp)
	}
	var tail [5]byte
	k, _ := io.ReadFull(ir.r, tail[:]) // the sum, then the end
	if ir.err != nil || k != 4 || sum.held != 4 || binary.LittleEndian.Uint32(tail[:4]) != sum.crc {
		return nil, fmt.Errorf("%w: damaged or cut short", errIndexFile)
	}
	return samples, nil
}

// summing reads r and sums every byte it read but the last 4 (the sum a
// whole index file ends with), which it holds.
type summing struct {
	r    io.Reader
	crc  uint32
	hold [4]byte
	held int
}

func (s *summing) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	// The bytes so far end with hold[:held] then p[:n]: all but their
	// last 4 are summed.
	if over := s.held + n - 4; over > 0 {
		fromHold := min(over, s.held)
		s.crc = crc32c.Update(s.crc, s.hold[:fromHold])
		s.crc = crc32c.Update(s.crc, p[:over-fromHold])
		var next [4]byte
		k := copy(next[:], s.hold[fromHold:s.held])
		k += copy(next[k:], p[over-fromHold:n])
		s.hold, s.held = next, k
	} else {
		s.held += copy(s.hold[s.held:], p[:n])
	}
	return n, err
}

// indexReader reads an index file's values and counts the bytes it
// read; its first error stays in err, and every read after it gives zero.
type indexReader struct {
	r   *bufio.Reader
	n   int64 // bytes read
	err error
	buf []byte
}

func (ir *indexReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	ir.n += int64(n)
	return n, err
}

func (ir *indexReader) ReadByte() (byte, error) {
	c, err := ir.r.ReadByte()
	if err == nil {
		ir.n++
	}
	return c, err
}

// uvarint reads a uvarint of at most max.
func (ir *indexReader) uvarint(max uint64) uint64 {
	if ir.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(ir)
	if err == nil && v > max {
		err = fmt.Errorf("%w: a value of %d where at most %d", errIndexFile, v, max)
	}
	if err != nil {
		ir.err = fmt.Errorf("%w: %w", errIndexFile, err)
		return 0
	}
	return v
}

// int reads an offset or a size: at most MaxInt64.
func (ir *indexReader) int() int64 { return int64(ir.uvarint(math.MaxInt64)) }

// bytes reads a string's bytes, valid until the next read.
func (ir *indexReader) bytes() []byte {
	n := ir.uvarint(math.MaxUint16 + 1)
	if ir.err != nil {
		return nil
	}
	ir.buf = slices.Grow(ir.buf[:0], int(n))[:n]
	if _, err := io.ReadFull(ir, ir.buf); err != nil {
		ir.err = fmt.Errorf("%w: %w", errIndexFile, err)
		return nil
	}
	return ir.buf
}

func (ir *indexReader) string() string { return string(ir.bytes()) }
