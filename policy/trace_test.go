package policy

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestReadTraceFormat(t *testing.T) {
	text := `# a comment line

r 1 100
r	18446744073709551615	0   # max id, size 0, tabs
s 1 -2.5e-3
  s 7 4   
`
	got, err := ReadTrace(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []Access{
		{ID: 1, Size: 100},
		{ID: math.MaxUint64, Size: 0},
		{ID: 1, Score: -2.5e-3, HasScore: true},
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
		{"x 1 2\n", "line 1: unknown event \"x\""},
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
}

func TestTraceRoundTrip(t *testing.T) {
	tr := randomTrace(11, 3000, 500, true, true)
	tr = append(tr,
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

func TestWriteTraceRefusesWhatReadTraceWould(t *testing.T) {
	for _, a := range []Access{
		{ID: 1, Size: -1},
		{ID: 1, Score: math.NaN(), HasScore: true},
		{ID: 1, Score: math.Inf(-1), HasScore: true},
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
