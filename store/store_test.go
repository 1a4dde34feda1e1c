package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"

	"github.com/shade-mesh/shade/protocol/shm"
)

func newStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestNewConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero capacity", Config{}, false},
		{"negative capacity", Config{Capacity: -1}, false},
		{"three shards", Config{Capacity: 1 << 16, Shards: 3}, false},
		{"negative shards", Config{Capacity: 1 << 16, Shards: -4}, false},
		{"defaults", Config{Capacity: 1 << 16}, true},
		{"one shard", Config{Capacity: 1 << 16, Shards: 1}, true},
		{"tiny arena", Config{Capacity: 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			s, err := New(cfg)
			if cfg != tc.cfg {
				t.Fatalf("New wrote into its Config: %+v", cfg)
			}
			if !tc.ok {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("New = %v, want ErrInvalidConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.Stats().Capacity; got != cfg.Capacity {
				t.Fatalf("Capacity %d, want %d", got, cfg.Capacity)
			}
		})
	}
}

func TestTinyArena(t *testing.T) {
	s := newStore(t, Config{Capacity: 40})
	if err := s.Put(nil, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Put in a 40-byte arena = %v, want ErrTooLarge", err)
	}
	if s.Fits(0, 0) {
		t.Fatal("Fits in a 40-byte arena")
	}
}

func TestOps(t *testing.T) {
	type op struct {
		do         string // put, get, has, del
		key, value string
		want       bool   // get/has/del result
		err        error  // put result
		wantValue  string // get result when want
	}
	big := strings.Repeat("x", 3000)
	for _, tc := range []struct {
		name string
		ops  []op
	}{
		{"put get", []op{
			{do: "put", key: "d/1", value: "one"},
			{do: "get", key: "d/1", want: true, wantValue: "one"},
			{do: "has", key: "d/1", want: true},
			{do: "get", key: "d/2"},
			{do: "has", key: "d/2"},
		}},
		{"replace", []op{
			{do: "put", key: "d/1", value: "one"},
			{do: "put", key: "d/1", value: "uno, longer than before"},
			{do: "get", key: "d/1", want: true, wantValue: "uno, longer than before"},
			{do: "put", key: "d/1", value: ""},
			{do: "get", key: "d/1", want: true, wantValue: ""},
		}},
		{"delete", []op{
			{do: "put", key: "d/1", value: "one"},
			{do: "del", key: "d/1", want: true},
			{do: "del", key: "d/1"},
			{do: "get", key: "d/1"},
			{do: "has", key: "d/1"},
		}},
		{"zero-length value and key", []op{
			{do: "put", key: "", value: ""},
			{do: "get", key: "", want: true, wantValue: ""},
			{do: "put", key: "d/0", value: ""},
			{do: "has", key: "d/0", want: true},
			{do: "get", key: "d/0", want: true, wantValue: ""},
		}},
		{"no space until delete", []op{
			{do: "put", key: "a", value: big},
			{do: "put", key: "b", value: big, err: ErrNoSpace},
			{do: "get", key: "b"},
			{do: "put", key: "a", value: big, err: ErrNoSpace}, // replacing keeps the old
			{do: "get", key: "a", want: true, wantValue: big},
			{do: "del", key: "a", want: true},
			{do: "put", key: "b", value: big},
			{do: "get", key: "b", want: true, wantValue: big},
		}},
		{"too large", []op{
			{do: "put", key: "a", value: big + big, err: ErrTooLarge},
			{do: "put", key: "a", value: big},
			{do: "put", key: "a", value: big + big, err: ErrTooLarge},
			{do: "get", key: "a", want: true, wantValue: big},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, Config{Capacity: 4096, Shards: 4})
			for i, o := range tc.ops {
				switch o.do {
				case "put":
					if err := s.Put([]byte(o.key), []byte(o.value)); !errors.Is(err, o.err) || (o.err == nil) != (err == nil) {
						t.Fatalf("op %d: Put(%q) = %v, want %v", i, o.key, err, o.err)
					}
				case "get":
					prefix := []byte("prefix:")
					got, ok := s.Get(prefix, []byte(o.key))
					if ok != o.want {
						t.Fatalf("op %d: Get(%q) ok = %v", i, o.key, ok)
					}
					want := "prefix:"
					if ok {
						want += o.wantValue
					}
					if string(got) != want {
						t.Fatalf("op %d: Get(%q) = %q, want %q", i, o.key, got, want)
					}
				case "has":
					if got := s.Has([]byte(o.key)); got != o.want {
						t.Fatalf("op %d: Has(%q) = %v", i, o.key, got)
					}
				case "del":
					if got := s.Delete([]byte(o.key)); got != o.want {
						t.Fatalf("op %d: Delete(%q) = %v", i, o.key, got)
					}
				}
			}
		})
	}
}

