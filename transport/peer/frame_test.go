package peer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, body := range [][]byte{{0xc0}, bytes.Repeat([]byte{7}, 1<<20)} {
		var b bytes.Buffer
		if err := EncodeFrame(&b, 42, body); err != nil {
			t.Fatal(err)
		}
		if got := binary.BigEndian.Uint32(b.Bytes()); got != uint32(2+len(body)) {
			t.Fatalf("length prefix %d, want %d", got, 2+len(body))
		}
		tag, got, err := DecodeFrame(&b, 2+len(body))
		if err != nil || tag != 42 || !bytes.Equal(got, body) {
			t.Fatalf("DecodeFrame = %d, %d bytes, %v", tag, len(got), err)
		}
		if _, _, err := DecodeFrame(&b, 1<<30); err != io.EOF {
			t.Fatalf("DecodeFrame at end = %v, want io.EOF", err)
		}
	}
}

func TestDecodeFrameErrors(t *testing.T) {
	frame := func(n uint32, rest ...byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, n), rest...)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"over limit", frame(101, 0, 1), 100, ErrFrameTooLarge},
		{"claims 4 GiB", frame(1<<32-1, 0, 1, 0xc0), DefaultMaxFrame, ErrFrameTooLarge},
		{"no tag", frame(1, 0), 100, ErrBadFrame},
		{"zero length", frame(0), 100, ErrBadFrame},
		{"short prefix", []byte{0, 0}, 100, io.ErrUnexpectedEOF},
		{"short tag", frame(3, 0), 100, io.ErrUnexpectedEOF},
		{"short body", frame(10, 0, 1, 2, 3), 100, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := DecodeFrame(bytes.NewReader(tc.in), tc.max); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// allocated reports the bytes f allocates, on average over runs.
func allocated(runs int, f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

func TestDecodeFrameDoesNotAllocateClaimedLength(t *testing.T) {
	// A prefix claiming 4 GiB against the default limit: refused at once.
	huge := binary.BigEndian.AppendUint32(nil, 1<<32-1)
	huge = append(huge, 0, 1, 0xc0)
	got := allocated(20, func() {
		if _, _, err := DecodeFrame(bytes.NewReader(huge), DefaultMaxFrame); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("err = %v", err)
		}
	})
	if got > 1<<20 {
		t.Fatalf("refusing a 4 GiB frame allocated %d bytes", got)
	}
	// A frame claiming the whole limit (64 MiB) but carrying 10 bytes costs
	// what arrived, rounded up to the first chunk, not what it claimed.
	liar := binary.BigEndian.AppendUint32(nil, DefaultMaxFrame)
	liar = append(liar, make([]byte, 12)...)
	got = allocated(20, func() {
		if _, _, err := DecodeFrame(bytes.NewReader(liar), DefaultMaxFrame); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err = %v", err)
		}
	})
	if got > 1<<20 {
		t.Fatalf("a 64 MiB claim carrying 10 bytes allocated %d bytes", got)
	}
}

func TestCheckMsgpackAcceptsEncodedValues(t *testing.T) {
	type inner struct {
		A []int
		M map[string][]byte
	}
	values := []any{
		nil, true, false, 0, -1, 127, -33, 1 << 40, -1 << 40, 3.5, float32(1.5),
		"", "hi", strings.Repeat("x", 300), strings.Repeat("y", 70000),
		[]byte{}, []byte("bin"), make([]byte, 70000),
		[]int{}, []int{1, 2, 3}, make([]uint32, 20), make([]string, 70000),
		map[string]int{"a": 1, "b": 2}, map[int]string{}, time.Unix(1700000000, 5),
		inner{A: []int{1}, M: map[string][]byte{"k": {1, 2}}},
		[]any{[]any{[]any{map[string]any{"deep": []any{1}}}}},
	}
	for _, v := range values {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckMsgpack(b); err != nil {
			t.Errorf("CheckMsgpack(%T %.40v) = %v", v, v, err)
		}
	}
}

