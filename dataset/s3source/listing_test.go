package s3source

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	path := filepath.Join(dir, "l.json")
	if err := saveListing(path, "http://e", loc, objs); err != nil {
		t.Fatal(err)
	}
	if got, err := loadListing(path, "http://e", loc); err != nil || !slices.Equal(got, objs) {
		t.Fatalf("read back %d objects, %v; want the %d saved", len(got), err, len(objs))
	}
	for _, other := range []struct {
		endpoint string
		loc      Location
	}{{"http://other", loc}, {"http://e", Location{Bucket: "c", Prefix: "train/"}}, {"http://e", Location{Bucket: "b", Prefix: "val/"}}} {
		if got, err := loadListing(path, other.endpoint, other.loc); got != nil || err != nil {
			t.Fatalf("listing of another place (%v): %d objects, %v; want none", other, len(got), err)
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
	if got, err := loadListing(old, "http://e", loc); err != nil || !slices.Equal(got, objs[:5]) {
		t.Fatalf("one-document listing: %v, %v; want its 5 objects", got, err)
	}
	doc["format"] = "shade-s3-listing/0"
	b, _ = json.Marshal(doc)
	os.WriteFile(old, b, 0o600)
	if got, _ := loadListing(old, "http://e", loc); got != nil {
		t.Fatalf("a listing of another format gave %d objects", len(got))
	}

	// Cut short anywhere: not used.
	whole, _ := os.ReadFile(path)
	cut := filepath.Join(dir, "cut.json")
	for _, n := range []int{0, 1, 40, len(whole) / 2, len(whole) - 3} {
		os.WriteFile(cut, whole[:n], 0o600)
		if got, err := loadListing(cut, "http://e", loc); got != nil || err != nil {
			t.Fatalf("listing cut at %d of %d bytes: %d objects, %v; want none", n, len(whole), len(got), err)
		}
	}
	if got, err := loadListing(filepath.Join(dir, "missing"), "http://e", loc); got != nil || err != nil {
		t.Fatalf("no listing: %v, %v", got, err)
	}
}
