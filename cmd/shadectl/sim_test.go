package main

import (
	"bytes"
	"compress/gzip"
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
//     The trace publishes no order, so "order" decides as APP, and closes
//     none of the gap to MIN: 0.0%.
//   - 40%, two samples. APP keeps {1,2} and refuses 3 4 5: t4 t6 t8 t9.
//     LRU, FIFO, LFU: each read evicts the sample read two steps later:
//     none. MinIO keeps {1,2}: 4. MIN bypasses 3 4 5, never read again: 4.
//     app/lru 4/0: "inf". No gap between APP and MIN: "-".
//   - 100%: all five fit; every policy hits all 4 repeats: 1.00x, "-".
func TestSimTable(t *testing.T) {
	out, errOut, err := simRun("--trace", "testdata/sim_small.trace", "--sizes", "0.2,0.4,1")
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, errOut)
	}
	want := `trace testdata/sim_small.trace: 9 reads of 5 samples, 5 score updates, 0 epoch orders, working set 500 bytes

  size  bytes     app   order     min     lru    fifo     lfu   minio  app/lru  gap closed
   20%    100   0.00%   0.00%  22.22%   0.00%   0.00%   0.00%  22.22%        -        0.0%
   40%    200  44.44%  44.44%  44.44%   0.00%   0.00%   0.00%  44.44%      inf           -
  100%    500  44.44%  44.44%  44.44%  44.44%  44.44%  44.44%  44.44%    1.00x           -
`
	if out != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out, want)
	}
}

// simEpochsTrace is testdata/sim_epochs.trace.gz unzipped.
const simEpochsTrace = `# shade access trace: e <epoch> | r <id> <size> | s <id> <score>
# Two published orders over samples 1 (score 5), 2 (score 1) and 3 (never
# scored: the running mean, 3); every sample is 100 bytes, working set 300.
# Hit counts by hand are in sim_test.go. Kept gzip'd as sim_epochs.trace.gz.
s 1 5
s 2 1
e 0
r 1 100
r 2 100
r 2 100
r 2 100
r 1 100
e 1
r 3 100
r 1 100
r 3 100
`

// TestSimGzipEpochs replays testdata/sim_epochs.trace.gz, a gzip'd trace
// with orders (simEpochsTrace): reads t1..t8 = 1 2 2 2 1 | 3 1 3, orders
// [1 2 2 2 1] and [3 1 3]. Keys as in the policy package's tests: order
// [next place, (score, freq, last)], MIN next position p (∞: never).
//
//   - 34% (102 bytes): one sample.
//     order: t1 1 [4,..]; t2 2 [2,..] evicts 1 (read later); t3, t4 hit 2,
//     now [∞,(1,3,4)]; t5 1 [∞,(5,2,5)] evicts 2 (less important). Order
//     [3 1 3]: 1 → [1,..]. t6 3 [2,..]: 1 is read first: rejected. t7 hits
//     1 → [∞,(5,3,7)]; t8 3 [∞,(3,2,8)]: 1 is more important: rejected.
//     Hits t3 t4 t7 = 3 of 8: 37.50%.
//     app: 2 (score 1) and 3 (score 3) never displace 1 (score 5): hits t5,
//     t7: 25.00%. min: next p0→4 p1→2 p2→3 p3→∞ p4→6 p5→7 p6,p7→∞; p1 2(2)
//     evicts 1(4); p2, p3 hit; p4 1(6) evicts 2(∞); p5 3(7) bypassed; p6
//     hits; p7 3(∞) bypassed: 3, 37.50%. lru, fifo, lfu: one slot, every
//     miss replaces it: hits t3 t4 = 25.00%; minio keeps 1: t5 t7, 25.00%.
//     app/lru 1.00x; gap closed (37.5-25)/(37.5-25) = 100.0%.
//   - 67% (201 bytes): two samples. app, order, min: 1 and 2 fill the
//     cache, t3 t4 t5 hit; at t6, 2 is never read again (and the least
//     important): 3 replaces it; t7 t8 hit: 5, 62.50%. lru: t6 evicts 2
//     (least recent), then t7 t8 hit: 62.50%. fifo: t6 evicts 1, t7 evicts
//     2, t8 hits: 4, 50.00%. lfu: t6 evicts 1 (2 reads, 2 has 3), t7 1
//     evicts 3 (1 read), t8 3 evicts 1 (1 read, older than 2): 3, 37.50%.
//     minio keeps {1,2}: t3 t4 t5 t7: 50.00%. No gap: "-".
//   - 100%: all fit; the 5 re-reads hit everywhere: 62.50%.
//
// The same text unzipped prints the same table.
func TestSimGzipEpochs(t *testing.T) {
	const gz = "testdata/sim_epochs.trace.gz"
	table := `

  size  bytes     app   order     min     lru    fifo     lfu   minio  app/lru  gap closed
   34%    102  25.00%  37.50%  37.50%  25.00%  25.00%  25.00%  25.00%    1.00x      100.0%
   67%    201  62.50%  62.50%  62.50%  62.50%  50.00%  37.50%  50.00%    1.00x           -
  100%    300  62.50%  62.50%  62.50%  62.50%  62.50%  62.50%  62.50%    1.00x           -
`
	summary := ": 8 reads of 3 samples, 2 score updates, 2 epoch orders, working set 300 bytes"
	out, errOut, err := simRun("--trace", gz, "--sizes", "0.34,0.67,1")
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, errOut)
	}
	if want := "trace " + gz + summary + table; out != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out, want)
	}

	f, err := os.Open(gz)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if _, err := text.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	if text.String() != simEpochsTrace {
		t.Fatalf("%s holds:\n%s\nwant simEpochsTrace", gz, text.String())
	}
	plain := filepath.Join(t.TempDir(), "epochs.trace")
	if err := os.WriteFile(plain, text.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = simRun("--trace", plain, "--sizes", "0.34,0.67,1")
	if want := "trace " + plain + summary + table; err != nil || out != want {
		t.Fatalf("plain copy: %v\n%s\nwant:\n%s", err, out, want)
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
	for _, col := range []string{"app", "order", "lru", "fifo", "lfu", "minio", "min", "app/lru", "gap closed"} {
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
		strings.Contains(out, "gap closed") || !strings.Contains(out, "40%    200  44.44%  44.44%\n") {
		t.Fatalf("subset output:\n%s", out)
	}
}

func TestSimErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.trace")
	if err := os.WriteFile(bad, []byte("r 1 10\nr 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badGzip := filepath.Join(dir, "bad.trace.gz")
	if err := os.WriteFile(badGzip, []byte{0x1f, 0x8b, 'r', ' ', '1'}, 0o644); err != nil {
		t.Fatal(err)
	}
	gz, err := os.ReadFile("testdata/sim_epochs.trace.gz")
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.trace.gz")
	if err := os.WriteFile(cut, gz[:len(gz)-12], 0o644); err != nil {
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
		{[]string{"--trace", badGzip}, "bad.trace.gz: reading gzip: unexpected EOF"},
		{[]string{"--trace", cut}, "cut.trace.gz: policy: reading trace after line 13: unexpected EOF"},
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