func TestCallerOwnsSlices(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 16})
	key, value := []byte("d/7"), []byte("seven")
	if err := s.Put(key, value); err != nil {
		t.Fatal(err)
	}
	key[0], value[0] = 'X', 'X'
	got, ok := s.Get(nil, []byte("d/7"))
	if !ok || string(got) != "seven" {
		t.Fatalf("Get = %q, %v after the caller reused its slices", got, ok)
	}
	got[0] = 'Y'
	if again, _ := s.Get(nil, []byte("d/7")); string(again) != "seven" {
		t.Fatalf("Get = %q after the caller wrote into a result", again)
	}
	var seen string
	var seenSum uint64
	if !s.View([]byte("d/7"), func(v []byte, sum uint64) { seen, seenSum = string(v), sum }) {
		t.Fatal("View missed")
	}
	if seen != "seven" || seenSum != shm.Checksum([]byte("seven")) {
		t.Fatalf("View saw %q %x", seen, seenSum)
	}
	if s.View([]byte("d/8"), func([]byte, uint64) { t.Fatal("fn called on a miss") }) {
		t.Fatal("View found an absent key")
	}
}

// TestFitsAgreesWithPut drives a small arena into fragmentation and checks,
// before every Put, that Fits predicts its outcome exactly; and that
// UsedBytes is always the sum of Charge over the entries held.
func TestFitsAgreesWithPut(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			s := newStore(t, Config{Capacity: 64<<10 + 16*rng.Int64N(64), Shards: 8})
			held := map[string]int64{} // key -> charge
			var fits, noSpace int
			buf := make([]byte, 40<<10)
			for step := range 5000 {
				key := fmt.Sprintf("d/%d", rng.IntN(200))
				var vlen int
				switch rng.IntN(10) {
				case 0:
					vlen = rng.IntN(len(buf)) // sometimes the largest
				case 1:
					vlen = 0
				default:
					vlen = rng.IntN(4 << 10)
				}
				if rng.IntN(3) == 0 {
					if s.Delete([]byte(key)) {
						delete(held, key)
					}
					continue
				}
				predicted := s.Fits(len(key), vlen)
				err := s.Put([]byte(key), buf[:vlen])
				if predicted != (err == nil) {
					t.Fatalf("step %d: Fits(%d, %d) = %v, Put = %v", step, len(key), vlen, predicted, err)
				}
				if err != nil {
					if !errors.Is(err, ErrNoSpace) {
						t.Fatalf("step %d: Put = %v", step, err)
					}
					noSpace++
				} else {
					fits++
					held[key] = s.Charge(len(key), vlen)
				}
				var sum int64
				for _, c := range held {
					sum += c
				}
				st := s.Stats()
				if st.UsedBytes != sum || st.Entries != len(held) || s.Len() != len(held) {
					t.Fatalf("step %d: used %d entries %d, want %d and %d", step, st.UsedBytes, st.Entries, sum, len(held))
				}
				if st.UsedBytes+st.FreeBytes != st.Capacity {
					t.Fatalf("step %d: used %d + free %d != capacity %d", step, st.UsedBytes, st.FreeBytes, st.Capacity)
				}
			}
			if fits == 0 || noSpace == 0 {
				t.Fatalf("test did not exercise both outcomes: %d fits, %d no space", fits, noSpace)
			}
			for key := range held {
				s.Delete([]byte(key))
			}
			if st := s.Stats(); st.UsedBytes != 0 || st.LargestFree != st.Capacity {
				t.Fatalf("emptied store: used %d, largest free %d of %d", st.UsedBytes, st.LargestFree, st.Capacity)
			}
			checkHeap(t, s.alloc)
		})
	}
}

