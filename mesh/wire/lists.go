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

// sizeOf is the bytes one value of T takes on the wire.
func sizeOf[T number]() int {
	var zero T
	return int(unsafe.Sizeof(zero))
}

// encodeList writes l as one bin of its values' little-endian bytes: its
// own memory if native (the machine is little-endian), else a copy made
// value by value.
func encodeList[T number](enc *msgpack.Encoder, l []T, native bool) error {
	size := sizeOf[T]()
	if native && len(l) > 0 {
		if err := enc.EncodeBytesLen(size * len(l)); err != nil {
			return err
		}
		_, err := enc.Writer().Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(l))), size*len(l)))
		return err
	}
	b := make([]byte, size*len(l))
	for i, v := range l {
		switch x := any(v).(type) {
		case uint32:
			binary.LittleEndian.PutUint32(b[size*i:], x)
		case float32:
			binary.LittleEndian.PutUint32(b[size*i:], math.Float32bits(x))
		case float64:
			binary.LittleEndian.PutUint64(b[size*i:], math.Float64bits(x))
		}
	}
	return enc.EncodeBytes(b)
}

// decodeList reads a bin written by encodeList. If native and the bin's
// bytes are aligned for T (a bin is an allocation of its own, which is),
// the list is the bin's memory (fromBin); else a copy made value by value. A bin
// that is not a whole number of values is an error naming what; an empty
// one comes back empty, not nil.
func decodeList[T number](dec *msgpack.Decoder, native bool, what string) ([]T, error) {
	b, err := dec.DecodeBytes()
	if err != nil {
		return nil, err
	}
	size := sizeOf[T]()
	if len(b)%size != 0 {
		return nil, fmt.Errorf("wire: a list of %s is %d bytes long", what, len(b))
	}
	if native {
		if l := fromBin[T](b); l != nil {
			return l, nil
		}
	}
	out := make([]T, len(b)/size)
	for i := range out {
		var v any
		switch any(out[i]).(type) {
		case uint32:
			v = binary.LittleEndian.Uint32(b[size*i:])
		case float32:
			v = math.Float32frombits(binary.LittleEndian.Uint32(b[size*i:]))
		case float64:
			v = math.Float64frombits(binary.LittleEndian.Uint64(b[size*i:]))
		}
		out[i] = v.(T)
	}
	return out, nil
}

// fromBin is b's memory as a list of T, if b is not empty and is aligned
// for T; nil otherwise. len(b) must be a whole number of values.
func fromBin[T number](b []byte) []T {
	var zero T
	if len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%unsafe.Alignof(zero) != 0 {
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
func (l U32s) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeList(enc, l, littleEndian) }

// DecodeMsgpack implements msgpack.CustomDecoder: a bin whose length is
// not a whole number of words is an error.
func (l *U32s) DecodeMsgpack(dec *msgpack.Decoder) error {
	out, err := decodeList[uint32](dec, littleEndian, "4-byte words")
	if err == nil {
		*l = out
	}
	return err
}

// F64s is a list of losses or scores that travels as one msgpack bin of
// little-endian IEEE 754 doubles, for the reason U32s does; every value
// comes back bit for bit (NaNs included: the receiver checks them).
type F64s []float64

// EncodeMsgpack implements msgpack.CustomEncoder.
func (l F64s) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeList(enc, l, littleEndian) }

// DecodeMsgpack implements msgpack.CustomDecoder: a bin whose length is
// not a whole number of doubles is an error.
func (l *F64s) DecodeMsgpack(dec *msgpack.Decoder) error {
	out, err := decodeList[float64](dec, littleEndian, "doubles")
	if err == nil {
		*l = out
	}
	return err
}

// F32s is a list of importance weights that travels as one msgpack bin of
// little-endian IEEE 754 singles, for the reason U32s does.
type F32s []float32

// EncodeMsgpack implements msgpack.CustomEncoder.
func (l F32s) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeList(enc, l, littleEndian) }

// DecodeMsgpack implements msgpack.CustomDecoder: a bin whose length is
// not a whole number of singles is an error.
func (l *F32s) DecodeMsgpack(dec *msgpack.Decoder) error {
	out, err := decodeList[float32](dec, littleEndian, "singles")
	if err == nil {
		*l = out
	}
	return err
}

// Encode returns p in msgpack, encoded into a buffer sized for it at
// once: an order of a million samples would otherwise be copied through
// every doubling of a growing buffer.
func (p *PublishMsg) Encode() ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, p.EncodedSize()))
	if err := msgpack.NewEncoder(buf).Encode(p); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// PeekOrder reads, from the start of an encoded PublishMsg (its first
// relayed piece, say), its epoch and Ahead, which are encoded before its
// slices; ok is false where prefix does not hold them.
func PeekOrder(prefix []byte) (epoch, ahead int, ok bool) {
	dec := msgpack.NewDecoder(bytes.NewReader(prefix))
	n, err := dec.DecodeMapLen()
	if err != nil {
		return 0, 0, false
	}
	for range n {
		key, err := dec.DecodeString()
		if err != nil {
			return 0, 0, false
		}
		switch key {
		case "e":
			epoch, err = dec.DecodeInt()
		case "a":
			ahead, err = dec.DecodeInt()
		case "S":
			return epoch, ahead, true // the slices: the fields before them are read
		default:
			err = dec.Skip()
		}
		if err != nil {
			return 0, 0, false
		}
	}
	return epoch, ahead, true
}

// EncodedSize is at least the size of p in msgpack, close above it.
func (p *PublishMsg) EncodedSize() int {
	size := 256 + len(p.Dataset) + len(p.Job) + len(p.Version) + len(p.Sampler) + len(p.Part) + 5 + 4*len(p.Reads)
	for _, s := range p.Slices {
		size += 5 + 4*len(s)
	}
	for _, w := range p.Weights {
		size += 5 + 4*len(w)
	}
	for _, r := range p.Ranks {
		size += 5 + len(r)
	}
	for _, m := range p.Below {
		size += 5 + len(m)
	}
	return size
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

// Narrow returns doubles (losses, scores) as singles, as they travel and
// as scores are kept, in a new slice.
func Narrow(doubles []float64) []float32 {
	out := make([]float32, len(doubles))
	for i, v := range doubles {
		out[i] = float32(v)
	}
	return out
}

// Widen returns singles (losses) as the doubles a score table takes, in a
// new slice.
func Widen(singles []float32) []float64 {
	out := make([]float64, len(singles))
	for i, v := range singles {
		out[i] = float64(v)
	}
	return out
}
