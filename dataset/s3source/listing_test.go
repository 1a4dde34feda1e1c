package s3source

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/internal/atomicfile"
	"github.com/shade-mesh/shade/internal/jsonstream"
)

// TestListingRoundTrip: a listing saved reads back whole; a listing of
// another place, cut short, with a byte changed or with bytes after it is
// not used (nil: list again).
func TestListingRoundTrip(t *testing.T) {
	dir := t.TempDir()
	loc := Location{Bucket: "b", Prefix: "train/"}
	objs := testObjects(3000)
	path := filepath.Join(dir, "l")
	names, sizes, etags := listedOf(t, loc, objs).sorted()
	if err := saveListing(path, "http://e", loc, time.Now(), names, sizes, etags); err != nil {
		t.Fatal(err)
	}
	got, legacy, err := loadListing(path, "http://e", loc, nil)
	if read := objectsOf(loc, got); err != nil || legacy || !slices.Equal(read, objs) {
		t.Fatalf("read back %d objects, %v (legacy %v); want the %d saved", len(read), err, legacy, len(objs))
	}
	for _, other := range []struct {
		endpoint string
		loc      Location
	}{{"http://other", loc}, {"http://e", Location{Bucket: "c", Prefix: "train/"}}, {"http://e", Location{Bucket: "b", Prefix: "val/"}}} {
		if got, _, err := loadListing(path, other.endpoint, other.loc, nil); got != nil || err != nil {
			t.Fatalf("listing of another place (%v): %d objects, %v; want none", other, got.len(), err)
		}
	}
	whole, _ := os.ReadFile(path)
	bad := filepath.Join(dir, "bad")
	for _, n := range []int{0, 1, 40, len(whole) / 2, len(whole) - 4, len(whole) - 1} {
		os.WriteFile(bad, whole[:n], 0o600)
		if got, _, err := loadListing(bad, "http://e", loc, nil); got != nil || err != nil {
			t.Fatalf("listing cut at %d of %d bytes: %d objects, %v; want none", n, len(whole), got.len(), err)
		}
	}
	for _, at := range []int{30, len(whole) / 2, len(whole) - 2} {
		changed := slices.Clone(whole)
		changed[at] ^= 0x10
		os.WriteFile(bad, changed, 0o600)
		if got, _, err := loadListing(bad, "http://e", loc, nil); got != nil || err != nil {
			t.Fatalf("listing with byte %d changed: %d objects, %v; want none", at, got.len(), err)
		}
	}
	os.WriteFile(bad, append(slices.Clone(whole), 0), 0o600)
	if got, _, err := loadListing(bad, "http://e", loc, nil); got != nil || err != nil {
		t.Fatalf("listing with a byte after it: %d objects, %v; want none", got.len(), err)
	}
	if got, legacy, err := loadListing(filepath.Join(dir, "missing"), "http://e", loc, nil); got != nil || legacy || err != nil {
		t.Fatalf("no listing: %v, %v, %v", got, legacy, err)
	}
}