func TestCharge(t *testing.T) {
	for _, tc := range []struct {
		k, v int
		want int64
	}{
		{0, 0, 64},
		{8, 0, 64},
		{9, 0, 80},
		{8, 8, 64},
		{12, 4096, 64 + 4096 + 16},
		{-1, 0, -1},
		{0, -1, -1},
	} {
		if got := (&Store{}).Charge(tc.k, tc.v); got != tc.want {
			t.Errorf("Charge(%d, %d) = %d, want %d", tc.k, tc.v, got, tc.want)
		}
	}
	if (&Store{}).Charge(0, 1<<62) < 1<<62 {
		t.Error("Charge of a huge value overflowed")
	}
}

func TestWholeArenaSample(t *testing.T) {
	const capacity = 1<<20 + 16*37
	s := newStore(t, Config{Capacity: capacity})
	vlen := capacity - int(valueOffset(3)) - tagSize // the largest value
	if s.Charge(3, vlen) != capacity {
		t.Fatalf("Charge = %d", s.Charge(3, vlen))
	}
	if !s.Fits(3, vlen) {
		t.Fatal("a sample the size of the arena does not fit an empty arena")
	}
	value := bytes.Repeat([]byte{0xab}, vlen)
	if err := s.Put([]byte("big"), value); err != nil {
		t.Fatal(err)
	}
	if err := s.Put([]byte("big"), value[:vlen-align]); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Put into a full arena = %v", err)
	}
	if err := s.Put([]byte("big"), append(value, 0)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Put one byte over = %v", err)
	}
	got, ok := s.Get(nil, []byte("big"))
	if !ok || !bytes.Equal(got, value) {
		t.Fatal("whole-arena sample not read back")
	}
}

func TestHashCollision(t *testing.T) {
	// Forge a collision: make key b's hash point at key a's block.
	s := newStore(t, Config{Capacity: 1 << 16, Shards: 1})
	a, b := []byte("d/a"), []byte("d/b")
	if err := s.Put(a, []byte("value of a")); err != nil {
		t.Fatal(err)
	}
	ha, hb := xxhash.Sum64(a), xxhash.Sum64(b)
	sh := s.shard(ha)
	sh.mu.Lock()
	sh.m.set(hb, heldOff(s, ha))
	sh.m.del(ha)
	sh.mu.Unlock()
	if got, ok := s.Get(nil, b); ok {
		t.Fatalf("Get(b) returned a's bytes %q", got)
	}
	if s.Has(b) || s.View(b, func([]byte, uint64) { t.Fatal("View of b saw a") }) {
		t.Fatal("b reported present")
	}
	if s.Delete(b) {
		t.Fatal("Delete(b) removed a")
	}
	// A Put of b replaces the colliding entry.
	if err := s.Put(b, []byte("value of b")); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Get(nil, b); !ok || string(got) != "value of b" {
		t.Fatalf("Get(b) = %q, %v", got, ok)
	}
	if st := s.Stats(); st.Entries != 1 || st.UsedBytes != s.Charge(3, 10) {
		t.Fatalf("after replacing a collision: %+v", st)
	}
}

// TestAppend checks Append's framing and that a miss leaves dst as given.
func TestAppend(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 16})
	if err := s.Put([]byte("d/7"), []byte("seven")); err != nil {
		t.Fatal(err)
	}
	head := func(dst []byte, n int) []byte { return fmt.Appendf(dst, "<%d>", n) }
	got, ok := s.Append([]byte("pre:"), []byte("d/7"), head)
	if !ok || string(got) != "pre:<5>seven" {
		t.Fatalf("Append = %q, %v", got, ok)
	}
	got, ok = s.Append([]byte("pre:"), []byte("d/8"), func([]byte, int) []byte { t.Fatal("head called on a miss"); return nil })
	if ok || string(got) != "pre:" {
		t.Fatalf("Append of an absent key = %q, %v", got, ok)
	}
}

