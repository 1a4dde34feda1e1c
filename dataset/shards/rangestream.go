package shards

import (
	"context"
	"fmt"
	"io"
)

// rangeStream reads a shard as a stream that seeks, for tar, which passes
// over each member's data by seeking: a read after a seek ahead reads on
// through the bytes passed over where the stream has them buffered or
// they are at most readThrough, and otherwise opens the shard again at
// the new position. A shard is thus read by its headers where its members
// are large: in a bucket a new range GET past a member of over 4 MiB
// (objectReadThrough), in a directory a read of fileChunk bytes at each
// header not already read.
type rangeStream struct {
	ctx         context.Context
	open        func(ctx context.Context, off int64) (io.ReadCloser, error) // the shard from off to its end
	size        int64
	readThrough int64
	closer      io.Closer // closed by Close, or nil

	body io.ReadCloser // the stream being read, or nil
	at   int64         // the position of body's next byte
	pos  int64         // the position of the next byte to read
	head []byte        // the shard's first bytes read, up to keptHead
}

// objectReadThrough is the longest stretch of an object a rangeStream
// reads through rather than sending a new request: about what a
// request's latency is worth on a connection to an object store (4 MiB
// take 40 ms at 100 MB/s). A request given up mid-answer also costs its
// connection.
const objectReadThrough = 4 << 20

// keptHead is how much of a shard's start a rangeStream keeps: a reader
// that checks its first bytes (a compressed shard's magic) and seeks back
// reads them again without opening the shard again.
const keptHead = 512

// buffered is a body that holds bytes already read: they are passed over
// without a new read.
type buffered interface {
	Buffered() int
	Discard(n int) (int, error)
}

func (r *rangeStream) Read(p []byte) (int, error) {
	if r.pos >= r.size {
		return 0, io.EOF
	}
	if r.pos < int64(len(r.head)) {
		n := copy(p, r.head[r.pos:])
		r.pos += int64(n)
		return n, nil
	}
	if r.body != nil && (r.pos < r.at || r.pos-r.at > max(r.readThrough, held(r.body))) {
		r.body.Close()
		r.body = nil
	}
	if r.body == nil {
		body, err := r.open(r.ctx, r.pos)
		if err != nil {
			return 0, err
		}
		r.body, r.at = body, r.pos
	}
	if r.pos > r.at {
		n, err := skip(r.body, r.pos-r.at)
		r.at += n
		if err != nil {
			return 0, eofUnexpected(err)
		}
	}
	n, err := r.body.Read(p)
	if r.at == int64(len(r.head)) && r.at < keptHead {
		r.head = append(r.head, p[:min(int64(n), keptHead-r.at)]...)
	}
	r.at += int64(n)
	r.pos += int64(n)
	if err == io.EOF && r.pos < r.size {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// held is how many bytes body holds already read.
func held(body io.Reader) int64 {
	if b, ok := body.(buffered); ok {
		return int64(b.Buffered())
	}
	return 0
}

// skip reads n bytes of body and drops them.
func skip(body io.Reader, n int64) (int64, error) {
	if b, ok := body.(buffered); ok && n <= int64(b.Buffered()) {
		k, err := b.Discard(int(n))
		return int64(k), err
	}
	return io.CopyN(io.Discard, body, n)
}

// eofUnexpected turns an end of the shard before its listed size into
// io.ErrUnexpectedEOF.
func eofUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Seek sets the position of the next Read; it reads nothing.
func (r *rangeStream) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		off += r.pos
	case io.SeekEnd:
		off += r.size
	case io.SeekStart:
	default:
		return r.pos, fmt.Errorf("shards: seek whence %d", whence)
	}
	if off < 0 {
		return r.pos, fmt.Errorf("shards: seek to %d", off)
	}
	r.pos = off
	return off, nil
}

// Close closes the stream being read, then closer.
func (r *rangeStream) Close() error {
	var err error
	if r.body != nil {
		err = r.body.Close()
		r.body = nil
	}
	if r.closer != nil {
		if cerr := r.closer.Close(); err == nil {
			err = cerr
		}
		r.closer = nil
	}
	return err
}
