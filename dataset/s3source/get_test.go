package s3source

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/minio/minio-go/v7/pkg/signer"
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
					g := &getter{base: host.base, path: host.path, region: "eu-west-3"}
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
					theirs := req.Clone(req.Context())
					theirs.Header.Set("X-Amz-Content-Sha256", emptySHA256)
					theirs = signer.SignV4(*theirs, v.AccessKeyID, v.SecretAccessKey, v.SessionToken, g.region)
					at, err := time.Parse("20060102T150405Z", theirs.Header.Get("X-Amz-Date"))
					if err != nil {
						t.Fatal(err)
					}
					g.sign(req, path, v, at)
					want, got := theirs.Header.Get("Authorization"), req.Header.Get("Authorization")
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

// TestSigningKeyKeptForTheDay: the signing key is derived again when the
// day or the secret changes, and only then.
func TestSigningKeyKeptForTheDay(t *testing.T) {
	g := &getter{region: "us-east-1"}
	a := g.signingKey("20261129", "s1")
	if b := g.signingKey("20261129", "s1"); &a[0] != &b[0] {
		t.Error("the same day's key was derived again")
	}
	b := g.signingKey("20261130", "s1")
	c := g.signingKey("20261130", "s2")
	if string(a) == string(b) || string(b) == string(c) {
		t.Error("a new day or secret kept the old key")
	}
}

// TestEncodePath: encodePath encodes every path as s3utils.EncodePath
// does.
func TestEncodePath(t *testing.T) {
	for _, p := range []string{"", "/", "/b/train/c0/00001.bin", "/a b/c+d=e&f;g.bin", "/ü/ñ€ (1)!*'~.bin",
		"/x%20y/%2F.bin", "/Az09-_.~/", "/tab\there", "/\x00\xff"} {
		if got, want := encodePath(p), s3utils.EncodePath(p); got != want {
			t.Errorf("encodePath(%q) = %q, want %q", p, got, want)
		}
	}
}
