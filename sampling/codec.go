package sampling

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
)

func wrapf(err error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", err, fmt.Sprintf(format, args...))
}

func checksum(b []byte) uint32 {
	return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
}

// appendChecksum appends the CRC-32C of b to b.
func appendChecksum(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, checksum(b))
}

// verifyChecksum checks the trailing CRC-32C of data and returns the body.
func verifyChecksum(data []byte) ([]byte, error) {
	if len(data) < 4 {
		return nil, wrapf(ErrCorrupt, "%d bytes, too short", len(data))
	}
	body := data[:len(data)-4]
	if got, want := binary.LittleEndian.Uint32(data[len(data)-4:]), checksum(body); got != want {
		return nil, wrapf(ErrCorrupt, "checksum %08x, want %08x", got, want)
	}
	return body, nil
}

// Encoding of a Table, version 1, all integers little-endian:
//
//	magic "SHSC" | version byte 1 | n uint32 | scored uint32 |
//	bitset: ceil(n/8) bytes, id i at bit i%8 of byte i/8 |
//	scores: one float32 per scored id, ascending id |
//	CRC-32C (Castagnoli) of all the preceding bytes, uint32
//
// About n/8 + 4*scored + 17 bytes.
const (
	tableMagic   = "SHSC"
	tableVersion = 1
	tableHeader  = len(tableMagic) + 1 + 4 + 4
)

// MarshalBinary encodes the table's scores (not alpha or kind, which are
// configuration) in a compact, versioned, checksummed form for replication
// and warm start. The result is a new slice owned by the caller.
func (t *Table) MarshalBinary() ([]byte, error) {
	n := len(t.scores)
	buf := make([]byte, 0, tableHeader+(n+7)/8+4*t.numScored+4)
	buf = append(buf, tableMagic...)
	buf = append(buf, tableVersion)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(n))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(t.numScored))
	for i := 0; i < n; i += 8 {
		buf = append(buf, byte(t.scored[i/64]>>(i%64)))
	}
	for w, word := range t.scored {
		for word != 0 {
			id := w*64 + bits.TrailingZeros64(word)
			word &= word - 1
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(t.scores[id]))
		}
	}
	return appendChecksum(buf), nil
}

// UnmarshalBinary replaces the table's scores with an encoding made by
// MarshalBinary; the table keeps its alpha and kind. A table that already has
// samples (Len() > 0) accepts only an encoding of the same length
// (ErrSizeMismatch); a zero Table takes the encoded length. Truncated or oversized input, an
// unknown version, a bad checksum, inconsistent counts or a score that is not
// finite and non-negative fail with ErrCorrupt, and the table is unchanged.
// Nothing is allocated before the input's length has been checked against the
// length it claims. data is not retained.
func (t *Table) UnmarshalBinary(data []byte) error {
	body, err := verifyChecksum(data)
	if err != nil {
		return err
	}
	if len(body) < tableHeader || string(body[:4]) != tableMagic {
		return wrapf(ErrCorrupt, "not a score table")
	}
	if v := body[4]; v != tableVersion {
		return wrapf(ErrCorrupt, "score table version %d, want %d", v, tableVersion)
	}
	n := uint64(binary.LittleEndian.Uint32(body[5:]))
	scored := uint64(binary.LittleEndian.Uint32(body[9:]))
	if scored > n || n > math.MaxInt/8 { // the second: on 32-bit platforms
		return wrapf(ErrCorrupt, "%d scored of %d samples", scored, n)
	}
	if want := uint64(tableHeader) + (n+7)/8 + 4*scored; uint64(len(body)) != want {
		return wrapf(ErrCorrupt, "%d bytes for %d samples (%d scored), want %d", len(body), n, scored, want)
	}
	if len(t.scores) > 0 && uint64(len(t.scores)) != n {
		return wrapf(ErrSizeMismatch, "encoding of %d samples into a table of %d", n, len(t.scores))
	}
	bitset := body[tableHeader : tableHeader+int((n+7)/8)]
	if n%8 != 0 && bitset[len(bitset)-1]>>(n%8) != 0 {
		return wrapf(ErrCorrupt, "bits set beyond sample %d", n)
	}
	var count uint64
	for _, b := range bitset {
		count += uint64(bits.OnesCount8(b))
	}
	if count != scored {
		return wrapf(ErrCorrupt, "bitset holds %d scored samples, header says %d", count, scored)
	}

	next := Table{
		alpha:  t.alpha,
		kind:   t.kind,
		scores: make([]float32, n),
		scored: make([]uint64, (n+63)/64),
	}
	raw := body[tableHeader+len(bitset):]
	for i, b := range bitset {
		next.scored[i/8] |= uint64(b) << (8 * (i % 8))
	}
	for w, word := range next.scored {
		for word != 0 {
			id := w*64 + bits.TrailingZeros64(word)
			word &= word - 1
			u := binary.LittleEndian.Uint32(raw)
			raw = raw[4:]
			if u>>31 != 0 || u>>23 == 0xff {
				return wrapf(ErrCorrupt, "score of id %d is not finite and non-negative", id)
			}
			v := math.Float32frombits(u)
			next.scores[id] = v
			next.sum.add(v, 1)
		}
	}
	next.numScored = int(scored)
	next.refreshMean()
	*t = next
	return nil
}

