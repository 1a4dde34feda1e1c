//go:build !amd64

package crc32c

const (
	minFold     = 0
	minFoldAVX2 = 0
)

// canFold and canFoldAVX2 stay false; they are variables so that the
// tests can set them, as on amd64.
var canFold, canFoldAVX2 = false, false

func fold(uint32, *byte, []byte) uint32 { panic("crc32c: no fold on this architecture") }

func foldAVX2(uint32, *byte, []byte, *constants) uint32 {
	panic("crc32c: no fold on this architecture")
}
