package jsonstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

type head struct {
	Format string `json:"format"`
	Check  string `json:"check"`
}

type item struct {
	K string `json:"k"`
	N int    `json:"n"`
}

func items(n int) []item {
	out := make([]item, n)
	for i := range out {
		out[i] = item{K: strings.Repeat("x", i%5) + "\"\\é", N: i}
	}
	return out
}

func read(t *testing.T, doc []byte) (head, []item, error) {
	t.Helper()
	var h head
	var got []item
	err := Read(json.NewDecoder(bytes.NewReader(doc)), map[string]any{"format": &h.Format, "check": &h.Check}, "items",
		func(dec *json.Decoder) error {
			var it item
			if err := dec.Decode(&it); err != nil {
				return err
			}
			got = append(got, it)
			return nil
		})
	return h, got, err
}

// TestWriteRead: a document written one element at a time reads back
// whole, and encoding/json reads it as one document too; empty arrays,
// other field orders and fields of a later format read; a document cut
// short anywhere, or without the array, does not.
func TestWriteRead(t *testing.T) {
	for _, n := range []int{0, 1, 1000} {
		want := items(n)
		var buf bytes.Buffer
		if err := Write(&buf, head{"f/1", "c"}, "items", n, func(i int) any { return want[i] }); err != nil {
			t.Fatal(err)
		}
		h, got, err := read(t, buf.Bytes())
		if err != nil || h != (head{"f/1", "c"}) || len(got) != n || !slices.Equal(got, want) {
			t.Fatalf("n=%d: read back %+v, %d items, %v", n, h, len(got), err)
		}
		var whole struct {
			head
			Items []item `json:"items"`
		}
		if err := json.Unmarshal(buf.Bytes(), &whole); err != nil || whole.head != h || len(whole.Items) != n {
			t.Fatalf("n=%d: encoding/json reads %+v, %v", n, whole.head, err)
		}
		doc := buf.Bytes()
		for _, cut := range []int{0, 1, len(doc) / 2, len(doc) - 3, len(doc) - 2} {
			if _, _, err := read(t, doc[:cut]); err == nil {
				t.Fatalf("n=%d: a document cut at %d of %d bytes read without error", n, cut, len(doc))
			}
		}
	}
	h, got, err := read(t, []byte(`{"items":[{"k":"a","n":1}],"later":{"x":[1,2]},"check":"c","format":"f"}`))
	if err != nil || h != (head{"f", "c"}) || len(got) != 1 {
		t.Fatalf("another order: %+v %v %v", h, got, err)
	}
	for _, doc := range []string{`{"format":"f"}`, `{"format":"f","items":null}`} {
		if _, _, err := read(t, []byte(doc)); !errors.Is(err, ErrNoArray) && err == nil {
			t.Fatalf("%s: %v, want an error", doc, err)
		}
	}
	if err := Write(&bytes.Buffer{}, struct{}{}, "items", 0, nil); err == nil {
		t.Fatal("a header with no field was written")
	}
}
