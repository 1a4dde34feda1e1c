// Package binfile writes and reads a peer's binary state files (a
// shards index, a bucket's listing): a magic line naming the form, then
// uvarints and strings (a uvarint length and the bytes), then the
// CRC-32C of every byte before it, 4 bytes little-endian. A Reader takes
// a file only whole: its sum right and nothing after it. They read in a
// fraction of the time JSON of the same values decodes in, and allocate
// only what the caller keeps.
package binfile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/shade-mesh/shade/protocol/crc32c"
)

// ErrFile is a file that is not of the form asked, or not whole.
var ErrFile = errors.New("binfile: not a whole state file of this form")

// Writer writes a state file. Its methods keep the first error, which
// Close returns.
type Writer struct {
	w   *bufio.Writer
	crc uint32
	buf []byte
	err error
}

// flushAt is how much a Writer gathers before summing and writing it.
const flushAt = 32 << 10

// NewWriter starts a file of the form magic (a line, "\n" included) on w.
func NewWriter(w io.Writer, magic string) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 64<<10), buf: append(make([]byte, 0, flushAt+1024), magic...)}
}

// Uvarint writes v.
func (w *Writer) Uvarint(v uint64) {
	w.buf = binary.AppendUvarint(w.buf, v)
	w.flush(false)
}

// String writes s, its length first.
func (w *Writer) String(s string) { writeBytes(w, s) }

// Bytes writes b as String writes a string of its bytes.
func (w *Writer) Bytes(b []byte) { writeBytes(w, b) }

func writeBytes[T string | []byte](w *Writer, s T) {
	w.buf = append(binary.AppendUvarint(w.buf, uint64(len(s))), s...)
	w.flush(false)
}

func (w *Writer) flush(all bool) {
	if w.err != nil || (!all && len(w.buf) < flushAt) {
		return
	}
	w.crc = crc32c.Update(w.crc, w.buf)
	_, w.err = w.w.Write(w.buf)
	w.buf = w.buf[:0]
}

// Close writes the sum and flushes; it does not close the writer given
// to NewWriter.
func (w *Writer) Close() error {
	w.flush(true)
	if w.err == nil {
		_, w.err = w.w.Write(binary.LittleEndian.AppendUint32(nil, w.crc))
	}
	if w.err == nil {
		w.err = w.w.Flush()
	}
	return w.err
}

// Reader reads a state file. Its first error stays in Err, every read
// after it gives zero values, and Close reports it.
type Reader struct {
	sum  *summing
	r    *bufio.Reader
	size int64 // the file's bytes
	n    int64 // bytes read
	buf  []byte
	err  error
}

// NewReader starts reading a file of size bytes from r, and fails with
// ErrFile unless it begins with magic.
func NewReader(r io.Reader, size int64, magic string) (*Reader, error) {
	sum := &summing{r: r}
	rd := &Reader{sum: sum, r: bufio.NewReaderSize(sum, 64<<10), size: size}
	if got := rd.next(len(magic)); rd.err != nil || string(got) != magic {
		return nil, fmt.Errorf("%w: not %q", ErrFile, magic[:len(magic)-1])
	}
	return rd, nil
}

// Err is the first error met.
func (r *Reader) Err() error { return r.err }

// Left is how many of the file's bytes are not read yet: a count read
// from it is bounded by what that many bytes could hold.
func (r *Reader) Left() int64 { return max(0, r.size-r.n) }

// SizingRecords is how many records a reader of a file of many reads
// before it makes room for the rest (Estimate).
const SizingRecords = 4096

// Estimate is how much of something counted n in the bytes read since
// Left was from comes to over all those from bytes, as if the rest held
// as much a byte: the room a reader of like records makes for the rest,
// so that its memory does not grow by doubling. It is at most n times
// from.
func (r *Reader) Estimate(n int, from int64) int {
	return int(float64(n) * float64(from) / float64(max(from-r.Left(), 1)))
}

// Uvarint reads a uvarint of at most max.
func (r *Reader) Uvarint(max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(byteCounter{r})
	if err == nil && v > max {
		err = fmt.Errorf("a value of %d where at most %d", v, max)
	}
	if err != nil {
		r.fail(err)
		return 0
	}
	return v
}

// Int reads an offset, a size or a count: at most MaxInt64.
func (r *Reader) Int() int64 { return int64(r.Uvarint(math.MaxInt64)) }

// Bytes reads a string of at most max bytes, valid until the next read.
func (r *Reader) Bytes(max int) []byte {
	return r.next(int(r.Uvarint(uint64(max))))
}

// String reads a string of at most max bytes.
func (r *Reader) String(max int) string { return string(r.Bytes(max)) }

// next reads n bytes, valid until the next read.
func (r *Reader) next(n int) []byte {
	if r.err != nil {
		return nil
	}
	if int64(n) > r.Left() {
		r.fail(io.ErrUnexpectedEOF)
		return nil
	}
	r.buf = slices.Grow(r.buf[:0], n)[:n]
	k, err := io.ReadFull(r.r, r.buf)
	r.n += int64(k)
	if err != nil {
		r.fail(err)
		return nil
	}
	return r.buf
}

func (r *Reader) fail(err error) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %w", ErrFile, err)
	}
}

// Close reads the sum and the file's end and returns the first error:
// ErrFile unless every value was read, the sum is right and nothing
// follows it. It does not close the reader given to NewReader.
func (r *Reader) Close() error {
	if r.err != nil {
		return r.err
	}
	var tail [5]byte
	k, _ := io.ReadFull(r.r, tail[:]) // the sum, then the end
	if k != 4 || r.sum.held != 4 || binary.LittleEndian.Uint32(tail[:4]) != r.sum.crc {
		r.fail(errors.New("damaged or cut short"))
	}
	return r.err
}

// byteCounter reads bytes for binary.ReadUvarint and counts them.
type byteCounter struct{ r *Reader }

func (b byteCounter) ReadByte() (byte, error) {
	c, err := b.r.r.ReadByte()
	if err == nil {
		b.r.n++
	}
	return c, err
}

// summing reads r and sums every byte it read but the last 4 (the sum a
// whole file ends with), which it holds.
type summing struct {
	r    io.Reader
	crc  uint32
	hold [4]byte
	held int
}

func (s *summing) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	// The bytes so far end with hold[:held] then p[:n]: all but their
	// last 4 are summed.
	if over := s.held + n - 4; over > 0 {
		fromHold := min(over, s.held)
		s.crc = crc32c.Update(s.crc, s.hold[:fromHold])
		s.crc = crc32c.Update(s.crc, p[:over-fromHold])
		var next [4]byte
		k := copy(next[:], s.hold[fromHold:s.held])
		k += copy(next[k:], p[over-fromHold:n])
		s.hold, s.held = next, k
	} else {
		s.held += copy(s.hold[s.held:], p[:n])
	}
	return n, err
}
