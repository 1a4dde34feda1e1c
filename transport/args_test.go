package transport

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func args(s string) [][]byte {
	var out [][]byte
	for _, f := range strings.Fields(s) {
		out = append(out, []byte(f))
	}
	return out
}

func TestParseOrderTakesItsOptionsInEitherOrder(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want OrderArgs
		err  string
	}{
		{in: "ds 1 0 2", want: OrderArgs{Dataset: "ds", Epoch: 1, World: 2}},
		{in: "ds 1 0 2 500", want: OrderArgs{Dataset: "ds", Epoch: 1, World: 2, Wait: 500 * time.Millisecond}},
		{in: "ds 1 0 2 WITHWEIGHTS", want: OrderArgs{Dataset: "ds", Epoch: 1, World: 2, WithWeights: true}},
		{in: "ds 1 0 2 JOB sweep-1", want: OrderArgs{Dataset: "ds", Epoch: 1, World: 2, Job: "sweep-1"}},
		{in: "ds 1 0 2 500 withweights job b", want: OrderArgs{Dataset: "ds", Epoch: 1, World: 2, Wait: 500 * time.Millisecond, WithWeights: true, Job: "b"}},
		{in: "ds 1 0 2 JOB b WITHWEIGHTS", want: OrderArgs{Dataset: "ds", Epoch: 1, World: 2, WithWeights: true, Job: "b"}},
		{in: "ds 1 0 2 PACKED", want: OrderArgs{Dataset: "ds", Epoch: 1, World: 2, Packed: true}},
		{in: "ds 1 0 2 500 packed JOB b WITHWEIGHTS", want: OrderArgs{Dataset: "ds", Epoch: 1, World: 2, Wait: 500 * time.Millisecond, WithWeights: true, Packed: true, Job: "b"}},
		{in: "ds 1 0 2 WITHWEIGHTS JOB PACKED", want: OrderArgs{Dataset: "ds", Epoch: 1, World: 2, WithWeights: true, Job: "PACKED"}},
		{in: "PACKED 1 0 2 PACKED", want: OrderArgs{Dataset: "PACKED", Epoch: 1, World: 2, Packed: true}},
		{in: "ds 1 0 2 JOB ../x", err: "bad job name"},
		{in: "ds 1 0 2 JOB", err: `got "JOB"`},
		{in: "ds 1 0 2 JOB a JOB b", err: "needs"},
		{in: "ds 1 0 2 PACKED PACKED", err: "needs"},
		{in: "ds 1 0 2 WITHWEIGHTS 5", err: "needs"},
		{in: "ds 1 0 2 soon", err: "timeout-ms"},
		{in: "ds 1 0", err: "needs"},
	} {
		got, err := ParseOrder(args(tc.in))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one with %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseDoneAndReportTakeAJob(t *testing.T) {
	ds, job, epoch, rank, err := ParseDone(args("ds 3 1 JOB a"))
	if err != nil || ds != "ds" || job != "a" || epoch != 3 || rank != 1 {
		t.Errorf("DONE with a job: %s %s %d %d %v", ds, job, epoch, rank, err)
	}
	if _, job, _, _, err := ParseDone(args("ds 3 1")); err != nil || job != "" {
		t.Errorf("DONE without a job: %q %v", job, err)
	}
	if _, _, _, _, err := ParseDone(args("ds 3 1 JOB a b")); err == nil {
		t.Error("DONE with a stray argument parsed")
	}
	r, err := ParseReport(args("ds 0 4 0.5 7 1.5 JOB a"))
	if err != nil || r.Job != "a" || len(r.IDs) != 2 || r.IDs[1] != 7 || r.Losses[1] != 1.5 {
		t.Errorf("REPORT with a job: %+v %v", r, err)
	}
	if r, err := ParseReport(args("ds 0 4 0.5")); err != nil || r.Job != "" {
		t.Errorf("REPORT without a job: %+v %v", r, err)
	}
	if _, err := ParseReport(args("ds 0 4 0.5 JOB a/b")); err == nil || !strings.Contains(err.Error(), "bad job name") {
		t.Errorf("REPORT with a bad job name: %v", err)
	}
	// PACKED: ids 4 and 7 (uint32), losses 0.5 and 0.1 (float64, which
	// float32 would not keep), little-endian.
	ids := []byte{4, 0, 0, 0, 7, 0, 0, 0}
	losses := []byte{0, 0, 0, 0, 0, 0, 0xe0, 0x3f, 0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xb9, 0x3f}
	packed := [][]byte{[]byte("ds"), []byte("0"), []byte("packed"), ids, losses, []byte("JOB"), []byte("a")}
	r, err = ParseReport(packed)
	if err != nil || r.Job != "a" || !slices.Equal(r.IDs, []uint32{4, 7}) || !slices.Equal(r.Losses, []float64{0.5, 0.1}) {
		t.Errorf("REPORT PACKED: %+v %v", r, err)
	}
	for _, bad := range [][2][]byte{{ids, losses[:8]}, {ids[:7], losses}, {nil, nil}, {ids[:4], losses[:12]}} {
		if _, err := ParseReport([][]byte{[]byte("ds"), []byte("0"), []byte("PACKED"), bad[0], bad[1]}); err == nil || !strings.Contains(err.Error(), "PACKED needs") {
			t.Errorf("REPORT PACKED of %d and %d bytes: %v", len(bad[0]), len(bad[1]), err)
		}
	}
}
