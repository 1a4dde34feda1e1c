package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/shade-mesh/shade/transport/peer"
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
//
// The transport goes further for a whole message: it has a FetchReq or a
// FetchHead append its bytes to the frame (AppendMsgpack, peer.Appender),
// with no msgpack encoder, and decode itself from the frame's bytes
// (UnmarshalMsgpack, msgpack.Unmarshaler), where the layout the encoders
// write (keys in their order, fixed-width integers) is read straight from
// the bytes, and anything else goes to the decoder above. Checking and
// decoding the heads of about 20 items through the decoder took 7.5% of
// the asking peer's CPU for MGETs of small samples
// (test/results/hedged-reads.md).

// maxPrealloc bounds the elements a decoder makes room for ahead of
// reading them: a hostile length costs the bytes that follow it, not
// what it claims. (The peer transport checks every frame's lengths
// against its bytes before decoding: peer.CheckMsgpack.)
const maxPrealloc = 1 << 12

// EncodeMsgpack implements msgpack.CustomEncoder: AppendMsgpack's bytes.
func (r FetchReq) EncodeMsgpack(enc *msgpack.Encoder) error {
	return writeAppended(enc, r.AppendMsgpack)
}

// AppendMsgpack implements peer.Appender: it appends the bytes msgpack's
// reflection makes of r (a map of the fields' tags in their order, First
// left out when false, every id a 32-bit integer) to dst.
func (r FetchReq) AppendMsgpack(dst []byte) ([]byte, error) {
	fields := byte(5)
	if r.First {
		fields++
	}
	dst = append(dst, msgpcode.FixedMapLow|fields, keyCode, 'd')
	dst = appendString(dst, r.Dataset)
	dst = append(dst, keyCode, 'v')
	dst = appendString(dst, r.Version)
	dst = append(dst, keyCode, 'i')
	if r.IDs == nil {
		dst = append(dst, msgpcode.Nil)
	} else {
		dst = appendArrayLen(dst, len(r.IDs))
		for _, id := range r.IDs {
			dst = append(dst, msgpcode.Uint32, byte(id>>24), byte(id>>16), byte(id>>8), byte(id))
		}
	}
	dst = append(dst, keyCode, 'm', boolCode(r.MemoryOnly), keyCode, 'w', boolCode(r.Warm))
	if r.First {
		dst = append(dst, keyCode, 'p', msgpcode.True)
	}
	return dst, nil
}

