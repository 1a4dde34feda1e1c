package testsupport

import "encoding/binary"

// AppendVersion appends n bytes that stand for version v of key k: the
// two numbers (8 bytes each, little-endian), then bytes drawn from them.
// A value read back thus names the version it must equal in full, which
// tests of concurrent writers and readers check against. n must be at
// least 16.
func AppendVersion(dst []byte, k int, v uint64, n int) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(k))
	dst = binary.LittleEndian.AppendUint64(dst, v)
	x := uint64(k)<<32 ^ v
	for range n - 16 {
		x = x*6364136223846793005 + 1442695040888963407
		dst = append(dst, byte(x>>56))
	}
	return dst
}
