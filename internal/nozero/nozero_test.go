package nozero

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/shade-mesh/shade/internal/testsupport"
)

func TestImportsNothingOfTheModule(t *testing.T) { testsupport.CheckImports(t) }

// TestBytesHoldWhatIsWritten: a buffer of each size has room for n bytes,
// none of which are shared with another buffer, and keeps what was
// written across collections.
func TestBytesHoldWhatIsWritten(t *testing.T) {
	var bufs [][]byte
	for _, n := range []int{1, 7, 64, 4 << 10, 100<<10 + 1, 4 << 20} {
		b := Bytes(n)
		if len(b) != 0 || cap(b) < n {
			t.Fatalf("Bytes(%d): length %d, capacity %d", n, len(b), cap(b))
		}
		for i := range n {
			b = append(b, byte(n+i))
		}
		if cap(b) < n || len(b) != n {
			t.Fatalf("Bytes(%d) grew on %d appends", n, n)
		}
		bufs = append(bufs, b)
	}
	runtime.GC()
	runtime.GC()
	for _, b := range bufs {
		n := len(b)
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(n + i)
		}
		if !bytes.Equal(b, want) {
			t.Fatalf("buffer of %d bytes changed after collections (shared, or freed)", n)
		}
	}
}

// TestBytesOfNothing: no room asked for, none given.
func TestBytesOfNothing(t *testing.T) {
	for _, n := range []int{0, -1} {
		if b := Bytes(n); b != nil {
			t.Fatalf("Bytes(%d) = %d bytes of room, want nil", n, cap(b))
		}
	}
}

// BenchmarkBuffer allocates a buffer of 100 KiB and fills it, as a sample
// is read: with make, which clears it first, and with Bytes.
func BenchmarkBuffer(b *testing.B) {
	src := make([]byte, 100<<10)
	for _, way := range []struct {
		name string
		make func(n int) []byte
	}{
		{"make", func(n int) []byte { return make([]byte, 0, n) }},
		{"Bytes", Bytes},
	} {
		b.Run(way.name, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				buf := append(way.make(len(src)), src...)
				_ = buf
			}
		})
	}
}
