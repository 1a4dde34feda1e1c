package wire

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// A fetch's request and its reply's head cross between peers for every
// read from another node's memory, one sample a request where no
// read-ahead batches them. msgpack's reflection took a tenth of the CPU
// of such a read (BenchmarkRemoteHits), so FetchReq and FetchHead encode
// and decode themselves, field by field. The bytes are exactly those of
// the reflection (a map of the fields' tags in their order, fixed-width
// integers, the omitempty fields left out when empty), so peers of either
// kind read each other; decoding takes the keys in any order, skips those
// it does not know, and takes nil for an empty field, as the reflection
// does (TestFetchCodecMatchesReflection, FuzzFetchDecode).

// maxPrealloc bounds the elements a decoder makes room for ahead of
// reading them: a hostile length costs the bytes that follow it, not
// what it claims. (The peer transport checks every frame's lengths
// against its bytes before decoding: peer.CheckMsgpack.)
const maxPrealloc = 1 << 12

// EncodeMsgpack implements msgpack.CustomEncoder.
func (r FetchReq) EncodeMsgpack(enc *msgpack.Encoder) error {
	fields := 5
	if r.First {
		fields++
	}
	err := enc.EncodeMapLen(fields)
	err = keyed(enc, err, "d", func() error { return enc.EncodeString(r.Dataset) })
	err = keyed(enc, err, "v", func() error { return enc.EncodeString(r.Version) })
	err = keyed(enc, err, "i", func() error { return encodeU32Array(enc, r.IDs) })
	err = keyed(enc, err, "m", func() error { return enc.EncodeBool(r.MemoryOnly) })
	err = keyed(enc, err, "w", func() error { return enc.EncodeBool(r.Warm) })
	if r.First {
		err = keyed(enc, err, "p", func() error { return enc.EncodeBool(true) })
	}
	return err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (r *FetchReq) DecodeMsgpack(dec *msgpack.Decoder) error {
	*r = FetchReq{}
	return decodeMap(dec, "fetch request", func(key string) (err error) {
		switch key {
		case "d":
			r.Dataset, err = dec.DecodeString()
		case "v":
			r.Version, err = dec.DecodeString()
		case "i":
			r.IDs, err = decodeU32Array(dec)
		case "m":
			r.MemoryOnly, err = dec.DecodeBool()
		case "w":
			r.Warm, err = dec.DecodeBool()
		case "p":
			r.First, err = dec.DecodeBool()
		default:
			err = dec.Skip()
		}
		return err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (h FetchHead) EncodeMsgpack(enc *msgpack.Encoder) error {
	err := enc.EncodeMapLen(1)
	return keyed(enc, err, "i", func() error {
		if h.Items == nil {
			return enc.EncodeNil()
		}
		if err := enc.EncodeArrayLen(len(h.Items)); err != nil {
			return err
		}
		for i := range h.Items {
			if err := h.Items[i].encode(enc); err != nil {
				return err
			}
		}
		return nil
	})
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (h *FetchHead) DecodeMsgpack(dec *msgpack.Decoder) error {
	*h = FetchHead{}
	return decodeMap(dec, "fetch reply head", func(key string) error {
		if key != "i" {
			return dec.Skip()
		}
		var err error
		h.Items, err = decodeArray(dec, func(m *FetchMeta) error { return m.decode(dec) })
		return err
	})
}

func (m *FetchMeta) encode(enc *msgpack.Encoder) error {
	fields := 4
	if m.Err != "" {
		fields++
	}
	err := enc.EncodeMapLen(fields)
	err = keyed(enc, err, "f", func() error { return enc.EncodeBool(m.Found) })
	err = keyed(enc, err, "h", func() error { return enc.EncodeBool(m.Hit) })
	err = keyed(enc, err, "s", func() error { return enc.EncodeUint64(m.Sum) })
	err = keyed(enc, err, "n", func() error { return enc.EncodeUint32(m.Len) })
	if m.Err != "" {
		err = keyed(enc, err, "e", func() error { return enc.EncodeString(m.Err) })
	}
	return err
}

func (m *FetchMeta) decode(dec *msgpack.Decoder) error {
	return decodeMap(dec, "fetch reply item", func(key string) (err error) {
		switch key {
		case "f":
			m.Found, err = dec.DecodeBool()
		case "h":
			m.Hit, err = dec.DecodeBool()
		case "s":
			m.Sum, err = dec.DecodeUint64()
		case "n":
			m.Len, err = dec.DecodeUint32()
		case "e":
			m.Err, err = dec.DecodeString()
		default:
			err = dec.Skip()
		}
		return err
	})
}

// keyed encodes key, then the value value encodes, unless err (an earlier
// field's) is set; it returns the first error.
func keyed(enc *msgpack.Encoder, err error, key string, value func() error) error {
	if err != nil {
		return err
	}
	if err := enc.EncodeString(key); err != nil {
		return err
	}
	return value()
}

// decodeMap reads a map, calling field for each of its keys to decode the
// value that follows; nil is an empty map, anything else an error naming
// what.
func decodeMap(dec *msgpack.Decoder, what string, field func(key string) error) error {
	// DecodeMapLen reads past an extension's header to a map after it;
	// msgpack's reflection, which decodes every other message, takes no
	// extension for a map, and neither does this.
	if c, err := dec.PeekCode(); err == nil && msgpcode.IsExt(c) {
		return fmt.Errorf("wire: %s: an extension (code %#x) where a map belongs", what, c)
	}
	n, err := dec.DecodeMapLen()
	if err != nil {
		return fmt.Errorf("wire: %s: %w", what, err)
	}
	for range n { // n is -1 for nil
		key, err := dec.DecodeString()
		if err != nil {
			return fmt.Errorf("wire: %s: %w", what, err)
		}
		if err := field(key); err != nil {
			return fmt.Errorf("wire: %s, field %q: %w", what, key, err)
		}
	}
	return nil
}

// encodeU32Array encodes l as msgpack's reflection encodes a []uint32: an
// array of fixed-width 32-bit integers, nil for nil.
func encodeU32Array(enc *msgpack.Encoder, l []uint32) error {
	if l == nil {
		return enc.EncodeNil()
	}
	if err := enc.EncodeArrayLen(len(l)); err != nil {
		return err
	}
	for _, v := range l {
		if err := enc.EncodeUint32(v); err != nil {
			return err
		}
	}
	return nil
}

// decodeU32Array decodes an array of integers that fit 32 bits; nil for
// nil.
func decodeU32Array(dec *msgpack.Decoder) ([]uint32, error) {
	return decodeArray(dec, func(v *uint32) (err error) {
		*v, err = dec.DecodeUint32()
		return err
	})
}

// decodeArray decodes an array, each element into a new T by decode; nil
// for nil.
func decodeArray[T any](dec *msgpack.Decoder, decode func(*T) error) ([]T, error) {
	n, err := dec.DecodeArrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	l := make([]T, 0, min(n, maxPrealloc))
	var zero T
	for range n {
		// Decoded in place: a T of its own would escape to the heap,
		// handed to decode, one allocation an element.
		l = append(l, zero)
		if err := decode(&l[len(l)-1]); err != nil {
			return nil, err
		}
	}
	return l, nil
}
