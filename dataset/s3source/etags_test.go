package s3source

import (
	"strings"
	"testing"

	"github.com/shade-mesh/shade/dataset"
)

// TestETagsPacked: every ETag reads back as listed, whether kept as 16
// bytes (32 lower-case hex digits) or whole (upper case, a multipart
// upload's, none, any other text), across the bitmap's words.
func TestETagsPacked(t *testing.T) {
	kinds := []string{
		"0123456789abcdef0123456789abcdef",
		"00000000000000000000000000000000",
		"0123456789ABCDEF0123456789ABCDEF",
		"d41d8cd98f00b204e9800998ecf8427e-12",
		"",
		"0123456789abcdef0123456789abcde",
		"0123456789abcdef0123456789abcdeg",
		`"quoted"`,
	}
	var all []string
	for i := range 300 {
		k := kinds[i%len(kinds)]
		if i%len(kinds) == 0 {
			k = strings.Repeat(string("0123456789abcdef"[i%16]), 32)
		}
		all = append(all, k)
	}
	names, err := dataset.NamesOf(all)
	if err != nil {
		t.Fatal(err)
	}
	e := newETags(names)
	for i, want := range all {
		if got := e.at(i); got != want {
			t.Fatalf("ETag %d = %q, want %q", i, got, want)
		}
	}
	packed, want := 0, 0
	for i := range all {
		if e.hasMD5[i/64]&(1<<(i%64)) != 0 {
			packed++
		}
		if i%len(kinds) <= 1 { // the two kinds of 32 lower-case hex digits
			want++
		}
	}
	if packed != want {
		t.Fatalf("%d ETags kept as 16 bytes, want %d", packed, want)
	}
}
