package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/protocol/shm"
)

// sampleValue is the value for version v of key k: a header naming both,
// then bytes derived from them, so a value of another key or version, or a
// torn copy, is recognised.
func sampleValue(buf []byte, k int, v uint64) []byte {
	return testsupport.AppendVersion(buf[:0], k, v, 16+(k*131+int(v)*17)%3000)
}

func checkSample(got []byte, k int) (uint64, error) {
	if len(got) < 16 {
		return 0, fmt.Errorf("key %d: %d-byte value", k, len(got))
	}
	gk, v := binary.LittleEndian.Uint64(got), binary.LittleEndian.Uint64(got[8:])
	if int(gk) != k {
		return 0, fmt.Errorf("key %d: read the value of key %d", k, gk)
	}
	want := sampleValue(make([]byte, 4096), k, v)
	if string(got) != string(want) {
		return 0, fmt.Errorf("key %d version %d: wrong bytes", k, v)
	}
	return v, nil
}

// TestConcurrent runs writers, readers and deleters over one key space.
// Each key has one writer, which publishes versions in order, by Put and
// by Reserve and Commit in turn; readers and
// deleters touch every key. A reader must see exactly a version of its key
// no older than the one completed before its read began and no newer than
// the one started after it ended.
func TestConcurrent(t *testing.T) {
	const (
		keys    = 256
		writers = 4
		readers = 4
		ops     = 4000
	)
	// Roughly half of the key space fits, so writers also meet ErrNoSpace.
	s := newStore(t, Config{Capacity: 256 << 10, Shards: 8})
	var started, done [keys]atomic.Uint64
	keyName := func(k int) []byte { return fmt.Appendf(nil, "ds/%d", k) }

	var wg sync.WaitGroup
	errs := make(chan error, writers+readers+1)
	for w := range writers {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for i := range ops {
				k := (i*writers + w) % keys // keys owned by w
				v := started[k].Add(1)
				value := sampleValue(buf, k, v)
				var err error
				stored := false
				if i%2 == 0 {
					err = s.Put(keyName(k), value)
					stored = err == nil
				} else {
					// Reserved, then filled while the others read,
					// delete and replace, then committed.
					var r Reservation
					if r, err = s.Reserve(keyName(k), len(value)); err == nil {
						copy(r.Value, value)
						runtime.Gosched()
						stored = r.Commit(shm.Checksum(value))
					}
				}
				if err != nil && !errors.Is(err, ErrNoSpace) {
					errs <- err
					return
				}
				if stored {
					done[k].Store(v)
				}
			}
		})
	}
	for r := range readers {
		wg.Go(func() {
			var dst []byte
			for i := range ops {
				k := (i*7 + r*31) % keys
				lo := done[k].Load()
				var (
					ok   bool
					lent []byte
					loan uint64
				)
				switch i % 3 {
				case 0:
					dst, ok = s.Get(dst[:0], keyName(k))
				case 1:
					ok = s.View(keyName(k), func(v []byte, _ uint64) { dst = append(dst[:0], v...) })
				case 2:
					// A lent value is checked after the other goroutines
					// have had a while to delete, replace and reuse.
					_, lent, loan, ok = s.Lend(nil, keyName(k), nil, 0)
					runtime.Gosched()
				}
				hi := started[k].Load()
				if !ok {
					continue
				}
				if lent != nil {
					dst = append(dst[:0], lent...)
					s.Return(loan)
				}
				v, err := checkSample(dst, k)
				if err == nil && (v < lo || v > hi) {
					err = fmt.Errorf("key %d: read version %d outside [%d, %d]", k, v, lo, hi)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range ops {
			s.Delete(keyName(i * 13 % keys))
			s.Has(keyName(i * 5 % keys))
			if i%64 == 0 {
				runtime.Gosched()
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := s.Stats()
	if st.Corrupt != 0 || st.Hits == 0 || st.Loans != 0 {
		t.Fatalf("stats: %+v", st)
	}
	checkHeap(t, s.alloc)
	var charged int64
	for k := range keys {
		if got, ok := s.Get(nil, keyName(k)); ok {
			charged += s.Charge(len(keyName(k)), len(got))
		}
	}
	if st := s.Stats(); charged != st.UsedBytes {
		t.Fatalf("entries charge %d, store used %d", charged, st.UsedBytes)
	}
}

// TestCloseUnderLoad closes the store while goroutines use it; none may
// fault or see wrong bytes.
func TestCloseUnderLoad(t *testing.T) {
	s, err := New(Config{Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := (i + g) % 64
				key := fmt.Appendf(nil, "k%d", k)
				if err := s.Put(key, sampleValue(buf, k, uint64(i))); errors.Is(err, ErrClosed) {
					return
				}
				if got, ok := s.Get(nil, key); ok {
					if _, err := checkSample(got, k); err != nil {
						t.Error(err)
						return
					}
				}
				s.Delete(fmt.Appendf(nil, "k%d", (k+1)%64))
			}
		})
	}
	for s.Stats().Puts < 500 {
		runtime.Gosched()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
}
