package policy

import (
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestReadTraceFormat(t *testing.T) {
	text := `# a comment line

e 0
r 1 100
r	18446744073709551615	0   # max id, size 0, tabs
s 1 -2.5e-3
e	3 # an epoch
e 3
  s 7 4   
`
	got, err := ReadTrace(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []Access{
		{Epoch: 0, IsEpoch: true},
		{ID: 1, Size: 100},
		{ID: math.MaxUint64, Size: 0},
		{ID: 1, Score: -2.5e-3, HasScore: true},
		{Epoch: 3, IsEpoch: true},
		{Epoch: 3, IsEpoch: true},
		{ID: 7, Score: 4, HasScore: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if tr, err := ReadTrace(strings.NewReader("")); err != nil || len(tr) != 0 {
		t.Fatalf("empty trace: %v, %v", tr, err)
	}
}

func TestReadTraceErrors(t *testing.T) {
	cases := []struct {
		text, want string
	}{
		{"x 1 2\n", "line 1: unknown event \"x\" (want e, r or s)"},
		{"e\n", "line 1: event \"e\" wants 1 field, got 0"},
		{"e 1 2\n", "line 1: event \"e\" wants 1 field, got 2"},
		{"e -1\n", "line 1: bad epoch \"-1\""},
		{"e one\n", "line 1: bad epoch \"one\""},
		{"e 1.0\n", "line 1: bad epoch \"1.0\""},
		{"e 99999999999999999999\n", "line 1: bad epoch"},
		{"E 1\n", "line 1: unknown event \"E\""},
		{"r 1 1\n\nR 1 1\n", "line 3: unknown event \"R\""},
		{"# c\nr 1\n", "line 2: event \"r\" wants 2 fields, got 1"},
		{"r 1 2 3\n", "line 1: event \"r\" wants 2 fields, got 3"},
		{"s 1\n", "line 1: event \"s\" wants 2 fields, got 1"},
		{"r a 2\n", "line 1: bad id \"a\""},
		{"r -1 2\n", "line 1: bad id \"-1\""},
		{"r 18446744073709551616 2\n", "line 1: bad id"},
		{"r 1 -3\n", "line 1: bad size \"-3\""},
		{"r 1 1.5\n", "line 1: bad size \"1.5\""},
		{"r 1 2\ns 1 nan\n", "line 2: bad score \"nan\""},
		{"s 1 +Inf\n", "line 1: bad score \"+Inf\""},
		{"s 1 high\n", "line 1: bad score \"high\""},
		{"r 1 1 # ok\nr 2 " + strings.Repeat("9", maxTraceLine) + "\n", "line 2: longer than"},
	}
	for _, c := range cases {
		_, err := ReadTrace(strings.NewReader(c.text))
		if !errors.Is(err, ErrBadTrace) {
			t.Errorf("%.20q: error %v, want ErrBadTrace", c.text, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.20q: error %q, want it to contain %q", c.text, err, c.want)
		}
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestReadTraceReaderError(t *testing.T) {
	_, err := ReadTrace(failingReader{})
	if err == nil || errors.Is(err, ErrBadTrace) || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("error %v", err)
	}
	// A reader failing mid-line (a cut gzip stream) leaves "r 2": the
	// reader's error is reported, not the cut line.
	cut := io.MultiReader(strings.NewReader("r 1 1\nr 2"), failingReader{})
	_, err = ReadTrace(cut)
	if err == nil || errors.Is(err, ErrBadTrace) || !strings.Contains(err.Error(), "after line 1: disk on fire") {
		t.Fatalf("cut trace: error %v", err)
	}
	// A bad line followed by one too long is still the bad line's error.
	_, err = ReadTrace(strings.NewReader("r 1\nr 2 " + strings.Repeat("9", maxTraceLine) + "\n"))
	if !errors.Is(err, ErrBadTrace) || !strings.Contains(err.Error(), "line 1: event \"r\" wants 2 fields") {
		t.Fatalf("bad line then a long one: error %v", err)
	}
}

func TestTraceRoundTrip(t *testing.T) {
	tr := withEpochs(randomTrace(11, 3000, 500, true, true), 250)
	tr = append(tr,
		Access{Epoch: math.MaxInt, IsEpoch: true},
		Access{Epoch: 0, IsEpoch: true},
		Access{ID: math.MaxUint64, Size: math.MaxInt64},
		Access{ID: 0, Score: math.SmallestNonzeroFloat64, HasScore: true},
		Access{ID: 3, Score: -math.MaxFloat64, HasScore: true},
		Access{ID: 4, Score: 0.1 + 0.2, HasScore: true},
	)
	var buf bytes.Buffer
	if err := WriteTrace(&buf, tr); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTrace(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, tr) {
		t.Fatal("round trip changed the trace")
	}
}

// TestWriteTraceEpochLines: epoch events are written as "e <epoch>" lines,
// whatever their other fields hold.
func TestWriteTraceEpochLines(t *testing.T) {
	var buf bytes.Buffer
	tr := []Access{
		{Epoch: 2, IsEpoch: true, ID: 9, Size: -1, HasScore: true, Score: math.NaN()},
		{ID: 1, Size: 3},
		{ID: 1, Score: 0.5, HasScore: true},
	}
	if err := WriteTrace(&buf, tr); err != nil {
		t.Fatal(err)
	}
	if got, want := buf.String(), "e 2\nr 1 3\ns 1 0.5\n"; got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
	got, err := ReadTrace(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Access{{Epoch: 2, IsEpoch: true}, tr[1], tr[2]}; !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %+v", got)
	}
	if got[0].IsRead() || !got[1].IsRead() || got[2].IsRead() {
		t.Fatal("IsRead wrong")
	}
}

func TestWriteTraceRefusesWhatReadTraceWould(t *testing.T) {
	for _, a := range []Access{
		{ID: 1, Size: -1},
		{ID: 1, Score: math.NaN(), HasScore: true},
		{ID: 1, Score: math.Inf(-1), HasScore: true},
		{Epoch: -1, IsEpoch: true},
	} {
		var buf bytes.Buffer
		err := WriteTrace(&buf, []Access{{ID: 2, Size: 1}, a})
		if !errors.Is(err, ErrBadTrace) || !strings.Contains(err.Error(), "event 1") {
			t.Errorf("%+v: error %v", a, err)
		}
		if buf.Len() != 0 {
			t.Errorf("%+v: wrote %q before refusing", a, buf.String())
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteTraceWriterError(t *testing.T) {
	if err := WriteTrace(failingWriter{}, []Access{{ID: 1, Size: 1}}); err == nil {
		t.Fatal("no error from a failing writer")
	}
}