func TestCheckMsgpackRefuses(t *testing.T) {
	nest := func(depth int) []byte {
		b := bytes.Repeat([]byte{0x91}, depth) // fixarray of 1, depth times
		return append(b, 0xc0)
	}
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"array32 claims 2^32-1 in 10 bytes", []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5}},
		{"map32 claims 2^31", []byte{0xdf, 0x80, 0, 0, 0, 1, 2}},
		{"array16 one short", append([]byte{0xdc, 0, 4}, 1, 2, 3)},
		{"nested arrays claim more than the bytes left", []byte{0x92, 0x9f, 1, 2, 3}},
		{"str32 claims 4 GiB", []byte{0xdb, 0xff, 0xff, 0xff, 0xff, 'a'}},
		{"bin16 claims more", []byte{0xc5, 0x01, 0x00, 1, 2}},
		{"ext32 claims more", []byte{0xc9, 0, 0, 1, 0, 5, 1}},
		{"fixext16 short", []byte{0xd8, 1, 2, 3}},
		{"fixstr short", []byte{0xa5, 'a'}},
		{"uint64 short", []byte{0xcf, 1, 2}},
		{"array32 header cut", []byte{0xdd, 0, 0}},
		{"reserved 0xc1", []byte{0xc1}},
		{"trailing bytes", []byte{0xc0, 0xc0}},
		{"too deep", nest(maxDepth + 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckMsgpack(tc.in); !errors.Is(err, ErrBadFrame) {
				t.Fatalf("CheckMsgpack(% x) = %v, want ErrBadFrame", tc.in, err)
			}
		})
	}
	if err := CheckMsgpack(nest(maxDepth)); err != nil {
		t.Fatalf("depth %d refused: %v", maxDepth, err)
	}
}

func TestCheckMsgpackDoesNotAllocate(t *testing.T) {
	b, err := msgpack.Marshal(map[string]any{"ids": []uint32{1, 2, 3}, "name": "x", "nested": []any{[]any{1.5, nil}}})
	if err != nil {
		t.Fatal(err)
	}
	bad := []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5}
	if n := testing.AllocsPerRun(100, func() { _ = CheckMsgpack(b) }); n != 0 {
		t.Fatalf("CheckMsgpack allocated %v times on a valid body", n)
	}
	// The error path formats its message; it must not size anything from
	// the header.
	if got := allocated(100, func() { _ = CheckMsgpack(bad) }); got > 1024 {
		t.Fatalf("CheckMsgpack allocated %d bytes refusing a bomb", got)
	}
}

// fuzzMsg is representative of the mesh's request bodies.
type fuzzMsg struct {
	Dataset string
	Epoch   int
	IDs     []uint32
	Losses  []float64
	Blob    []byte
	Meta    map[string]any
	Sub     []fuzzMsg
}

func FuzzDecodeFrame(f *testing.F) {
	const limit = 1 << 16
	for _, v := range []any{
		fuzzMsg{Dataset: "fmnist", Epoch: 3, IDs: []uint32{1, 2}, Losses: []float64{0.5}, Blob: []byte("x"), Meta: map[string]any{"k": []any{1, "v"}}},
		"an error message", nil, []any{1, []any{2}},
	} {
		body, err := msgpack.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		var b bytes.Buffer
		EncodeFrame(&b, 7, body)
		f.Add(b.Bytes())
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 1})
	f.Add([]byte{0, 0, 0, 12, 0, 1, 0xdd, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5})
	f.Add([]byte{0, 1, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		_, body, err := DecodeFrame(bytes.NewReader(in), limit)
		if cap(body) > limit {
			t.Fatalf("DecodeFrame allocated %d bytes, limit %d", cap(body), limit)
		}
		if err != nil {
			return
		}
		if err := CheckMsgpack(body); err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("CheckMsgpack error %v does not wrap ErrBadFrame", err)
			}
			return
		}
		var m fuzzMsg
		_ = msgpack.Unmarshal(body, &m)
		var v any
		_ = msgpack.Unmarshal(body, &v)
	})
}

func FuzzCheckMsgpack(f *testing.F) {
	for _, v := range []any{nil, 1, "s", []byte{1}, []any{1, "a", map[string]any{"x": []int{1}}}, time.Unix(1, 0)} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5})
	f.Fuzz(func(t *testing.T, in []byte) {
		if err := CheckMsgpack(in); err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			}
			return
		}
		// Accepted bytes decode without running away: each element
		// consumed one byte at least.
		var v any
		_ = msgpack.Unmarshal(in, &v)
	})
}
