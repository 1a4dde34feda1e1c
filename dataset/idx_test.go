package dataset

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// idxFile builds an IDX file: magic, big-endian dims, data.
func idxFile(magic uint32, dims []uint32, data []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, magic)
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return append(b, data...)
}

func gzipped(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// synthSplit is a made-up split: n images of rows x cols with pixel values
// derived from the index, and labels cycling through 0..9.
type synthSplit struct {
	rows, cols int
	pixels     []byte
	labels     []byte
}

func newSynthSplit(n, rows, cols int) synthSplit {
	s := synthSplit{rows: rows, cols: cols, pixels: make([]byte, n*rows*cols), labels: make([]byte, n)}
	for i := range s.pixels {
		s.pixels[i] = byte(i*31 + i/7)
	}
	for i := range s.labels {
		s.labels[i] = byte((i * 7) % 10)
	}
	return s
}

func (s synthSplit) images() []byte {
	return idxFile(idxImagesMagic, []uint32{uint32(len(s.labels)), uint32(s.rows), uint32(s.cols)}, s.pixels)
}

func (s synthSplit) labelFile() []byte {
	return idxFile(idxLabelsMagic, []uint32{uint32(len(s.labels))}, s.labels)
}

// writeSynthSrc writes the four IDX files (gzip'd) of a small made-up
// dataset into a new folder; files overrides the content of any of them
// by base name ("train-images-idx3-ubyte.gz"...), without compressing;
// a nil content leaves that file out.
func writeSynthSrc(t *testing.T, train, test synthSplit, files map[string][]byte) string {
	t.Helper()
	src := t.TempDir()
	contents := map[string][]byte{
		"train-images-idx3-ubyte.gz": gzipped(t, train.images()),
		"train-labels-idx1-ubyte.gz": gzipped(t, train.labelFile()),
		"t10k-images-idx3-ubyte.gz":  gzipped(t, test.images()),
		"t10k-labels-idx1-ubyte.gz":  gzipped(t, test.labelFile()),
	}
	for name, data := range files {
		contents[name] = data
	}
	for name, data := range contents {
		if data == nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// checkImported checks that dst/<split> holds exactly the images of s, in
// ImageFolder order (class, then index) with the right pixels.
func checkImported(t *testing.T, dst, split string, s synthSplit, n int) {
	t.Helper()
	m, err := Scan(filepath.Join(dst, split), nil)
	if err != nil {
		t.Fatalf("Scan(%s): %v", split, err)
	}
	var want []string
	for label := range 10 {
		for i := range n {
			if int(s.labels[i]) == label {
				want = append(want, fmt.Sprintf("%s/%05d.png", FashionMNISTClasses()[label], i))
			}
		}
	}
	if !slices.Equal(m.Names.Strings(), want) {
		t.Fatalf("%s manifest:\n got %q\nwant %q", split, m.Names.Strings(), want)
	}
	size := s.rows * s.cols
	for _, name := range m.Names.All() {
		var i int
		if _, err := fmt.Sscanf(filepath.Base(name), "%05d.png", &i); err != nil {
			t.Fatal(err)
		}
		img := decodeGray(t, filepath.Join(dst, split, filepath.FromSlash(name)))
		if img.Rect.Dx() != s.cols || img.Rect.Dy() != s.rows {
			t.Fatalf("%s is %v, want %dx%d", name, img.Rect, s.cols, s.rows)
		}
		for y := range s.rows {
			row := img.Pix[y*img.Stride : y*img.Stride+s.cols]
			if !bytes.Equal(row, s.pixels[i*size+y*s.cols:i*size+(y+1)*s.cols]) {
				t.Fatalf("%s row %d differs from the IDX data", name, y)
			}
		}
	}
}

func decodeGray(t *testing.T, path string) *image.Gray {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if cfg.ColorModel != color.GrayModel {
		t.Fatalf("%s: color model is not 8-bit gray", path)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	g, ok := img.(*image.Gray)
	if !ok {
		t.Fatalf("%s decodes to %T, want *image.Gray", path, img)
	}
	return g
}

func TestImportIDXSynthetic(t *testing.T) {
	train, test := newSynthSplit(137, 5, 3), newSynthSplit(23, 5, 3)
	src := writeSynthSrc(t, train, test, nil)
	dst := filepath.Join(t.TempDir(), "out", "fm")

	var mu sync.Mutex
	var calls [][2]int
	progress := func(done, total int) {
		mu.Lock()
		calls = append(calls, [2]int{done, total})
		mu.Unlock()
	}
	n, m, err := ImportIDX(ImportOptions{Src: src, Dst: dst, Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	if n != 137 || m != 23 {
		t.Fatalf("counts %d, %d", n, m)
	}
	checkImported(t, dst, "train", train, 137)
	checkImported(t, dst, "test", test, 23)
	if len(calls) == 0 || calls[len(calls)-1] != [2]int{160, 160} {
		t.Errorf("progress calls %v, want the last to be 160 of 160", calls)
	}
	for i := 1; i < len(calls); i++ {
		if calls[i][0] <= calls[i-1][0] {
			t.Errorf("progress went backwards: %v", calls)
		}
	}
	assertOnly(t, filepath.Dir(dst), "fm")

	// Plain (not gzip'd) files work too.
	src2 := writeSynthSrc(t, train, test, map[string][]byte{"t10k-images-idx3-ubyte.gz": nil})
	if err := os.WriteFile(filepath.Join(src2, "t10k-images-idx3-ubyte"), test.images(), 0o644); err != nil {
		t.Fatal(err)
	}
	dst2 := filepath.Join(t.TempDir(), "fm")
	if _, _, err := ImportIDX(ImportOptions{Src: src2, Dst: dst2, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	checkImported(t, dst2, "test", test, 10)
}

func TestImportIDXRerun(t *testing.T) {
	train, test := newSynthSplit(40, 2, 2), newSynthSplit(15, 2, 2)
	src := writeSynthSrc(t, train, test, nil)
	dst := filepath.Join(t.TempDir(), "fm")
	if _, _, err := ImportIDX(ImportOptions{Src: src, Dst: dst}); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(filepath.Join(dst, "train"))
	if err != nil {
		t.Fatal(err)
	}

	// A killed import's temporary folder is cleaned up by the next import
	// that builds (below, the one over an incomplete tree).
	writeFiles(t, filepath.Dir(dst), ".fm.import-123456/train/0-tshirt-top/00001.png")

	// Complete: a no-op that reports the counts.
	called := false
	n, m, err := ImportIDX(ImportOptions{Src: src, Dst: dst, Progress: func(int, int) { called = true }})
	if err != nil || n != 40 || m != 15 {
		t.Fatalf("re-run = %d, %d, %v", n, m, err)
	}
	after, err := os.Stat(filepath.Join(dst, "train"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || called {
		t.Error("a re-run over a complete import rewrote it")
	}

	// Incomplete: replaced.
	if err := os.RemoveAll(filepath.Join(dst, "test", FashionMNISTClasses()[0])); err != nil {
		t.Fatal(err)
	}
	if n, m, err := ImportIDX(ImportOptions{Src: src, Dst: dst}); err != nil || n != 40 || m != 15 {
		t.Fatalf("re-run over an incomplete import = %d, %d, %v", n, m, err)
	}
	checkImported(t, dst, "test", test, 15)

	// A different limit: replaced.
	if n, m, err := ImportIDX(ImportOptions{Src: src, Dst: dst, Limit: 5}); err != nil || n != 5 || m != 5 {
		t.Fatalf("re-run with a limit = %d, %d, %v", n, m, err)
	}
	checkImported(t, dst, "train", train, 5)
	assertOnly(t, filepath.Dir(dst), "fm")

	// An empty folder is filled; one with anything else is refused and kept.
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ImportIDX(ImportOptions{Src: src, Dst: empty, Limit: 3}); err != nil {
		t.Fatalf("import into an empty folder: %v", err)
	}
	foreign := t.TempDir()
	writeFiles(t, foreign, "precious.txt", "train/x.png")
	if _, _, err := ImportIDX(ImportOptions{Src: src, Dst: foreign}); err == nil {
		t.Fatal("import replaced a folder holding other files")
	}
	if _, err := os.Stat(filepath.Join(foreign, "precious.txt")); err != nil {
		t.Errorf("the refused folder was touched: %v", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	writeFiles(t, filepath.Dir(file), "file")
	if _, _, err := ImportIDX(ImportOptions{Src: src, Dst: file}); err == nil {
		t.Error("import over a file succeeded")
	}
}

// assertOnly fails unless dir holds exactly the named entries: no
// temporary folders left behind.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, de := range des {
		got = append(got, de.Name())
	}
	if !slices.Equal(got, names) {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}

func TestImportIDXBadFiles(t *testing.T) {
	train, test := newSynthSplit(30, 4, 4), newSynthSplit(10, 4, 4)
	imgs := train.images()
	lbls := train.labelFile()
	badLabels := slices.Clone(lbls)
	badLabels[8+17] = 10
	gzImgs := gzipped(t, imgs)
	corruptGz := slices.Clone(gzImgs)
	corruptGz[len(corruptGz)/2] ^= 0xff
	badCRC := slices.Clone(gzImgs)
	badCRC[len(badCRC)-8] ^= 0xff

	const ti, tl = "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"
	for _, tc := range []struct {
		name    string
		files   map[string][]byte
		limit   int
		want    string // in the message
		wantBad bool   // wraps ErrBadIDX
	}{
		{"images magic", map[string][]byte{ti: gzipped(t, idxFile(0x00000801, nil, imgs[4:]))}, 0, "magic number", true},
		{"labels magic", map[string][]byte{tl: idxFile(idxImagesMagic, []uint32{30, 1, 1}, train.labels)}, 0, "magic number", true},
		{"truncated data", map[string][]byte{ti: gzipped(t, imgs[:len(imgs)-5])}, 0, "truncated", true},
		{"truncated data within the limit", map[string][]byte{ti: gzipped(t, imgs[:16+3*16])}, 5, "truncated", true},
		{"truncated header", map[string][]byte{ti: gzipped(t, imgs[:10])}, 0, "truncated", true},
		{"empty file", map[string][]byte{tl: {}}, 0, "truncated", true},
		{"truncated gzip", map[string][]byte{ti: gzImgs[:len(gzImgs)/2]}, 0, "truncated", true},
		{"corrupt gzip", map[string][]byte{ti: corruptGz}, 0, ti, true},
		{"gzip checksum", map[string][]byte{ti: badCRC}, 0, ti, true},
		{"trailing bytes", map[string][]byte{tl: gzipped(t, append(slices.Clone(lbls), 1))}, 0, "extra bytes", true},
		{"count mismatch", map[string][]byte{tl: gzipped(t, idxFile(idxLabelsMagic, []uint32{29}, train.labels[:29]))}, 0, "30 images but 29 labels", true},
		{"label out of range", map[string][]byte{tl: gzipped(t, badLabels)}, 0, "label of image 17 is 10", true},
		{"zero rows", map[string][]byte{ti: gzipped(t, idxFile(idxImagesMagic, []uint32{30, 0, 4}, nil))}, 0, "dimension 1 is 0", true},
		{"huge claim", map[string][]byte{ti: gzipped(t, idxFile(idxImagesMagic, []uint32{1 << 30, 28, 28}, imgs[16:]))}, 0, "more than this importer accepts", true},
		{"missing file", map[string][]byte{"t10k-labels-idx1-ubyte.gz": nil}, 0, "t10k-labels-idx1-ubyte", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := writeSynthSrc(t, train, test, tc.files)
			parent := t.TempDir()
			dst := filepath.Join(parent, "fm")
			_, _, err := ImportIDX(ImportOptions{Src: src, Dst: dst, Limit: tc.limit})
			if err == nil {
				t.Fatal("import succeeded")
			}
			if tc.wantBad != errors.Is(err, ErrBadIDX) {
				t.Errorf("error %v: errors.Is(ErrBadIDX) = %v", err, !tc.wantBad)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
			assertOnly(t, parent) // no Dst, no temporary folder
		})
	}
}

func TestImportIDXBadOptions(t *testing.T) {
	if _, _, err := ImportIDX(ImportOptions{Src: t.TempDir()}); err == nil {
		t.Error("import without Dst succeeded")
	}
	if _, _, err := ImportIDX(ImportOptions{Src: t.TempDir(), Dst: filepath.Join(t.TempDir(), "x"), Limit: -1}); err == nil {
		t.Error("import with a negative limit succeeded")
	}
}

// fashionMNIST skips the test unless Debian's dataset-fashion-mnist is
// installed.
func fashionMNIST(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(DefaultIDXDir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST not installed (%v); install the Debian package dataset-fashion-mnist", err)
	}
	return DefaultIDXDir
}

// readRealIDX reads the first n records of a real IDX file independently
// of the importer: gzip, then skip the header.
func readRealIDX(t *testing.T, path string, header, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, header+n)
	if _, err := io.ReadFull(zr, buf); err != nil {
		t.Fatal(err)
	}
	return buf[header:]
}

func TestImportIDXFashionMNIST(t *testing.T) {
	src := fashionMNIST(t)
	const limit = 50
	dst := filepath.Join(t.TempDir(), "fashion-mnist")
	n, m, err := ImportIDX(ImportOptions{Src: src, Dst: dst, Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	if n != limit || m != limit {
		t.Fatalf("counts %d, %d, want %d each", n, m, limit)
	}
	for _, sp := range []struct{ split, prefix string }{{"train", "train"}, {"test", "t10k"}} {
		s := synthSplit{
			rows:   28,
			cols:   28,
			pixels: readRealIDX(t, filepath.Join(src, sp.prefix+"-images-idx3-ubyte.gz"), 16, limit*28*28),
			labels: readRealIDX(t, filepath.Join(src, sp.prefix+"-labels-idx1-ubyte.gz"), 8, limit),
		}
		checkImported(t, dst, sp.split, s, limit)
	}
	// Well-known first labels: the first training image is an ankle boot,
	// the first test image too, the second test image a pullover.
	for _, p := range []string{"train/9-ankle-boot/00000.png", "test/9-ankle-boot/00000.png", "test/2-pullover/00001.png"} {
		if _, err := os.Stat(filepath.Join(dst, p)); err != nil {
			t.Error(err)
		}
	}
	des, err := os.ReadDir(filepath.Join(dst, "train"))
	if err != nil {
		t.Fatal(err)
	}
	var classes []string
	for _, de := range des {
		classes = append(classes, de.Name())
	}
	if !slices.Equal(classes, FashionMNISTClasses()) {
		t.Errorf("class folders %q", classes)
	}
}

func BenchmarkImportIDX(b *testing.B) {
	train, test := newSynthSplit(2000, 28, 28), newSynthSplit(10, 28, 28)
	src := b.TempDir()
	for name, data := range map[string][]byte{
		"train-images-idx3-ubyte": train.images(), "train-labels-idx1-ubyte": train.labelFile(),
		"t10k-images-idx3-ubyte": test.images(), "t10k-labels-idx1-ubyte": test.labelFile(),
	} {
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; b.Loop(); i++ {
		if _, _, err := ImportIDX(ImportOptions{Src: src, Dst: filepath.Join(b.TempDir(), fmt.Sprint(i))}); err != nil {
			b.Fatal(err)
		}
	}
}
