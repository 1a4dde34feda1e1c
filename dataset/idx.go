package dataset

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrBadIDX is wrapped by every error about the contents of an IDX file.
var ErrBadIDX = errors.New("dataset: bad IDX file")

// DefaultIDXDir is where Debian's dataset-fashion-mnist package installs
// the Fashion-MNIST IDX files.
const DefaultIDXDir = "/usr/share/datasets/fashion-mnist"

const (
	idxImagesMagic = 0x00000803 // unsigned bytes, 3 dimensions
	idxLabelsMagic = 0x00000801 // unsigned bytes, 1 dimension

	// maxIDXBytes bounds what one IDX file may claim to hold, so that a
	// corrupt header cannot make the importer allocate without end.
	maxIDXBytes = 1 << 31
	// importMarker, inside a finished import, records what it holds. Its
	// leading '.' keeps it out of every manifest.
	importMarker = ".shade-import.json"
	importFormat = "shade-idx-import/1"
)

// fashionClasses are the Fashion-MNIST class folders in label order; their
// "<label>-" prefix makes them sort in that order.
var fashionClasses = [10]string{
	"0-tshirt-top", "1-trouser", "2-pullover", "3-dress", "4-coat",
	"5-sandal", "6-shirt", "7-sneaker", "8-bag", "9-ankle-boot",
}

// FashionMNISTClasses returns the class folder names ImportIDX writes, in
// label order (index = label).
func FashionMNISTClasses() []string { return fashionClasses[:] }

// ImportOptions configures ImportIDX. The zero value of each field means
// its default.
type ImportOptions struct {
	// Src is the folder holding train-images-idx3-ubyte, train-labels-
	// idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each
	// gzip'd (name + ".gz", tried first) or plain. Default DefaultIDXDir.
	Src string
	// Dst is the folder to create; required. It receives train/ and test/,
	// two ImageFolder datasets.
	Dst string
	// Progress, if not nil, is called with the number of images written so
	// far and the total, about every 1000 images and once at the end. Calls
	// come from worker goroutines, one at a time, with done increasing.
	Progress func(done, total int)
	// Limit, if positive, imports only the first Limit images of each
	// split (for tests). Only that prefix of each file is read and checked.
	Limit int
}

// ImportIDX converts Fashion-MNIST's IDX files into two ImageFolder trees,
// Dst/train/<class>/<n>.png and Dst/test/<class>/<n>.png: 8-bit grayscale
// PNGs, class folders named as FashionMNISTClasses (sorted in label order),
// n the image's index within its split zero-padded to 5 digits. A Scan of
// either split thus lists samples by class, then by original index.
//
// The IDX files are validated before anything is written (magic numbers,
// dimensions, image and label counts agree, every label below 10, the data
// neither truncated nor followed by extra bytes); errors about their
// contents wrap ErrBadIDX and name the file.
//
// The tree is built in a temporary folder beside Dst and renamed into
// place, so Dst is either absent, the previous content, or complete; on
// error nothing is left behind, and temporary folders of earlier, killed
// imports into Dst are removed. If Dst already holds a complete import
// with the same Limit, ImportIDX does nothing and returns its counts. An
// incomplete or different earlier import is replaced; any other existing,
// non-empty Dst is refused, never deleted. Files are not fsync'd.
//
// It returns the number of images written per split. Encoding runs on
// GOMAXPROCS workers. Concurrent imports into one Dst are not supported.
func ImportIDX(opts ImportOptions) (train, test int, err error) {
	if opts.Src == "" {
		opts.Src = DefaultIDXDir
	}
	if opts.Dst == "" {
		return 0, 0, errors.New("dataset: import: no destination folder")
	}
	if opts.Limit < 0 {
		return 0, 0, fmt.Errorf("dataset: import: negative limit %d", opts.Limit)
	}
	dst := filepath.Clean(opts.Dst)
	if m, ok := readCompleteImport(dst); ok && m.Limit == opts.Limit {
		return m.Train, m.Test, nil
	}
	if err := checkReplaceable(dst); err != nil {
		return 0, 0, err
	}

	splits := []*idxSplit{{name: "train", prefix: "train"}, {name: "test", prefix: "t10k"}}
	for _, s := range splits {
		if err := s.load(opts.Src, opts.Limit); err != nil {
			return 0, 0, err
		}
	}

	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return 0, 0, fmt.Errorf("dataset: import: %w", err)
	}
	removeStaleImports(dst)
	tmp, err := os.MkdirTemp(parent, tmpPrefix(dst))
	if err != nil {
		return 0, 0, fmt.Errorf("dataset: import: %w", err)
	}
	defer func() {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}()
	if err := writeSplits(tmp, splits, opts.Progress); err != nil {
		return 0, 0, err
	}
	m := importManifest{Format: importFormat, Src: opts.Src, Limit: opts.Limit, Train: splits[0].n, Test: splits[1].n}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return 0, 0, fmt.Errorf("dataset: import: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, importMarker), append(data, '\n'), 0o644); err != nil {
		return 0, 0, fmt.Errorf("dataset: import: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp made it 0700
		return 0, 0, fmt.Errorf("dataset: import: %w", err)
	}
	if err := install(tmp, dst); err != nil {
		return 0, 0, err
	}
	tmp = ""
	return m.Train, m.Test, nil
}

