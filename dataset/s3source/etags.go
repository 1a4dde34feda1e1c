package s3source

import (
	"encoding/hex"

	"github.com/shade-mesh/shade/dataset"
)

// etags is a listing's ETags as a Source keeps them: an ETag of 32
// lower-case hex digits (the object's MD5, what stores give an object not
// uploaded in parts) as its 16 bytes, any other (a multipart upload's
// "<hex>-<parts>", none at all) whole. At 1,000,000 objects of the first
// kind that is 20 bytes an object instead of 36.
type etags struct {
	md5    []byte        // 16 bytes an object; zero where other holds it
	hasMD5 []uint64      // bit i: object i's ETag is in md5
	other  dataset.Names // the ETags not in md5; "" for those in it
}

// newETags packs all.
func newETags(all dataset.Names) etags {
	e := etags{md5: make([]byte, 16*all.Len()), hasMD5: make([]uint64, (all.Len()+63)/64)}
	var other dataset.NamesBuilder
	for i, t := range all.AllBytes() {
		if isMD5Hex(t) {
			hex.Decode(e.md5[16*i:16*i+16], t)
			e.hasMD5[i/64] |= 1 << (i % 64)
			t = nil
		}
		other.AddBytes(t) // all held it: not too long
	}
	e.other = other.Names()
	return e
}

// at returns object i's ETag as listed.
func (e *etags) at(i int) string {
	if e.hasMD5[i/64]&(1<<(i%64)) != 0 {
		return hex.EncodeToString(e.md5[16*i : 16*i+16])
	}
	return e.other.At(i)
}

// isMD5Hex reports whether t is 32 lower-case hex digits: hex encoding
// its 16 bytes gives it back.
func isMD5Hex[T string | []byte](t T) bool {
	if len(t) != 32 {
		return false
	}
	for i := range len(t) {
		if c := t[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
