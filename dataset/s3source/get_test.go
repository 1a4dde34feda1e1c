package s3source

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/shade-mesh/shade/internal/s3test"
)

// TestSignatureMatchesMinioGo: a getter signs each kind of GET it sends
// (whole or a range, conditional or not, with a session token or not,
// path or virtual-host style, keys with characters that URLs escape)
// exactly as minio-go's signer does at the same instant: the same
// Authorization header, signed headers and signature. The real gateway
// checks the signatures too (TestReadsKeysOfAnyCharacters and every read
// test).
func TestSignatureMatchesMinioGo(t *testing.T) {
	keys := []string{"train/c0/00001.bin", "a b/c+d=e&f;g.bin", "ü/ñ€ (1)!*'~.bin", "x%20y/%2F.bin"}
	for _, host := range []struct{ base, path string }{
		{"http://127.0.0.1:9000", "/shade-ds"},
		{"https://shade-ds.s3.eu-west-3.amazonaws.com", ""},
	} {
		for _, token := range []string{"", "FQoGZXIvYXdzEXAMPLETOKEN"} {
			for _, key := range keys {
				for _, h := range []http.Header{
					{},
					{"If-Match": {`"9b2cf535f27731c974343645a3985328"`}},
					{"If-Match": {`"9b2cf535f27731c974343645a3985328"`}, "Range": {"bytes=100-4195"}},
				} {
					g := &getter{base: host.base, path: host.path}
					region := "eu-west-3"
					g.region.Store(&region)
					v := credentials.Value{AccessKeyID: "AKIAIOSFODNN7EXAMPLE",
						SecretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", SessionToken: token}
					path := s3utils.EncodePath(g.path + "/" + key)
					req, err := http.NewRequest(http.MethodGet, g.base+path, nil)
					if err != nil {
						t.Fatal(err)
					}
					for k, vs := range h {
						req.Header[k] = vs
					}
					got, want, at := signBoth(t, g, req, path, "", v, region)
					if got != want {
						t.Errorf("%s%s with %v, token %q:\n got %s\nwant %s", host.base, path, h, token, got, want)
					}
					if !strings.Contains(got, "Credential=AKIAIOSFODNN7EXAMPLE/"+at.Format("20060102")+"/eu-west-3/s3/aws4_request") {
						t.Errorf("credential scope: %s", got)
					}
				}
			}
		}
	}
}

// signBoth signs req by minio-go's signer, then by g at the same instant,
// and returns g's Authorization header, minio-go's, and the instant.
func signBoth(t *testing.T, g *getter, req *http.Request, path, query string, v credentials.Value, region string) (got, want string, at time.Time) {
	t.Helper()
	theirs := req.Clone(req.Context())
	theirs.Header.Set("X-Amz-Content-Sha256", emptySHA256)
	theirs = signer.SignV4(*theirs, v.AccessKeyID, v.SecretAccessKey, v.SessionToken, region)
	at, err := time.Parse("20060102T150405Z", theirs.Header.Get("X-Amz-Date"))
	if err != nil {
		t.Fatal(err)
	}
	g.sign(req, path, query, v, at)
	return req.Header.Get("Authorization"), theirs.Header.Get("Authorization"), at
}

// A listing's request, a GET of the bucket with a query of escaped names
// and values, is signed as minio-go's signer signs it.
func TestListSignatureMatchesMinioGo(t *testing.T) {
	for _, host := range []struct{ base, path string }{
		{"http://127.0.0.1:9000", "/shade-ds"},
		{"https://shade-ds.s3.eu-west-3.amazonaws.com", ""},
	} {
		for _, q := range []url.Values{
			{"list-type": {"2"}, "encoding-type": {"url"}, "prefix": {"train/"}},
			{"list-type": {"2"}, "encoding-type": {"url"}, "prefix": {"a b/c+d=é&f~"}, "delimiter": {"/"},
				"continuation-token": {"1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="}},
		} {
			g := &getter{base: host.base, path: host.path}
			region := "eu-west-3"
			g.region.Store(&region)
			v := credentials.Value{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}
			query := s3utils.QueryEncode(q)
			req, err := http.NewRequest(http.MethodGet, g.base+g.path+"/?"+query, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, want, _ := signBoth(t, g, req, g.path+"/", query, v, region); got != want {
				t.Errorf("%s%s/?%s:\n got %s\nwant %s", host.base, host.path, query, got, want)
			}
		}
	}
}

// TestSigningKeyKeptForTheDay: the signing key is derived again when the
// day, the region or the secret changes, and only then.
func TestSigningKeyKeptForTheDay(t *testing.T) {
	var g getter
	a := g.signingKey("20261129", "us-east-1", "s1")
	if b := g.signingKey("20261129", "us-east-1", "s1"); &a[0] != &b[0] {
		t.Error("the same day's key was derived again")
	}
	keys := map[string]bool{string(a): true}
	for _, k := range [][3]string{{"20261130", "us-east-1", "s1"}, {"20261130", "eu-west-3", "s1"}, {"20261130", "eu-west-3", "s2"}} {
		key := string(g.signingKey(k[0], k[1], k[2]))
		if keys[key] {
			t.Errorf("%v kept an earlier key", k)
		}
		keys[key] = true
	}
}

// wrongRegion answers, as AWS S3 does, a request signed for another
// region than the gateway's (us-east-1) with AuthorizationHeaderMalformed
// naming the right one; the gateway itself answers a bare 400. It passes
// every other request on, and counts those it answered.
type wrongRegion struct {
	rt       http.RoundTripper
	answered atomic.Int64
}

func (w *wrongRegion) RoundTrip(req *http.Request) (*http.Response, error) {
	auth := req.Header.Get("Authorization")
	if auth == "" || strings.Contains(auth, "/us-east-1/s3/aws4_request") {
		return w.rt.RoundTrip(req)
	}
	w.answered.Add(1)
	body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AuthorizationHeaderMalformed</Code>` +
		`<Message>The authorization header is malformed; the region 'eu-west-3' is wrong; expecting 'us-east-1'</Message>` +
		`<Region>us-east-1</Region><RequestId>TEST</RequestId></Error>`
	return &http.Response{StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Proto: "HTTP/1.1",
		ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Content-Type": {"application/xml"}},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}, nil
}

// TestRegionLearnedFromTheStore: a getter whose region is wrong (AWS's
// default where the bucket's region could not be looked up) takes the
// one the store names in its refusal and sends the request again, once:
// the read gets the bytes, and later reads are signed for that region
// from the start. With the region configured, the refusal stands, as
// minio-go lets it stand.
func TestRegionLearnedFromTheStore(t *testing.T) {
	g := s3test.Start(t)
	g.CreateBucket(t, "rgn")
	g.Put(t, "rgn", "p/a.bin", []byte("the sample's bytes"))
	for _, region := range []string{"", "us-east-1"} {
		learn := region == ""
		w := &wrongRegion{rt: http.DefaultTransport}
		src, err := Open(context.Background(), Config{URL: "s3://rgn/p", Endpoint: g.Endpoint, PathStyle: true, Region: region,
			AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey, Transport: w, Retries: -1})
		if err != nil {
			t.Fatal(err)
		}
		get, err := src.getter.get(context.Background(), src.client, src.rt, src.loc.Bucket, learn)
		if err != nil || get == nil {
			t.Fatalf("no getter: %v", err)
		}
		wrong := "eu-west-3"
		get.region.Store(&wrong)
		for range 2 {
			b, err := src.Read(0, nil)
			switch {
			case learn && (err != nil || string(b) != "the sample's bytes"):
				t.Fatalf("read %q: %v", b, err)
			case !learn && err == nil:
				t.Fatalf("read %q signed for another region than the one configured", b)
			}
		}
		if want := map[bool]int64{true: 1, false: 2}[learn]; w.answered.Load() != want {
			t.Errorf("region %q: %d requests refused for their region, want %d", region, w.answered.Load(), want)
		}
	}
}

// TestEncodePath: encodePath encodes every path as s3utils.EncodePath
// does, each character outside its plain set among plain ones too.
func TestEncodePath(t *testing.T) {
	for _, p := range []string{"", "/", "/b/train/c0/00001.bin", "/a b/c+d=e&f;g.bin", "/ü/ñ€ (1)!*'~.bin",
		"/x%20y/%2F.bin", "/Az09-_.~/", "/tab\there", "/\x00\xff",
		// One character to escape in an otherwise plain path: the fast
		// path's test decides each of these alone.
		"/c+d.bin", "/x=1", "/a b", "/%41", "/q?r", "/a#b", "/é", "/a*b", "/a:b", "/a@b", "/a,b", "/a;b"} {
		if got, want := encodePath(p), s3utils.EncodePath(p); got != want {
			t.Errorf("encodePath(%q) = %q, want %q", p, got, want)
		}
	}
}