// tmpPrefix is the name prefix of the temporary folders an import into
// dst builds beside it.
func tmpPrefix(dst string) string { return "." + filepath.Base(dst) + ".import-" }

// removeStaleImports deletes the temporary folders that earlier imports
// into dst left beside it when they were killed. Best effort.
func removeStaleImports(dst string) {
	parent, prefix := filepath.Dir(dst), tmpPrefix(dst)
	des, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, de := range des {
		if de.IsDir() && strings.HasPrefix(de.Name(), prefix) {
			os.RemoveAll(filepath.Join(parent, de.Name()))
		}
	}
}

// importManifest is the content of importMarker.
type importManifest struct {
	Format string `json:"format"`
	Src    string `json:"src"`
	Limit  int    `json:"limit"`
	Train  int    `json:"train"`
	Test   int    `json:"test"`
}

// readCompleteImport reports whether dst holds a finished import: its
// marker, and as many files in each split's class folders as it records.
func readCompleteImport(dst string) (importManifest, bool) {
	var m importManifest
	data, err := os.ReadFile(filepath.Join(dst, importMarker))
	if err != nil || json.Unmarshal(data, &m) != nil || m.Format != importFormat {
		return m, false
	}
	for _, s := range []struct {
		name string
		want int
	}{{"train", m.Train}, {"test", m.Test}} {
		n := 0
		for _, c := range fashionClasses {
			des, err := os.ReadDir(filepath.Join(dst, s.name, c))
			if err != nil {
				return m, false
			}
			n += len(des)
		}
		if n != s.want {
			return m, false
		}
	}
	return m, true
}

// checkReplaceable refuses a dst that exists and is not empty or the
// remains of an import: ImportIDX must never delete the user's files.
func checkReplaceable(dst string) error {
	info, err := os.Lstat(dst)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dataset: import: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("dataset: import: %s exists and is not a folder", dst)
	}
	des, err := os.ReadDir(dst)
	if err != nil {
		return fmt.Errorf("dataset: import: %w", err)
	}
	for _, de := range des {
		switch de.Name() {
		case "train", "test", importMarker:
		default:
			return fmt.Errorf("dataset: import: %s exists and holds %q, which an import does not write; refusing to replace it", dst, de.Name())
		}
	}
	return nil
}

