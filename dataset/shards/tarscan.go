package shards

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/bits"
)

// scanTar calls member with the name, size and data offset of each
// regular file of the tar in f (a shard of size bytes, read from its
// start), in order, and returns what archive/tar's Reader would: nil at
// the archive's end, or its error (ErrHeader, io.ErrUnexpectedEOF, a read
// error), or member's. The name's bytes are scanTar's, valid until member
// returns.
//
// Indexing a shard of small members is mostly reading headers, and
// archive/tar spends more on a header than the read does (it parses every
// field into a Header, checks the block for non-ASCII bytes, allocates
// the names): the headers of the tars WebDataset writers make (USTAR, PAX
// or GNU blocks of regular files and directories, octal fields, names
// of at most 100 bytes) are read here, field by field as archive/tar
// checks them, and from the first header of any other kind (PAX and GNU
// extension headers, long names, sparse files, base-256 numbers, the end
// of the archive) on, archive/tar reads the rest. FuzzScanTar holds the
// two to the same members and errors.
func scanTar(f io.ReadSeeker, size int64, member func(name []byte, size, off int64) error) error {
	var blk [blockSize]byte
	for pos := int64(0); ; {
		if _, err := f.Seek(pos, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.ReadFull(f, blk[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // exactly at the end: archive/tar's normal end
			}
			return err
		}
		typeflag, name, n, ok := plainHeader(&blk)
		if !ok {
			// From this header on, archive/tar, the block put back rather
			// than read again (a stream that seeks back may open the
			// shard again).
			return tarFrom(&rewound{f: f, blk: blk[:], pos: pos}, member)
		}
		data := pos + blockSize
		switch typeflag {
		case tar.TypeReg:
			if err := member(name, n, data); err != nil {
				return err
			}
		case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
			n = 0 // archive/tar: a header alone, whatever its size field says
		}
		switch next := data + n + padding(n); {
		case data+n > size:
			return io.ErrUnexpectedEOF // archive/tar fails passing over the data
		case next > size:
			return nil // archive/tar ends at a short padding
		default:
			pos = next
		}
	}
}

const blockSize = 512

func padding(n int64) int64 { return -n & (blockSize - 1) }

// tarFrom reads the tar in f from f's position on with archive/tar.
func tarFrom(f io.ReadSeeker, member func(name []byte, size, off int64) error) error {
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeRegA {
			continue
		}
		// tar passes over member data by seeking: after Next, the stream's
		// position is where the member's data begins.
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return err
		}
		if err := member([]byte(hdr.Name), hdr.Size, off); err != nil {
			return err
		}
	}
}

// rewound is f with the bytes blk, just read from it at pos, put back:
// it reads and seeks as f did before they were read.
type rewound struct {
	f   io.ReadSeeker
	blk []byte // what is left to read again
	pos int64  // the position of blk[0]
}

func (r *rewound) Read(p []byte) (int, error) {
	if len(r.blk) == 0 {
		return r.f.Read(p)
	}
	n := copy(p, r.blk)
	r.blk, r.pos = r.blk[n:], r.pos+int64(n)
	return n, nil
}

func (r *rewound) Seek(off int64, whence int) (int64, error) {
	if len(r.blk) == 0 {
		return r.f.Seek(off, whence) // f is where the bytes put back end
	}
	switch whence {
	case io.SeekCurrent:
		off += r.pos
	case io.SeekStart:
	default:
		r.blk = nil
		return r.f.Seek(off, whence)
	}
	if end := r.pos + int64(len(r.blk)); r.pos <= off && off <= end {
		r.blk, r.pos = r.blk[off-r.pos:], off
		return off, nil
	}
	r.blk = nil
	return r.f.Seek(off, io.SeekStart)
}

// The fields of a header block, as archive/tar names them.
var (
	fieldName     = [2]int{0, 100}
	fieldMode     = [2]int{100, 108}
	fieldUID      = [2]int{108, 116}
	fieldGID      = [2]int{116, 124}
	fieldSize     = [2]int{124, 136}
	fieldModTime  = [2]int{136, 148}
	fieldChecksum = [2]int{148, 156}
	fieldDevMajor = [2]int{329, 337}
	fieldDevMinor = [2]int{337, 345}
	fieldPrefix   = [2]int{345, 500} // USTAR
	fieldATime    = [2]int{345, 357} // GNU
	fieldCTime    = [2]int{357, 369} // GNU
)

