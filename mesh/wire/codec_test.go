package wire

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/transport/peer"
)

// reflectReq, reflectHead and reflectMeta are FetchReq, FetchHead and
// FetchMeta without their codecs (a defined type has none of its base's
// methods): msgpack's reflection encodes and decodes them, as it did the
// wire types before they had their own.
type (
	reflectReq  FetchReq
	reflectMeta FetchMeta
	reflectHead struct {
		Items []reflectMeta `msgpack:"i"`
	}
)

func toReflectHead(h FetchHead) reflectHead {
	if h.Items == nil {
		return reflectHead{}
	}
	r := reflectHead{Items: make([]reflectMeta, len(h.Items))}
	for i, m := range h.Items {
		r.Items[i] = reflectMeta(m)
	}
	return r
}

func randomReq(rng *rand.Rand) FetchReq {
	r := FetchReq{
		Dataset:    strings.Repeat("d", rng.IntN(40)),
		Version:    fmt.Sprintf("%x", rng.Uint64()),
		MemoryOnly: rng.IntN(2) == 0,
		Warm:       rng.IntN(2) == 0,
		First:      rng.IntN(2) == 0,
	}
	switch k := rng.IntN(4); k {
	case 0: // nil
	case 1:
		r.IDs = []uint32{}
	default:
		for range rng.IntN(300) {
			r.IDs = append(r.IDs, rng.Uint32()>>rng.IntN(32))
		}
	}
	return r
}

func randomHead(rng *rand.Rand) FetchHead {
	var h FetchHead
	switch k := rng.IntN(4); k {
	case 0: // nil
	case 1:
		h.Items = []FetchMeta{}
	default:
		for range rng.IntN(40) {
			m := FetchMeta{Found: rng.IntN(2) == 0, Hit: rng.IntN(2) == 0, Sum: rng.Uint64() >> rng.IntN(64), Len: rng.Uint32() >> rng.IntN(32)}
			if rng.IntN(3) == 0 {
				m.Err = strings.Repeat("e", 1+rng.IntN(300))
			}
			h.Items = append(h.Items, m)
		}
	}
	return h
}

// TestFetchCodecMatchesReflection: FetchReq and FetchHead encode to the
// very bytes msgpack's reflection makes of them, and decode what it makes
// back to the same values; so peers with and without the codecs read
// each other.
func TestFetchCodecMatchesReflection(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		req, head := randomReq(rng), randomHead(rng)
		ref, refHead := reflectReq(req), toReflectHead(head)
		sameAsReflection(t, fmt.Sprintf("request %d", i), &req, &ref)
		sameAsReflection(t, fmt.Sprintf("head %d", i), &head, &refHead)
	}
}

// sameAsReflection fails unless v encodes to the bytes the reflection
// makes of ref (v's value, in a type without the codec), and those bytes
// decode to v.
func sameAsReflection[T, R any](t *testing.T, what string, v *T, ref *R) {
	t.Helper()
	mine, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := msgpack.Marshal(ref)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mine, theirs) {
		t.Fatalf("%s: encoded\n%x, reflection\n%x", what, mine, theirs)
	}
	var back, fast T
	if err := msgpack.Unmarshal(theirs, &back); err != nil || !reflect.DeepEqual(back, *v) {
		t.Fatalf("%s decoded as %+v (%v), want %+v", what, back, err, *v)
	}
	if err := any(&fast).(msgpack.Unmarshaler).UnmarshalMsgpack(theirs); err != nil || !reflect.DeepEqual(fast, *v) {
		t.Fatalf("%s decoded from its bytes as %+v (%v), want %+v", what, fast, err, *v)
	}
}

