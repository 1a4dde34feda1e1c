package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// U32s is a list of sample ids that travels as one msgpack bin of
// little-endian 4-byte words: a leader merges millions of ids an epoch,
// and msgpack encodes and decodes an array element by element, through
// reflection, at tens of nanoseconds each; a bin is one copy. Nil and
// empty both travel as an empty bin and come back empty.
type U32s []uint32

// EncodeMsgpack implements msgpack.CustomEncoder.
func (l U32s) EncodeMsgpack(enc *msgpack.Encoder) error {
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
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	*l = out
	return nil
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
