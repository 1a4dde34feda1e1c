package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// HeaderLen is the size of a frame's header: the u32 length prefix plus
// the u16 method or code.
const HeaderLen = 6

const headerLen = HeaderLen

// firstChunk is the most readFrame allocates for a body before any of its
// bytes arrived; it grows the buffer by doubling as data comes in, so a frame
// that claims more than it carries costs at most twice what it carried.
const firstChunk = 512 << 10

// maxDepth is how deeply CheckMsgpack lets arrays and maps nest.
const maxDepth = 32

// EncodeFrame writes one frame: the length prefix, tag (a Method or a Code)
// and body, in one Write. It does not check body against a frame limit.
func EncodeFrame(w io.Writer, tag uint16, body []byte) error {
	if uint64(len(body))+2 > 1<<32-1 {
		return ErrFrameTooLarge
	}
	b := make([]byte, headerLen+len(body))
	putHeader(b, tag)
	copy(b[headerLen:], body)
	_, err := w.Write(b)
	return err
}

// putHeader fills the first headerLen bytes of the frame b.
func putHeader(b []byte, tag uint16) { putHeaderOf(b, tag, len(b)-headerLen) }

// putHeaderOf writes into b[:headerLen] the header of a frame of tag whose
// body, after the header, is n bytes long.
func putHeaderOf(b []byte, tag uint16, n int) {
	binary.BigEndian.PutUint32(b, uint32(headerLen-4+n))
	binary.BigEndian.PutUint16(b[4:], tag)
}

// DecodeFrame reads one frame of at most limit bytes after its length prefix
// and returns its tag (a Method or a Code) and body. A length over limit is
// refused with ErrFrameTooLarge before anything is allocated; a length under
// 2 with ErrBadFrame; a frame cut short with io.ErrUnexpectedEOF (io.EOF if r
// was empty). Memory grows with the bytes that arrive, not with the length
// claimed. The body is not checked: see CheckMsgpack.
func DecodeFrame(r io.Reader, limit int) (tag uint16, body []byte, err error) {
	return readFrame(r, limit, nil, nil)
}

// readFrame is DecodeFrame reading the body into buf's storage, which it
// grows (and then returns) when buf is too small. admit, if not nil, is
// asked for the body's length before any of it is read; when it refuses,
// readFrame returns ErrBusy without reading the body.
func readFrame(r io.Reader, limit int, buf []byte, admit func(n int) bool) (tag uint16, body []byte, err error) {
	tag, need, err := readHeader(r, limit, admit)
	if err != nil {
		return tag, buf[:0], err
	}
	body, err = readBody(r, need, buf)
	return tag, body, err
}

// readHeader reads a frame's header and returns its tag and the length of
// its body, checked as readFrame checks it; the body is left unread.
func readHeader(r io.Reader, limit int, admit func(n int) bool) (tag uint16, size int, err error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return 0, 0, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if uint64(n) > uint64(limit) {
		return 0, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, limit)
	}
	if n < 2 {
		return 0, 0, fmt.Errorf("%w: length %d", ErrBadFrame, n)
	}
	if admit != nil && !admit(int(n)) {
		return 0, 0, fmt.Errorf("%w: no room for a frame of %d bytes", ErrBusy, n)
	}
	if _, err := io.ReadFull(r, hdr[4:]); err != nil {
		return 0, 0, unexpected(err)
	}
	return binary.BigEndian.Uint16(hdr[4:]), int(n) - 2, nil
}

