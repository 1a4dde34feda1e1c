package peer

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/internal/quic"
	"github.com/shade-mesh/shade/protocol/crc32c"
)

// RawReply is a reply whose bulk bytes go to the stream as they are, not
// msgpack-encoded: a Handler returns a *RawReply (with a nil error) for a
// method that its callers call with CallRaw. The body of its frame is
//
//	[u32 length of the head][msgpack Head][Values, back to back]
//
// Head says how the values are cut apart (each one's length, say); the
// caller decodes and checks it before it reads them. Nothing is copied into
// one contiguous frame: the head is encoded on its own and the values are
// written from where they lie, one Write for each run of values that lie
// next to each other in memory.
//
// Once the handler returns it, the RawReply belongs to the Node: it reads
// Values while the reply is sent (they must not change until Release), and
// calls Release (if not nil) exactly once, when it is done with them,
// whether the reply was sent, refused (too large for Config.MaxFrame) or
// dropped (the caller went away).
//
// Owned says that nobody writes to Values again, not even after Release
// (values read into memory of their own for this reply, say). The Node
// then sends them as they lie, with no copy into its packets' frames: the
// frames keep them, and so keep them allocated, until the peer has
// acknowledged them. Release still comes once the reply is written.
type RawReply struct {
	Head    any
	Values  [][]byte
	Release func()
	Owned   bool
}

// rawHeadLen is the size of the u32 head length that starts the body of a
// raw reply.
const rawHeadLen = 4

// appendRawHead appends to dst the start of r's frame: the frame header
// (code OK), the head's length and its msgpack encoding. size is the
// frame's length after its prefix, values included.
func appendRawHead(dst []byte, r *RawReply) (frame []byte, size int64, err error) {
	start := len(dst)
	b, err := appendMsgpack(append(dst, make([]byte, headerLen+rawHeadLen)...), r.Head)
	if err != nil {
		return dst, 0, err
	}
	head := len(b) - start - headerLen - rawHeadLen
	size = int64(len(b) - start - 4)
	for _, v := range r.Values {
		size += int64(len(v))
	}
	if size > 1<<32-1 {
		return dst, size, ErrFrameTooLarge
	}
	binary.BigEndian.PutUint32(b[start:], uint32(size))
	binary.BigEndian.PutUint16(b[start+4:], uint16(CodeOK))
	binary.BigEndian.PutUint32(b[start+headerLen:], uint32(head))
	return b, size, nil
}

// writeValues writes values back to back to w, one Write for each run of
// values that lie next to each other in one array, and returns the bytes
// written.
func writeValues(w io.Writer, values [][]byte) (int64, error) {
	var total int64
	var run []byte
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		k, err := w.Write(run)
		total += int64(k)
		run = nil
		return err
	}
	for _, v := range values {
		if len(v) == 0 {
			continue
		}
		if len(run) > 0 && cap(run)-len(run) >= len(v) && &run[:len(run)+1][len(run)] == &v[0] {
			run = run[:len(run)+len(v)] // v starts where run ends
			continue
		}
		if err := flush(); err != nil {
			return total, err
		}
		run = v
	}
	return total, flush()
}

// readRawHead reads the head of a raw reply's body of size bytes from r,
// into buf's storage (grown as bytes arrive, and returned), checks it with
// MsgpackCost and decodes it into head (a pointer; nil skips decoding); a
// head that is a msgpack.Unmarshaler decodes and checks itself (it must
// refuse what CheckMsgpack refuses, and size nothing beyond the bytes). It
// returns the length of the values that follow. A head longer than the
// body is refused before it is read; errors of the reply's own making wrap
// ErrBadFrame.
func readRawHead(r io.Reader, size int, buf []byte, head any) (values int, body []byte, err error) {
	if size < rawHeadLen {
		return 0, buf[:0], fmt.Errorf("%w: raw reply of %d bytes has no head", ErrBadFrame, size)
	}
	var b [rawHeadLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, buf[:0], unexpected(err)
	}
	h := binary.BigEndian.Uint32(b[:])
	if uint64(h) > uint64(size-rawHeadLen) {
		return 0, buf[:0], fmt.Errorf("%w: raw reply head of %d bytes in a body of %d", ErrBadFrame, h, size)
	}
	body, err = readBody(r, int(h), buf)
	if err != nil {
		return 0, body, err
	}
	rest := size - rawHeadLen - int(h)
	if u, ok := head.(msgpack.Unmarshaler); ok {
		if err := u.UnmarshalMsgpack(body); err != nil {
			return 0, body, fmt.Errorf("%w: raw reply head: %v", ErrBadFrame, err)
		}
		return rest, body, nil
	}
	if err := CheckMsgpack(body); err != nil {
		return 0, body, fmt.Errorf("raw reply head: %w", err)
	}
	if head != nil {
		if err := msgpack.Unmarshal(body, head); err != nil {
			return 0, body, fmt.Errorf("%w: raw reply head: %v", ErrBadFrame, err)
		}
	}
	return rest, body, nil
}

