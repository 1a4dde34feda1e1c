package policy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// ErrBadTrace is wrapped by ReadTrace's errors about the trace's text.
var ErrBadTrace = errors.New("policy: bad trace")

// maxTraceLine bounds one line of a trace file.
const maxTraceLine = 64 << 10

// ReadTrace parses a trace in the text format WriteTrace writes, one event a
// line:
//
//	e <epoch>        an epoch's order was installed; the reads that follow,
//	                 up to the next e line, belong to it (decimal int >= 0)
//	r <id> <size>    a read of id (decimal uint64) of size bytes (>= 0)
//	s <id> <score>   an importance update of id to score (a finite float)
//
// An e line may repeat an epoch number (the order was installed again); the
// last e line before a read decides which order it belongs to. Fields are separated by spaces or tabs; '#' starts a comment that runs to
// the end of the line; blank lines are skipped. An error about the text wraps
// ErrBadTrace and names the line (counted from 1).
func ReadTrace(r io.Reader) ([]Access, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxTraceLine)
	var trace []Access
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		a, err := parseEvent(f)
		if err != nil {
			// A reader that fails mid-line leaves a cut last line: report
			// the reader's error, not the cut.
			if !sc.Scan() {
				if rerr := sc.Err(); rerr != nil && !errors.Is(rerr, bufio.ErrTooLong) {
					return nil, fmt.Errorf("policy: reading trace after line %d: %w", line-1, rerr)
				}
			}
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadTrace, line, err)
		}
		trace = append(trace, a)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%w: line %d: longer than %d bytes", ErrBadTrace, line+1, maxTraceLine)
		}
		return nil, fmt.Errorf("policy: reading trace after line %d: %w", line, err)
	}
	return trace, nil
}

func parseEvent(f []string) (Access, error) {
	if f[0] == "e" {
		if len(f) != 2 {
			return Access{}, fmt.Errorf("event \"e\" wants 1 field, got %d", len(f)-1)
		}
		e, err := strconv.ParseInt(f[1], 10, 0)
		if err != nil || e < 0 {
			return Access{}, fmt.Errorf("bad epoch %q (want an integer >= 0)", f[1])
		}
		return Access{Epoch: int(e), IsEpoch: true}, nil
	}
	if f[0] != "r" && f[0] != "s" {
		return Access{}, fmt.Errorf("unknown event %q (want e, r or s)", f[0])
	}
	if len(f) != 3 {
		return Access{}, fmt.Errorf("event %q wants 2 fields, got %d", f[0], len(f)-1)
	}
	id, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return Access{}, fmt.Errorf("bad id %q", f[1])
	}
	if f[0] == "r" {
		size, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || size < 0 {
			return Access{}, fmt.Errorf("bad size %q (want a byte count >= 0)", f[2])
		}
		return Access{ID: ID(id), Size: size}, nil
	}
	score, err := strconv.ParseFloat(f[2], 64)
	if err != nil || math.IsNaN(score) || math.IsInf(score, 0) {
		return Access{}, fmt.Errorf("bad score %q (want a finite number)", f[2])
	}
	return Access{ID: ID(id), Score: score, HasScore: true}, nil
}

// WriteTrace writes trace in the format ReadTrace reads. Scores are written
// with the fewest digits that read back exactly. An event ReadTrace would
// refuse (a negative size or epoch, a score that is not finite) is an error
// wrapping ErrBadTrace, and then nothing is written.
func WriteTrace(w io.Writer, trace []Access) error {
	for i, a := range trace {
		if a.IsEpoch {
			if a.Epoch < 0 {
				return fmt.Errorf("%w: event %d: negative epoch %d", ErrBadTrace, i, a.Epoch)
			}
			continue
		}
		if a.HasScore && (math.IsNaN(a.Score) || math.IsInf(a.Score, 0)) {
			return fmt.Errorf("%w: event %d: score %v is not finite", ErrBadTrace, i, a.Score)
		}
		if !a.HasScore && a.Size < 0 {
			return fmt.Errorf("%w: event %d: negative size %d", ErrBadTrace, i, a.Size)
		}
	}
	bw := bufio.NewWriter(w)
	buf := make([]byte, 0, 64)
	for _, a := range trace {
		buf = buf[:0]
		switch {
		case a.IsEpoch:
			buf = append(buf, "e "...)
			buf = strconv.AppendInt(buf, int64(a.Epoch), 10)
		case a.HasScore:
			buf = append(buf, "s "...)
			buf = strconv.AppendUint(buf, uint64(a.ID), 10)
			buf = append(buf, ' ')
			buf = strconv.AppendFloat(buf, a.Score, 'g', -1, 64)
		default:
			buf = append(buf, "r "...)
			buf = strconv.AppendUint(buf, uint64(a.ID), 10)
			buf = append(buf, ' ')
			buf = strconv.AppendInt(buf, a.Size, 10)
		}
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}
