package wire

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/shade-mesh/shade/protocol/shm"
)

// sendFetch is what an owner sends for items: the head, and the found
// values back to back.
func sendFetch(items []FetchItem) (*FetchHead, []byte) {
	r := FetchRawReply(items, nil)
	return r.Head.(*FetchHead), bytes.Join(r.Values, nil)
}

// TestReadFetchValuesRoundTrip reads what an owner sends back: every
// item as it was, and Verified only where the value's bytes match its
// Sum (the third's does not: it comes back, not Verified, for the caller
// to refuse).
func TestReadFetchValuesRoundTrip(t *testing.T) {
	items := []FetchItem{
		{Found: true, Hit: true, Sum: shm.Checksum([]byte("first")), Value: []byte("first")},
		{Err: "index out of range"},
		{Found: true, Sum: shm.Checksum([]byte("third value")) ^ 1, Value: []byte("third value")},
		{Found: true, Sum: shm.Checksum(nil), Value: []byte{}},
	}
	head, values := sendFetch(items)
	got, err := ReadFetchValues(bytes.NewReader(values), len(values), head, []int64{5, 100, 11, 0})
	if err != nil {
		t.Fatal(err)
	}
	verified := []bool{true, false, false, true}
	for i := range items {
		w, g := items[i], got[i]
		if w.Found != g.Found || w.Hit != g.Hit || w.Sum != g.Sum || w.Err != g.Err || !bytes.Equal(w.Value, g.Value) {
			t.Errorf("item %d: %+v, want %+v", i, g, w)
		}
		if g.Verified != verified[i] {
			t.Errorf("item %d: Verified %v, want %v", i, g.Verified, verified[i])
		}
	}
	// Each value is cut to its own length: appending to one cannot
	// overwrite the next.
	_ = append(got[0].Value, 'x')
	if string(got[2].Value) != "third value" {
		t.Fatal("a value's capacity reaches into the next")
	}
}

func TestReadFetchValuesRefusesLies(t *testing.T) {
	head := func(metas ...FetchMeta) *FetchHead { return &FetchHead{Items: metas} }
	for _, tc := range []struct {
		name   string
		head   *FetchHead
		size   int
		maxLen []int64
	}{
		{"more items than ids", head(FetchMeta{}, FetchMeta{}), 0, []int64{10}},
		{"fewer items than ids", head(FetchMeta{}), 0, []int64{10, 10}},
		{"longer than the manifest", head(FetchMeta{Found: true, Len: 11}), 11, []int64{10}},
		{"4 GiB claimed", head(FetchMeta{Found: true, Len: 1<<32 - 1}), 1<<31 - 1, []int64{10}},
		{"bytes for a missing item", head(FetchMeta{Len: 5}), 5, []int64{10}},
		{"fewer bytes follow than the items take", head(FetchMeta{Found: true, Len: 10}), 4, []int64{10}},
		{"more bytes follow than the items take", head(FetchMeta{Found: true, Len: 10}), 1 << 30, []int64{10}},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := ReadFetchValues(bytes.NewReader(nil), tc.size, tc.head, tc.maxLen)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrBadFetchReply) {
			t.Errorf("%s: %v, want ErrBadFetchReply", tc.name, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
			t.Errorf("%s: %d bytes allocated to refuse it", tc.name, grew)
		}
	}
}

func TestReadFetchValuesCutShort(t *testing.T) {
	head, values := sendFetch([]FetchItem{{Found: true, Value: []byte("0123456789")}})
	_, err := ReadFetchValues(bytes.NewReader(values[:4]), len(values), head, []int64{10})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("4 of 10 bytes: %v, want io.ErrUnexpectedEOF", err)
	}
}