// The JSON listing of an earlier build beside the path is read, in
// pieces or as one document (fields in another order, an unknown one),
// and replaced once saved again. One of another format, or cut short, is
// not used.
func TestListingOfAnEarlierBuild(t *testing.T) {
	dir := t.TempDir()
	loc := Location{Bucket: "b", Prefix: "train/"}
	objs := testObjects(500)
	path := filepath.Join(dir, "l")
	h := listing{Format: listingFormat, Endpoint: "http://e", Bucket: "b", Prefix: "train/", Listed: time.Now()}
	writeJSON := func(objs []object) {
		err := atomicfile.WriteWith(path+".json", 0o600, func(w io.Writer) error {
			return jsonstream.Write(w, h, "objects", len(objs), func(i int) any { return objs[i] })
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	writeJSON(objs)
	got, legacy, err := loadListing(path, "http://e", loc, nil)
	if read := objectsOf(loc, got); err != nil || !legacy || !slices.Equal(read, objs) {
		t.Fatalf("an earlier build's listing: %d objects, legacy %v, %v", len(read), legacy, err)
	}
	names, sizes, etags := listedOf(t, loc, objs).sorted()
	if err := saveListing(path, "http://e", loc, time.Now(), names, sizes, etags); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".json"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the earlier build's listing left: %v", err)
	}
	got, legacy, err = loadListing(path, "http://e", loc, nil)
	if read := objectsOf(loc, got); err != nil || legacy || !slices.Equal(read, objs) {
		t.Fatalf("saved again: %d objects, legacy %v, %v", len(read), legacy, err)
	}
	os.Remove(path)

	doc := map[string]any{"objects": objs[:5], "future": []int{1, 2}, "format": listingFormat,
		"endpoint": "http://e", "bucket": "b", "prefix": "train/", "listed": time.Now()}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path+".json", b, 0o600)
	if got, _, err := loadListing(path, "http://e", loc, nil); err != nil || !slices.Equal(objectsOf(loc, got), objs[:5]) {
		t.Fatalf("one-document listing: %v, %v; want its 5 objects", objectsOf(loc, got), err)
	}
	doc["format"] = "shade-s3-listing/0"
	b, _ = json.Marshal(doc)
	os.WriteFile(path+".json", b, 0o600)
	if got, _, _ := loadListing(path, "http://e", loc, nil); got != nil {
		t.Fatalf("a listing of another format gave %d objects", got.len())
	}
	writeJSON(objs)
	whole, _ := os.ReadFile(path + ".json")
	os.WriteFile(path+".json", whole[:len(whole)-3], 0o600)
	if got, _, err := loadListing(path, "http://e", loc, nil); got != nil || err != nil {
		t.Fatalf("an earlier build's listing cut short: %d objects, %v", got.len(), err)
	}
}

// testObjects makes n objects under train/ in key order, with MD5 ETags.
func testObjects(n int) []object {
	var objs []object
	for i := range n {
		objs = append(objs, object{Key: fmt.Sprintf("train/c%d/%05d.png", i%7, i), Size: int64(i), ETag: fmt.Sprintf("%032x", i)})
	}
	slices.SortFunc(objs, func(a, b object) int { return strings.Compare(a.Key, b.Key) })
	return objs
}

// BenchmarkLoadListing reads a kept listing of 1,000,000 objects: what a
// restart over a bucket of a million samples waits for.
func BenchmarkLoadListing(b *testing.B) {
	loc := Location{Bucket: "b", Prefix: "train/"}
	var objs []object
	for i := range 1_000_000 {
		objs = append(objs, object{Key: fmt.Sprintf("train/c%03d/%07d.png", i/1000, i), Size: int64(i % 5000), ETag: fmt.Sprintf("%032x", i)})
	}
	path := filepath.Join(b.TempDir(), "l")
	names, sizes, etags := listedOf(b, loc, objs).sorted()
	if err := saveListing(path, "http://e", loc, time.Now(), names, sizes, etags); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if l, _, err := loadListing(path, "http://e", loc, nil); err != nil || l.len() != len(objs) {
			b.Fatalf("%d objects, %v", l.len(), err)
		}
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

// readPage reads an AWS ListObjectsV2 page as minio-go's decoding does:
// keys URL-decoded where the page says so, after XML's escapes; ETags
// unquoted; the continuation; and refuses pages not of that form.
func TestReadPage(t *testing.T) {
	page := `<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>b</Name><Prefix>train%2F</Prefix><KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>%2F</Delimiter>
  <IsTruncated>true</IsTruncated>
  <Contents><Key>train%2Fa+b%2Bc%26d.bin</Key><LastModified>2026-11-30T10:00:00.000Z</LastModified>
    <ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>4096</Size>
    <Owner><ID>abc</ID><DisplayName>me</DisplayName></Owner><StorageClass>STANDARD</StorageClass></Contents>
  <Contents><Key>train%2F%C3%BC.bin</Key><ETag>"e1-2"</ETag><Size>0</Size><Owner/></Contents>
  <CommonPrefixes><Prefix>train%2Fc0%2F</Prefix></CommonPrefixes>
  <EncodingType>url</EncodingType>
  <NextContinuationToken>1ueGcx&amp;LPRx1T=</NextContinuationToken>
</ListBucketResult>`
	var got []listEntry
	next, truncated, err := readPage([]byte(page), func(e listEntry) error { got = append(got, e); return nil })
	want := []listEntry{{"train/a b+c&d.bin", 4096, "9b2cf535f27731c974343645a3985328"}, {"train/ü.bin", 0, "e1-2"}, {"train/c0/", 0, ""}}
	if err != nil || !slices.Equal(got, want) || next != "1ueGcx&LPRx1T=" || !truncated {
		t.Fatalf("readPage: %+v, next %q, truncated %v, %v; want %+v, the token, truncated", got, next, truncated, err, want)
	}
	for _, bad := range []string{
		``,
		`<Error><Code>AccessDenied</Code></Error>`,
		`<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>`,
		`<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>`,
		`<ListBucketResult><Contents><Key>a</Key><Size>1</Size></ListBucketResult>`,
		`<ListBucketResult><Contents><Key><![CDATA[a]]></Key></Contents></ListBucketResult>`,
		`<ListBucketResult>text<IsTruncated>false</IsTruncated></ListBucketResult>`,
		`<ListBucketResult><Contents><Key>a%zz</Key></Contents><EncodingType>url</EncodingType></ListBucketResult>`,
	} {
		if _, _, err := readPage([]byte(bad), func(listEntry) error { return nil }); !errors.Is(err, errPage) {
			t.Errorf("readPage(%q): %v, want errPage", bad, err)
		}
	}
}

// etagOf and sizeOf read what minio-go's decoding and strconv would:
// an ETag's escapes read and its quotes trimmed, a size of digits.
func TestETagAndSizeOf(t *testing.T) {
	for _, c := range []string{"&quot;0123abcd&quot;", `"0123abcd"`, "0123abcd", "&quot;&quot;x&quot;", `&#34;x&#34;`, "&quot;a-3&quot;",
		"&quot;abc&amp;quot;", "abc&amp;quot;", "&amp;&quot;", "&quot", "&quot;&amp&quot;", `"`, "", "&quot;", "x&lt;y"} {
		if got, want := etagOf([]byte(c)), strings.Trim(html.UnescapeString(c), `"`); got != want {
			t.Errorf("etagOf(%q) = %q, want %q", c, got, want)
		}
	}
	for _, c := range []string{"0", "42", "000123", "123456789012345678", "1234567890123456789", "9223372036854775807", "9223372036854775808", "", "-1", "+1", "1 ", "1e3", "x"} {
		n, err := strconv.ParseInt(c, 10, 64)
		want := err == nil && n >= 0
		if got, ok := sizeOf([]byte(c)); ok != want || ok && got != n {
			t.Errorf("sizeOf(%q) = %d, %v; want %d, %v", c, got, ok, n, want)
		}
	}
}

// A listing whose time fresh refuses is given up as soon as its time is
// read, its objects unread; one it accepts reads whole, and a kept one
// refused is listed again (nil).
func TestListingRefusedUnread(t *testing.T) {
	loc := Location{Bucket: "b", Prefix: "train/"}
	objs := testObjects(100_000)
	path := filepath.Join(t.TempDir(), "l")
	names, sizes, etags := listedOf(t, loc, objs).sorted()
	at := time.Unix(1_700_000_000, 0)
	if err := saveListing(path, "http://e", loc, at, names, sizes, etags); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old := errors.New("too old")
	for _, c := range []struct {
		fresh func(time.Time) error
		want  error
	}{{func(got time.Time) error {
		if !got.Equal(at) {
			t.Errorf("fresh told %s, want %s", got, at)
		}
		return old
	}, old}, {func(time.Time) error { return nil }, nil}} {
		r := &countingReader{r: bytes.NewReader(whole)}
		l, err := readListing(r, int64(len(whole)), "http://e", loc, c.fresh)
		if !errors.Is(err, c.want) {
			t.Fatalf("error %v, want %v", err, c.want)
		}
		if c.want != nil && (l != nil || r.n > int64(len(whole))/4) {
			t.Fatalf("a refused listing: %d of its %d bytes read", r.n, len(whole))
		}
		if c.want == nil && (l.len() != len(objs) || r.n != int64(len(whole))) {
			t.Fatalf("an accepted listing: %d objects of %d, %d bytes of %d read", l.len(), len(objs), r.n, len(whole))
		}
	}
	if got, _, err := loadListing(path, "http://e", loc, func(time.Time) error { return old }); got != nil || err != nil {
		t.Fatalf("a refused kept listing: %v, %v; want nil, nil (list again)", got, err)
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// A listing's version is what earlier builds made of the same names,
// sizes and ETags (the hash below is c899f82's, before names were
// front-coded): peers of either build agree on a bucket's dataset.
func TestVersionUnchanged(t *testing.T) {
	var nb, eb dataset.NamesBuilder
	var sizes []int64
	for i := range 1000 {
		nb.Add(fmt.Sprintf("class-%d/%05d.png", i%7, i))
		if i%3 == 0 {
			eb.Add(fmt.Sprintf("%032x", i*7919))
		} else {
			eb.Add(fmt.Sprintf("%032x-%d", i, i%5))
		}
		sizes = append(sizes, int64(i*37%5000))
	}
	if got, want := versionOf(nb.Names(), sizes, eb.Names()), "dea1d8082734de8c959c5bde43670b68"; got != want {
		t.Fatalf("version %s, want %s", got, want)
	}
}