// TestFetchCodecKeysInAnyOrder: keys come in any order, unknown ones
// (with values of any shape) are skipped, and a nil list is nil.
func TestFetchCodecKeysInAnyOrder(t *testing.T) {
	in := map[string]any{"w": true, "z": []any{1, "x", map[string]any{"q": nil}}, "i": []uint32{3, 1}, "d": "ds", "p": true, "v": "v1"}
	b, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	want := FetchReq{Dataset: "ds", Version: "v1", IDs: []uint32{3, 1}, Warm: true, First: true}
	var req, fast FetchReq
	if err := msgpack.Unmarshal(b, &req); err != nil || !reflect.DeepEqual(req, want) {
		t.Fatalf("decoded %+v (%v), want %+v", req, err, want)
	}
	if err := fast.UnmarshalMsgpack(b); err != nil || !reflect.DeepEqual(fast, want) {
		t.Fatalf("decoded from its bytes %+v (%v), want %+v", fast, err, want)
	}
	b, _ = msgpack.Marshal(map[string]any{"x": 1, "i": []any{map[string]any{"n": 7, "y": "skip", "f": true}}})
	wantHead := FetchHead{Items: []FetchMeta{{Found: true, Len: 7}}}
	var head, fastHead FetchHead
	if err := msgpack.Unmarshal(b, &head); err != nil || !reflect.DeepEqual(head, wantHead) {
		t.Fatalf("decoded %+v (%v)", head, err)
	}
	if err := fastHead.UnmarshalMsgpack(b); err != nil || !reflect.DeepEqual(fastHead, wantHead) {
		t.Fatalf("decoded from its bytes %+v (%v)", fastHead, err)
	}
}

// TestFetchUnmarshalRefusesLengthsPastItsBytes: a list that claims more
// elements than its bytes can hold (the most an array32 can claim; one
// more than fit, where 40,000 are claimed and the bytes of all but part
// of one follow; an item cut short) is refused, and refusing it
// allocates next to nothing, not room for what was claimed; bytes after
// the message are refused as the transport's check refuses them.
func TestFetchUnmarshalRefusesLengthsPastItsBytes(t *testing.T) {
	req := FetchReq{Dataset: "ds", Version: "v", IDs: []uint32{1, 2, 3}}
	head := FetchHead{Items: []FetchMeta{{Found: true, Sum: 9, Len: 4}, {Err: "gone"}}}
	goodReq, _ := req.AppendMsgpack(nil)
	goodHead, _ := head.AppendMsgpack(nil)
	idsAt := bytes.Index(goodReq, []byte{0xa1, 'i'}) + 2
	const itemsAt = 3
	// claim puts an array32 of n elements at b[at] and fill bytes of
	// 0xc1 (no msgpack value) after it, in place of b's own elements.
	claim := func(b []byte, at int, n uint32, fill int) []byte {
		out := append([]byte{}, b[:at]...)
		out = append(out, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		return append(out, bytes.Repeat([]byte{0xc1}, fill)...)
	}
	const many = 40000
	cases := map[string]struct {
		b []byte
		v msgpack.Unmarshaler
	}{
		"ids, 2^32-1":           {claim(goodReq, idsAt, 1<<32-1, 64), new(FetchReq)},
		"ids, one too many":     {claim(goodReq, idsAt, many, 5*many-1), new(FetchReq)},
		"items, 2^32-1":         {claim(goodHead, itemsAt, 1<<32-1, 64), new(FetchHead)},
		"items, one too many":   {claim(goodHead, itemsAt, many, 25*many-1), new(FetchHead)},
		"item cut short":        {goodHead[:len(goodHead)-3], new(FetchHead)},
		"request, a byte after": {append(append([]byte{}, goodReq...), 0xc0), new(FetchReq)},
		"head, a byte after":    {append(append([]byte{}, goodHead...), 0xc0), new(FetchHead)},
	}
	for name, c := range cases {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := c.v.UnmarshalMsgpack(c.b)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("%s: decoded as %+v", name, c.v)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
			t.Fatalf("%s: %d bytes allocated to refuse it", name, got)
		}
	}
	var back FetchHead
	if err := back.UnmarshalMsgpack(goodHead); err != nil || !reflect.DeepEqual(back, head) {
		t.Fatalf("the head itself decoded as %+v (%v)", back, err)
	}
}

// FuzzFetchDecode: what the codecs decode, msgpack's reflection decodes
// to the same value; and it encodes back to bytes that decode to it again.
// Inputs are those the peer transport decodes: frames that pass
// peer.CheckMsgpack (msgpack reads a length as it is given, and skipping
// a 4 GB bin that is not there allocates as it reads, in either decoder).
func FuzzFetchDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 8 {
		req, head := randomReq(rng), randomHead(rng)
		b, _ := msgpack.Marshal(&req)
		f.Add(b)
		b, _ = msgpack.Marshal(&head)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sameFromBytes[FetchReq](t, b)
		sameFromBytes[FetchHead](t, b)
		if peer.CheckMsgpack(b) != nil {
			return
		}
		sameDecoding(t, b, func(r FetchReq) reflectReq { return reflectReq(r) })
		sameDecoding(t, b, toReflectHead)
	})
}

