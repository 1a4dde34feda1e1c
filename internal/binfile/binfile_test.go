package binfile

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"testing/iotest"
)

const magic = "test-form/1\n"

// file writes the values of a test file: strings and uvarints, over
// flushAt so that it is summed in pieces.
func file(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	w := NewWriter(&b, magic)
	for i := range 20_000 {
		w.String(strings.Repeat("x", i%7))
		w.Uvarint(uint64(i) * 1e9)
	}
	w.Uvarint(math.MaxUint64)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// read reads a test file's values back and reports the first error:
// Close's where it has one, else a value read wrong.
func read(r io.Reader, size int64) error {
	rd, err := NewReader(r, size, magic)
	if err != nil {
		return err
	}
	var wrong error
	for i := range 20_000 {
		if s := rd.String(10); s != strings.Repeat("x", i%7) {
			wrong = errors.New("string read wrong")
		}
		if v := rd.Uvarint(math.MaxUint64); v != uint64(i)*1e9 {
			wrong = errors.New("uvarint read wrong")
		}
	}
	if v := rd.Uvarint(math.MaxUint64); v != math.MaxUint64 {
		wrong = errors.New("the last uvarint read wrong")
	}
	if err := rd.Close(); err != nil {
		return err
	}
	return wrong
}

// A file reads back whole, in pieces of any size.
func TestRoundTrip(t *testing.T) {
	b := file(t)
	for _, r := range []io.Reader{bytes.NewReader(b), iotest.OneByteReader(bytes.NewReader(b)), iotest.HalfReader(bytes.NewReader(b))} {
		if err := read(r, int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
}

// A file cut anywhere, with any byte changed, with a byte after it or of
// another form fails with ErrFile.
func TestOnlyWholeFilesRead(t *testing.T) {
	b := file(t)
	for n := 0; n < len(b); n += 1 + n/3 {
		if err := read(bytes.NewReader(b[:n]), int64(n)); !errors.Is(err, ErrFile) {
			t.Fatalf("cut at %d of %d: %v", n, len(b), err)
		}
	}
	for at := 0; at < len(b); at += 1 + at/5 {
		c := bytes.Clone(b)
		c[at] ^= 0x01
		if err := read(bytes.NewReader(c), int64(len(c))); !errors.Is(err, ErrFile) {
			t.Fatalf("byte %d of %d changed: %v", at, len(b), err)
		}
	}
	c := append(bytes.Clone(b), 0)
	if err := read(bytes.NewReader(c), int64(len(c))); !errors.Is(err, ErrFile) {
		t.Fatalf("a byte after the sum: %v", err)
	}
	if _, err := NewReader(bytes.NewReader(b), int64(len(b)), "test-form/2\n"); !errors.Is(err, ErrFile) {
		t.Fatalf("another form: %v", err)
	}
}

// A value over its bound, or a string longer than the rest of the file,
// fails without making room for it.
func TestBounds(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, magic)
	w.Uvarint(1000)
	w.Uvarint(1 << 40) // a string's length
	w.Close()
	rd, _ := NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()), magic)
	if v := rd.Uvarint(999); v != 0 || !errors.Is(rd.Err(), ErrFile) {
		t.Fatalf("1000 read under a bound of 999: %d, %v", v, rd.Err())
	}
	rd, _ = NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()), magic)
	if rd.Uvarint(1000) != 1000 || rd.Left() != int64(b.Len()-len(magic)-2) {
		t.Fatalf("left %d", rd.Left())
	}
	if s := rd.Bytes(math.MaxInt); s != nil || !errors.Is(rd.Err(), ErrFile) || cap(rd.buf) > 64 {
		t.Fatalf("a string of 2^40 bytes: %d bytes, room for %d, %v", len(s), cap(rd.buf), rd.Err())
	}
	if rd.Uvarint(math.MaxUint64) != 0 || !errors.Is(rd.Close(), ErrFile) {
		t.Fatal("reads after an error gave values, or Close no error")
	}
}

// Estimate scales what was read to the bytes left when it began: a
// quarter read says four times as much; nothing read yet, at most n times
// the bytes.
func TestEstimate(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, magic)
	for range 100 {
		w.String("0123456789") // 11 bytes a record
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()), magic)
	if err != nil {
		t.Fatal(err)
	}
	from := r.Left()
	if got := r.Estimate(3, from); got != 3*int(from) {
		t.Fatalf("nothing read: Estimate(3) = %d, want %d", got, 3*from)
	}
	for range 25 {
		r.Bytes(10)
	}
	// 25 records of 11 bytes read: 25 over 275 of the bytes.
	if got, want := r.Estimate(25, from), 25*int(from)/275; got != want {
		t.Fatalf("a quarter read: Estimate(25) = %d, want %d", got, want)
	}
}
