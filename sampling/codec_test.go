package sampling

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
)

// checkTable verifies a table's invariants from scratch.
func checkTable(t *Table) error {
	n := len(t.scores)
	if len(t.scored) != (n+63)/64 {
		return fmt.Errorf("bitset of %d words for %d samples", len(t.scored), n)
	}
	var count int
	var sum scoreSum
	for id := range n {
		v := t.scores[id]
		if !t.Scored(uint32(id)) {
			if v != 0 {
				return fmt.Errorf("unscored id %d holds %v", id, v)
			}
			continue
		}
		count++
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || math.Signbit(float64(v)) {
			return fmt.Errorf("id %d holds %v", id, v)
		}
		sum.add(v, 1)
	}
	if n%64 != 0 && t.scored[len(t.scored)-1]>>(n%64) != 0 {
		return fmt.Errorf("bits beyond n set")
	}
	if count != t.numScored || sum != t.sum {
		return fmt.Errorf("scored %d, counted %d; sums equal %v", t.numScored, count, sum == t.sum)
	}
	if m := t.Mean(); math.IsNaN(m) || math.IsInf(m, 0) || m < 0 {
		return fmt.Errorf("mean %v", m)
	}
	if count > 0 && t.mean != sum.value()/float64(count) {
		return fmt.Errorf("mean %v, want %v", t.mean, sum.value()/float64(count))
	}
	return nil
}

func sameTable(a, b *Table) error {
	if a.Len() != b.Len() || a.NumScored() != b.NumScored() || a.Mean() != b.Mean() {
		return fmt.Errorf("len %d/%d scored %d/%d mean %v/%v", a.Len(), b.Len(), a.NumScored(), b.NumScored(), a.Mean(), b.Mean())
	}
	for id := uint32(0); int(id) < a.Len(); id++ {
		if a.Scored(id) != b.Scored(id) || a.Score(id) != b.Score(id) {
			return fmt.Errorf("id %d: %v/%v vs %v/%v", id, a.Scored(id), a.Score(id), b.Scored(id), b.Score(id))
		}
	}
	return nil
}

// reseal replaces the trailing checksum, so that a test can reach the checks
// behind it.
func reseal(b []byte) []byte {
	b = slices.Clone(b)
	binary.LittleEndian.PutUint32(b[len(b)-4:], checksum(b[:len(b)-4]))
	return b
}

func TestTableRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 63, 64, 65, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rng := newRand(uint64(n))
			src := NewTable(n, 0.3, ScoreRankLog)
			for id := 0; id < n; id += 1 + rng.IntN(3) {
				if err := src.Set(uint32(id), rng.Float64()*5); err != nil {
					t.Fatal(err)
				}
			}
			if n > 2 {
				_ = src.Set(uint32(n-1), 0)
				_ = src.Set(1, math.SmallestNonzeroFloat32)
			}
			data, err := src.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			var zero Table // a zero Table takes the encoded length
			if err := zero.UnmarshalBinary(data); err != nil {
				t.Fatal(err)
			}
			sized := NewTable(n, 0.9, ScoreRankLog) // keeps its own alpha
			if err := sized.UnmarshalBinary(data); err != nil {
				t.Fatal(err)
			}
			for _, dst := range []*Table{&zero, sized} {
				if err := sameTable(src, dst); err != nil {
					t.Fatal(err)
				}
				if err := checkTable(dst); err != nil {
					t.Fatal(err)
				}
				again, _ := dst.MarshalBinary()
				if !bytes.Equal(again, data) {
					t.Fatalf("re-encoding differs")
				}
			}
			if zero.Alpha() != DefaultAlpha || sized.Alpha() != 0.9 {
				t.Fatalf("alpha %v, %v", zero.Alpha(), sized.Alpha())
			}
		})
	}
}

