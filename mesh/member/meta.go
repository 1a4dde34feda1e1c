package member

import (
	"encoding/binary"
	"fmt"
	"math"
)

// MetaVersion is the Meta encoding this package writes.
const MetaVersion uint8 = 1

// MaxMetaSize is the largest encoded Meta: memberlist's limit on node
// metadata.
const MaxMetaSize = 512

// flagLeaving marks the meta of a node that is leaving gracefully; see
// List.Leave. It is internal to the wire form and never shows in Meta.
const flagLeaving = 1 << 0

// Meta is a node's metadata, gossiped with its membership.
//
// Encoding version 1 is: the version byte; a flags byte; PeerAddr as a
// uvarint length and bytes; Capacity as a uvarint; Build as length and
// bytes; the number of Datasets as a uvarint, then each as length and
// bytes. It must fit in MaxMetaSize bytes.
type Meta struct {
	// Version is the encoding version: 0 when marshalling means
	// MetaVersion; UnmarshalBinary sets it.
	Version uint8
	// PeerAddr is the node's QUIC peer address, host:port.
	PeerAddr string
	// Capacity is the node's cache size in bytes, >= 0.
	Capacity int64
	// Build identifies the node's software build.
	Build string
	// Datasets the node serves, each "name=version"; optional.
	Datasets []string
}

// MarshalBinary encodes m. It fails with ErrMeta when m's Version is
// unknown, Capacity is negative, or the encoding exceeds MaxMetaSize.
func (m Meta) MarshalBinary() ([]byte, error) {
	return m.encode(0)
}

func (m Meta) encode(flags byte) ([]byte, error) {
	if m.Version != 0 && m.Version != MetaVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrMetaVersion, m.Version, MetaVersion)
	}
	if m.Capacity < 0 {
		return nil, fmt.Errorf("%w: negative capacity %d", ErrMeta, m.Capacity)
	}
	b := make([]byte, 0, 64)
	b = append(b, MetaVersion, flags)
	b = appendString(b, m.PeerAddr)
	b = binary.AppendUvarint(b, uint64(m.Capacity))
	b = appendString(b, m.Build)
	b = binary.AppendUvarint(b, uint64(len(m.Datasets)))
	for _, d := range m.Datasets {
		b = appendString(b, d)
	}
	if len(b) > MaxMetaSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, limit %d", ErrMeta, len(b), MaxMetaSize)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// UnmarshalBinary decodes data into m. Unknown versions, unknown flags,
// truncated or trailing bytes and inputs over MaxMetaSize fail with ErrMeta
// (ErrMetaVersion for the version) and leave m unchanged. data is not
// retained.
func (m *Meta) UnmarshalBinary(data []byte) error {
	out, _, err := decodeMeta(data)
	if err != nil {
		return err
	}
	*m = out
	return nil
}

func decodeMeta(data []byte) (Meta, byte, error) {
	var m Meta
	if len(data) > MaxMetaSize {
		return m, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrMeta, len(data), MaxMetaSize)
	}
	if len(data) < 2 {
		return m, 0, fmt.Errorf("%w: %d bytes, too short", ErrMeta, len(data))
	}
	if data[0] != MetaVersion {
		return m, 0, fmt.Errorf("%w: version %d, want %d", ErrMetaVersion, data[0], MetaVersion)
	}
	flags := data[1]
	if flags&^flagLeaving != 0 {
		return m, 0, fmt.Errorf("%w: unknown flags %#x", ErrMeta, flags)
	}
	d := decoder{b: data[2:]}
	m.Version = MetaVersion
	m.PeerAddr = d.string()
	capacity := d.uvarint()
	if capacity > math.MaxInt64 {
		d.fail("capacity overflows")
	}
	m.Capacity = int64(capacity)
	m.Build = d.string()
	// Every dataset takes at least one byte, which bounds the count before
	// anything is allocated for it.
	if n := d.uvarint(); n > uint64(len(d.b)) {
		d.fail("dataset count exceeds the input")
	} else if n > 0 {
		m.Datasets = make([]string, n)
		for i := range m.Datasets {
			m.Datasets[i] = d.string()
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return Meta{}, 0, d.err
	}
	return m, flags, nil
}

// decoder reads from b until the first error, which it keeps.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMeta, why)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail("string overruns the input")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
