package s3source

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// getter sends a Source's GETs of samples: requests it builds and signs
// itself (AWS Signature Version 4), on the Source's transport. minio-go
// builds each request anew: it derives the day's signing key (four
// HMACs), sorts and lowercases the headers, builds the object's URL and
// starts a retry timer, then parses every header of the answer into an
// ObjectInfo; that was a third of a read's CPU on the client
// (BenchmarkRead). A getter keeps the signing key for the day and signs
// the few headers it sets in a fixed order. What minio-go decides stays
// minio-go's: the bucket's URL (path or virtual-host style, the region's
// host) and its region come from a URL it presigns, and the credentials
// from its provider, asked at every request (a cached value unless they
// expire). Where the region was not configured and the store answers that
// a request was signed for the wrong one, naming the right one (as AWS
// does where the region could not be looked up), the getter takes that
// one and sends the request again, as minio-go does.
type getter struct {
	rt     http.RoundTripper
	client *minio.Client // for the credentials
	base   string        // scheme://host
	path   string        // the bucket's path on base: "" (virtual host) or "/BUCKET"
	learn  bool          // the region was not configured: take the store's word for it
	region atomic.Pointer[string]
	key    atomic.Pointer[dayKey]
}

// dayKey is a signing key: valid for one day, region and secret.
type dayKey struct {
	day, region, secret string
	key                 []byte
}

// probeKey is the object name whose presigned URL shows the bucket's URL
// (no request is made for it).
const probeKey = "shade-probe"

// newGetter returns the getter for bucket (learn: the region was not
// configured), or nil where minio-go must send the requests itself:
// anonymous credentials (minio-go does not presign without credentials),
// or an S3 Express bucket (its sessions are minio-go's). It may ask the
// store for the bucket's region (minio-go's lookup, once per client).
func newGetter(ctx context.Context, client *minio.Client, rt http.RoundTripper, bucket string, learn bool) (*getter, error) {
	v, err := client.GetCreds()
	if err != nil {
		return nil, err
	}
	if v.SignerType.IsAnonymous() || v.AccessKeyID == "" || s3utils.IsS3ExpressBucket(bucket) {
		return nil, nil
	}
	u, err := client.PresignedGetObject(ctx, bucket, probeKey, time.Minute, nil)
	if err != nil {
		return nil, err
	}
	path, ok := strings.CutSuffix(u.Path, "/"+probeKey)
	scope := strings.Split(u.Query().Get("X-Amz-Credential"), "/") // KEY/DAY/REGION/s3/aws4_request
	if !ok || len(scope) != 5 || scope[2] == "" {
		return nil, fmt.Errorf("s3source: unexpected presigned URL for bucket %s: %s", bucket, u.Redacted())
	}
	g := &getter{rt: rt, client: client, base: u.Scheme + "://" + u.Host, path: path, learn: learn}
	g.region.Store(&scope[2])
	return g, nil
}

// emptySHA256 is the SHA-256 of an empty payload, a GET's.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// get sends a GET of key, conditional on etag where it is not "", of the
// bytes [off, off+n) where rng. It returns the answer of a 200 or 206;
// any other status is a minio.ErrorResponse, as minio-go reports it, so
// that readError and retryable see one kind of error whichever sent the
// request.
func (g *getter) get(ctx context.Context, key, etag string, rng bool, off, n int64) (*http.Response, error) {
	resp, err := g.send(ctx, key, etag, rng, off, n)
	if er, ok := err.(minio.ErrorResponse); ok && g.learn && er.Region != "" && er.Region != *g.region.Load() {
		switch er.Code {
		case "AuthorizationHeaderMalformed", "InvalidRegion", "AccessDenied":
			g.region.Store(&er.Region)
			return g.send(ctx, key, etag, rng, off, n)
		}
	}
	return resp, err
}

// send is one request of get.
func (g *getter) send(ctx context.Context, key, etag string, rng bool, off, n int64) (*http.Response, error) {
	v, err := g.client.GetCreds()
	if err != nil {
		return nil, err
	}
	path := encodePath(g.path + "/" + key)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.base+path, nil)
	if err != nil {
		return nil, err
	}
	h := req.Header
	if etag != "" {
		h["If-Match"] = []string{`"` + etag + `"`}
	}
	if rng {
		h["Range"] = []string{"bytes=" + strconv.FormatInt(off, 10) + "-" + strconv.FormatInt(off+n-1, 10)}
	}
	g.sign(req, path, "", v, time.Now().UTC())
	resp, err := g.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, errorResponse(resp, key)
}

// encodePath is s3utils.EncodePath without its regular expression for
// paths of letters, digits and "-_.~/" alone, which it leaves as they
// are: most keys, and a read encodes its key's path each time.
func encodePath(p string) string {
	for i := range len(p) {
		switch c := p[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '_', c == '.', c == '~', c == '/':
		default:
			return s3utils.EncodePath(p)
		}
	}
	return p
}