func TestTableUnmarshalRefusesCorrupt(t *testing.T) {
	src := NewTable(20, 0, ScoreRankLog)
	for id := uint32(0); id < 20; id += 3 {
		_ = src.Set(id, float64(id))
	}
	good, _ := src.MarshalBinary()
	scoreAt := tableHeader + 3 // first score: 20 samples → 3 bitset bytes

	withScore := func(bitsv uint32) []byte {
		b := slices.Clone(good)
		binary.LittleEndian.PutUint32(b[scoreAt:], bitsv)
		return reseal(b)
	}
	edit := func(f func(b []byte)) []byte {
		b := slices.Clone(good)
		f(b)
		return reseal(b)
	}
	cases := map[string]struct {
		data []byte
		want error
	}{
		"empty":       {nil, ErrCorrupt},
		"flipped bit": {func() []byte { b := slices.Clone(good); b[scoreAt] ^= 1; return b }(), ErrCorrupt},
		"NaN score":   {withScore(math.Float32bits(float32(math.NaN()))), ErrCorrupt},
		"+Inf score":  {withScore(math.Float32bits(float32(math.Inf(1)))), ErrCorrupt},
		"negative":    {withScore(math.Float32bits(-1)), ErrCorrupt},
		"minus zero":  {withScore(1 << 31), ErrCorrupt},
		"magic":       {edit(func(b []byte) { b[0] = 'X' }), ErrCorrupt},
		"version":     {edit(func(b []byte) { b[4] = 2 }), ErrCorrupt},
		"huge n":      {edit(func(b []byte) { binary.LittleEndian.PutUint32(b[5:], math.MaxUint32) }), ErrCorrupt},
		"scored > n":  {edit(func(b []byte) { binary.LittleEndian.PutUint32(b[9:], 21) }), ErrCorrupt},
		"popcount":    {edit(func(b []byte) { b[tableHeader] ^= 2 }), ErrCorrupt},
		"bit past n":  {edit(func(b []byte) { b[tableHeader+2] |= 0x80 }), ErrCorrupt},
		"extra byte":  {reseal(append(slices.Clone(good[:len(good)-4]), 0, 0, 0, 0, 0)), ErrCorrupt},
	}
	for cut := 0; cut < len(good); cut++ {
		cases[fmt.Sprintf("truncated to %d", cut)] = struct {
			data []byte
			want error
		}{good[:cut], ErrCorrupt}
		if cut >= 4 {
			cases[fmt.Sprintf("truncated to %d, resealed", cut)] = struct {
				data []byte
				want error
			}{reseal(good[:cut]), ErrCorrupt}
		}
	}
	other := NewTable(21, 0, ScoreRankLog)
	otherData, _ := other.MarshalBinary()
	cases["size mismatch"] = struct {
		data []byte
		want error
	}{otherData, ErrSizeMismatch}

	for name, c := range cases {
		dst := NewTable(20, 0, ScoreRankLog)
		_ = dst.Set(5, 1.25)
		before, _ := dst.MarshalBinary()
		err := dst.UnmarshalBinary(c.data)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", name, err, c.want)
			continue
		}
		if after, _ := dst.MarshalBinary(); !bytes.Equal(before, after) {
			t.Errorf("%s: table changed", name)
		}
	}
}

// drawnSampler returns a sampler of 700 samples, its configuration and
// table, that drew the orders of epochs 0 to epochs-1.
func drawnSampler(t *testing.T, epochs int) (*Sampler, Config, *Table) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Seed = 11
	cfg.CoverageEpochs = 3
	tb := skewedTable(700)
	s := NewSampler(700, cfg)
	for e := range epochs {
		if _, err := s.Order(e, tb); err != nil {
			t.Fatal(err)
		}
	}
	return s, cfg, tb
}

func TestSamplerRoundTripContinues(t *testing.T) {
	const n = 700
	a, cfg, tb := drawnSampler(t, 6)
	data, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	b := NewSampler(n, cfg)
	if err := b.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	var zero Sampler
	if err := zero.UnmarshalBinary(data); err != nil || zero.Len() != n || zero.Next() != 6 {
		t.Fatalf("zero sampler: %v, len %d next %d", err, zero.Len(), zero.Next())
	}
	if b.Next() != 6 || !slices.Equal(a.last, b.last) {
		t.Fatalf("state differs: next %d", b.Next())
	}
	for e := 6; e < 9; e++ {
		oa, err := a.Order(e, tb)
		if err != nil {
			t.Fatal(err)
		}
		ob, err := b.Order(e, tb)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(oa, ob) {
			t.Fatalf("epoch %d: restored sampler's order differs", e)
		}
	}
	// A fresh sampler round-trips too (ages of never-drawn samples).
	fresh := NewSampler(5, cfg)
	fd, _ := fresh.MarshalBinary()
	back := NewSampler(5, cfg)
	if err := back.UnmarshalBinary(fd); err != nil || !slices.Equal(back.last, fresh.last) || back.Next() != 0 {
		t.Fatalf("fresh round trip: %v %v", err, back.last)
	}
}