// TestCopyTo: the value goes into the slice into returns for its length,
// with its checksum; nothing is copied where into declines; an absent key
// never calls into.
func TestCopyTo(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 20})
	for _, size := range []int{10, 300, 4 << 10} {
		key := []byte(fmt.Sprintf("d/%d", size))
		value := bytes.Repeat([]byte{byte(size)}, size)
		value[size/2] = 7
		if err := s.Put(key, value); err != nil {
			t.Fatal(err)
		}
		dst := bytes.Repeat([]byte{0xA5}, size+8)
		sum, ok := s.CopyTo(key, func(n int) []byte {
			if n != size {
				t.Fatalf("into asked for %d bytes, want %d", n, size)
			}
			return dst
		})
		if !ok || sum != shm.Checksum(value) || !bytes.Equal(dst[:size], value) || !bytes.Equal(dst[size:], bytes.Repeat([]byte{0xA5}, 8)) {
			t.Fatalf("CopyTo of %d bytes: ok %v, sum %#x (want %#x), copy equal %v", size, ok, sum, shm.Checksum(value), bytes.Equal(dst[:size], value))
		}
		if _, ok := s.CopyTo(key, func(int) []byte { return nil }); !ok {
			t.Fatalf("CopyTo of %d bytes declined by into: not held", size)
		}
	}
	if _, ok := s.CopyTo([]byte("d/absent"), func(int) []byte { t.Fatal("into called for an absent key"); return nil }); ok {
		t.Fatal("an absent key copied")
	}
	if st := s.Stats(); st.Hits != 6 || st.Misses != 1 {
		t.Fatalf("hits %d, misses %d; want 6 and 1", st.Hits, st.Misses)
	}
}

func TestCorruptValue(t *testing.T) {
	for _, read := range []string{"get", "view", "append", "lend", "copyto"} {
		t.Run(read, func(t *testing.T) {
			s := newStore(t, Config{Capacity: 1 << 16})
			key := []byte("d/1")
			// Long enough for the checks that fold (crc32c), short ones
			// being hash/crc32's.
			if err := s.Put(key, bytes.Repeat([]byte("good bytes"), 30)); err != nil {
				t.Fatal(err)
			}
			h := xxhash.Sum64(key)
			off := heldOff(s, h)
			s.mem[off+valueOffset(3)] ^= 0xff // a memory bug
			var ok bool
			switch read {
			case "get":
				_, ok = s.Get(nil, key)
			case "view":
				ok = s.View(key, func([]byte, uint64) { t.Fatal("fn saw corrupt bytes") })
			case "append":
				var got []byte
				got, ok = s.Append([]byte("pre"), key, func(dst []byte, n int) []byte { return append(dst, "head"...) })
				if string(got) != "pre" {
					t.Fatalf("Append of a corrupt value returned %q, want the dst given", got)
				}
			case "copyto":
				_, ok = s.CopyTo(key, func(n int) []byte { return make([]byte, n) })
			case "lend":
				var got, lent []byte
				got, lent, _, ok = s.Lend([]byte("pre"), key, func(dst []byte, n int) []byte { return append(dst, "head"...) }, 0)
				if string(got) != "pre" || lent != nil || s.Stats().Loans != 0 {
					t.Fatalf("Lend of a corrupt value returned %q, lent %q, %d loans", got, lent, s.Stats().Loans)
				}
			}
			if ok {
				t.Fatal("corrupt value reported present")
			}
			st := s.Stats()
			if st.Corrupt != 1 || st.Entries != 0 || st.UsedBytes != 0 || st.Misses != 1 || s.Has(key) {
				t.Fatalf("after corruption: %+v", st)
			}
		})
	}
	t.Run("skip verify", func(t *testing.T) {
		s := newStore(t, Config{Capacity: 1 << 16, SkipVerify: true})
		key := []byte("d/1")
		s.Put(key, []byte("good bytes"))
		h := xxhash.Sum64(key)
		s.mem[heldOff(s, h)+valueOffset(3)] ^= 0xff
		if _, ok := s.Get(nil, key); !ok {
			t.Fatal("SkipVerify still verified")
		}
	})
}

func TestStatsCounters(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 16})
	s.Put([]byte("a"), []byte("1"))
	s.Put([]byte("a"), []byte("2"))
	s.Put([]byte("b"), []byte("3"))
	s.Get(nil, []byte("a"))
	s.Get(nil, []byte("c"))
	s.View([]byte("b"), func([]byte, uint64) {})
	s.Delete([]byte("a"))
	s.Delete([]byte("a"))
	tables := 2 // a table in each shard that held a key
	if s.shard(xxhash.Sum64([]byte("a"))) == s.shard(xxhash.Sum64([]byte("b"))) {
		tables = 1
	}
	want := Stats{Entries: 1, UsedBytes: s.Charge(1, 1), FreeBytes: 1<<16 - s.Charge(1, 1),
		LargestFree: 1<<16 - s.Charge(1, 1), Capacity: 1 << 16, Puts: 3, Hits: 2, Misses: 1, Deletes: 1,
		IndexBytes: int64(tables) * int64(unsafe.Sizeof(slotTable{}))}
	if got := s.Stats(); got != want {
		t.Fatalf("Stats = %+v\nwant    %+v", got, want)
	}
	s.Close()
	if got := s.Stats().IndexBytes; got != 0 {
		t.Fatalf("IndexBytes after Close = %d", got)
	}
}

