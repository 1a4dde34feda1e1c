package store

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestHeapStaysSmall caches 1 GiB of 16 KiB samples and checks that the Go
// heap does not grow with them: entries cost arena bytes, not heap.
func TestHeapStaysSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("maps and fills 1 GiB")
	}
	const (
		valueLen = 16 << 10
		samples  = 1 << 16 // 1 GiB of values
	)
	start := time.Now()
	s := newStore(t, Config{Capacity: samples * (valueLen + 128)})
	value := make([]byte, valueLen)
	key := make([]byte, 0, 32)
	for i := range samples {
		key = fmt.Appendf(key[:0], "imagenet/%d", i)
		binary.LittleEndian.PutUint64(value, uint64(i))
		if err := s.Put(key, value); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
	}
	filled := time.Since(start)
	var dst []byte
	for i := 0; i < samples; i += 997 {
		key = fmt.Appendf(key[:0], "imagenet/%d", i)
		var ok bool
		dst, ok = s.Get(dst[:0], key)
		if !ok || binary.LittleEndian.Uint64(dst) != uint64(i) {
			t.Fatalf("sample %d not read back", i)
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := s.Stats()
	t.Logf("%d samples, %d MiB charged, heap %.1f MiB, filled in %v, last GC pause %v",
		st.Entries, st.UsedBytes>>20, float64(ms.HeapAlloc)/(1<<20), filled.Round(time.Millisecond),
		time.Duration(ms.PauseNs[(ms.NumGC+255)%256]))
	if st.Entries != samples || st.UsedBytes < samples*valueLen {
		t.Fatalf("stats: %+v", st)
	}
	if ms.HeapAlloc > 64<<20 {
		t.Fatalf("heap %d bytes with 1 GiB cached, want under 64 MiB", ms.HeapAlloc)
	}
}