// install renames the finished tree tmp to dst, moving an existing dst
// aside first and deleting it afterwards.
func install(tmp, dst string) error {
	err := os.Rename(tmp, dst)
	if err == nil {
		return nil
	}
	if _, statErr := os.Lstat(dst); statErr != nil {
		return fmt.Errorf("dataset: import: %w", err)
	}
	old := tmp + ".old"
	if err := os.Rename(dst, old); err != nil {
		return fmt.Errorf("dataset: import: moving the old %s aside: %w", dst, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Rename(old, dst) // best effort: put the old tree back
		return fmt.Errorf("dataset: import: %w", err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("dataset: import: removing the old tree: %w", err)
	}
	return nil
}

// idxSplit is one split's images and labels, loaded and validated.
type idxSplit struct {
	name   string // folder name: "train" or "test"
	prefix string // IDX file name prefix: "train" or "t10k"

	n, rows, cols int
	pixels        []byte // n images of rows*cols bytes, row-major
	labels        []byte // n labels, each < 10
}

func (s *idxSplit) load(src string, limit int) error {
	imgDims, pixels, err := readIDX(filepath.Join(src, s.prefix+"-images-idx3-ubyte"), idxImagesMagic, limit)
	if err != nil {
		return err
	}
	lblDims, labels, err := readIDX(filepath.Join(src, s.prefix+"-labels-idx1-ubyte"), idxLabelsMagic, limit)
	if err != nil {
		return err
	}
	if imgDims[0] != lblDims[0] {
		return fmt.Errorf("%w: %s split: %d images but %d labels", ErrBadIDX, s.name, imgDims[0], lblDims[0])
	}
	s.rows, s.cols = imgDims[1], imgDims[2]
	s.n = imgDims[0]
	if limit > 0 && limit < s.n {
		s.n = limit
	}
	for i, l := range labels {
		if l >= byte(len(fashionClasses)) {
			return fmt.Errorf("%w: %s split: label of image %d is %d, want 0..9", ErrBadIDX, s.name, i, l)
		}
	}
	s.pixels, s.labels = pixels, labels
	return nil
}

// readIDX reads the IDX file base (base+".gz" if it exists, else base,
// either gzip'd or plain), checks its magic number and dimensions, and
// returns the dimensions and the data of the first limit records (all if
// limit is 0). Reading everything also checks that the data ends exactly
// where the header says, and the gzip checksum.
func readIDX(base string, magic uint32, limit int) (dims []int, data []byte, err error) {
	path := base + ".gz"
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		path = base
		f, err = os.Open(path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("dataset: import: %w", err)
	}
	defer f.Close()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadIDX, path, fmt.Sprintf(format, args...))
	}

	var r io.Reader
	br := bufio.NewReaderSize(f, 1<<16)
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, bad("gzip: %v", err)
		}
		defer zr.Close()
		r = zr
	} else {
		r = br
	}
	readErr := func(what string, err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return bad("truncated in the %s", what)
		}
		if errors.As(err, new(*fs.PathError)) {
			return fmt.Errorf("dataset: import: %w", err) // an I/O error, not bad content
		}
		return bad("reading the %s: %v", what, err) // gzip or deflate: corrupt
	}

	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, nil, readErr("header", err)
	}
	if got := binary.BigEndian.Uint32(hdr[:]); got != magic {
		return nil, nil, bad("magic number %#08x, want %#08x", got, magic)
	}
	ndim := int(hdr[3])
	dimBytes := make([]byte, 4*ndim)
	if _, err := io.ReadFull(r, dimBytes); err != nil {
		return nil, nil, readErr("header", err)
	}
	dims = make([]int, ndim)
	record := int64(1) // bytes per record: the product of all dims but the first
	for i := range dims {
		d := binary.BigEndian.Uint32(dimBytes[4*i:])
		if d == 0 || d > maxIDXBytes {
			return nil, nil, bad("dimension %d is %d", i, d)
		}
		dims[i] = int(d)
		if i > 0 {
			record *= int64(d)
			if record > maxIDXBytes {
				return nil, nil, bad("records of %d bytes are too large", record)
			}
		}
	}
	if magic == idxImagesMagic && (dims[1] > 1<<14 || dims[2] > 1<<14) {
		return nil, nil, bad("images of %dx%d are too large", dims[1], dims[2])
	}
	count := int64(dims[0])
	if limit > 0 && int64(limit) < count {
		count = int64(limit)
	}
	want := count * record
	if int64(dims[0])*record > maxIDXBytes {
		return nil, nil, bad("header claims %d bytes of data, more than this importer accepts", int64(dims[0])*record)
	}
	// Grow as data arrives rather than trusting the header with one big
	// allocation.
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, r, want); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, nil, bad("truncated: the header promises %d records of %d bytes, the data ends after %d bytes", dims[0], record, buf.Len())
		}
		return nil, nil, readErr("data", err)
	}
	if count == int64(dims[0]) {
		// Everything is read: the file must end here (this also makes gzip
		// verify its checksum).
		var extra [1]byte
		switch n, err := io.ReadFull(r, extra[:]); {
		case n > 0:
			return nil, nil, bad("extra bytes after the %d records the header promises", dims[0])
		case !errors.Is(err, io.EOF):
			return nil, nil, readErr("data", err)
		}
	}
	return dims, buf.Bytes(), nil
}

