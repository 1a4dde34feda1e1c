// Package trace records what a node's cache policy sees, in the text
// format that policy.ReadTrace reads (package policy is the format's
// reference), so that policies can be compared offline on the access
// pattern of a real training run. It imports only policy and must not
// import mesh or any network package.
package trace

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/shade-mesh/shade/policy"
)

// Writer records a node's trace, one line per event:
//
//	e <epoch>        an epoch's order was installed (reads that follow belong to it)
//	r <id> <size>    a read of sample id (a policy.ID) charging size bytes
//	s <id> <score>   the sample's merged importance changed
//
// Safe for concurrent use; buffered, flushed on Close. A nil *Writer
// records nothing, so callers need not check whether tracing is on.
type Writer struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	buf []byte
}

// Open creates (or truncates) the trace file at path.
func Open(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return nil, fmt.Errorf("mesh: trace: %w", err)
	}
	t := &Writer{f: f, w: bufio.NewWriterSize(f, 1<<20)}
	t.w.WriteString("# shade access trace: e <epoch> | r <id> <size> | s <id> <score>\n")
	return t, nil
}

func (t *Writer) line(kind byte, a uint64, b string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.buf = append(t.buf[:0], kind, ' ')
	t.buf = strconv.AppendUint(t.buf, a, 10)
	if b != "" {
		t.buf = append(t.buf, ' ')
		t.buf = append(t.buf, b...)
	}
	t.buf = append(t.buf, '\n')
	t.w.Write(t.buf)
	t.mu.Unlock()
}

// Read records a read of sample id charging size bytes.
func (t *Writer) Read(id policy.ID, size int64) {
	if t != nil {
		t.line('r', uint64(id), strconv.FormatInt(size, 10))
	}
}

// Score records that sample id's merged importance changed to score.
func (t *Writer) Score(id policy.ID, score float64) {
	if t != nil {
		t.line('s', uint64(id), strconv.FormatFloat(score, 'g', -1, 64))
	}
}

// Epoch records that epoch e's order was installed; e < 0 is ignored.
func (t *Writer) Epoch(e int) {
	if t != nil && e >= 0 {
		t.line('e', uint64(e), "")
	}
}

// Close flushes the trace and closes its file.
func (t *Writer) Close() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.w.Flush(); err != nil {
		t.f.Close()
		return err
	}
	return t.f.Close()
}
