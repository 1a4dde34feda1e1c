package s3source_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/dataset/claim"
	"github.com/shade-mesh/shade/dataset/s3source"
	"github.com/shade-mesh/shade/internal/binfile"
	"github.com/shade-mesh/shade/internal/s3test"
	"github.com/shade-mesh/shade/internal/testsupport"
)

// fill puts n objects CLASS/NNNNN under prefix in bucket, plus a hidden
// object and one outside the prefix, and returns the samples' names and
// bytes in key order.
func fill(t *testing.T, g *s3test.Gateway, bucket, prefix string, n int) ([]string, [][]byte) {
	t.Helper()
	g.CreateBucket(t, bucket)
	rng := rand.New(rand.NewPCG(1, 2))
	names := make([]string, n)
	data := make([][]byte, n)
	for i := range n {
		names[i] = fmt.Sprintf("c%d/%05d.bin", i%3, i)
		data[i] = make([]byte, 1+rng.IntN(3000))
		for j := range data[i] {
			data[i][j] = byte(rng.Uint32())
		}
		g.Put(t, bucket, prefix+names[i], data[i])
	}
	g.Put(t, bucket, prefix+".shade-import.json", []byte("{}"))
	g.Put(t, bucket, "elsewhere/x.bin", []byte("not a sample"))
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	sn, sd := make([]string, n), make([][]byte, n)
	for k, i := range idx {
		sn[k], sd[k] = names[i], data[i]
	}
	return sn, sd
}

func config(g *s3test.Gateway, url string) s3source.Config {
	return s3source.Config{URL: url, Endpoint: g.Endpoint, PathStyle: true,
		AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey}
}

