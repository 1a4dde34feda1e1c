package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/shade-mesh/shade/dataset"
)

func runDatasetCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = runDataset(args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// writeSmallIDX writes a made-up four-file IDX set of n 3x2 images per
// split, gzip'd, labels cycling 0..9, and returns its folder.
func writeSmallIDX(t *testing.T, n int) string {
	t.Helper()
	src := t.TempDir()
	for _, prefix := range []string{"train", "t10k"} {
		img := binary.BigEndian.AppendUint32(nil, 0x803)
		for _, d := range []uint32{uint32(n), 3, 2} {
			img = binary.BigEndian.AppendUint32(img, d)
		}
		lbl := binary.BigEndian.AppendUint32(nil, 0x801)
		lbl = binary.BigEndian.AppendUint32(lbl, uint32(n))
		for i := range n {
			for p := range 6 {
				img = append(img, byte(i+p))
			}
			lbl = append(lbl, byte(i%10))
		}
		for name, data := range map[string][]byte{prefix + "-images-idx3-ubyte.gz": img, prefix + "-labels-idx1-ubyte.gz": lbl} {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(data)
			zw.Close()
			if err := os.WriteFile(filepath.Join(src, name), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return src
}

func TestDatasetImportAndIndex(t *testing.T) {
	src := dataset.DefaultIDXDir
	if _, err := os.Stat(filepath.Join(src, "train-images-idx3-ubyte.gz")); err != nil {
		t.Logf("Fashion-MNIST not installed (%v): using made-up IDX files", err)
		src = writeSmallIDX(t, 60)
	}
	dst := filepath.Join(t.TempDir(), "fm")
	stdout, stderr, err := runDatasetCmd(t, "import-idx", "--src", src, "--dst", dst, "--limit", "50")
	if err != nil {
		t.Fatalf("import-idx: %v\nstderr: %s", err, stderr)
	}
	summary := regexp.MustCompile(`^imported 50 train \+ 50 test images in [0-9.]+m?s: (\S+) (\S+)\n$`)
	m := summary.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("summary %q does not match %v", stdout, summary)
	}
	if m[1] != filepath.Join(dst, "train") || m[2] != filepath.Join(dst, "test") {
		t.Errorf("summary paths %q, %q", m[1], m[2])
	}
	// stderr is not a terminal here: progress as whole lines, ending at 100%.
	if strings.Contains(stderr, "\r") || !strings.Contains(stderr, "100% (100/100)") {
		t.Errorf("progress on stderr: %q", stderr)
	}
	classes := dataset.FashionMNISTClasses()
	for _, split := range []string{"train", "test"} {
		n := 0
		for _, c := range classes {
			des, err := os.ReadDir(filepath.Join(dst, split, c))
			if err != nil {
				t.Fatal(err)
			}
			for _, de := range des {
				if !regexp.MustCompile(`^[0-9]{5}\.png$`).MatchString(de.Name()) {
					t.Errorf("unexpected file %s/%s/%s", split, c, de.Name())
				}
			}
			n += len(des)
		}
		if n != 50 {
			t.Errorf("%s holds %d files, want 50", split, n)
		}
	}

	// Again: nothing to do.
	stdout, _, err = runDatasetCmd(t, "import-idx", "--src", src, "--dst", dst, "--limit", "50")
	if err != nil || !strings.HasPrefix(stdout, "already imported 50 train + 50 test") {
		t.Errorf("re-run: %q, %v", stdout, err)
	}

	// index, text and JSON, flag before or after the folder.
	train := filepath.Join(dst, "train")
	want, err := dataset.Scan(train, nil)
	if err != nil {
		t.Fatal(err)
	}
	stdout, _, err = runDatasetCmd(t, "index", train)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"dir      " + train + "\n",
		"samples  50\n",
		"version  " + want.Version + "\n",
		"classes  " + strconv.Itoa(len(want.Classes())) + "\n",
	} {
		if !strings.Contains(stdout, line) {
			t.Errorf("index output lacks %q:\n%s", line, stdout)
		}
	}
	if !strings.Contains(stdout, "bytes    "+strconv.FormatInt(want.TotalBytes(), 10)+" (") {
		t.Errorf("index output lacks the byte count:\n%s", stdout)
	}
	for _, args := range [][]string{{"index", train, "--json"}, {"index", "--json", train}} {
		stdout, _, err = runDatasetCmd(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		var r indexReport
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stdout)
		}
		if r.Dir != train || r.Samples != 50 || r.Bytes != want.TotalBytes() || r.Version != want.Version ||
			r.Classes != len(want.Classes()) || len(r.ClassNames) != r.Classes {
			t.Errorf("%v: %+v", args, r)
		}
		for _, c := range r.ClassNames {
			if !strings.Contains(strings.Join(classes, " "), c) {
				t.Errorf("unknown class %q", c)
			}
		}
	}
}

func TestDatasetErrors(t *testing.T) {
	empty := t.TempDir()
	for _, tc := range []struct {
		args []string
		is   error
	}{
		{nil, nil},
		{[]string{"frobnicate"}, nil},
		{[]string{"import-idx"}, nil}, // no --dst
		{[]string{"import-idx", "--dst", "x", "extra"}, nil}, // stray argument
		{[]string{"import-idx", "--nope"}, nil},              // unknown flag
		{[]string{"import-idx", "--dst", filepath.Join(empty, "o"), "--src", empty}, os.ErrNotExist},
		{[]string{"index"}, nil},
		{[]string{"index", "a", "b"}, nil},
		{[]string{"index", empty}, dataset.ErrEmpty},
		{[]string{"index", filepath.Join(empty, "missing")}, os.ErrNotExist},
	} {
		_, _, err := runDatasetCmd(t, tc.args...)
		if err == nil {
			t.Errorf("%q succeeded", tc.args)
			continue
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%q: %v, want %v", tc.args, err, tc.is)
		}
	}
	for _, args := range [][]string{{"help"}, {"index", "--help"}, {"import-idx", "-h"}} {
		if _, _, err := runDatasetCmd(t, args...); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
}

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	p := &progressBar{w: &buf, label: "x", tty: true, lastPct: -1}
	for d := 100; d <= 1000; d += 100 {
		p.update(d, 1000)
	}
	p.finish()
	out := buf.String()
	if strings.Count(out, "\r") != 10 || !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 ||
		!strings.Contains(out, "100% 1000/1000") {
		t.Errorf("terminal bar: %q", out)
	}

	buf.Reset()
	p = &progressBar{w: &buf, label: "x", lastPct: -1}
	for d := 1; d <= 1000; d++ {
		p.update(d, 1000)
	}
	p.finish()
	if n := strings.Count(buf.String(), "\n"); n != 10 || strings.Contains(buf.String(), "\r") {
		t.Errorf("log progress has %d lines: %q", n, buf.String())
	}
}

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  string
		json bool
	}{
		{[]string{"d"}, "d", false},
		{[]string{"d", "--json"}, "d", true},
		{[]string{"--json", "d", "e"}, "d e", true},
		{[]string{"--", "--json"}, "--json", false},
		{[]string{"d", "--", "-x"}, "d -x", false},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		j := fs.Bool("json", false, "")
		pos, err := parseInterspersed(fs, tc.args)
		if err != nil || strings.Join(pos, " ") != tc.pos || *j != tc.json {
			t.Errorf("%q: %q, json=%v, %v", tc.args, pos, *j, err)
		}
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 30959147: "29.5 MiB", 5 << 30: "5.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