// valueReader hands a raw reply's values to the caller's reader: it reads
// at most left bytes from r and keeps the first error of r's own (a FIN
// before left bytes counts as io.ErrUnexpectedEOF), so that the call can
// tell a failed stream from a reply the caller refused.
type valueReader struct {
	r    io.Reader
	left int
	err  error
}

func (v *valueReader) Read(p []byte) (int, error) { return v.read(p, nil) }

// copyReader is a reader that moves its data into p with cp, as
// quic.Stream.ReadCopy does.
type copyReader interface {
	ReadCopy(p []byte, cp func(dst, src []byte) int) (int, error)
}

// read reads as Read does, moving the bytes with cp unless it is nil (r
// is then a copyReader).
func (v *valueReader) read(p []byte, cp func(dst, src []byte) int) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if v.left == 0 {
		return 0, io.EOF
	}
	if len(p) > v.left {
		p = p[:v.left]
	}
	var k int
	var err error
	if cp != nil {
		k, err = v.r.(copyReader).ReadCopy(p, cp)
	} else {
		k, err = v.r.Read(p)
	}
	v.left -= k
	if err != nil && !(err == io.EOF && v.left == 0) {
		v.err = unexpected(err)
		return k, v.err
	}
	return k, nil
}

// ReadSummed reads len(p) bytes from r into p, as io.ReadFull does, in
// parts of lens[i] bytes that follow each other (they must add up to
// len(p)), and sets sums[i] to the CRC-32C (crc32c.Checksum) of part i.
// From the values of a raw reply (the reader that CallRaw hands its
// values function) each part is summed as it is copied out of the
// stream's packets (crc32c.UpdateCopy), one pass over its bytes; from
// any other reader, once it is read.
func ReadSummed(r io.Reader, p []byte, lens, sums []uint32) error {
	total := 0
	for _, l := range lens {
		total += int(l)
	}
	if total != len(p) || len(sums) != len(lens) {
		return fmt.Errorf("peer: ReadSummed of %d bytes in parts of %d bytes in all, %d sums for %d parts", len(p), total, len(sums), len(lens))
	}
	vr, ok := r.(*valueReader)
	if ok {
		_, ok = vr.r.(copyReader)
	}
	if !ok {
		if _, err := io.ReadFull(r, p); err != nil {
			return err
		}
		off := 0
		for i, l := range lens {
			sums[i] = crc32c.Checksum(p[off : off+int(l)])
			off += int(l)
		}
		return nil
	}
	clear(sums)
	ps := &partSums{lens: lens, sums: sums}
	cp := ps.copy
	for read := 0; read < len(p); {
		k, err := vr.read(p[read:], cp)
		read += k
		if err != nil && read < len(p) {
			if err == io.EOF && read > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// partSums sums a run of bytes in parts as it is copied, piece by piece
// in order: lens[i] bytes the part i, whose CRC-32C so far is sums[i].
type partSums struct {
	lens, sums []uint32
	part       int // the part the next byte belongs to
	in         int // the bytes of that part copied so far
}

// copy copies min(len(dst), len(src)) bytes and sums them into their
// parts; it is never handed more bytes than the parts hold.
func (s *partSums) copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	for done := 0; done < n; {
		for s.in == int(s.lens[s.part]) {
			s.part, s.in = s.part+1, 0
		}
		k := min(n-done, int(s.lens[s.part])-s.in)
		s.sums[s.part] = crc32c.UpdateCopy(s.sums[s.part], dst[done:done+k], src[done:done+k])
		s.in += k
		done += k
	}
	return n
}

// noCopyWriter writes owned values to a stream without a copy (see
// RawReply.Owned).
type noCopyWriter struct{ str *quic.Stream }

func (w noCopyWriter) Write(p []byte) (int, error) { return w.str.WriteNoCopy(p) }
