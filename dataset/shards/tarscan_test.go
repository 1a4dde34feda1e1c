package shards

import (
	"archive/tar"
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// scanned is what scanTar (or archive/tar) gave: each regular file's
// name, size and data offset, then the error.
func scanned(b []byte, scan func([]byte, func([]byte, int64, int64) error) error) string {
	var out strings.Builder
	err := scan(b, func(name []byte, size, off int64) error {
		fmt.Fprintf(&out, "%q %d @%d\n", name, size, off)
		return nil
	})
	fmt.Fprintf(&out, "error: %v\n", err)
	return out.String()
}

func fast(b []byte, member func([]byte, int64, int64) error) error {
	return scanTar(bytes.NewReader(b), int64(len(b)), member)
}

// reference reads the whole tar with archive/tar, as shards were indexed
// before scanTar.
func reference(b []byte, member func([]byte, int64, int64) error) error {
	return tarFrom(bytes.NewReader(b), member)
}

// tarOf writes files (name: size) in format, with a directory and a
// symlink among them.
func tarOf(tb testing.TB, format tar.Format, names ...string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mod := time.Unix(1_700_000_000, 0)
	for i, name := range names {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(i * 300), Typeflag: tar.TypeReg, ModTime: mod, Format: format}
		switch {
		case strings.HasSuffix(name, "/"):
			hdr.Typeflag, hdr.Size = tar.TypeDir, 0
		case strings.HasPrefix(name, "link"):
			hdr.Typeflag, hdr.Size, hdr.Linkname = tar.TypeSymlink, 0, "a.jpg"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			tb.Fatal(err)
		}
		tw.Write(bytes.Repeat([]byte{byte(i)}, int(hdr.Size)))
	}
	tw.Close()
	return buf.Bytes()
}

// seeds are tars of every kind scanTar reads itself or hands over:
// USTAR, PAX (a long name, non-ASCII), GNU (a long name), with
// directories and links, and each cut short.
func seeds(tb testing.TB) [][]byte {
	long := strings.Repeat("d/", 60) + "x.jpg"
	var out [][]byte
	for _, format := range []tar.Format{tar.FormatUSTAR, tar.FormatPAX, tar.FormatGNU} {
		names := []string{"dir/", "a.jpg", "a.cls", "link", "b.jpg", "b.txt"}
		if format != tar.FormatUSTAR {
			names = append(names, long, "c.jpg", "é.jpg")
		}
		b := tarOf(tb, format, names...)
		out = append(out, b)
		for _, cut := range []int{0, 100, 512, 700, 1024, 1536, len(b) - 1024, len(b) - 700, len(b) - 512} {
			if cut >= 0 && cut < len(b) {
				out = append(out, b[:cut])
			}
		}
	}
	// Blocks that are read differently, each made from a USTAR or GNU
	// tar's header at 512 (a.jpg, 300 bytes) and at 0 (a directory).
	for _, c := range []struct {
		format tar.Format
		at     int
		field  [2]int
		value  []byte
	}{
		{tar.FormatUSTAR, 512, fieldSize, append([]byte{0x80}, make([]byte, 9)...)},     // base-256: 0
		{tar.FormatGNU, 512, fieldSize, []byte{0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 44}}, // base-256: 300
		{tar.FormatUSTAR, 512, [2]int{156, 157}, []byte{0}},                             // TypeRegA
		{tar.FormatUSTAR, 0, fieldSize, []byte("00000001750\x00")},                      // a directory of size 1000
		{tar.FormatUSTAR, 512, fieldMode, []byte("zz\x00")},                             // not octal
		{tar.FormatUSTAR, 512, fieldSize, []byte(" 454 \x00")},                          // spaces around
		{tar.FormatGNU, 512, fieldATime, []byte("not a time\x00")},                      // buggy GNU
		{tar.FormatUSTAR, 512, fieldPrefix, []byte("pre\x00")},                          // a prefix
		{tar.FormatUSTAR, 512, [2]int{156, 157}, []byte{'7'}},                           // contiguous
		{tar.FormatUSTAR, 512, [2]int{508, 512}, []byte("tar\x00")},                     // STAR
	} {
		b := tarOf(tb, c.format, "dir/", "a.jpg", "b.jpg")
		blk := b[c.at : c.at+blockSize]
		copy(blk[c.field[0]:c.field[1]], append(c.value, make([]byte, c.field[1]-c.field[0])...))
		copy(blk[fieldChecksum[0]:fieldChecksum[1]], "        ")
		var sum int64
		for _, x := range blk {
			sum += int64(x)
		}
		copy(blk[fieldChecksum[0]:fieldChecksum[1]], fmt.Sprintf("%06o\x00 ", sum))
		out = append(out, b)
	}
	return out
}

// scanTar gives every regular file and error archive/tar gives, for the
// seeds and their cuts.
func TestScanTarAsArchiveTar(t *testing.T) {
	for _, format := range []tar.Format{tar.FormatUSTAR, tar.FormatPAX, tar.FormatGNU} {
		// The headers of the tars writers make are read here, not
		// handed over.
		b := tarOf(t, format, "dir/", "a.jpg", "link")
		for _, at := range []int{0, 512, 1024 + 512} {
			if _, _, _, ok := plainHeader((*[blockSize]byte)(b[at:])); !ok {
				t.Fatalf("%v: the header at %d is handed to archive/tar", format, at)
			}
		}
	}
	for i, b := range seeds(t) {
		if got, want := scanned(b, fast), scanned(b, reference); got != want {
			t.Fatalf("seed %d (%d bytes): scanTar gave\n%s\narchive/tar\n%s", i, len(b), got, want)
		}
	}
}

// FuzzScanTar holds scanTar to archive/tar's members and errors on any
// bytes.
func FuzzScanTar(f *testing.F) {
	for _, b := range seeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := scanned(b, fast), scanned(b, reference); got != want {
			t.Fatalf("scanTar gave\n%s\narchive/tar\n%s", got, want)
		}
	})
}

// headerSums adds as a byte at a time does: blocks of random bytes, of
// bytes all 0xff (the lanes' largest sums) and all 0x80, and each with
// its checksum field high.
func TestHeaderSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var blocks [][blockSize]byte
	for range 200 {
		var blk [blockSize]byte
		for i := range blk {
			blk[i] = byte(rng.Uint32())
		}
		blocks = append(blocks, blk)
	}
	var ones, eighty [blockSize]byte
	for i := range ones {
		ones[i], eighty[i] = 0xff, 0x80
	}
	blocks = append(blocks, ones, eighty, [blockSize]byte{})
	for k := range blocks {
		blk := blocks[k]
		for range 2 {
			var unsigned, signed int64
			for i, c := range blk {
				if fieldChecksum[0] <= i && i < fieldChecksum[1] {
					c = ' '
				}
				unsigned += int64(c)
				signed += int64(int8(c))
			}
			if u, s := headerSums(&blk); u != unsigned || s != signed {
				t.Fatalf("block %d: sums %d and %d, want %d and %d", k, u, s, unsigned, signed)
			}
			for i := fieldChecksum[0]; i < fieldChecksum[1]; i++ {
				blk[i] = 0xf0
			}
		}
	}
}
