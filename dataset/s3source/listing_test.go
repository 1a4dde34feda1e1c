package s3source

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestListingRoundTrip: a listing saved one object at a time reads back
// whole; one written as a single JSON document (as earlier builds wrote
// it) reads too; a field of a later format is skipped; a listing of
// another place, another format, or cut short is not used (nil: list
// again).
func TestListingRoundTrip(t *testing.T) {
	dir := t.TempDir()
	loc := Location{Bucket: "b", Prefix: "train/"}
	var objs []object
	for i := range 3000 {
		objs = append(objs, object{Key: fmt.Sprintf("train/c%d/%05d.png", i%7, i), Size: int64(i), ETag: fmt.Sprintf("%032x", i)})
	}
	slices.SortFunc(objs, func(a, b object) int { return strings.Compare(a.Key, b.Key) })
	path := filepath.Join(dir, "l.json")
	names, sizes, etags := listedOf(t, loc, objs).sorted()
	if err := saveListing(path, "http://e", loc, names, sizes, etags); err != nil {
		t.Fatal(err)
	}
	if got, err := loadListing(path, "http://e", loc); err != nil || !slices.Equal(objectsOf(loc, got), objs) {
		t.Fatalf("read back %d objects, %v; want the %d saved", len(objectsOf(loc, got)), err, len(objs))
	}
	for _, other := range []struct {
		endpoint string
		loc      Location
	}{{"http://other", loc}, {"http://e", Location{Bucket: "c", Prefix: "train/"}}, {"http://e", Location{Bucket: "b", Prefix: "val/"}}} {
		if got, err := loadListing(path, other.endpoint, other.loc); got != nil || err != nil {
			t.Fatalf("listing of another place (%v): %d objects, %v; want none", other, got.len(), err)
		}
	}

	// One JSON document, fields in another order, an unknown one.
	doc := map[string]any{"objects": objs[:5], "future": []int{1, 2}, "format": listingFormat,
		"endpoint": "http://e", "bucket": "b", "prefix": "train/", "listed": time.Now()}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old.json")
	os.WriteFile(old, b, 0o600)
	if got, err := loadListing(old, "http://e", loc); err != nil || !slices.Equal(objectsOf(loc, got), objs[:5]) {
		t.Fatalf("one-document listing: %v, %v; want its 5 objects", objectsOf(loc, got), err)
	}
	doc["format"] = "shade-s3-listing/0"
	b, _ = json.Marshal(doc)
	os.WriteFile(old, b, 0o600)
	if got, _ := loadListing(old, "http://e", loc); got != nil {
		t.Fatalf("a listing of another format gave %d objects", got.len())
	}

	// Cut short anywhere: not used.
	whole, _ := os.ReadFile(path)
	cut := filepath.Join(dir, "cut.json")
	for _, n := range []int{0, 1, 40, len(whole) / 2, len(whole) - 3} {
		os.WriteFile(cut, whole[:n], 0o600)
		if got, err := loadListing(cut, "http://e", loc); got != nil || err != nil {
			t.Fatalf("listing cut at %d of %d bytes: %d objects, %v; want none", n, len(whole), got.len(), err)
		}
	}
	if got, err := loadListing(filepath.Join(dir, "missing"), "http://e", loc); got != nil || err != nil {
		t.Fatalf("no listing: %v, %v", got, err)
	}
}

// listedOf packs objs as a listing brings them.
func listedOf(t testing.TB, loc Location, objs []object) *listed {
	t.Helper()
	l := &listed{prefix: loc.Prefix}
	for _, o := range objs {
		if err := l.add(o); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// objectsOf returns l's objects in key order (none for nil).
func objectsOf(loc Location, l *listed) []object {
	if l == nil {
		return nil
	}
	names, sizes, etags := l.sorted()
	out := []object{}
	for i, name := range names.All() {
		out = append(out, object{Key: loc.Prefix + name, Size: sizes[i], ETag: etags.At(i)})
	}
	return out
}

// TestListedSorted: a listing that came out of key order (a store that
// walks folders lists "a/b" before "a.txt") is put in key order, each
// object's size and ETag with it; an object outside the prefix is
// refused.
func TestListedSorted(t *testing.T) {
	loc := Location{Bucket: "b", Prefix: "p/"}
	rng := rand.New(rand.NewPCG(1, 2))
	var objs []object
	for i := range 5000 {
		key := fmt.Sprintf("p/%c/%d.bin", 'a'+rune(rng.IntN(26)), rng.IntN(1_000_000))
		if i%7 == 0 {
			key = fmt.Sprintf("p/%c.txt", 'a'+rune(i%26)) + strconv.Itoa(i)
		}
		objs = append(objs, object{Key: key, Size: int64(i), ETag: fmt.Sprintf("e%d", i)})
	}
	got := objectsOf(loc, listedOf(t, loc, objs))
	want := slices.Clone(objs)
	slices.SortStableFunc(want, func(a, b object) int { return strings.Compare(a.Key, b.Key) })
	if !slices.Equal(got, want) {
		t.Fatal("the listing out of order was not put in key order with its sizes and ETags")
	}
	l := &listed{prefix: loc.Prefix}
	if err := l.add(object{Key: "q/x.bin"}); err == nil || !strings.Contains(err.Error(), "not under the prefix") {
		t.Fatalf("an object outside the prefix: %v", err)
	}
}