// Encoding of a Sampler's coverage state, version 1, integers little-endian:
//
//	magic "SHCV" | version byte 1 | n uint32 | next epoch uint32 |
//	per sample, ascending id: uvarint age = (next-1) - last epoch drawn,
//	in [0, next] (next-1 - (-1) for a sample never drawn) |
//	CRC-32C of all the preceding bytes, uint32
//
// Ages are small, so this is about one byte per sample.
const (
	samplerMagic   = "SHCV"
	samplerVersion = 1
	samplerHeader  = len(samplerMagic) + 1 + 4 + 4
)

// MarshalBinary encodes the sampler's coverage state (the next epoch and the
// last epoch each sample was drawn), so that a new leader can continue the
// job's sequence of orders. Configuration is not included. The result is a new
// slice owned by the caller.
func (s *Sampler) MarshalBinary() ([]byte, error) {
	buf := make([]byte, 0, samplerHeader+len(s.last)+8)
	buf = append(buf, samplerMagic...)
	buf = append(buf, samplerVersion)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(s.last)))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(s.next))
	// Ages below 128 are one byte each, written in place, up to the
	// first that is not; the rest go as uvarints.
	top := int64(s.next) - 1
	ages := buf[len(buf) : len(buf)+len(s.last)]
	i := 0
	for ; i < len(s.last); i++ {
		age := uint64(top - int64(s.last[i]))
		if age >= 0x80 {
			break
		}
		ages[i] = byte(age)
	}
	buf = buf[:len(buf)+i]
	for _, l := range s.last[i:] {
		buf = binary.AppendUvarint(buf, uint64(top-int64(l)))
	}
	return appendChecksum(buf), nil
}

// UnmarshalBinary replaces the sampler's coverage state with one made by
// MarshalBinary; the sampler keeps its configuration. A sampler of n > 0
// samples accepts only a state of n samples (ErrSizeMismatch); a zero Sampler
// takes the encoded length. Corrupt input fails with ErrCorrupt and leaves the
// sampler unchanged. data is not retained.
func (s *Sampler) UnmarshalBinary(data []byte) error {
	body, err := verifyChecksum(data)
	if err != nil {
		return err
	}
	if len(body) < samplerHeader || string(body[:4]) != samplerMagic {
		return wrapf(ErrCorrupt, "not a sampler state")
	}
	if v := body[4]; v != samplerVersion {
		return wrapf(ErrCorrupt, "sampler state version %d, want %d", v, samplerVersion)
	}
	n := uint64(binary.LittleEndian.Uint32(body[5:]))
	next := int64(binary.LittleEndian.Uint32(body[9:]))
	if next > math.MaxInt32 {
		return wrapf(ErrCorrupt, "next epoch %d", next)
	}
	raw := body[samplerHeader:]
	if uint64(len(raw)) < n || n > math.MaxInt/4 { // every age takes at least one byte
		return wrapf(ErrCorrupt, "%d bytes for %d samples", len(raw), n)
	}
	if s.n > 0 && uint64(s.n) != n {
		return wrapf(ErrSizeMismatch, "state of %d samples into a sampler of %d", n, s.n)
	}
	last := make([]int32, n)
	for i := range last {
		age, k := binary.Uvarint(raw)
		if k <= 0 || age > uint64(next) {
			return wrapf(ErrCorrupt, "age of sample %d", i)
		}
		raw = raw[k:]
		last[i] = int32(next - 1 - int64(age))
	}
	if len(raw) != 0 {
		return wrapf(ErrCorrupt, "%d trailing bytes", len(raw))
	}
	s.n = int(n)
	s.next = int(next)
	s.last = last
	return nil
}