func TestGenerationChanges(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 16})
	key := []byte("d/1")
	offOf := func() uint64 { h := xxhash.Sum64(key); return heldOff(s, h) }
	s.Put(key, []byte("v1"))
	o1 := offOf()
	g1 := s.alloc.generation(o1)
	s.Put(key, []byte("v2"))
	if g := s.alloc.generation(o1); g == g1 || g&1 != 0 {
		t.Fatalf("replaced block generation %d -> %d", g1, g)
	}
	o2 := offOf()
	g2 := s.alloc.generation(o2)
	if g2&1 != 1 || g2 == g1 {
		t.Fatalf("new block generation %d", g2)
	}
	s.Delete(key)
	if g := s.alloc.generation(o2); g == g2 {
		t.Fatal("generation unchanged by Delete")
	}
}

func TestMemfd(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 20, Name: "shade-test"})
	fd := s.Fd()
	if fd < 0 {
		t.Skip("memfd unavailable; anonymous fallback in use")
	}
	link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(link, "memfd:shade-test") {
		t.Fatalf("fd %d is %q", fd, link)
	}
	// Another mapping of the memfd, as a trainer would make, sees the bytes.
	value := []byte("shared sample bytes")
	s.Put([]byte("d/1"), value)
	other, err := unix.Mmap(fd, 0, 1<<20, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(other)
	if !bytes.Contains(other, value) {
		t.Fatal("second mapping does not see the sample")
	}
}

func TestAnonymousFallback(t *testing.T) {
	s, err := newStoreWith(Config{Capacity: 1 << 16}, arenaOptions{anonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Fd() != -1 {
		t.Fatalf("Fd = %d without a memfd", s.Fd())
	}
	if err := s.Put([]byte("a"), []byte("anonymous")); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Get(nil, []byte("a")); !ok || string(got) != "anonymous" {
		t.Fatalf("Get = %q, %v", got, ok)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestClosed(t *testing.T) {
	s, err := New(Config{Capacity: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	s.Put([]byte("a"), []byte("1"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}
	if err := s.Put([]byte("a"), []byte("1")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close = %v", err)
	}
	if _, ok := s.Get(nil, []byte("a")); ok {
		t.Fatal("Get after Close")
	}
	if s.Has([]byte("a")) || s.Delete([]byte("a")) || s.Fits(1, 1) || s.Len() != 0 || s.Fd() != -1 ||
		s.View([]byte("a"), func([]byte, uint64) {}) {
		t.Fatal("operation succeeded after Close")
	}
	if st := s.Stats(); st.UsedBytes != 0 || st.FreeBytes != 0 {
		t.Fatalf("Stats after Close: %+v", st)
	}
}

// TestPrefetchChangesNothing: Prefetch is a hint. It counts no hit or
// miss, leaves every value as it was, ignores a key not held and a closed
// Store, and is safe beside writers of the same keys (under -race, its
// lookup takes the shard's lock).
func TestPrefetchChangesNothing(t *testing.T) {
	s, err := New(Config{Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([][]byte, 64)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "k%d", i)
		if err := s.Put(keys[i], bytes.Repeat([]byte{byte(i)}, 4096)); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Stats()
	for _, k := range keys {
		s.Prefetch(k)
	}
	s.Prefetch([]byte("absent"))
	if after := s.Stats(); after != before {
		t.Fatalf("Stats after Prefetch %+v, before %+v", after, before)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			k := keys[i%len(keys)]
			if i%3 == 0 {
				s.Delete(k)
			} else if err := s.Put(k, bytes.Repeat([]byte{byte(i)}, 100+i%4000)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 20000 {
		s.Prefetch(keys[i%len(keys)])
	}
	<-done
	for i, k := range keys[:8] {
		want := bytes.Repeat([]byte{byte(i)}, 64)
		if err := s.Put(k, want); err != nil {
			t.Fatal(err)
		}
		s.Prefetch(k)
		if got, ok := s.Get(nil, k); !ok || !bytes.Equal(got, want) {
			t.Fatalf("%s after Prefetch: %v %q", k, ok, got)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		s.Prefetch(k)
	}
}