// TestSamplerClone: a clone draws the orders the sampler would, and its
// draws leave the sampler as it was.
func TestSamplerClone(t *testing.T) {
	a, _, tb := drawnSampler(t, 4)
	before := slices.Clone(a.last)
	c := a.Clone()
	var ahead [][]uint32
	for e := 4; e < 7; e++ {
		o, err := c.Order(e, tb)
		if err != nil {
			t.Fatal(err)
		}
		ahead = append(ahead, o)
	}
	if a.Next() != 4 || !slices.Equal(a.last, before) {
		t.Fatalf("the clone's draws moved the sampler: next %d", a.Next())
	}
	for e := 4; e < 7; e++ {
		o, err := a.Order(e, tb)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(o, ahead[e-4]) {
			t.Fatalf("epoch %d: the clone's order differs from the sampler's", e)
		}
	}
}

func TestSamplerUnmarshalRefusesCorrupt(t *testing.T) {
	cfg := DefaultConfig()
	s := NewSampler(50, cfg)
	for e := range 3 {
		_, _ = s.Order(e, skewedTable(50))
	}
	good, _ := s.MarshalBinary()
	bad := map[string][]byte{
		"empty":       nil,
		"flipped":     func() []byte { b := slices.Clone(good); b[samplerHeader] ^= 0x40; return b }(),
		"magic":       reseal(append([]byte("XXXX"), good[4:]...)),
		"version":     func() []byte { b := slices.Clone(good); b[4] = 9; return reseal(b) }(),
		"age > next":  func() []byte { b := slices.Clone(good); b[samplerHeader] = 4; return reseal(b) }(),
		"huge n":      func() []byte { b := slices.Clone(good); binary.LittleEndian.PutUint32(b[5:], 1<<31); return reseal(b) }(),
		"huge next":   func() []byte { b := slices.Clone(good); binary.LittleEndian.PutUint32(b[9:], 1<<31); return reseal(b) }(),
		"trailing":    reseal(append(slices.Clone(good[:len(good)-4]), 0, 0, 0, 0, 0)),
		"overlong":    func() []byte { b := slices.Clone(good); b[samplerHeader] = 0x80; return reseal(b) }(),
		"other n":     func() []byte { d, _ := NewSampler(51, cfg).MarshalBinary(); return d }(),
		"truncated 9": good[:9],
	}
	for cut := 4; cut < len(good); cut++ {
		bad[fmt.Sprintf("cut %d", cut)] = reseal(good[:cut])
	}
	for name, data := range bad {
		dst := NewSampler(50, cfg)
		_, _ = dst.Order(0, nil)
		before, _ := dst.MarshalBinary()
		err := dst.UnmarshalBinary(data)
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrSizeMismatch) {
			t.Errorf("%s: err %v", name, err)
		}
		if after, _ := dst.MarshalBinary(); !bytes.Equal(before, after) {
			t.Errorf("%s: sampler changed", name)
		}
	}
}

// fuzzBatch decodes a table size, an rng seed and (id, loss) pairs from data:
// ids may be out of range and losses NaN or infinite on purpose.
func fuzzBatch(data []byte) (n int, seed uint64, ids []uint32, losses []float64) {
	if len(data) == 0 {
		return 1, 0, nil, nil
	}
	n = 1 + int(data[0]%70)
	data = data[1:]
	if len(data) >= 1 {
		seed = uint64(data[0])
		data = data[1:]
	}
	for len(data) >= 3 {
		ids = append(ids, uint32(data[0]))
		var raw [8]byte
		k := copy(raw[:], data[1:min(len(data), 9)])
		loss := math.Float64frombits(binary.LittleEndian.Uint64(raw[:]))
		if k < 8 { // short tails make small, often tied, losses
			loss = float64(int8(raw[0]))
		}
		losses = append(losses, loss)
		data = data[1+k:]
	}
	if len(data) > 0 { // a dangling byte: an id without a loss
		ids = append(ids, uint32(data[0]))
	}
	return n, seed, ids, losses
}