// readBody reads need bytes into buf's storage, which it grows (and then
// returns) when buf is too small: by doubling as bytes arrive, from
// firstChunk, so a sender that claims more than it sends costs at most
// twice what it sent.
func readBody(r io.Reader, need int, buf []byte) ([]byte, error) {
	body := buf[:0]
	for len(body) < need {
		if len(body) == cap(body) {
			grown := make([]byte, len(body), min(need, max(2*cap(body), firstChunk)))
			copy(grown, body)
			body = grown
		}
		k, err := r.Read(body[len(body):min(need, cap(body))])
		body = body[:len(body)+k]
		if err != nil && len(body) < need {
			return body, unexpected(err)
		}
	}
	return body, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// CheckMsgpack reports whether b holds exactly one well-formed msgpack value
// whose every declared length is possible: each str, bin and ext length fits
// in the bytes that remain, the elements that arrays and maps declare (all
// still pending ones together, one byte at least each) fit in the bytes that
// remain, and containers nest at most 32 deep. It allocates nothing. Run it
// before msgpack.Unmarshal on bytes from the network: msgpack/v5 sizes slices
// and maps from their headers. Errors wrap ErrBadFrame.
func CheckMsgpack(b []byte) error {
	_, err := MsgpackCost(b)
	return err
}

// decodedValueCost is what one decoded msgpack value may take in memory
// beside its payload bytes: a slice, string or interface header.
const decodedValueCost = 24

// MsgpackCost checks b as CheckMsgpack does and returns a bound on the
// memory that decoding it may take: its bytes, plus decodedValueCost for
// every value it holds. A frame of many tiny values (empty arrays, say)
// decodes to many times its size; the bound lets a server charge that
// before it decodes.
func MsgpackCost(b []byte) (int64, error) {
	values := int64(0)
	// pending[d] counts the values still expected at nesting level d; need
	// is their sum, each of which takes one byte at least.
	var pending [maxDepth + 1]uint64
	pending[0] = 1
	need := uint64(1)
	d := 0
	p := 0
	for {
		for pending[d] == 0 {
			if d == 0 {
				if p != len(b) {
					return 0, fmt.Errorf("%w: %d bytes after the msgpack value", ErrBadFrame, len(b)-p)
				}
				return int64(len(b)) + decodedValueCost*values, nil
			}
			d--
		}
		if p >= len(b) {
			return 0, fmt.Errorf("%w: msgpack truncated at byte %d", ErrBadFrame, p)
		}
		pending[d]--
		need--
		values++
		c := b[p]
		p++
		var skip uint64 // payload bytes after the header
		var elems uint64
		container := false
		switch {
		case c <= 0x7f || c >= 0xe0: // positive and negative fixint
		case c <= 0x8f: // fixmap
			elems, container = 2*uint64(c&0x0f), true
		case c <= 0x9f: // fixarray
			elems, container = uint64(c&0x0f), true
		case c <= 0xbf: // fixstr
			skip = uint64(c & 0x1f)
		default:
			switch c {
			case 0xc0, 0xc2, 0xc3: // nil, false, true
			case 0xc1:
				return 0, fmt.Errorf("%w: msgpack code 0xc1 at byte %d", ErrBadFrame, p-1)
			case 0xc4, 0xd9: // bin8, str8
				skip = 1
			case 0xc5, 0xda: // bin16, str16
				skip = 2
			case 0xc6, 0xdb: // bin32, str32
				skip = 4
			case 0xc7: // ext8: length, type
				skip = 1
			case 0xc8:
				skip = 2
			case 0xc9:
				skip = 4
			case 0xca, 0xce, 0xd2: // float32, uint32, int32
				skip = 4
			case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
				skip = 8
			case 0xcc, 0xd0: // uint8, int8
				skip = 1
			case 0xcd, 0xd1: // uint16, int16
				skip = 2
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16 plus type
				skip = 1 + 1<<(c-0xd4)
			case 0xdc, 0xdd, 0xde, 0xdf: // array16, array32, map16, map32
				container = true
			}
		}
		rest := uint64(len(b) - p)
		switch c {
		case 0xc4, 0xc5, 0xc6, 0xd9, 0xda, 0xdb, 0xc7, 0xc8, 0xc9:
			// A length of skip bytes, then (ext) a type byte, then that many
			// bytes.
			if skip > rest {
				return 0, truncated(p)
			}
			l := readUint(b[p:], int(skip))
			p += int(skip)
			if c >= 0xc7 && c <= 0xc9 {
				l++
			}
			skip = l
		case 0xdc, 0xdd, 0xde, 0xdf:
			w := 2
			if c == 0xdd || c == 0xdf {
				w = 4
			}
			if uint64(w) > rest {
				return 0, truncated(p)
			}
			elems = readUint(b[p:], w)
			p += w
			if c >= 0xde {
				elems *= 2
			}
		}
		rest = uint64(len(b) - p)
		if skip > rest {
			return 0, fmt.Errorf("%w: msgpack length %d at byte %d exceeds the %d bytes left", ErrBadFrame, skip, p, rest)
		}
		p += int(skip)
		if container && elems > 0 {
			if d == maxDepth {
				return 0, fmt.Errorf("%w: msgpack nests deeper than %d", ErrBadFrame, maxDepth)
			}
			need += elems
			if need > uint64(len(b)-p) {
				return 0, fmt.Errorf("%w: msgpack declares %d more values at byte %d, only %d bytes left", ErrBadFrame, need, p, len(b)-p)
			}
			d++
			pending[d] = elems
		}
		if need > uint64(len(b)-p) {
			return 0, truncated(p)
		}
	}
}

func truncated(p int) error {
	return fmt.Errorf("%w: msgpack truncated at byte %d", ErrBadFrame, p)
}

// readUint reads a big-endian unsigned integer of w (1, 2 or 4) bytes.
func readUint(b []byte, w int) uint64 {
	switch w {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.BigEndian.Uint16(b))
	default:
		return uint64(binary.BigEndian.Uint32(b))
	}
}

// isFrameError reports an error of the frame's own making, as opposed to the
// stream's.
func isFrameError(err error) bool {
	return errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrBadFrame)
}
