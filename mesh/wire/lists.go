package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// littleEndian reports whether this machine stores numbers as the lists
// travel, little-endian (amd64 and arm64 do): a list then goes out as its
// own memory and comes back in the bin's, with no pass over its values.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// number is a value of a packed list.
type number interface{ uint32 | float32 | float64 }

// encodeBin writes l, if this machine is little-endian and l is not
// empty, as one bin of its own memory, and reports whether it did.
func encodeBin[T number](enc *msgpack.Encoder, l []T) (bool, error) {
	if !littleEndian || len(l) == 0 {
		return false, nil
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(l))), len(l)*int(unsafe.Sizeof(l[0])))
	if err := enc.EncodeBytesLen(len(b)); err != nil {
		return true, err
	}
	_, err := enc.Writer().Write(b)
	return true, err
}

// fromBin returns a bin's bytes as the list they hold, in the bin's own
// memory, if this machine is little-endian and the bytes are aligned for
// T (a bin is its own allocation, which is); nil otherwise. len(b) must
// be a whole number of values.
func fromBin[T number](b []byte) []T {
	var zero T
	if !littleEndian || len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%unsafe.Alignof(zero) != 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(zero)))
}

// U32s is a list of sample ids that travels as one msgpack bin of
// little-endian 4-byte words: a leader merges millions of ids an epoch,
// and msgpack encodes and decodes an array element by element, through
// reflection, at tens of nanoseconds each; a bin is one copy. Nil and
// empty both travel as an empty bin and come back empty.
type U32s []uint32

// EncodeMsgpack implements msgpack.CustomEncoder.
func (l U32s) EncodeMsgpack(enc *msgpack.Encoder) error {
	if done, err := encodeBin(enc, l); done {
		return err
	}
	b := make([]byte, 4*len(l))
	for i, v := range l {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return enc.EncodeBytes(b)
}

// DecodeMsgpack implements msgpack.CustomDecoder: a bin whose length is
// not a whole number of words is an error.
func (l *U32s) DecodeMsgpack(dec *msgpack.Decoder) error {
	b, err := dec.DecodeBytes()
	if err != nil {
		return err
	}
	if len(b)%4 != 0 {
		return fmt.Errorf("wire: a list of 4-byte words is %d bytes long", len(b))
	}
	if out := fromBin[uint32](b); out != nil {
		*l = out
		return nil
	}
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	*l = out
	return nil
}

// F64s is a list of losses or scores that travels as one msgpack bin of
// little-endian IEEE 754 doubles, for the reason U32s does; every value
// comes back bit for bit (NaNs included: the receiver checks them).
type F64s []float64

// EncodeMsgpack implements msgpack.CustomEncoder.
func (l F64s) EncodeMsgpack(enc *msgpack.Encoder) error {
	if done, err := encodeBin(enc, l); done {
		return err
	}
	b := make([]byte, 8*len(l))
	for i, v := range l {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
	return enc.EncodeBytes(b)
}

// DecodeMsgpack implements msgpack.CustomDecoder: a bin whose length is
// not a whole number of doubles is an error.
func (l *F64s) DecodeMsgpack(dec *msgpack.Decoder) error {
	b, err := dec.DecodeBytes()
	if err != nil {
		return err
	}
	if len(b)%8 != 0 {
		return fmt.Errorf("wire: a list of doubles is %d bytes long", len(b))
	}
	if out := fromBin[float64](b); out != nil {
		*l = out
		return nil
	}
	out := make([]float64, len(b)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	*l = out
	return nil
}

// F32s is a list of importance weights that travels as one msgpack bin of
// little-endian IEEE 754 singles, for the reason U32s does.
type F32s []float32

// EncodeMsgpack implements msgpack.CustomEncoder.
func (l F32s) EncodeMsgpack(enc *msgpack.Encoder) error {
	if done, err := encodeBin(enc, l); done {
		return err
	}
	b := make([]byte, 4*len(l))
	for i, v := range l {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return enc.EncodeBytes(b)
}

// DecodeMsgpack implements msgpack.CustomDecoder: a bin whose length is
// not a whole number of singles is an error.
func (l *F32s) DecodeMsgpack(dec *msgpack.Decoder) error {
	b, err := dec.DecodeBytes()
	if err != nil {
		return err
	}
	if len(b)%4 != 0 {
		return fmt.Errorf("wire: a list of singles is %d bytes long", len(b))
	}
	if out := fromBin[float32](b); out != nil {
		*l = out
		return nil
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	*l = out
	return nil
}

// Encode returns p in msgpack, encoded into a buffer sized for it at
// once: an order of a million samples would otherwise be copied through
// every doubling of a growing buffer.
func (p *PublishMsg) Encode() ([]byte, error) {
	size := 256 + len(p.Dataset) + len(p.Job) + len(p.Version) + len(p.Sampler)
	for _, s := range p.Slices {
		size += 5 + 4*len(s)
	}
	for _, w := range p.Weights {
		size += 5 + 4*len(w)
	}
	for _, r := range p.Ranks {
		size += 5 + len(r)
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	if err := msgpack.NewEncoder(buf).Encode(p); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// PackSlices returns an order's slices as U32s, sharing their memory.
func PackSlices(slices [][]uint32) []U32s {
	out := make([]U32s, len(slices))
	for i, s := range slices {
		out[i] = s
	}
	return out
}

// PackWeights returns an order's weights as F32s, sharing their memory;
// nil for nil.
func PackWeights(weights [][]float32) []F32s {
	if weights == nil {
		return nil
	}
	out := make([]F32s, len(weights))
	for i, w := range weights {
		out[i] = w
	}
	return out
}