// sign signs req, a GET of the URL-encoded path with the query as SigV4
// has it (s3utils.QueryEncode; "" for none), for v at t: it sets X-Amz-Date, X-Amz-Content-Sha256, X-Amz-Security-Token (with
// a session token) and Authorization, signing those, Host, and the
// If-Match and Range the caller set. The headers are written in their
// canonical order, lowercased, as the signature wants them.
func (g *getter) sign(req *http.Request, path, query string, v credentials.Value, t time.Time) {
	h := req.Header
	date := t.Format("20060102T150405Z")
	h["X-Amz-Date"] = []string{date}
	h["X-Amz-Content-Sha256"] = []string{emptySHA256}
	if v.SessionToken != "" {
		h["X-Amz-Security-Token"] = []string{v.SessionToken}
	}
	signed := "host"
	var b strings.Builder
	b.Grow(512)
	b.WriteString("GET\n")
	b.WriteString(path)
	b.WriteByte('\n')
	b.WriteString(query)
	b.WriteString("\nhost:")
	b.WriteString(req.URL.Host)
	b.WriteByte('\n')
	for _, name := range [...]string{"If-Match", "Range", "X-Amz-Content-Sha256", "X-Amz-Date", "X-Amz-Security-Token"} {
		vs := h[name]
		if len(vs) == 0 {
			continue
		}
		lower := strings.ToLower(name)
		signed += ";" + lower
		b.WriteString(lower)
		b.WriteByte(':')
		b.WriteString(strings.TrimSpace(vs[0]))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.WriteString(signed)
	b.WriteByte('\n')
	b.WriteString(emptySHA256)
	sum := sha256.Sum256([]byte(b.String()))

	day, region := date[:8], *g.region.Load()
	scope := day + "/" + region + "/s3/aws4_request"
	toSign := "AWS4-HMAC-SHA256\n" + date + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	mac := hmac.New(sha256.New, g.signingKey(day, region, v.SecretAccessKey))
	mac.Write([]byte(toSign))
	h["Authorization"] = []string{"AWS4-HMAC-SHA256 Credential=" + v.AccessKeyID + "/" + scope +
		", SignedHeaders=" + signed + ", Signature=" + hex.EncodeToString(mac.Sum(nil))}
}

// signingKey returns the signing key of day (YYYYMMDD), region and
// secret, derived once a day (or when the region or secret changes).
func (g *getter) signingKey(day, region, secret string) []byte {
	if k := g.key.Load(); k != nil && k.day == day && k.region == region && k.secret == secret {
		return k.key
	}
	key := []byte("AWS4" + secret)
	for _, part := range [...]string{day, region, "s3", "aws4_request"} {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(part))
		key = mac.Sum(nil)
	}
	g.key.Store(&dayKey{day: day, region: region, secret: secret, key: key})
	return key
}

// errorResponse reads a failed answer's S3 error document into a
// minio.ErrorResponse (its code from the status where the body has none,
// as a HEAD's or a proxy's answer).
func errorResponse(resp *http.Response, key string) error {
	var er minio.ErrorResponse
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if xml.Unmarshal(body, &er) != nil || er.Code == "" {
		er = minio.ErrorResponse{Code: statusCode(resp.StatusCode), Message: resp.Status}
	}
	er.StatusCode = resp.StatusCode
	if er.Key == "" {
		er.Key = key
	}
	er.RequestID = resp.Header.Get("X-Amz-Request-Id")
	return er
}

// statusCode is the S3 error code of a status without an error document.
func statusCode(status int) string {
	switch status {
	case http.StatusNotFound:
		return "NoSuchKey"
	case http.StatusPreconditionFailed:
		return "PreconditionFailed"
	case http.StatusForbidden:
		return "AccessDenied"
	case http.StatusServiceUnavailable:
		return "SlowDown"
	}
	return http.StatusText(status)
}

// lazyGetter builds a Source's getter at its first read, not at Open: a
// Source opened from a kept listing starts without asking the store
// anything. A failed build is tried again at the next read.
type lazyGetter struct {
	mu    sync.Mutex
	built atomic.Pointer[builtGetter]
}

type builtGetter struct{ g *getter } // g nil: minio-go sends the GETs

// get returns the getter, building it first if need be; nil (with a nil
// error) means minio-go sends the GETs.
func (l *lazyGetter) get(ctx context.Context, client *minio.Client, rt http.RoundTripper, bucket string, learn bool) (*getter, error) {
	if b := l.built.Load(); b != nil {
		return b.g, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.built.Load(); b != nil {
		return b.g, nil
	}
	g, err := newGetter(ctx, client, rt, bucket, learn)
	if err != nil {
		return nil, fmt.Errorf("the bucket's address: %w", err)
	}
	l.built.Store(&builtGetter{g})
	return g, nil
}