func TestListsAndReadsByteExact(t *testing.T) {
	g := s3test.Start(t)
	names, data := fill(t, g, "shade-ds", "train/", 300)
	src, err := s3source.Open(context.Background(), config(g, "s3://shade-ds/train"))
	if err != nil {
		t.Fatal(err)
	}
	m := src.Manifest()
	if !slices.Equal(m.Names.Strings(), names) {
		t.Fatalf("names: got %d %v..., want %d %v...", m.Len(), m.Names.Strings()[:3], len(names), names[:3])
	}
	if got := m.Classes(); !slices.Equal(got, []string{"c0", "c1", "c2"}) {
		t.Fatalf("classes %v", got)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for i := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prefix := []byte("keep")
			got, err := src.Read(i, prefix)
			switch {
			case err != nil:
				errs <- err
			case !bytes.Equal(got[:4], []byte("keep")) || !bytes.Equal(got[4:], data[i]):
				errs <- fmt.Errorf("sample %d (%s): wrong bytes", i, names[i])
			case m.Sizes.At(i) != int64(len(data[i])):
				errs <- fmt.Errorf("sample %d: size %d, want %d", i, m.Sizes.At(i), len(data[i]))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := src.Read(len(names), nil); !errors.Is(err, dataset.ErrOutOfRange) {
		t.Fatalf("read past the end: %v", err)
	}
	part, err := src.ReadRange(0, 1, int64(len(data[0]))-1, nil)
	if err != nil || !bytes.Equal(part, data[0][1:]) {
		t.Fatalf("range read: %v", err)
	}
	// A whole-bucket URL lists every object but the hidden one.
	whole, err := s3source.Open(context.Background(), config(g, "s3://shade-ds"))
	if err != nil {
		t.Fatal(err)
	}
	if whole.Manifest().Len() != len(names)+1 {
		t.Fatalf("whole bucket: %d samples, want %d", whole.Manifest().Len(), len(names)+1)
	}
}

func TestChangedObjectFailsThatSampleOnly(t *testing.T) {
	g := s3test.Start(t)
	names, data := fill(t, g, "shade-ds", "p/", 20)
	src, err := s3source.Open(context.Background(), config(g, "s3://shade-ds/p/"))
	if err != nil {
		t.Fatal(err)
	}
	same := bytes.Repeat([]byte{'x'}, len(data[3])) // same size, other bytes
	g.Put(t, "shade-ds", "p/"+names[3], same)
	g.Put(t, "shade-ds", "p/"+names[4], append(slices.Clone(data[4]), 'y'))
	g.Delete(t, "shade-ds", "p/"+names[5])
	for _, i := range []int{3, 4, 5} {
		dst := []byte("keep")
		got, err := src.Read(i, dst)
		if !errors.Is(err, dataset.ErrChanged) {
			t.Fatalf("sample %d (%s) changed: err %v, want ErrChanged", i, names[i], err)
		}
		if string(got) != "keep" {
			t.Fatalf("sample %d: dst changed to %q on error", i, got)
		}
		t.Logf("sample %d: %v", i, err)
	}
	for _, i := range []int{0, 2, 6, 19} {
		got, err := src.Read(i, nil)
		if err != nil || !bytes.Equal(got, data[i]) {
			t.Fatalf("sample %d: %v", i, err)
		}
	}
}

func TestOpenFailsWithOneClearLine(t *testing.T) {
	g := s3test.Start(t)
	g.CreateBucket(t, "shade-ds")
	g.Put(t, "shade-ds", "a/b", []byte("x"))
	bad := config(g, "s3://shade-ds/a")
	bad.SecretAccessKey = "wrong-secret"
	closed := config(g, "s3://shade-ds/a")
	closed.Endpoint = "http://127.0.0.1:1"
	for _, tc := range []struct {
		name string
		cfg  s3source.Config
		want string
	}{
		{"missing bucket", config(g, "s3://shade-nope/a"), `bucket "shade-nope" does not exist`},
		{"bad credentials", bad, "credentials refused"},
		{"wrong endpoint", closed, "unreachable"},
		{"empty prefix", config(g, "s3://shade-ds/none"), "no samples"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s3source.Open(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err %v; want one line with %q", err, tc.want)
			}
			if tc.name != "empty prefix" && !errors.Is(err, s3source.ErrOpen) {
				t.Fatalf("err %v does not wrap ErrOpen", err)
			}
			t.Log(err)
		})
	}
	if _, err := s3source.Open(context.Background(), config(g, "ds/a")); !errors.Is(err, s3source.ErrURL) {
		t.Fatalf("not an s3 URL: %v", err)
	}
}

func TestCredentialsFromEnvironmentAndFiles(t *testing.T) {
	g := s3test.Start(t)
	g.CreateBucket(t, "shade-ds")
	g.Put(t, "shade-ds", "a/b", []byte("x"))
	cfg := s3source.Config{URL: "s3://shade-ds/a", Endpoint: g.Endpoint, PathStyle: true}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(home, "none"))
	t.Setenv("AWS_ACCESS_KEY_ID", g.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", g.SecretKey)
	if _, err := s3source.Open(context.Background(), cfg); err != nil {
		t.Fatalf("from the environment: %v", err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	creds := filepath.Join(home, "credentials")
	os.WriteFile(creds, []byte(fmt.Sprintf("[shade]\naws_access_key_id = %s\naws_secret_access_key = %s\n", g.AccessKey, g.SecretKey)), 0o600)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	t.Setenv("AWS_PROFILE", "shade")
	if _, err := s3source.Open(context.Background(), cfg); err != nil {
		t.Fatalf("from the shared credentials file: %v", err)
	}
}

func TestListingKeptInStateDir(t *testing.T) {
	g := s3test.Start(t)
	names, _ := fill(t, g, "shade-ds", "p/", 10)
	state := t.TempDir()
	cfg := config(g, "s3://shade-ds/p")
	cfg.StateDir = state
	first, err := s3source.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	listed := g.Lists(t)
	g.Put(t, "shade-ds", "p/c9/new.bin", []byte("new"))
	again, err := s3source.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if again.Manifest().Version != first.Manifest().Version || again.Manifest().Len() != len(names) {
		t.Fatalf("restart re-listed: %d samples, version %s (was %s)", again.Manifest().Len(), again.Manifest().Version, first.Manifest().Version)
	}
	if g.Lists(t) != listed {
		t.Fatalf("restart listed the bucket again (%d listings, was %d)", g.Lists(t), listed)
	}
	cfg.Relist = true
	relisted, err := s3source.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if relisted.Manifest().Len() != len(names)+1 || relisted.Manifest().Version == first.Manifest().Version {
		t.Fatalf("relist: %d samples, want %d and a new version", relisted.Manifest().Len(), len(names)+1)
	}
	entries, _ := os.ReadDir(state)
	if len(entries) != 1 {
		t.Fatalf("state dir holds %d files, want the one listing", len(entries))
	}
}

// throttling answers 503 SlowDown to the first n GETs of objects, then
// lets requests through to the real gateway.
type throttling struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (tr *throttling) RoundTrip(r *http.Request) (*http.Response, error) {
	if isObjectGet(r) && tr.n.Add(-1) >= 0 {
		body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
			Header: http.Header{"Content-Type": {"application/xml"}}, Body: io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
	}
	return tr.next.RoundTrip(r)
}

func TestThrottledReadsAreRetried(t *testing.T) {
	g := s3test.Start(t)
	_, data := fill(t, g, "shade-ds", "p/", 4)
	tr := &throttling{next: http.DefaultTransport}
	cfg := config(g, "s3://shade-ds/p")
	cfg.Transport = tr
	src, err := s3source.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.n.Store(3)
	got, err := src.Read(1, nil)
	if err != nil || !bytes.Equal(got, data[1]) {
		t.Fatalf("after 3 SlowDowns: %v", err)
	}
	cfg.Retries = 2
	few, err := s3source.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.n.Store(3)
	if _, err := few.Read(1, nil); !errors.Is(err, s3source.ErrRead) || !strings.Contains(err.Error(), "reduce your request rate") {
		t.Fatalf("3 SlowDowns with 2 retries: %v, want ErrRead", err)
	}
}

// gate counts the object GETs in flight and can hold the first few until
// their request's context ends (a store that stops answering).
type gate struct {
	inFlight, peak atomic.Int64
	hang           atomic.Int64
	delay          chan struct{} // closed: GETs go through at once
	next           http.RoundTripper
}

func (gt *gate) RoundTrip(r *http.Request) (*http.Response, error) {
	if !isObjectGet(r) {
		return gt.next.RoundTrip(r)
	}
	n := gt.inFlight.Add(1)
	defer gt.inFlight.Add(-1)
	for p := gt.peak.Load(); n > p && !gt.peak.CompareAndSwap(p, n); p = gt.peak.Load() {
	}
	if gt.hang.Add(-1) >= 0 {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	select {
	case <-gt.delay:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return gt.next.RoundTrip(r)
}

func TestInFlightBoundAndRequestTimeout(t *testing.T) {
	g := s3test.Start(t)
	_, data := fill(t, g, "shade-ds", "p/", 64)
	gt := &gate{next: http.DefaultTransport, delay: make(chan struct{})}
	cfg := config(g, "s3://shade-ds/p")
	cfg.Transport, cfg.MaxInFlight = gt, 4
	cfg.RequestTimeout = 300 * time.Millisecond
	src, err := s3source.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The GET of a published listing was held too: it timed out, and the
	// prefix was listed.
	if from, _, skipped := src.Listing(); from != s3source.ListingListed || !errors.Is(skipped, s3source.ErrRead) {
		t.Fatalf("Open with the published listing's GET unanswered: listing %s (%v), want listed after a failed read", from, skipped)
	}
	// 64 concurrent reads: hold the GETs until 4 are waiting, then let
	// them go; never more than 4 at once.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := src.Read(i, nil)
			if err == nil && !bytes.Equal(got, data[i]) {
				err = fmt.Errorf("sample %d: wrong bytes", i)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	testsupport.WaitFor(t, 10*time.Second, "4 GETs in flight", func() bool { return gt.inFlight.Load() >= 4 })
	close(gt.delay)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if p := gt.peak.Load(); p != 4 {
		t.Fatalf("peak GETs in flight %d, want MaxInFlight 4", p)
	}
	// A GET that never answers times out and is tried again.
	gt.hang.Store(1)
	start := time.Now()
	got, err := src.Read(7, nil)
	if err != nil || !bytes.Equal(got, data[7]) {
		t.Fatalf("after a hung request: %v", err)
	}
	t.Logf("read after one hung request in %v (timeout 300ms)", time.Since(start).Round(time.Millisecond))
}

// isObjectGet reports whether r is a GET of an object (path-style
// /BUCKET/KEY), not a listing (/BUCKET/?list-type=2).
func isObjectGet(r *http.Request) bool { return r.Method == http.MethodGet && isObject(r) }

// isObject reports whether r names an object (/BUCKET/KEY, path-style),
// not a bucket.
func isObject(r *http.Request) bool {
	parts := strings.SplitN(r.URL.Path, "/", 3)
	return len(parts) == 3 && parts[2] != ""
}

// TestSilentEndpointFailsOpen: an endpoint that accepts connections but
// never answers fails Open within the request timeout.
func TestSilentEndpointFailsOpen(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered, until the listener closes
		}
	}()
	cfg := s3source.Config{URL: "s3://shade-ds/p", Endpoint: "http://" + l.Addr().String(), PathStyle: true,
		AccessKeyID: "a", SecretAccessKey: "b", RequestTimeout: 300 * time.Millisecond}
	start := time.Now()
	_, err = s3source.Open(context.Background(), cfg)
	if !errors.Is(err, s3source.ErrOpen) || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("silent endpoint: %v", err)
	}
	t.Logf("%v after %v", err, time.Since(start).Round(time.Millisecond))
}

// TestListingOfFolders: a prefix's samples are its objects at every
// depth, folder markers and hidden keys left out, in key order.
func TestListingOfFolders(t *testing.T) {
	g := s3test.Start(t)
	g.CreateBucket(t, "shade-ls")
	var want []string
	put := func(key string, sample bool) {
		data := []byte(key)
		if strings.HasSuffix(key, "/") {
			data = nil // a folder marker is empty
		}
		g.Put(t, "shade-ls", "ds/"+key, data)
		if sample {
			want = append(want, key)
		}
	}
	for c := range 21 {
		for j := range 3 {
			put(fmt.Sprintf("c%02d/%d.bin", c, j), true)
		}
	}
	put("top.bin", true)
	put("c050.bin", true) // between c05/ and c06/ in key order
	put("a/b/c/deep.bin", true)
	put("a/b/", false) // a folder marker
	put("c03/", false)
	put("c04/.hidden", false)
	put(".cache/x.bin", false)
	put("z/y/.git/HEAD", false)
	g.Put(t, "shade-ls", "ds-other/x.bin", []byte("beside the prefix"))
	slices.Sort(want)
	src, err := s3source.Open(context.Background(), config(g, "s3://shade-ls/ds"))
	if err != nil {
		t.Fatal(err)
	}
	if got := src.Manifest().Names.Strings(); !slices.Equal(got, want) {
		t.Fatalf("listed %d: %v\nwant %d: %v", len(got), got, len(want), want)
	}
	for i, name := range want {
		if b, err := src.Read(i, nil); err != nil || string(b) != name {
			t.Fatalf("sample %d (%s): %q, %v", i, name, b, err)
		}
	}
}

// damaging flips the first byte of the body of the first n object PUTs
// on their way to the real gateway, and counts the object PUTs.
type damaging struct {
	n, puts atomic.Int64
	next    http.RoundTripper
}

func (tr *damaging) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && isObject(r) {
		tr.puts.Add(1)
		if tr.n.Add(-1) >= 0 {
			body, err := io.ReadAll(r.Body)
			r.Body.Close()
			if err != nil {
				return nil, err
			}
			body[0] ^= 0xff
			r = r.Clone(r.Context())
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
	}
	return tr.next.RoundTrip(r)
}

// TestUploadBodyIsChecked: an upload sends each object's MD5 with it, so
// that a body damaged on its way is refused by the store (BadDigest),
// not kept: the upload fails saying which object, nothing of it is in
// the bucket, and a second upload puts the right bytes.
func TestUploadBodyIsChecked(t *testing.T) {
	g := s3test.Start(t)
	dir := t.TempDir()
	want := []byte("the bytes of one sample, as the trainer must get them")
	if err := os.MkdirAll(filepath.Join(dir, "c0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c0", "a.bin"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	tr := &damaging{next: http.DefaultTransport}
	tr.n.Store(1)
	cfg := config(g, "s3://shade-up/p")
	cfg.Transport = tr
	if _, err := s3source.Upload(context.Background(), cfg, dir, nil); err == nil || !strings.Contains(err.Error(), "p/c0/a.bin") {
		t.Fatalf("upload of a damaged body: %v, want an error naming the object", err)
	}
	if _, err := s3source.Open(context.Background(), config(g, "s3://shade-up/p")); !errors.Is(err, dataset.ErrEmpty) {
		t.Fatalf("after the refused upload: %v, want nothing under the prefix", err)
	}
	rep, err := s3source.Upload(context.Background(), cfg, dir, nil)
	if err != nil || rep.Uploaded != 1 {
		t.Fatalf("second upload: %+v, %v", rep, err)
	}
	src, err := s3source.Open(context.Background(), config(g, "s3://shade-up/p"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := src.Read(0, nil); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back %q, %v; want %q", got, err, want)
	}
	if tr.puts.Load() != 2 {
		t.Errorf("%d object PUTs, want 2 (a refused body is not retried)", tr.puts.Load())
	}
}

// TestReadsKeysOfAnyCharacters: objects whose keys hold characters that
// URLs escape (spaces, '+', '=', '&', '%', non-ASCII letters) are read
// byte-exact, whole and in ranges: the gateway checks each request's
// signature over its escaped path.
func TestReadsKeysOfAnyCharacters(t *testing.T) {
	g := s3test.Start(t)
	g.CreateBucket(t, "odd")
	keys := []string{"a b/c+d=e&f;g.bin", "ü/ñ€ (1)!*'~.bin", "x%20y/%41.bin", "plain/0.bin"}
	want := make(map[string][]byte)
	for i, k := range keys {
		want[k] = bytes.Repeat([]byte{byte('a' + i)}, 100+i)
		g.Put(t, "odd", "p/"+k, want[k])
	}
	src, err := s3source.Open(context.Background(), config(g, "s3://odd/p"))
	if err != nil {
		t.Fatal(err)
	}
	m := src.Manifest()
	if m.Len() != len(keys) {
		t.Fatalf("%d samples listed, want %d: %v", m.Len(), len(keys), m.Names.Strings())
	}
	// Listed by the Source's own requests, each page read by it: none
	// listed again by minio-go (which asks for the owners).
	for _, r := range g.Requests(t) {
		if strings.Contains(r.Operation, "ListObjects") && strings.Contains(r.URI, "fetch-owner") {
			t.Errorf("a listing request sent by minio-go: %s", r.URI)
		}
	}
	for i, name := range m.Names.All() {
		got, err := src.Read(i, nil)
		if err != nil || !bytes.Equal(got, want[name]) {
			t.Errorf("%q: %d bytes (%v), want %d", name, len(got), err, len(want[name]))
		}
		part, err := src.ReadRange(i, 10, 20, nil)
		if err != nil || !bytes.Equal(part, want[name][10:30]) {
			t.Errorf("%q bytes 10-29: %q (%v)", name, part, err)
		}
	}
}

// Stream answers an object from any offset to its end, the end itself
// included, refuses an offset outside it, and fails for an object
// rewritten since the listing.
func TestStreamFromAnOffset(t *testing.T) {
	g := s3test.Start(t)
	names, data := fill(t, g, "shade-ds", "p/", 4)
	src, err := s3source.Open(context.Background(), config(g, "s3://shade-ds/p/"))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 3} {
		size := int64(len(data[i]))
		for _, off := range []int64{0, 1, size / 2, size - 1, size} {
			rc, err := src.Stream(context.Background(), i, off)
			if err != nil {
				t.Fatalf("sample %d from %d: %v", i, off, err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, data[i][off:]) {
				t.Fatalf("sample %d from %d: %d bytes, %v", i, off, len(got), err)
			}
		}
		for _, off := range []int64{-1, size + 1} {
			if _, err := src.Stream(context.Background(), i, off); !errors.Is(err, dataset.ErrOutOfRange) {
				t.Fatalf("sample %d from %d: %v, want ErrOutOfRange", i, off, err)
			}
		}
	}
	g.Put(t, "shade-ds", "p/"+names[1], bytes.Repeat([]byte{'x'}, len(data[1])))
	for _, off := range []int64{0, 1} {
		if _, err := src.Stream(context.Background(), 1, off); !errors.Is(err, dataset.ErrChanged) {
			t.Fatalf("a rewritten object from %d: %v, want ErrChanged", off, err)
		}
	}
}

// TestAside: what is written beside a dataset reads back byte-exact, is
// never listed as a sample nor changes the dataset's version, and a name
// not written gives ErrNoAside; a damaged body is refused by the store,
// as an upload's.
func TestAside(t *testing.T) {
	g := s3test.Start(t)
	fill(t, g, "shade-ds", "p/", 3)
	src, err := s3source.Open(context.Background(), config(g, "s3://shade-ds/p"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := src.ReadAside(context.Background(), "index"); !errors.Is(err, s3source.ErrNoAside) {
		t.Fatalf("reading what was never written: %v, want ErrNoAside", err)
	}
	if ok, err := s3source.HasAside(context.Background(), config(g, "s3://shade-ds/p"), "index"); ok || err != nil {
		t.Fatalf("HasAside before writing: %v, %v", ok, err)
	}
	want := bytes.Repeat([]byte("kept beside the dataset "), 1000)
	if err := src.WriteAside(context.Background(), "index", want); err != nil {
		t.Fatal(err)
	}
	if ok, err := s3source.HasAside(context.Background(), config(g, "s3://shade-ds/p"), "index"); !ok || err != nil {
		t.Fatalf("HasAside after writing: %v, %v", ok, err)
	}
	if got := src.AsideURL("index"); got != "s3://shade-ds/p/.shade/index" {
		t.Fatalf("AsideURL %q", got)
	}
	r, size, err := src.ReadAside(context.Background(), "index")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || size != int64(len(want)) || !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes (size %d), %v; want %d", len(got), size, err, len(want))
	}
	again, err := s3source.Open(context.Background(), config(g, "s3://shade-ds/p"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := again.Manifest(), src.Manifest(); a.Len() != b.Len() || a.Version != b.Version {
		t.Fatalf("after writing beside it: %d samples, version %s; before %d, %s", a.Len(), a.Version, b.Len(), b.Version)
	}

	tr := &damaging{next: http.DefaultTransport}
	tr.n.Store(1)
	cfg := config(g, "s3://shade-ds/p")
	cfg.Transport = tr
	damaged, err := s3source.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := damaged.WriteAside(context.Background(), "index", []byte("other bytes")); err == nil {
		t.Fatal("a damaged body was kept")
	}
	if r, _, err = src.ReadAside(context.Background(), "index"); err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after a refused write: %d bytes, %v; want what was there", len(got), err)
	}
}

// TestPublishedListing: a listing published beside the dataset is what an
// Open with none kept reads instead of listing the prefix, on any
// endpoint that reaches the bucket; it is the dataset until published
// again (an object added after is not served; Relist lists); a state
// directory keeps it; a damaged one, or one of another place, is not
// used and the prefix is listed.
func TestPublishedListing(t *testing.T) {
	g := s3test.Start(t)
	names, data := fill(t, g, "shade-ds", "p/", 10)
	cfg := config(g, "s3://shade-ds/p")
	first, err := s3source.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if from, _, skipped := first.Listing(); from != s3source.ListingListed || skipped != nil {
		t.Fatalf("first Open: listing %s (%v), want listed", from, skipped)
	}
	if err := first.PublishListing(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, listedAt, _ := first.Listing()
	g.Put(t, "shade-ds", "p/c9/new.bin", []byte("added after publishing"))

	listed := g.Lists(t)
	other := cfg
	other.Endpoint = strings.Replace(g.Endpoint, "127.0.0.1", "localhost", 1) // another address of the same store
	pub, err := s3source.Open(context.Background(), other)
	if err != nil {
		t.Fatal(err)
	}
	from, at, skipped := pub.Listing()
	if from != s3source.ListingPublished || skipped != nil || !at.Equal(listedAt) {
		t.Fatalf("Open after publishing: listing %s of %v (%v), want the published one of %v", from, at, skipped, listedAt)
	}
	if g.Lists(t) != listed {
		t.Fatalf("Open after publishing listed the prefix")
	}
	if pub.Manifest().Version != first.Manifest().Version || pub.Manifest().Len() != len(names) {
		t.Fatalf("the published listing: %d samples, version %s; want the %d published, %s", pub.Manifest().Len(), pub.Manifest().Version, len(names), first.Manifest().Version)
	}
	for i := range names {
		if got, err := pub.Read(i, nil); err != nil || !bytes.Equal(got, data[i]) {
			t.Fatalf("sample %d through the published listing: %v", i, err)
		}
	}

	// Kept in a state directory: a restart reads neither.
	st := cfg
	st.StateDir = t.TempDir()
	if _, err := s3source.Open(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	gets := g.GetCounts(t, "shade-ds")["p/.shade/listing"]
	if again, err := s3source.Open(context.Background(), st); err != nil {
		t.Fatal(err)
	} else if from, _, _ := again.Listing(); from != s3source.ListingKept || g.GetCounts(t, "shade-ds")["p/.shade/listing"] != gets {
		t.Fatalf("a restart with the state directory: listing %s, want kept without reading the published one", from)
	}

	relist := cfg
	relist.Relist = true
	if r, err := s3source.Open(context.Background(), relist); err != nil {
		t.Fatal(err)
	} else if from, _, _ := r.Listing(); from != s3source.ListingListed || r.Manifest().Len() != len(names)+1 {
		t.Fatalf("Relist: listing %s, %d samples; want listed, %d", from, r.Manifest().Len(), len(names)+1)
	}

	// The listing of another prefix, copied here, is not of this place.
	g.Put(t, "shade-ds", "q/c0/a.bin", []byte("a sample of another prefix"))
	q, err := s3source.Open(context.Background(), config(g, "s3://shade-ds/q"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.PublishListing(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, _, err := q.ReadAside(context.Background(), s3source.PublishedListing)
	if err != nil {
		t.Fatal(err)
	}
	qListing, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{qListing, []byte("shade-s3-listing/2\nnot a listing")} {
		g.Put(t, "shade-ds", "p/.shade/listing", body)
		l, err := s3source.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if from, _, skipped := l.Listing(); from != s3source.ListingListed || !errors.Is(skipped, binfile.ErrFile) || l.Manifest().Len() != len(names)+1 {
			t.Fatalf("a published listing of another place or damaged: listing %s (%v), %d samples; want listed, %d", from, skipped, l.Manifest().Len(), len(names)+1)
		}
	}
}

// TestSharedListing: Opens of one prefix at once with Share (peers
// starting together) list it once: the last to claim lists and publishes,
// the others wait and read the published listing; the claim is gone
// after, and every Open serves the same samples.
func TestSharedListing(t *testing.T) {
	g := s3test.Start(t)
	names, data := fill(t, g, "shade-ds", "p/", 60)
	cfg := config(g, "s3://shade-ds/p")
	before := g.Lists(t)
	if _, err := s3source.Open(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	oneListing := g.Lists(t) - before

	const k = 3
	srcs := make([]*s3source.Source, k)
	var listed, waited atomic.Int64
	before = g.Lists(t)
	if err := testsupport.Parallel(k, func(i int) error {
		c := cfg
		c.Share, c.Claim = true, claim.Config{Holder: fmt.Sprint("peer-", i)}
		src, err := s3source.Open(context.Background(), c)
		if err != nil {
			return err
		}
		srcs[i] = src
		from, _, _ := src.Listing()
		by, shareErr := src.Shared()
		switch {
		case shareErr != nil:
			return shareErr
		case from == s3source.ListingListed:
			listed.Add(1)
		case from == s3source.ListingPublished && by != "":
			waited.Add(1)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if listed.Load() != 1 || waited.Load() != k-1 || g.Lists(t)-before != oneListing {
		t.Fatalf("%d Opens listed, %d waited, %d list requests; want 1, %d and %d (one listing)", listed.Load(), waited.Load(), g.Lists(t)-before, k-1, oneListing)
	}
	if there, err := s3source.HasAside(context.Background(), cfg, s3source.ListingClaim); there || err != nil {
		t.Fatalf("the claim after the listing: there %v (%v), want gone", there, err)
	}
	for _, src := range srcs {
		if src.Manifest().Len() != len(names) {
			t.Fatalf("%d samples, want %d", src.Manifest().Len(), len(names))
		}
		for _, i := range []int{0, len(names) - 1} {
			if got, err := src.Read(i, nil); err != nil || !bytes.Equal(got, data[i]) {
				t.Fatalf("sample %d: %v", i, err)
			}
		}
	}
}

// TestListingMaxAge: a kept or published listing older than MaxAge is
// passed over and the prefix listed, serving what was added since; with
// Share, the new listing is published in its place.
func TestListingMaxAge(t *testing.T) {
	g := s3test.Start(t)
	names, _ := fill(t, g, "shade-ds", "p/", 20)
	cfg := config(g, "s3://shade-ds/p")
	first, err := s3source.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.PublishListing(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, published, _ := first.Listing()
	g.Put(t, "shade-ds", "p/c9/added.bin", []byte("added after publishing"))
	state := t.TempDir()
	open := func(maxAge time.Duration, share bool) *s3source.Source {
		t.Helper()
		c := cfg
		c.MaxAge, c.Share, c.StateDir = maxAge, share, state
		src, err := s3source.Open(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		return src
	}

	// Younger than an hour: the published listing, then kept.
	for _, want := range []s3source.ListingOrigin{s3source.ListingPublished, s3source.ListingKept} {
		src := open(time.Hour, false)
		if from, _, skipped := src.Listing(); from != want || skipped != nil || src.Manifest().Len() != len(names) {
			t.Fatalf("MaxAge 1h: listing %s (%v), %d samples; want %s, %d", from, skipped, src.Manifest().Len(), want, len(names))
		}
	}
	// Older than a nanosecond: the kept one and the published one passed
	// over, the prefix listed; with Share, published again.
	src := open(time.Nanosecond, true)
	from, at, skipped := src.Listing()
	if from != s3source.ListingListed || !errors.Is(skipped, s3source.ErrTooOld) || src.Manifest().Len() != len(names)+1 {
		t.Fatalf("MaxAge 1ns: listing %s (%v), %d samples; want listed, the published one too old, %d", from, skipped, src.Manifest().Len(), len(names)+1)
	}
	if by, err := src.Shared(); by != "" || err != nil {
		t.Fatalf("Shared() = %q, %v; want listed and published here", by, err)
	}
	again, err := s3source.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if from, pubAt, _ := again.Listing(); from != s3source.ListingPublished || !pubAt.Equal(at) || !pubAt.After(published) || again.Manifest().Len() != len(names)+1 {
		t.Fatalf("after the listing was made again: %s of %v, %d samples; want the new one published (of %v, after %v)", from, pubAt, again.Manifest().Len(), at, published)
	}
}

// A listing of more than a page (1,000 keys) follows the
// store's continuation tokens: every object listed once, by the Source's
// own requests.
func TestListingPages(t *testing.T) {
	g := s3test.Start(t)
	const objects = 500 // in 10 folders
	cfg := config(g, "s3://pages/train")
	if rep, err := s3source.Upload(context.Background(), cfg, writeFolder(t, objects, 1), nil); err != nil || rep.Uploaded != objects {
		t.Fatalf("uploaded %d of %d: %v", rep.Uploaded, objects, err)
	}
	// 1,100 objects at the prefix's own level (its one-level listing
	// takes two pages), and 1,100 in one folder (that folder's listing
	// takes two).
	var cfgs []s3source.Config
	for _, under := range []string{"", "c0"} {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, under), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range 1_100 {
			if err := os.WriteFile(filepath.Join(dir, under, fmt.Sprintf("%05d.bin", i)), []byte{byte(i)}, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		c := config(g, "s3://pages/flat"+under)
		if rep, err := s3source.Upload(context.Background(), c, dir, nil); err != nil || rep.Uploaded != 1_100 {
			t.Fatalf("uploaded %d of 1,100: %v", rep.Uploaded, err)
		}
		cfgs = append(cfgs, c)
	}
	for _, c := range []struct {
		cfg  s3source.Config
		want int
	}{{cfg, objects}, {cfgs[0], 1_100}, {cfgs[1], 1_100}} {
		before := len(g.Requests(t))
		src, err := s3source.Open(context.Background(), c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if src.Manifest().Len() != c.want {
			t.Fatalf("%s: %d objects listed, want %d", c.cfg.URL, src.Manifest().Len(), c.want)
		}
		for _, r := range g.Requests(t)[before:] {
			if strings.Contains(r.Operation, "ListObjects") && strings.Contains(r.URI, "fetch-owner") {
				t.Errorf("a listing request sent by minio-go: %s", r.URI)
			}
		}
	}
}

// pageSpoiler answers the Source's own listing requests (not minio-go's,
// which ask for the owners) with a page that is not one, as a store the
// getter cannot read would.
type pageSpoiler struct{ spoiled atomic.Int64 }

func (p *pageSpoiler) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !strings.Contains(req.URL.RawQuery, "list-type=2") || strings.Contains(req.URL.RawQuery, "fetch-owner") {
		return resp, err
	}
	resp.Body.Close()
	p.spoiled.Add(1)
	resp.Body = io.NopCloser(strings.NewReader("<ListBucketResult><Contents>not a page"))
	return resp, nil
}

// A page the Source cannot read is listed again through minio-go, and so
// is the rest of the listing, without asking the store twice for each
// folder: every object listed, once.
func TestUnreadablePagesListedByMinio(t *testing.T) {
	g := s3test.Start(t)
	names, _ := fill(t, g, "shade-ds", "p/", 30)
	cfg := config(g, "s3://shade-ds/p")
	spoiler := &pageSpoiler{}
	cfg.Transport = spoiler
	src, err := s3source.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(src.Manifest().Names.Strings(), names) {
		t.Fatalf("listed %v, want %v", src.Manifest().Names.Strings(), names)
	}
	if n := spoiler.spoiled.Load(); n != 1 {
		t.Fatalf("%d pages spoiled, want 1: after the first, minio-go lists", n)
	}
}
