package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func simRun(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = runSim(args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestSimTable replays testdata/sim_small.trace: reads 1 2 3 1 4 2 5 1 2 of
// 100 bytes each, 1 and 2 scored 4, 3 4 5 scored 1; working set 500 bytes.
// Hit counts, by hand (9 reads; 2 hits = 22.22%, 4 = 44.44%):
//
//   - 20%, one sample. APP: 1 and 2 (same score) displace each other by
//     frequency and recency, 3 4 5 are refused: no hit. LRU, FIFO, LFU hit
//     only on a repeat of the last read: none. MinIO keeps 1: t4, t8 hit.
//     MIN keeps 1 (next uses 3, 7) and bypasses 2 (5, 8), which is read
//     after 1's next read each time: t4, t8 hit. app/lru 0/0: "-".
//   - 40%, two samples. APP keeps {1,2} and refuses 3 4 5: t4 t6 t8 t9.
//     LRU, FIFO, LFU: each read evicts the sample read two steps later:
//     none. MinIO keeps {1,2}: 4. MIN bypasses 3 4 5, never read again: 4.
//     app/lru 4/0: "inf".
//   - 100%: all five fit; every policy hits all 4 repeats: 1.00x.
func TestSimTable(t *testing.T) {
	out, errOut, err := simRun("--trace", "testdata/sim_small.trace", "--sizes", "0.2,0.4,1")
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, errOut)
	}
	want := `trace testdata/sim_small.trace: 9 reads of 5 samples, 5 score updates, working set 500 bytes

  size  bytes     app     lru    fifo     lfu   minio     min  app/lru
   20%    100   0.00%   0.00%   0.00%   0.00%  22.22%  22.22%        -
   40%    200  44.44%   0.00%   0.00%   0.00%  44.44%  44.44%      inf
  100%    500  44.44%  44.44%  44.44%  44.44%  44.44%  44.44%    1.00x
`
	if out != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out, want)
	}
}

func TestSimDefaultsAndSubset(t *testing.T) {
	out, _, err := simRun("--trace", "testdata/sim_small.trace")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2+1+4 { // summary, blank, header, 4 default sizes
		t.Fatalf("default run printed %d lines:\n%s", len(lines), out)
	}
	for _, col := range []string{"app", "lru", "fifo", "lfu", "minio", "min", "app/lru"} {
		if !strings.Contains(" "+lines[2]+" ", " "+col+" ") && !strings.HasSuffix(lines[2], " "+col) {
			t.Errorf("header %q lacks %s", lines[2], col)
		}
	}
	for i, size := range []string{"5%", "10%", "20%", "50%"} {
		if f := strings.Fields(lines[3+i]); f[0] != size {
			t.Errorf("row %d starts %q, want %q", i, f[0], size)
		}
	}

	out, _, err = simRun("--trace=testdata/sim_small.trace", "--sizes", "0.4", "--policies", "min,app")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "size  bytes     min     app\n") || strings.Contains(out, "app/lru") ||
		!strings.Contains(out, "40%    200  44.44%  44.44%\n") {
		t.Fatalf("subset output:\n%s", out)
	}
}

func TestSimErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.trace")
	if err := os.WriteFile(bad, []byte("r 1 10\nr 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	scoresOnly := filepath.Join(dir, "scores.trace")
	if err := os.WriteFile(scoresOnly, []byte("s 1 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const tr = "testdata/sim_small.trace"
	cases := []struct {
		args []string
		want string
	}{
		{nil, "--trace is required"},
		{[]string{"--trace", tr, "--sizes", "0"}, `--sizes: "0" is not a positive`},
		{[]string{"--trace", tr, "--sizes", "0.1,-1"}, `--sizes: "-1"`},
		{[]string{"--trace", tr, "--sizes", "0.1,,0.2"}, `--sizes: ""`},
		{[]string{"--trace", tr, "--sizes", "a lot"}, `--sizes: "a lot"`},
		{[]string{"--trace", tr, "--policies", "lru,arc"}, `unknown policy "arc"`},
		{[]string{"--trace", tr, "--policies", "lru,lru"}, `"lru" listed twice`},
		{[]string{"--trace", filepath.Join(dir, "missing.trace")}, "no such file"},
		{[]string{"--trace", bad}, "line 2"},
		{[]string{"--trace", scoresOnly}, "no reads"},
		{[]string{"--trace", tr, "extra"}, "unexpected arguments"},
		{[]string{"--bogus"}, "bad arguments"},
	}
	for _, c := range cases {
		out, _, err := simRun(c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to contain %q", c.args, err, c.want)
		}
		if out != "" {
			t.Errorf("%q: printed %q before failing", c.args, out)
		}
	}
	if _, errOut, err := simRun("--help"); err != nil || !strings.Contains(errOut, "--trace") && !strings.Contains(errOut, "-trace") {
		t.Errorf("--help: %v, %q", err, errOut)
	}
}