// plainHeader reads blk as a header that archive/tar would read as it
// stands (no extension header before it, none to follow from it): a
// USTAR, PAX or GNU block whose checksum holds, whose numbers are octal
// and parse, of no USTAR prefix, of a regular file or a type that is a
// header alone. ok is false for any other block (archive/tar is to read
// it): then the other results mean nothing.
func plainHeader(blk *[blockSize]byte) (typeflag byte, name []byte, size int64, ok bool) {
	field := func(f [2]int) []byte { return blk[f[0]:f[1]] }
	sum, ok := octal(field(fieldChecksum))
	if !ok {
		return 0, nil, 0, false
	}
	if unsigned, signed := headerSums(blk); sum != unsigned && sum != signed {
		return 0, nil, 0, false // archive/tar: ErrHeader (all zeros: its end)
	}
	magic, version := string(blk[257:263]), string(blk[263:265])
	ustar := magic == "ustar\x00" && string(blk[508:512]) != "tar\x00"
	gnu := magic == "ustar " && version == " \x00"
	if !ustar && !gnu {
		return 0, nil, 0, false // V7 or STAR
	}
	typeflag = blk[156]
	switch typeflag {
	case tar.TypeReg, tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
	default:
		return 0, nil, 0, false
	}
	for _, f := range [...][2]int{fieldMode, fieldUID, fieldGID, fieldModTime, fieldDevMajor, fieldDevMinor} {
		if _, ok := octal(field(f)); !ok {
			return 0, nil, 0, false
		}
	}
	if ustar && blk[fieldPrefix[0]] != 0 { // a prefix: archive/tar joins it to the name
		return 0, nil, 0, false
	}
	if gnu {
		// archive/tar parses these only where they begin with a byte, and
		// otherwise reads the block as a buggy one: its reading, then.
		for _, f := range [...][2]int{fieldATime, fieldCTime} {
			if b := field(f); b[0] != 0 {
				if _, ok := octal(b); !ok {
					return 0, nil, 0, false
				}
			}
		}
	}
	if size, ok = octal(field(fieldSize)); !ok {
		return 0, nil, 0, false
	}
	return typeflag, cString(field(fieldName)), size, true
}

// headerSums returns the sums archive/tar checks a header's checksum
// against: of blk's bytes as unsigned and as signed numbers, those of the
// checksum field counted as spaces. Eight bytes are added at a time, in
// 16-bit lanes (at most 64 x 2 x 255 each: no carry between them), and
// the bytes of 128 and over counted, each of which is 256 less signed.
// Indexing a shard of small members is mostly this: a byte at a time, it
// was a quarter of BenchmarkOpenBuilt's CPU.
func headerSums(blk *[blockSize]byte) (unsigned, signed int64) {
	const lanes = 0x00ff00ff00ff00ff
	var pairs uint64
	high := 0
	for i := 0; i < blockSize; i += 8 {
		w := binary.LittleEndian.Uint64(blk[i:])
		pairs += w&lanes + w>>8&lanes
		high += bits.OnesCount64(w & 0x8080808080808080)
	}
	pairs = pairs&0xffff + pairs>>16&0xffff + pairs>>32&0xffff + pairs>>48
	unsigned = int64(pairs)
	for _, c := range blk[fieldChecksum[0]:fieldChecksum[1]] {
		unsigned += ' ' - int64(c)
		high -= int(c >> 7)
	}
	return unsigned, unsigned - 256*int64(high)
}

// octal parses a numeric field as archive/tar's parser does where it is
// octal (spaces and NULs trimmed from both ends, then the digits before a
// NUL, by strconv.ParseUint in base 8), without its allocations. ok is
// false where archive/tar would fail, or read the field as base-256.
func octal(b []byte) (int64, bool) {
	if len(b) > 0 && b[0]&0x80 != 0 {
		return 0, false
	}
	for len(b) > 0 && (b[0] == ' ' || b[0] == 0) {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == 0) {
		b = b[:len(b)-1]
	}
	var x int64 // at most 12 digits: no overflow
	for _, c := range b {
		if c == 0 {
			break
		}
		if c < '0' || c > '7' {
			return 0, false
		}
		x = x<<3 | int64(c-'0')
	}
	return x, true
}

// cString is b up to its first NUL.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return b
}