// writeSplits writes every image of splits under root with a pool of
// GOMAXPROCS workers.
func writeSplits(root string, splits []*idxSplit, progress func(done, total int)) error {
	total := 0
	for _, s := range splits {
		for _, c := range fashionClasses {
			if err := os.MkdirAll(filepath.Join(root, s.name, c), 0o755); err != nil {
				return fmt.Errorf("dataset: import: %w", err)
			}
		}
		total += s.n
	}

	var (
		next, done atomic.Int64
		failed     atomic.Bool
		errOnce    sync.Once
		firstErr   error
		progMu     sync.Mutex
		reported   int
		wg         sync.WaitGroup
	)
	report := func(d int) {
		progMu.Lock()
		defer progMu.Unlock()
		if d > reported { // calls are serialized and never go backwards
			reported = d
			progress(d, total)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), max(total/64, 1))
	for range workers {
		wg.Go(func() {
			w := newPNGWriter()
			for !failed.Load() {
				k := int(next.Add(1) - 1)
				if k >= total {
					return
				}
				s, i := splits[0], k
				for _, sp := range splits {
					if i < sp.n {
						s = sp
						break
					}
					i -= sp.n
				}
				if err := w.write(root, s, i); err != nil {
					errOnce.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
				if d := int(done.Add(1)); progress != nil && (d%progressEvery == 0 || d == total) {
					report(d)
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// pngWriter encodes and writes images; one per worker goroutine.
type pngWriter struct {
	enc  png.Encoder
	buf  bytes.Buffer
	path []byte
}

func newPNGWriter() *pngWriter {
	w := &pngWriter{}
	w.enc.BufferPool = &onePool{}
	w.enc.CompressionLevel = png.BestSpeed
	return w
}

func (w *pngWriter) write(root string, s *idxSplit, i int) error {
	size := s.rows * s.cols
	img := &image.Gray{
		Pix:    s.pixels[i*size : (i+1)*size : (i+1)*size],
		Stride: s.cols,
		Rect:   image.Rect(0, 0, s.cols, s.rows),
	}
	w.buf.Reset()
	if err := w.enc.Encode(&w.buf, img); err != nil {
		return fmt.Errorf("dataset: import: encoding %s image %d: %w", s.name, i, err)
	}
	w.path = append(w.path[:0], root...)
	w.path = append(w.path, os.PathSeparator)
	w.path = append(w.path, s.name...)
	w.path = append(w.path, os.PathSeparator)
	w.path = append(w.path, fashionClasses[s.labels[i]]...)
	w.path = append(w.path, os.PathSeparator)
	w.path = appendPadded(w.path, i, 5)
	w.path = append(w.path, ".png"...)
	if err := os.WriteFile(string(w.path), w.buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("dataset: import: %w", err)
	}
	return nil
}

// appendPadded appends i in decimal, zero-padded to width digits.
func appendPadded(b []byte, i, width int) []byte {
	var tmp [20]byte
	d := strconv.AppendInt(tmp[:0], int64(i), 10)
	for n := len(d); n < width; n++ {
		b = append(b, '0')
	}
	return append(b, d...)
}

// onePool is a png.EncoderBufferPool holding one buffer, for an encoder
// used by a single goroutine.
type onePool struct{ b *png.EncoderBuffer }

func (p *onePool) Get() *png.EncoderBuffer  { b := p.b; p.b = nil; return b }
func (p *onePool) Put(b *png.EncoderBuffer) { p.b = b }