// sameFromBytes: a T's UnmarshalMsgpack, on any bytes, decodes what
// peer.CheckMsgpack then msgpack.Unmarshal (the codec's DecodeMsgpack)
// decode, to the same value, and refuses what they refuse.
func sameFromBytes[T any](t *testing.T, b []byte) {
	t.Helper()
	var fast, slow T
	errFast := any(&fast).(msgpack.Unmarshaler).UnmarshalMsgpack(b)
	errSlow := peer.CheckMsgpack(b)
	if errSlow == nil {
		errSlow = msgpack.Unmarshal(b, &slow)
	}
	if (errFast == nil) != (errSlow == nil) || errFast == nil && !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%x: from its bytes %+v (%v), through the decoder %+v (%v)", b, fast, errFast, slow, errSlow)
	}
}

// sameDecoding: where the codec decodes b into a T, the reflection
// decodes it into an R (T's value in a type without the codec, as toRef
// makes it) to the same value; and the T round-trips.
func sameDecoding[T, R any](t *testing.T, b []byte, toRef func(T) R) {
	t.Helper()
	var v T
	if msgpack.Unmarshal(b, &v) != nil {
		return
	}
	var ref R
	if err := msgpack.Unmarshal(b, &ref); err != nil || !reflect.DeepEqual(toRef(v), ref) {
		t.Fatalf("%x: codec %+v, reflection %+v (%v)", b, v, ref, err)
	}
	roundTrip(t, &v, new(T))
}

// roundTrip encodes v, decodes the bytes into into, and fails unless they
// are equal.
func roundTrip[T any](t *testing.T, v, into *T) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := msgpack.Unmarshal(b, into); err != nil || !reflect.DeepEqual(*v, *into) {
		t.Fatalf("%+v came back as %+v (%v)", *v, *into, err)
	}
}

// BenchmarkFetchCodec encodes and decodes a fetch's request and its
// reply's head, for one sample and for 32: from and to bytes as the
// transport does (bytes), with the codecs through msgpack's encoder and
// decoder after the transport's check (codec), and with msgpack's
// reflection (reflection).
func BenchmarkFetchCodec(b *testing.B) {
	for _, n := range []int{1, 32} {
		req := FetchReq{Dataset: "fmnist-train", Version: "0123456789abcdef0123456789abcdef"}
		head := FetchHead{}
		for i := range n {
			req.IDs = append(req.IDs, uint32(i*7919))
			head.Items = append(head.Items, FetchMeta{Found: true, Hit: true, Sum: uint64(i) * 0x9e3779b97f4a7c15, Len: 102400})
		}
		ref, refHead := reflectReq(req), toReflectHead(head)
		b.Run(fmt.Sprintf("%d/bytes", n), func(b *testing.B) {
			var buf []byte
			for b.Loop() {
				for _, v := range [][2]any{{&req, new(FetchReq)}, {&head, new(FetchHead)}} {
					var err error
					if buf, err = v[0].(peer.Appender).AppendMsgpack(buf[:0]); err != nil {
						b.Fatal(err)
					}
					if err := v[1].(msgpack.Unmarshaler).UnmarshalMsgpack(buf); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("%d/codec", n), func(b *testing.B) {
			for b.Loop() {
				codecCycle(b, &req, new(FetchReq), &head, new(FetchHead))
			}
		})
		b.Run(fmt.Sprintf("%d/reflection", n), func(b *testing.B) {
			for b.Loop() {
				codecCycle(b, &ref, new(reflectReq), &refHead, new(reflectHead))
			}
		})
	}
}

func codecCycle[R, H any](b *testing.B, req, reqInto *R, head, headInto *H) {
	for _, v := range [][2]any{{req, reqInto}, {head, headInto}} {
		buf, err := msgpack.Marshal(v[0])
		if err != nil {
			b.Fatal(err)
		}
		if err := peer.CheckMsgpack(buf); err != nil {
			b.Fatal(err)
		}
		if err := msgpack.Unmarshal(buf, v[1]); err != nil {
			b.Fatal(err)
		}
	}
}