// UnmarshalMsgpack implements msgpack.Unmarshaler: it decodes b, which
// must hold r's message and nothing after it, as CheckMsgpack and then
// DecodeMsgpack would, reading AppendMsgpack's layout straight from b
// (no allocation past the strings and the ids, which b's length bounds).
// msgpack's decoder itself takes DecodeMsgpack.
func (r *FetchReq) UnmarshalMsgpack(b []byte) error {
	s := scan{b: b}
	var q FetchReq
	fields := s.mapLen()
	if fields == 5 || fields == 6 {
		q.Dataset = s.strOf('d')
		q.Version = s.strOf('v')
		s.key('i')
		if n, ok := s.arrayLen(5); ok {
			q.IDs = make([]uint32, n)
			for i := range q.IDs {
				q.IDs[i] = uint32(s.fixed(msgpcode.Uint32, 4))
			}
		}
		q.MemoryOnly = s.boolOf('m')
		q.Warm = s.boolOf('w')
		if fields == 6 {
			q.First = s.boolOf('p')
		}
		if s.done() {
			*r = q
			return nil
		}
	}
	return unmarshalChecked(b, r)
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

// EncodeMsgpack implements msgpack.CustomEncoder: AppendMsgpack's bytes.
func (h FetchHead) EncodeMsgpack(enc *msgpack.Encoder) error {
	return writeAppended(enc, h.AppendMsgpack)
}

// AppendMsgpack implements peer.Appender: it appends the bytes msgpack's
// reflection makes of h (a map of the fields' tags in their order, an
// item's Err left out when empty, fixed-width integers) to dst.
func (h FetchHead) AppendMsgpack(dst []byte) ([]byte, error) {
	dst = append(dst, msgpcode.FixedMapLow|1, keyCode, 'i')
	if h.Items == nil {
		return append(dst, msgpcode.Nil), nil
	}
	dst = appendArrayLen(dst, len(h.Items))
	for i := range h.Items {
		m := &h.Items[i]
		fields := byte(4)
		if m.Err != "" {
			fields++
		}
		s, n := m.Sum, m.Len
		dst = append(dst, msgpcode.FixedMapLow|fields,
			keyCode, 'f', boolCode(m.Found),
			keyCode, 'h', boolCode(m.Hit),
			keyCode, 's', msgpcode.Uint64, byte(s>>56), byte(s>>48), byte(s>>40), byte(s>>32), byte(s>>24), byte(s>>16), byte(s>>8), byte(s),
			keyCode, 'n', msgpcode.Uint32, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		if m.Err != "" {
			dst = append(dst, keyCode, 'e')
			dst = appendString(dst, m.Err)
		}
	}
	return dst, nil
}

// UnmarshalMsgpack implements msgpack.Unmarshaler: it decodes b, which
// must hold h's message and nothing after it, as CheckMsgpack and then
// DecodeMsgpack would, reading AppendMsgpack's layout straight from b
// (no allocation past the items and their errors, which b's length
// bounds). msgpack's decoder itself takes DecodeMsgpack.
func (h *FetchHead) UnmarshalMsgpack(b []byte) error {
	s := scan{b: b}
	var head FetchHead
	if s.mapLen() == 1 {
		s.key('i')
		// An item takes 25 bytes at least: its map, four keys, two
		// bools, a uint64 and a uint32.
		if n, ok := s.arrayLen(25); ok {
			head.Items = make([]FetchMeta, n)
			for i := range head.Items {
				m := &head.Items[i]
				fields := s.mapLen()
				if fields != 4 && fields != 5 {
					s.bad = true
					break
				}
				m.Found = s.boolOf('f')
				m.Hit = s.boolOf('h')
				s.key('s')
				m.Sum = s.fixed(msgpcode.Uint64, 8)
				s.key('n')
				m.Len = uint32(s.fixed(msgpcode.Uint32, 4))
				if fields == 5 {
					m.Err = s.strOf('e')
				}
			}
		}
		if s.done() {
			*h = head
			return nil
		}
	}
	return unmarshalChecked(b, h)
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

// keyCode starts every key of the fetch messages: a fixstr of one byte
// (msgpcode.FixedStrLow | 1; msgpcode's codes are variables).
const keyCode = 0xa1

// writeAppended writes what appendTo appends to an empty slice to enc's
// writer as it is: the bytes of one whole msgpack value.
func writeAppended(enc *msgpack.Encoder, appendTo func([]byte) ([]byte, error)) error {
	b, err := appendTo(nil)
	if err != nil {
		return err
	}
	_, err = enc.Writer().Write(b)
	return err
}

// unmarshalChecked decodes b into v (a FetchReq or FetchHead, by its
// DecodeMsgpack) once peer.CheckMsgpack has passed it, as the transport
// decodes other messages.
func unmarshalChecked(b []byte, v any) error {
	if err := peer.CheckMsgpack(b); err != nil {
		return err
	}
	return msgpack.Unmarshal(b, v)
}

func boolCode(v bool) byte {
	if v {
		return msgpcode.True
	}
	return msgpcode.False
}

// appendString appends v as msgpack's encoder writes a string: the
// shortest of fixstr, str8, str16 and str32 for its length.
func appendString(dst []byte, v string) []byte {
	switch l := len(v); {
	case l < 32:
		dst = append(dst, msgpcode.FixedStrLow|byte(l))
	case l < 256:
		dst = append(dst, msgpcode.Str8, byte(l))
	case l <= math.MaxUint16:
		dst = append(dst, msgpcode.Str16, byte(l>>8), byte(l))
	default:
		dst = append(dst, msgpcode.Str32, byte(l>>24), byte(l>>16), byte(l>>8), byte(l))
	}
	return append(dst, v...)
}

// appendArrayLen appends an array's header as msgpack's encoder writes
// it: the shortest of fixarray, array16 and array32 for l.
func appendArrayLen(dst []byte, l int) []byte {
	switch {
	case l < 16:
		return append(dst, msgpcode.FixedArrayLow|byte(l))
	case l <= math.MaxUint16:
		return append(dst, msgpcode.Array16, byte(l>>8), byte(l))
	}
	return append(dst, msgpcode.Array32, byte(l>>24), byte(l>>16), byte(l>>8), byte(l))
}

// scan reads the fetch messages' layout from bytes: each read that finds
// anything else (another code, another key, too few bytes) sets bad and
// reads nothing, and every read after it does nothing, so a decoder reads
// on and checks bad (done) once at the end.
type scan struct {
	b   []byte
	bad bool
}

// done reports whether every read went as expected and consumed b whole.
func (s *scan) done() bool { return !s.bad && len(s.b) == 0 }

// take returns the next n bytes, or nil (and sets bad) when fewer are left.
func (s *scan) take(n int) []byte {
	if s.bad || n > len(s.b) {
		s.bad = true
		return nil
	}
	v := s.b[:n]
	s.b = s.b[n:]
	return v
}

// mapLen reads a fixmap's header and returns its length; -1 for anything
// else.
func (s *scan) mapLen() int {
	if c := s.take(1); c != nil && c[0]&0xf0 == msgpcode.FixedMapLow {
		return int(c[0] & 0x0f)
	}
	s.bad = true
	return -1
}

// key reads the one-byte key k.
func (s *scan) key(k byte) {
	if c := s.take(2); c != nil && (c[0] != keyCode || c[1] != k) {
		s.bad = true
	}
}

// boolOf reads the key k and a bool after it.
func (s *scan) boolOf(k byte) bool {
	s.key(k)
	return s.bool()
}

// strOf reads the key k and a string after it.
func (s *scan) strOf(k byte) string {
	s.key(k)
	return s.str()
}

func (s *scan) bool() bool {
	c := s.take(1)
	if c == nil || c[0] != msgpcode.True && c[0] != msgpcode.False {
		s.bad = true
		return false
	}
	return c[0] == msgpcode.True
}

// fixed reads an integer of size bytes (4 or 8) after the code code
// (msgpcode.Uint32 or Uint64), big-endian.
func (s *scan) fixed(code byte, size int) uint64 {
	c := s.take(1 + size)
	switch {
	case c == nil || c[0] != code:
		s.bad = true
		return 0
	case size == 8:
		return binary.BigEndian.Uint64(c[1:])
	}
	return uint64(binary.BigEndian.Uint32(c[1:]))
}

// str reads a string of any of msgpack's four string codes.
func (s *scan) str() string {
	c := s.take(1)
	if c == nil {
		return ""
	}
	var n int
	switch code := c[0]; {
	case msgpcode.IsFixedString(code):
		n = int(code & msgpcode.FixedStrMask)
	case code == msgpcode.Str8:
		n = int(s.fixedLen(1))
	case code == msgpcode.Str16:
		n = int(s.fixedLen(2))
	case code == msgpcode.Str32:
		n = int(s.fixedLen(4))
	default:
		s.bad = true
		return ""
	}
	return string(s.take(n))
}

// fixedLen reads a length of size bytes, big-endian.
func (s *scan) fixedLen(size int) uint64 {
	var v uint64
	for _, b := range s.take(size) {
		v = v<<8 | uint64(b)
	}
	return v
}

// arrayLen reads an array's header whose elements take at least least
// bytes each, and returns its length and true; false for nil, and where
// the bytes left cannot hold that many elements (bad set), so that no
// length claims more than the bytes can back.
func (s *scan) arrayLen(least int) (int, bool) {
	c := s.take(1)
	if c == nil {
		return 0, false
	}
	var n uint64
	switch code := c[0]; {
	case code == msgpcode.Nil:
		return 0, false
	case code&0xf0 == msgpcode.FixedArrayLow:
		n = uint64(code & 0x0f)
	case code == msgpcode.Array16:
		n = s.fixedLen(2)
	case code == msgpcode.Array32:
		n = s.fixedLen(4)
	default:
		s.bad = true
		return 0, false
	}
	if s.bad || n > uint64(len(s.b)/least) {
		s.bad = true
		return 0, false
	}
	return int(n), true
}
