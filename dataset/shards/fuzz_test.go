package shards_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/shade-mesh/shade/dataset/shards"
)

// FuzzShard opens a shard of arbitrary bytes: Open never panics, and when
// it succeeds every sample reads back at its manifest size.
func FuzzShard(f *testing.F) {
	f.Add(writeTar(f, "", []file{{"a.jpg", []byte("12345")}, {"a.cls", []byte("1")}, {"b.jpg", make([]byte, 700)}}))
	f.Add(writeTar(f, "", []file{{"x/y.z.w", []byte("deep")}}))
	f.Add([]byte{0x1f, 0x8b, 8, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "s.tar"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		src, err := shards.Open(context.Background(), shards.Config{Location: dir})
		if err != nil {
			return
		}
		m := src.Manifest()
		for i := range m.Len() {
			got, err := src.Read(i, nil)
			if err != nil {
				t.Fatalf("sample %d of an indexed shard: %v", i, err)
			}
			if int64(len(got)) != m.Sizes.At(i) {
				t.Fatalf("sample %d: %d bytes, manifest %d", i, len(got), m.Sizes.At(i))
			}
		}
	})
}
