package shards

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"testing"
)

// object is an object of a store as rangeStream sees it: what a request
// from an offset answers, and how many were sent.
type object struct {
	data     []byte
	size     int64 // the listed size; more than data's for a truncated object
	requests []int64
}

func (o *object) stream() *rangeStream {
	return &rangeStream{ctx: context.Background(), size: o.size, readThrough: objectReadThrough, open: func(_ context.Context, off int64) (io.ReadCloser, error) {
		o.requests = append(o.requests, off)
		return io.NopCloser(bytes.NewReader(o.data[off:])), nil
	}}
}

// fileStream reads the object as a directory's shard is read: through a
// buffer of fileChunk bytes, read on only within it.
func (o *object) fileStream() *rangeStream {
	buf := bufio.NewReaderSize(nil, fileChunk)
	return &rangeStream{ctx: context.Background(), size: o.size, open: func(_ context.Context, off int64) (io.ReadCloser, error) {
		o.requests = append(o.requests, off)
		buf.Reset(bytes.NewReader(o.data[off:]))
		return fileBody{buf}, nil
	}}
}

// A directory's shard is read on within what its buffer holds, and read
// again at the new position past it.
func TestRangeStreamOfAFile(t *testing.T) {
	o := newObject(100_000)
	r := o.fileStream()
	readAt(t, r, o, 0, 6)
	readAt(t, r, o, 0, 512)                   // the head again: kept
	readAt(t, r, o, 600, 100)                 // within the first read's fileChunk bytes
	readAt(t, r, o, fileChunk-10, 10)         // the buffer's last bytes
	readAt(t, r, o, fileChunk+1, 10)          // past it: read again
	readAt(t, r, o, 3*fileChunk, 2*fileChunk) // a read larger than the buffer
	readAt(t, r, o, 50_000, 10)
	if want := []int64{0, fileChunk + 1, 3 * fileChunk, 50_000}; !slices.Equal(o.requests, want) {
		t.Fatalf("reads from %v, want %v", o.requests, want)
	}
}

func newObject(n int) *object {
	o := &object{data: make([]byte, n), size: int64(n)}
	for i := range o.data {
		o.data[i] = byte(i * 7 / 3)
	}
	return o
}

// readAt seeks r to off and reads n bytes, which must be the object's.
func readAt(t *testing.T, r *rangeStream, o *object, off, n int64) {
	t.Helper()
	if _, err := r.Seek(off, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatalf("read %d bytes at %d: %v", n, off, err)
	}
	if !bytes.Equal(got, o.data[off:off+n]) {
		t.Fatalf("the %d bytes at %d differ from the object's", n, off)
	}
}

// A rangeStream reads on through short skips, sends a request from the
// new position past long ones and from the start where it has not kept
// what is asked, and serves the object's first bytes again from memory.
func TestRangeStreamRequests(t *testing.T) {
	o := newObject(3*objectReadThrough + 4096)
	r := o.stream()
	readAt(t, r, o, 0, 6)
	readAt(t, r, o, 0, 512)                        // the head again: kept
	readAt(t, r, o, 1000, 100)                     // a short skip: read through
	readAt(t, r, o, 1100+objectReadThrough, 10)    // as far as is read through
	readAt(t, r, o, 1111+2*objectReadThrough, 10)  // one byte further: a request
	readAt(t, r, o, 1121+3*objectReadThrough, 300) // as far again: read through
	readAt(t, r, o, 600, 10)                       // back, past the kept head
	readAt(t, r, o, 0, 100)                        // the head, kept from the first request
	if want := []int64{0, 1111 + 2*objectReadThrough, 600}; !slices.Equal(o.requests, want) {
		t.Fatalf("requests from %v, want %v", o.requests, want)
	}
	if _, err := r.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("read at the end: %d, %v", n, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Seek(-1, io.SeekStart); err == nil {
		t.Fatal("seek before the start allowed")
	}
}

// An object shorter than listed ends a read with io.ErrUnexpectedEOF,
// whether it ends in a stretch read through or in the bytes asked.
func TestRangeStreamShortObject(t *testing.T) {
	o := newObject(10_000)
	o.size = 20_000
	r := o.stream()
	readAt(t, r, o, 0, 100)
	r.Seek(12_000, io.SeekStart)
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a skip past the object's end: %v", err)
	}
	r = o.stream()
	got, err := io.ReadAll(r)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) != 10_000 {
		t.Fatalf("read %d bytes to the end, %v", len(got), err)
	}
}