func FuzzReport(f *testing.F) {
	f.Add([]byte{10, 1, 3, 0, 0, 0, 0, 0, 0, 240, 63, 4, 1})
	f.Add([]byte{5, 2, 1, 1, 1, 2, 1, 1})
	f.Add([]byte{64, 7, 99, 0, 0, 0, 0, 0, 0, 248, 127})                 // NaN
	f.Add([]byte{3, 0, 2, 0, 0, 0, 0, 0, 0, 240, 127, 1, 5, 5})          // +Inf
	f.Add([]byte{20, 9, 1, 200, 2, 200, 3, 200, 1, 1, 4, 4, 4, 4, 4, 4}) // ties and duplicates
	f.Fuzz(func(t *testing.T, data []byte) {
		n, seed, ids, losses := fuzzBatch(data)
		tb := NewTable(n, 0, ScoreRankLog)
		for id := uint32(0); int(id) < n; id += 4 {
			_ = tb.Set(id, float64(id%5))
		}
		before, _ := tb.MarshalBinary()
		// Report twice, to merge into scored samples as well.
		for range 2 {
			err := tb.Report(ids, losses, newRand(seed))
			if err != nil {
				if after, _ := tb.MarshalBinary(); !bytes.Equal(before, after) {
					t.Fatalf("refused batch (%v) changed the table", err)
				}
				if !errors.Is(err, ErrBadBatch) && !errors.Is(err, ErrIDOutOfRange) && !errors.Is(err, ErrLossNotFinite) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err := checkTable(tb); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				if !tb.Scored(id) {
					t.Fatalf("reported id %d not scored", id)
				}
			}
		}
		data2, _ := tb.MarshalBinary()
		var back Table
		if err := back.UnmarshalBinary(data2); err != nil {
			t.Fatal(err)
		}
		if err := sameTable(tb, &back); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzTableUnmarshal(f *testing.F) {
	src := NewTable(30, 0, ScoreRankLog)
	for id := uint32(0); id < 30; id += 2 {
		_ = src.Set(id, float64(id)/3)
	}
	good, _ := src.MarshalBinary()
	f.Add(good)
	f.Add(good[:17])
	f.Fuzz(func(t *testing.T, data []byte) {
		var tb Table
		if err := tb.UnmarshalBinary(reseal(append(data, 0, 0, 0, 0))); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if err := checkTable(&tb); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSamplerStateAges: the state encodes every age as a uvarint, one
// byte below 128 and more above, wherever the first long one falls.
func TestSamplerStateAges(t *testing.T) {
	for _, at := range []int{-1, 0, 5, 299} {
		s := NewSampler(300, DefaultConfig())
		s.next = 400
		for i := range s.last {
			s.last[i] = int32(399 - i%100) // ages 0..99
		}
		if at >= 0 {
			s.last[at] = 3 // age 396: two bytes
			s.last[(at+7)%300] = -1
		}
		want := append([]byte(samplerMagic), samplerVersion)
		want = binary.LittleEndian.AppendUint32(want, 300)
		want = binary.LittleEndian.AppendUint32(want, 400)
		for _, l := range s.last {
			want = binary.AppendUvarint(want, uint64(399-int64(l)))
		}
		want = appendChecksum(want)
		got, err := s.MarshalBinary()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("a long age at %d: state %x (%v), want %x", at, got, err, want)
		}
		back := NewSampler(300, DefaultConfig())
		if err := back.UnmarshalBinary(got); err != nil || !slices.Equal(back.last, s.last) || back.next != s.next {
			t.Fatalf("a long age at %d: read back %v, %v", at, back.next, err)
		}
	}
}
