package wire

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/transport/peer"
)

// randomOffer returns an offer of up to 6 items whose values are nil,
// empty, or of lengths that take each of msgpack's bin headers (8-, 16-
// and 32-bit lengths).
func randomOffer(rng *rand.Rand) OfferReq {
	var r OfferReq
	switch rng.IntN(5) {
	case 0: // nil
	case 1:
		r.Items = []OfferItem{}
	default:
		for range 1 + rng.IntN(6) {
			it := OfferItem{
				Dataset: strings.Repeat("d", rng.IntN(40)),
				Version: fmt.Sprintf("%x", rng.Uint64()),
				ID:      rng.Uint32() >> rng.IntN(32),
				Sum:     rng.Uint64() >> rng.IntN(64),
				Leaving: rng.IntN(3) == 0,
			}
			switch rng.IntN(5) {
			case 0: // nil
			case 1:
				it.Value = []byte{}
			default:
				it.Value = make([]byte, []int{1 + rng.IntN(255), 256 + rng.IntN(65280), 65536 + rng.IntN(100000)}[rng.IntN(3)])
				for i := range it.Value {
					it.Value[i] = byte(rng.Uint32())
				}
			}
			r.Items = append(r.Items, it)
		}
	}
	return r
}

// TestOfferCodecMatchesReflection: Parts, joined, are the very bytes
// msgpack's reflection makes of an offer, each value a part of its own
// (the same slice, not a copy); DecodeOfferReq decodes them to the
// offer the reflection decodes, each value a slice of the bytes decoded
// that cannot be appended to past its end.
func TestOfferCodecMatchesReflection(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range 300 {
		req := randomOffer(rng)
		parts, err := req.Parts()
		if err != nil {
			t.Fatal(err)
		}
		mine := bytes.Join(parts, nil)
		theirs, err := msgpack.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mine, theirs) {
			at := 0
			for at < min(len(mine), len(theirs)) && mine[at] == theirs[at] {
				at++
			}
			t.Fatalf("offer %d: parts joined (%d bytes) differ from the reflection's (%d) at byte %d", i, len(mine), len(theirs), at)
		}
		for k := range req.Items {
			if v := req.Items[k].Value; len(v) > 0 && unsafe.SliceData(parts[2*k+1]) != unsafe.SliceData(v) {
				t.Fatalf("offer %d, item %d: its value's part is not the value itself", i, k)
			}
		}
		var got, want OfferReq
		if err := DecodeOfferReq(theirs, &got); err != nil {
			t.Fatalf("offer %d: %v", i, err)
		}
		if err := msgpack.Unmarshal(theirs, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("offer %d decoded as %+v, reflection %+v", i, got, want)
		}
		for k, it := range got.Items {
			if len(it.Value) > 0 && !within(it.Value, theirs) {
				t.Fatalf("offer %d, item %d: value is a copy, not a slice of the bytes decoded", i, k)
			}
			if cap(it.Value) != len(it.Value) {
				t.Fatalf("offer %d, item %d: value of %d bytes has room for %d", i, k, len(it.Value), cap(it.Value))
			}
		}
	}
}

// within reports whether v lies inside b.
func within(v, b []byte) bool {
	lo, hi := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))+uintptr(len(b))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	return p >= lo && p+uintptr(len(v)) <= hi
}

// TestOfferDecodeKeysInAnyOrder: keys come in any order, unknown ones
// (of any shape) are skipped, and a value sent as a str is taken as
// msgpack takes a []byte.
func TestOfferDecodeKeysInAnyOrder(t *testing.T) {
	in := map[string]any{"x": []any{1, "y"}, "o": []any{
		map[string]any{"l": true, "b": "abc", "z": map[string]any{"q": nil}, "s": 7, "i": 3, "v": "v1", "d": "ds"},
		map[string]any{"d": "ds2", "b": []byte{9}},
	}}
	b, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var got OfferReq
	if err := DecodeOfferReq(b, &got); err != nil {
		t.Fatal(err)
	}
	want := OfferReq{Items: []OfferItem{
		{Dataset: "ds", Version: "v1", ID: 3, Sum: 7, Value: []byte("abc"), Leaving: true},
		{Dataset: "ds2", Value: []byte{9}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

// TestOfferDecodeRefuses: a field of the wrong type is an error that
// names it, and an offer cut anywhere short is an error, not a shorter
// value.
func TestOfferDecodeRefuses(t *testing.T) {
	for _, in := range []map[string]any{
		{"o": "items"},
		{"o": []any{"item"}},
		{"o": []any{map[string]any{"i": "one"}}},
		{"o": []any{map[string]any{"b": 5}}},
		{"o": []any{map[string]any{"d": 5}}},
	} {
		b, _ := msgpack.Marshal(in)
		var got OfferReq
		if err := DecodeOfferReq(b, &got); err == nil || !strings.Contains(err.Error(), "offer") {
			t.Fatalf("%v decoded as %+v, err %v", in, got, err)
		}
	}
	req := OfferReq{Items: []OfferItem{{Dataset: "ds", Version: "v", ID: 1, Sum: 2, Value: bytes.Repeat([]byte{7}, 300)}}}
	b, _ := msgpack.Marshal(&req)
	for cut := range len(b) {
		var got OfferReq
		if err := DecodeOfferReq(b[:cut], &got); err == nil {
			t.Fatalf("the offer cut to %d of its %d bytes decoded as %+v", cut, len(b), got)
		}
	}
}

// FuzzOfferDecode: what DecodeOfferReq decodes, msgpack's reflection
// decodes to the same offer; and Parts encode it back to bytes that
// decode to it again. Inputs are those the peer transport decodes:
// frames that pass peer.CheckMsgpack.
func FuzzOfferDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(11, 12))
	for range 8 {
		req := randomOffer(rng)
		for k := range req.Items { // seeds of a fuzzable size
			if len(req.Items[k].Value) > 300 {
				req.Items[k].Value = req.Items[k].Value[:300]
			}
		}
		b, _ := msgpack.Marshal(&req)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if peer.CheckMsgpack(b) != nil {
			return
		}
		var got OfferReq
		if DecodeOfferReq(b, &got) != nil {
			return
		}
		var want OfferReq
		if err := msgpack.Unmarshal(b, &want); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%x: codec %+v, reflection %+v (%v)", b, got, want, err)
		}
		parts, err := got.Parts()
		if err != nil {
			t.Fatal(err)
		}
		again := bytes.Join(parts, nil)
		var back OfferReq
		if err := DecodeOfferReq(again, &back); err != nil || !reflect.DeepEqual(back, got) {
			t.Fatalf("%+v came back as %+v (%v)", got, back, err)
		}
	})
}
