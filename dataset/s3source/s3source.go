// Package s3source serves a dataset from an S3-compatible object store: the
// objects under one bucket prefix, each object one sample.
//
// Open lists the prefix (paginated) into a dataset.Manifest: every object
// under the prefix is a sample, sorted by key (S3's own order, byte order
// of the UTF-8 key), named by its key relative to the prefix, so that the
// first path element is the sample's class as in an ImageFolder tree (for a
// CLASS/FILE layout this is torchvision's order too). Keys ending in '/'
// (folder markers) and keys with a path element starting with '.' are
// skipped, as the directory source skips hidden files. The manifest's
// Version is a digest of every (name, size, ETag), so a rewritten object
// changes the version even at the same size.
//
// With a state directory the listing is kept there, one file per
// (endpoint, bucket, prefix), written to a temporary file and renamed, and a
// later Open reuses it instead of listing again unless Config.Relist is set.
// A listing can also be published beside the dataset (PublishListing, in
// the hidden folder PREFIX/.shade/): an Open with none kept reads it in one
// GET instead of listing the prefix, on any machine; it is the dataset
// until published again, as a kept one is until Relist.
//
// Reads are conditional on the listed ETag (If-Match), so an object deleted
// or rewritten since the listing fails that sample's reads with an error
// wrapping dataset.ErrChanged and never serves other bytes. Each request has
// a timeout; throttling (503 SlowDown) and server errors are retried with
// exponential backoff; at most Config.MaxInFlight requests run at once.
//
// The package is built on minio-go, which lists, uploads, finds the
// bucket's region and address, and resolves credentials; a sample's GET
// is built and signed here (getter), with the day's signing key kept,
// where minio-go would spend a third of the read's CPU on it. No minio-go
// type appears in its API.
package s3source

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/dataset/claim"
	"github.com/shade-mesh/shade/internal/atomicfile"
	"github.com/shade-mesh/shade/internal/binfile"
	"github.com/shade-mesh/shade/internal/jsonstream"
	"github.com/shade-mesh/shade/internal/workers"
)

var (
	// ErrURL is returned for a dataset URL that is not s3://BUCKET[/PREFIX].
	ErrURL = errors.New("s3source: want s3://BUCKET[/PREFIX]")
	// ErrOpen is wrapped by every error of Open that comes from the store:
	// an unreachable endpoint, a missing bucket, refused credentials.
	ErrOpen = errors.New("s3source: cannot open")
	// ErrRead is wrapped by a read that failed for a reason other than a
	// changed object (after its retries).
	ErrRead = errors.New("s3source: read failed")
)

// DefaultEndpoint is AWS S3's global endpoint.
const DefaultEndpoint = "https://s3.amazonaws.com"

// DefaultMaxInFlight is Config.MaxInFlight's default. A GET of a small
// object spends most of its time waiting for the store's first byte
// (10-50 ms on S3), so the requests in flight set the rate at which a
// cold cache fills: 64 at 20 ms carry up to 3,200 samples a second.
const DefaultMaxInFlight = 64

// Config configures a Source. The zero value of every field but URL means
// its default; Open fills defaults on a copy.
type Config struct {
	// URL is s3://BUCKET or s3://BUCKET/PREFIX. A prefix names a folder:
	// "s3://b/train" serves the objects under "train/".
	URL string
	// Endpoint is the store's URL, http:// or https:// with host and
	// optional port; "" means DefaultEndpoint.
	Endpoint string
	// Region is the bucket's region; "" lets the client find it (AWS) or
	// use us-east-1.
	Region string
	// PathStyle addresses buckets as ENDPOINT/BUCKET rather than
	// BUCKET.ENDPOINT; most stores other than AWS want it.
	PathStyle bool
	// AccessKeyID, SecretAccessKey and SessionToken are explicit
	// credentials. When AccessKeyID is "", credentials come from the
	// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
	// AWS_SESSION_TOKEN), then the shared credentials and config files
	// (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE, AWS_PROFILE), else
	// requests are anonymous.
	AccessKeyID, SecretAccessKey, SessionToken string
	// StateDir, when set, keeps the listing there so a restart does not
	// list again; "" lists at every Open.
	StateDir string
	// Relist lists the prefix even when StateDir holds a listing, and
	// replaces it, or one is published beside the dataset.
	Relist bool
	// Unpublished lists the prefix where StateDir holds no listing, even
	// when one is published beside the dataset (PublishListing): for a
	// dataset whose listing is short and must be current.
	Unpublished bool
	// MaxAge, when positive, passes over a kept or published listing
	// made longer ago than MaxAge (by the clock of the machine that
	// listed): the prefix is listed again (with Share, once for all the
	// Opens that find it so, and published again), so that objects added
	// since are served. 0 uses a listing whatever its age.
	MaxAge time.Duration
	// Share lists the prefix once for every Open of the dataset that
	// finds no listing kept or published while it is listed, on any
	// machine (the peers of a mesh starting together): the first claims
	// the listing beside the dataset (ListingClaim; package claim tells
	// how), lists the prefix, publishes the listing (PublishListing) and
	// drops the claim; the others wait for it and read what was
	// published. What is published is the dataset until published again
	// (PublishListing tells what that means). With Share, a claim that
	// cannot be written or read, or a listing that cannot be published,
	// is no error of Open's: the prefix is listed and Source.Shared says
	// why the listing was not shared. It needs write access to the
	// bucket. With Relist, the prefix is listed and the listing published
	// without a claim; Unpublished passes over Share.
	Share bool
	// Claim configures the claim of Share: this Open's name in it, the
	// beat, and what to call when it waits.
	Claim claim.Config
	// MaxInFlight bounds concurrent GET requests of one Source, and the
	// idle connections it keeps to the store; 0 means DefaultMaxInFlight.
	MaxInFlight int
	// RequestTimeout bounds one request (one attempt); 0 means 30 s.
	RequestTimeout time.Duration
	// Retries is how many times a throttled, failed (5xx) or timed-out
	// request is tried again; 0 means 5, a negative value none.
	Retries int
	// Transport, when set, carries the HTTP requests (tests, proxies);
	// nil means a default transport.
	Transport http.RoundTripper
}

func (c Config) withDefaults() Config {
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.Retries == 0 {
		c.Retries = 5
	}
	if c.Retries < 0 {
		c.Retries = 0
	}
	return c
}

// Location is a parsed dataset URL.
type Location struct {
	Bucket string
	// Prefix is "" or ends with '/'.
	Prefix string
}

// ParseURL parses s3://BUCKET[/PREFIX].
func ParseURL(s string) (Location, error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return Location{}, fmt.Errorf("%w: %q", ErrURL, s)
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return Location{}, fmt.Errorf("%w: %q has no bucket", ErrURL, s)
	}
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	return Location{Bucket: bucket, Prefix: prefix}, nil
}

// IsURL reports whether s names an S3 dataset (starts with s3://).
func IsURL(s string) bool { return strings.HasPrefix(s, "s3://") }

// NewClient returns a minio-go client for cfg's endpoint, region,
// addressing and credentials. It is exported for tools in this module
// (shadectl's upload) that must reach the store exactly as a Source does.
func NewClient(cfg Config) (*minio.Client, error) {
	cfg = cfg.withDefaults()
	return newClient(cfg, transport(cfg))
}

// transport is cfg.Transport, or a default one for cfg (with defaults).
func transport(cfg Config) http.RoundTripper {
	if cfg.Transport != nil {
		return cfg.Transport
	}
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: cfg.MaxInFlight,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// Bounds every request's wait for an answer, the listing's
		// pages included (their context is Open's).
		ResponseHeaderTimeout: cfg.RequestTimeout,
		// An object is served as it is stored, its listed size: never
		// asked for gzip and unpacked on the way (as minio-go's own
		// default transport).
		DisableCompression: true,
	}
}

// newClient is NewClient on the transport tr.
func newClient(cfg Config, tr http.RoundTripper) (*minio.Client, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: endpoint %q: want http(s)://HOST[:PORT]", ErrOpen, cfg.Endpoint)
	}
	var creds *credentials.Credentials
	if cfg.AccessKeyID != "" {
		creds = credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{},
		})
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	return minio.New(u.Host, &minio.Options{
		Creds: creds, Secure: u.Scheme == "https", Region: cfg.Region,
		BucketLookup: lookup, Transport: tr,
		MaxRetries: 1, // our own loop retries, with a timeout per attempt
	})
}

// object is one listed object.
type object struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
	ETag string `json:"etag"`
}

// Source is a dataset in a bucket prefix. It is immutable after Open and
// safe for concurrent use.
type Source struct {
	cfg    Config
	loc    Location
	rt     http.RoundTripper
	client *minio.Client
	getter lazyGetter
	// pagesByMinio: a page the getter did not read; the listing's other
	// runs go through minio-go rather than each asking that store twice.
	pagesByMinio atomic.Bool
	m            *dataset.Manifest // sample i is the object prefix and Names.At(i), Sizes[i] bytes
	etags        etags             // sample i's listed ETag ("" where none)
	slots        chan struct{}     // MaxInFlight tokens

	from     ListingOrigin
	listedAt time.Time
	skipped  error // why a published listing was not used, or nil
	// Config.Share: how the listing came (claim.Outcome), and why it was
	// not published, or nil.
	share      claim.Outcome
	publishErr error
}

// Open lists cfg.URL's prefix (or reuses the listing in cfg.StateDir) and
// returns the Source. ctx bounds the listing only. A wrong endpoint, a
// missing bucket or refused credentials give one error wrapping ErrOpen
// that says which; an empty prefix gives dataset.ErrEmpty.
func Open(ctx context.Context, cfg Config) (*Source, error) {
	cfg = cfg.withDefaults()
	loc, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	rt := transport(cfg)
	client, err := newClient(cfg, rt)
	if err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg, loc: loc, rt: rt, client: client, slots: make(chan struct{}, cfg.MaxInFlight), from: ListingKept}
	state := s.statePath()
	var (
		l    *listed
		keep bool // l is to be kept in the state directory
	)
	if state != "" && !cfg.Relist {
		l, keep, err = loadListing(state, cfg.Endpoint, loc, s.tooOld) // an earlier build's JSON listing is kept in the new form
		if err != nil {
			return nil, err
		}
	}
	if l == nil && !cfg.Relist && !cfg.Unpublished {
		s.from = ListingPublished
		l, s.skipped = s.publishedListing(ctx)
		keep = l != nil
	}
	if l == nil && cfg.Share && !cfg.Relist && !cfg.Unpublished {
		var release func()
		if l, release, err = s.sharedListing(ctx); err != nil {
			return nil, err
		}
		if release != nil {
			// Dropped once published (or Open failed): those waiting then
			// read it.
			defer release()
		}
		keep = true
	}
	if l == nil {
		s.from, keep = ListingListed, true
		if l, err = s.list(ctx); err != nil {
			return nil, err
		}
	}
	s.listedAt = l.at
	if l.len() == 0 {
		return nil, fmt.Errorf("%w under %s", dataset.ErrEmpty, cfg.URL)
	}
	// The listing is kept packed: the names in the manifest's
	// dataset.Names, the ETags as etags keeps them, where each listed
	// object was a struct and two strings (an object's key is the prefix
	// and its name).
	names, sizes, etags := l.sorted()
	if keep && state != "" {
		if err := saveListing(state, cfg.Endpoint, loc, s.listedAt, names, sizes, etags); err != nil {
			return nil, err
		}
	}
	s.etags = newETags(etags)
	s.m = &dataset.Manifest{Names: names, Sizes: dataset.NewSizes(sizes), Version: versionOf(names, sizes, etags)}
	if cfg.Share && !cfg.Unpublished && s.from == ListingListed {
		if err := s.PublishListing(ctx); err != nil {
			s.publishErr = fmt.Errorf("%w: %w", claim.ErrNotShared, err)
		}
	}
	return s, nil
}

// ErrTooOld is wrapped by Source.Listing's skipped error where a
// published listing was made longer ago than Config.MaxAge.
var ErrTooOld = errors.New("s3source: the listing is older than the maximum age")

// tooOld says why a listing made at at is too old to use, or nil.
func (s *Source) tooOld(at time.Time) error {
	if s.cfg.MaxAge <= 0 {
		return nil
	}
	if age := time.Since(at); age > s.cfg.MaxAge {
		return fmt.Errorf("%w: listed %s ago (at %s), over %s", ErrTooOld, age.Round(time.Second), at.UTC().Format(time.RFC3339), s.cfg.MaxAge)
	}
	return nil
}

// listed is a bucket's listing packed as it comes: each object's name
// (its key less the prefix), size and ETag, in the order they came. A
// listing of millions of objects is so never held as a struct and two
// strings an object.
type listed struct {
	prefix       string
	names, etags dataset.NamesBuilder
	sizes        []int64
	at           time.Time // when the prefix was listed
}

// add appends o, which must lie under the prefix.
func (l *listed) add(o object) error {
	if !strings.HasPrefix(o.Key, l.prefix) {
		return fmt.Errorf("object %q is not under the prefix %q", o.Key, l.prefix)
	}
	if err := l.names.Add(o.Key[len(l.prefix):]); err != nil {
		return err
	}
	if err := l.etags.Add(o.ETag); err != nil {
		return fmt.Errorf("object %q: ETag: %w", o.Key, err)
	}
	l.sizes = append(l.sizes, o.Size)
	return nil
}

// addAll appends o's objects (o is of the same prefix); o is empty
// after.
func (l *listed) addAll(o *listed) {
	for i := range o.len() {
		// Each was added to o already: none is too long.
		l.names.AddBytes(o.names.Bytes(i))
		l.etags.AddBytes(o.etags.Bytes(i))
	}
	l.sizes = append(l.sizes, o.sizes...)
	*o = listed{prefix: o.prefix, at: o.at}
}

func (l *listed) len() int { return len(l.sizes) }

// sorted returns the objects' names, sizes and ETags in key order (their
// names share the prefix, so in name order); l is empty after. A listing
// that came in order (a saved one, most stores') is not permuted.
func (l *listed) sorted() (names dataset.Names, sizes []int64, etags dataset.Names) {
	defer func() { *l = listed{prefix: l.prefix, at: l.at} }()
	n := l.len()
	less := func(a, b int) int { return bytes.Compare(l.names.Bytes(a), l.names.Bytes(b)) }
	inOrder := true
	for i := 1; i < n && inOrder; i++ {
		inOrder = less(i-1, i) <= 0
	}
	if inOrder {
		return l.names.Names(), slices.Clone(l.sizes), l.etags.Names() // exact: appends left up to twice the room
	}
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return less(int(a), int(b)) })
	var nb, eb dataset.NamesBuilder
	nb.Grow(n, l.names.Size())
	eb.Grow(n, l.etags.Size())
	sorted := make([]int64, n)
	for k, i := range order {
		// Each was added once already: none is too long.
		nb.AddBytes(l.names.Bytes(int(i)))
		eb.AddBytes(l.etags.Bytes(int(i)))
		sorted[k] = l.sizes[i]
	}
	return nb.Names(), sorted, eb.Names()
}

// object returns sample i's object as listed; i must be in range.
func (s *Source) object(i int) object {
	return object{Key: s.loc.Prefix + s.m.Names.At(i), Size: s.m.Sizes.At(i), ETag: s.etags.at(i)}
}

// Manifest returns the listing's manifest. It is shared: callers must not
// modify it.
func (s *Source) Manifest() *dataset.Manifest { return s.m }

// URL returns the dataset's s3:// URL.
func (s *Source) URL() string { return s.cfg.URL }

// listAtOnce is how many folders of the prefix are listed at once (and
// at most Config.MaxInFlight): a store lists a page of up to 1,000 keys a
// request, each page after the last, so one run over a prefix takes a
// request's time for every thousand objects (40-50 s for 1,000,000 here).
const listAtOnce = 16

// list lists the prefix: its own level first, then the folders it holds
// side by side (listAtOnce at a time), each in the order the store lists
// it.
func (s *Source) list(ctx context.Context) (*listed, error) {
	bctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	ok, err := s.client.BucketExists(bctx, s.loc.Bucket)
	cancel()
	if err != nil {
		return nil, s.openError(err)
	}
	if !ok {
		return nil, fmt.Errorf("%w %s: bucket %q does not exist at %s", ErrOpen, s.cfg.URL, s.loc.Bucket, s.cfg.Endpoint)
	}
	var folders []string
	l, err := s.listRun(ctx, s.loc.Prefix, func(folder string) { folders = append(folders, folder) })
	if err != nil {
		return nil, err
	}
	per := make([]*listed, len(folders))
	errs := make([]error, len(folders))
	workers.Each(len(folders), min(listAtOnce, s.cfg.MaxInFlight), func(k int) {
		per[k], errs[k] = s.listRun(ctx, folders[k], nil)
	})
	var objects, nameBytes, etagBytes int
	for k := range folders {
		if errs[k] != nil {
			return nil, errs[k]
		}
		objects, nameBytes, etagBytes = objects+per[k].len(), nameBytes+per[k].names.Size(), etagBytes+per[k].etags.Size()
	}
	l.names.Grow(objects, nameBytes)
	l.etags.Grow(objects, etagBytes)
	l.sizes = slices.Grow(l.sizes, objects)
	for k := range folders {
		l.addAll(per[k])
		per[k] = nil
	}
	return l, nil
}

// listRun lists the keys under prefix in one run of pages. With folder
// set, it lists one level: each folder there (a key ending in '/', not
// hidden) goes to folder instead of being listed; without, every level.
func (s *Source) listRun(ctx context.Context, prefix string, folder func(string)) (*listed, error) {
	if g, err := s.getter.get(ctx, s.client, s.rt, s.loc.Bucket, s.cfg.Region == ""); err == nil && g != nil && !s.pagesByMinio.Load() {
		l := &listed{prefix: s.loc.Prefix, at: time.Now()}
		var folders []string
		err := g.list(ctx, prefix, folder != nil, func(e listEntry) error {
			return s.addListed(l, e.key, e.size, e.etag, func(f string) { folders = append(folders, f) }, folder != nil)
		})
		if err == nil {
			for _, f := range folders {
				folder(f)
			}
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, s.openError(err)
		}
		// Listed again by minio-go: it says what the store refused, or
		// reads what the getter did not.
		s.pagesByMinio.Store(true)
	}
	l := &listed{prefix: s.loc.Prefix, at: time.Now()}
	opts := minio.ListObjectsOptions{Prefix: prefix, Recursive: folder == nil}
	for o := range s.client.ListObjects(ctx, s.loc.Bucket, opts) {
		if o.Err != nil {
			return nil, s.openError(o.Err)
		}
		if err := s.addListed(l, o.Key, o.Size, strings.Trim(o.ETag, `"`), folder, folder != nil); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// addListed adds a listed key to l, or where oneLevel and it is a
// folder (ending in '/', not hidden), gives it to folder; it passes over
// hidden keys and folder markers.
func (s *Source) addListed(l *listed, key string, size int64, etag string, folder func(string), oneLevel bool) error {
	under := strings.HasPrefix(key, s.loc.Prefix)
	if oneLevel && under && strings.HasSuffix(key, "/") {
		if !skipKey(strings.TrimSuffix(key[len(s.loc.Prefix):], "/")) {
			folder(key)
		}
		return nil
	}
	if under && skipKey(key[len(s.loc.Prefix):]) {
		return nil
	}
	// add refuses a key outside the prefix.
	if err := l.add(object{Key: key, Size: size, ETag: etag}); err != nil {
		return fmt.Errorf("%w %s: %w", ErrOpen, s.cfg.URL, err)
	}
	return nil
}

// skipKey reports whether a key (relative to the prefix) is no sample: a
// folder marker, or hidden (some path element starts with '.').
func skipKey(rel string) bool {
	if rel == "" || strings.HasSuffix(rel, "/") {
		return true
	}
	for el := range strings.SplitSeq(rel, "/") {
		if el == "" || strings.HasPrefix(el, ".") {
			return true
		}
	}
	return false
}

// openError turns a store error at Open into one line saying which.
func (s *Source) openError(err error) error {
	er := minio.ToErrorResponse(err)
	switch {
	case er.Code == "NoSuchBucket":
		return fmt.Errorf("%w %s: bucket %q does not exist at %s", ErrOpen, s.cfg.URL, s.loc.Bucket, s.cfg.Endpoint)
	case er.Code == "InvalidAccessKeyId" || er.Code == "SignatureDoesNotMatch" || er.Code == "AccessDenied" ||
		er.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%w %s: credentials refused by %s (%s)", ErrOpen, s.cfg.URL, s.cfg.Endpoint, er.Code)
	case er.Code != "":
		return fmt.Errorf("%w %s: %s: %s", ErrOpen, s.cfg.URL, er.Code, er.Message)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("%w %s: endpoint %s unreachable: %v", ErrOpen, s.cfg.URL, s.cfg.Endpoint, err)
}

// Read appends sample i's bytes to dst and returns the extended slice; dst
// is the caller's. It reads exactly Manifest().Sizes.At(i) bytes or fails:
//
//   - i out of range: an error wrapping dataset.ErrOutOfRange;
//   - the object was deleted, or its ETag or size differ from the
//     listing's: an error wrapping dataset.ErrChanged naming the key;
//   - otherwise, after Config.Retries retries of throttled, 5xx or timed-out
//     attempts: an error wrapping ErrRead.
//
// On error the returned slice is dst with its original length. Read is
// safe for concurrent use; it blocks while MaxInFlight requests run.
func (s *Source) Read(i int, dst []byte) ([]byte, error) {
	if i < 0 || i >= s.m.Len() {
		return dst, fmt.Errorf("%w: %d (dataset has %d samples)", dataset.ErrOutOfRange, i, s.m.Len())
	}
	return s.ReadRange(i, 0, s.m.Sizes.At(i), dst)
}

// ReadRange appends n bytes of sample i from offset off to dst, with Read's
// checks, retries and bounds (for samples packed in larger objects).
func (s *Source) ReadRange(i int, off, n int64, dst []byte) ([]byte, error) {
	if i < 0 || i >= s.m.Len() {
		return dst, fmt.Errorf("%w: %d (dataset has %d samples)", dataset.ErrOutOfRange, i, s.m.Len())
	}
	o := s.object(i)
	if off < 0 || n < 0 || off+n > o.Size {
		return dst, fmt.Errorf("%w: range %d+%d of %s (%d bytes)", dataset.ErrOutOfRange, off, n, o.Key, o.Size)
	}
	var err error
	for attempt := 0; ; attempt++ {
		var out []byte
		out, err = s.get(o, off, n, dst)
		if err == nil {
			return out, nil
		}
		if !retryable(err) || attempt >= s.cfg.Retries {
			break
		}
		time.Sleep(backoff(attempt))
	}
	if errors.Is(err, dataset.ErrChanged) {
		return dst, err
	}
	return dst, fmt.Errorf("%w: %s: %w", ErrRead, o.Key, err)
}

// Stream returns the object of sample i from byte off to its end as a
// stream, conditional on its listed ETag (a changed object fails Stream
// with an error wrapping dataset.ErrChanged). It holds one of the
// MaxInFlight slots until closed, and has no timeout: the caller bounds
// it with ctx. For tools that scan objects once (a tar shard's headers).
func (s *Source) Stream(ctx context.Context, i int, off int64) (io.ReadCloser, error) {
	if i < 0 || i >= s.m.Len() {
		return nil, fmt.Errorf("%w: %d (dataset has %d samples)", dataset.ErrOutOfRange, i, s.m.Len())
	}
	o := s.object(i)
	if off < 0 || off > o.Size {
		return nil, fmt.Errorf("%w: offset %d of %s (%d bytes)", dataset.ErrOutOfRange, off, o.Key, o.Size)
	}
	if off == o.Size {
		return io.NopCloser(bytes.NewReader(nil)), nil // no range of an object starts at its end
	}
	opts, err := getOptions(o)
	if err != nil {
		return nil, err
	}
	if off > 0 {
		if err := opts.SetRange(off, 0); err != nil {
			return nil, err
		}
	}
	s.slots <- struct{}{}
	body, info, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.loc.Bucket, o.Key, opts)
	if err != nil {
		<-s.slots
		return nil, fmt.Errorf("%w: %s: %w", ErrRead, o.Key, s.readError(o, err))
	}
	if info.Size >= 0 && info.Size != o.Size-off { // -1: the answer's length not given
		body.Close()
		<-s.slots
		return nil, fmt.Errorf("%w: %s: %d bytes from byte %d answered, want %d (range ignored, or the object changed)", ErrRead, o.Key, info.Size, off, o.Size-off)
	}
	return &stream{body: body, s: s, o: o}, nil
}

type stream struct {
	body   io.ReadCloser
	s      *Source
	o      object
	closed bool
}

func (st *stream) Read(p []byte) (int, error) {
	n, err := st.body.Read(p)
	if err != nil && err != io.EOF {
		err = st.s.readError(st.o, err)
	}
	return n, err
}

func (st *stream) Close() error {
	if st.closed {
		return nil
	}
	st.closed = true
	defer func() { <-st.s.slots }()
	return st.body.Close()
}

// get is one attempt: a conditional GET of n bytes of o from off.
func (s *Source) get(o object, off, n int64, dst []byte) ([]byte, error) {
	whole := off == 0 && n == o.Size
	if n == 0 && !whole {
		return dst, nil
	}
	s.slots <- struct{}{}
	defer func() { <-s.slots }()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	body, etag, err := s.send(ctx, o, !whole, off, n)
	if err != nil {
		return dst, s.readError(o, err)
	}
	defer body.Close()
	if o.ETag != "" && strings.Trim(etag, `"`) != o.ETag {
		return dst, fmt.Errorf("%w: %s has ETag %s, listed %s", dataset.ErrChanged, o.Key, etag, o.ETag)
	}
	start := len(dst)
	dst = slices.Grow(dst, int(n))[:start+int(n)]
	if _, err := io.ReadFull(body, dst[start:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return dst[:start], fmt.Errorf("%w: %s is shorter than the listed %d bytes", dataset.ErrChanged, o.Key, o.Size)
		}
		return dst[:start], s.readError(o, err)
	}
	// The body must end here (and a body read to its end leaves the
	// connection for the next request).
	var one [1]byte
	switch k, _ := body.Read(one[:]); {
	case k != 0 && whole:
		// A store that ignored If-Match could have served a longer rewrite.
		return dst[:start], fmt.Errorf("%w: %s is longer than the listed %d bytes", dataset.ErrChanged, o.Key, o.Size)
	case k != 0:
		return dst[:start], fmt.Errorf("%s: the store answered more than the %d bytes asked from byte %d (range ignored?)", o.Key, n, off)
	}
	return dst, nil
}

// send sends a conditional GET of o (of n bytes from off where rng) and
// returns the answer's body and ETag: through the Source's getter, or
// where it has none through minio.Core, which returns the response's body
// as it is (minio.Client's GetObject answers through an object that
// starts a goroutine and buffers of its own for each request).
func (s *Source) send(ctx context.Context, o object, rng bool, off, n int64) (io.ReadCloser, string, error) {
	g, err := s.getter.get(ctx, s.client, s.rt, s.loc.Bucket, s.cfg.Region == "")
	if err != nil {
		return nil, "", err
	}
	if g != nil {
		resp, err := g.get(ctx, o.Key, o.ETag, rng, off, n)
		if err != nil {
			return nil, "", err
		}
		return resp.Body, resp.Header.Get("ETag"), nil
	}
	opts, err := getOptions(o)
	if err != nil {
		return nil, "", err
	}
	if rng {
		if err := opts.SetRange(off, off+n-1); err != nil {
			return nil, "", err
		}
	}
	body, info, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.loc.Bucket, o.Key, opts)
	if err != nil {
		return nil, "", err
	}
	return body, info.ETag, nil
}

// getOptions conditions a GET of o on its listed ETag, where it has one.
func getOptions(o object) (minio.GetObjectOptions, error) {
	var opts minio.GetObjectOptions
	if o.ETag != "" {
		if err := opts.SetMatchETag(o.ETag); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// readError classifies a failed GET: a vanished or rewritten object is
// dataset.ErrChanged; anything else is returned as it is for retryable.
func (s *Source) readError(o object, err error) error {
	er := minio.ToErrorResponse(err)
	switch {
	case er.Code == "NoSuchKey" || er.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %s was deleted", dataset.ErrChanged, o.Key)
	case er.Code == "PreconditionFailed" || er.StatusCode == http.StatusPreconditionFailed:
		return fmt.Errorf("%w: %s was rewritten (ETag is no longer %s)", dataset.ErrChanged, o.Key, o.ETag)
	}
	return err
}

// retryable reports whether a failed attempt is worth another: throttling,
// a server error, a timeout or a broken connection; not a client error.
func retryable(err error) bool {
	if errors.Is(err, dataset.ErrChanged) {
		return false
	}
	er := minio.ToErrorResponse(err)
	if er.StatusCode != 0 {
		return er.StatusCode >= 500 || er.StatusCode == http.StatusTooManyRequests ||
			er.Code == "SlowDown" || er.Code == "RequestTimeout"
	}
	return true // transport errors and timeouts
}

// backoff is the pause before retry attempt+1: exponential from 50 ms,
// capped at 2 s, with full jitter.
func backoff(attempt int) time.Duration {
	d := min(50*time.Millisecond<<attempt, 2*time.Second)
	return d/2 + rand.N(d/2+1)
}

// versionOf digests every (name, size, ETag) in order.
func versionOf(names dataset.Names, sizes []int64, etags dataset.Names) string {
	h := sha256.New()
	h.Write([]byte("shade-s3-manifest/1\n"))
	var buf [binary.MaxVarintLen64]byte
	str := func(s []byte) {
		n := binary.PutUvarint(buf[:], uint64(len(s)))
		h.Write(buf[:n])
		h.Write(s)
	}
	etag, stop := iter.Pull2(etags.AllBytes())
	defer stop()
	for i, name := range names.AllBytes() {
		str(name)
		binary.BigEndian.PutUint64(buf[:8], uint64(sizes[i]))
		h.Write(buf[:8])
		_, e, _ := etag()
		str(e)
	}
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:16])
}

// listing is the state file's content: its header, then the objects
// ({"format":...,"listed":...,"objects":[...]}). The objects are written
// and read one at a time (saveListing, loadListing): a listing of
// millions of objects is not built in memory as one JSON document.
type listing struct {
	Format   string    `json:"format"`
	Endpoint string    `json:"endpoint"`
	Bucket   string    `json:"bucket"`
	Prefix   string    `json:"prefix"`
	Listed   time.Time `json:"listed"`
}

const listingFormat = "shade-s3-listing/1"

// statePath is the listing's file in the state directory, "" without one:
// s3-BUCKET-HASH.listing, the hash over endpoint, bucket and prefix (an
// earlier build's JSON listing at that path and ".json" is read once).
func (s *Source) statePath() string {
	if s.cfg.StateDir == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(s.cfg.Endpoint + "\x00" + s.loc.Bucket + "\x00" + s.loc.Prefix))
	return filepath.Join(s.cfg.StateDir, "s3-"+s.loc.Bucket+"-"+hex.EncodeToString(sum[:8])+".listing")
}

// loadListing returns the kept listing, or nil if there is none (or it
// is unreadable, of another form, of another place, or one fresh, if not
// nil, refuses: listed again). Where path holds none, it reads the JSON
// listing an earlier build kept at path+".json"; legacy reports that it
// did.
func loadListing(path, endpoint string, loc Location, fresh func(at time.Time) error) (l *listed, legacy bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		l, err = loadJSONListing(path+".json", endpoint, loc)
		if l != nil && fresh != nil && fresh(l.at) != nil {
			l = nil
		}
		return l, l != nil, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("s3source: listing: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("s3source: listing: %w", err)
	}
	l, err = readListing(f, st.Size(), endpoint, loc, fresh)
	if err != nil {
		return nil, false, nil
	}
	return l, false, nil
}

// The listing's state file, as this package writes it (internal/binfile):
// the endpoint, bucket and prefix it lists, when it was listed (Unix
// nanoseconds), the number of objects, and each object's name (its key
// less the prefix), size and ETag.
const listingMagic = "shade-s3-listing/2\n"

// readListing reads a listing file of size bytes from r, if it is whole,
// of the place asked and, where fresh is not nil, of a time it accepts:
// its error is returned as soon as the time is read, the objects unread.
func readListing(r io.Reader, size int64, endpoint string, loc Location, fresh func(at time.Time) error) (*listed, error) {
	br, err := binfile.NewReader(r, size, listingMagic)
	if err != nil {
		return nil, err
	}
	for _, want := range []string{endpoint, loc.Bucket, loc.Prefix} {
		if got := br.String(dataset.MaxNameBytes); br.Err() == nil && got != want {
			return nil, fmt.Errorf("%w: a listing of another place", binfile.ErrFile)
		}
	}
	l := &listed{prefix: loc.Prefix, at: time.Unix(0, br.Int())}
	if fresh != nil && br.Err() == nil {
		if err := fresh(l.at); err != nil {
			return nil, err
		}
	}
	n := br.Uvarint(uint64(br.Left() / 3)) // an object takes 3 bytes at least
	l.sizes = make([]int64, 0, n)
	left := br.Left() // the objects' bytes
	for i := range n {
		if i == binfile.SizingRecords {
			// Room for the rest by what the objects read so far hold: the
			// names and ETags then seldom grow by doubling.
			for _, b := range []*dataset.NamesBuilder{&l.names, &l.etags} {
				b.Grow(int(n)-b.Len(), br.Estimate(b.Size(), left)-b.Size())
			}
		}
		if err := l.names.AddBytes(br.Bytes(dataset.MaxNameBytes)); err != nil {
			return nil, err
		}
		size := br.Int()
		if err := l.etags.AddBytes(br.Bytes(dataset.MaxNameBytes)); err != nil {
			return nil, err
		}
		l.sizes = append(l.sizes, size)
		if br.Err() != nil {
			return nil, br.Err()
		}
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	return l, nil
}

// loadJSONListing returns the JSON listing at path if it is of this
// format and of the place asked, else nil.
func loadJSONListing(path, endpoint string, loc Location) (*listed, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("s3source: listing: %w", err)
	}
	defer f.Close()
	var h listing
	l := &listed{prefix: loc.Prefix}
	fields := map[string]any{"format": &h.Format, "endpoint": &h.Endpoint, "bucket": &h.Bucket, "prefix": &h.Prefix, "listed": &h.Listed}
	err = jsonstream.Read(json.NewDecoder(bufio.NewReaderSize(f, 64<<10)), fields, "objects", func(dec *json.Decoder) error {
		var o object
		if err := dec.Decode(&o); err != nil {
			return err
		}
		return l.add(o)
	})
	if err != nil || h.Format != listingFormat {
		return nil, nil
	}
	if h.Endpoint != endpoint || h.Bucket != loc.Bucket || h.Prefix != loc.Prefix {
		return nil, nil
	}
	l.at = h.Listed
	return l, nil
}

// saveListing writes the listing, listed at at, to a temporary file and
// renames it to path, and removes the JSON listing of an earlier build
// beside it.
func saveListing(path, endpoint string, loc Location, at time.Time, names dataset.Names, sizes []int64, etags dataset.Names) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("s3source: listing: %w", err)
	}
	err := atomicfile.WriteWith(path, 0o600, func(w io.Writer) error {
		return writeListing(w, endpoint, loc, at, names, func(i int) int64 { return sizes[i] }, etags.At)
	})
	if err != nil {
		return fmt.Errorf("s3source: listing: %w", err)
	}
	if err := os.Remove(path + ".json"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("s3source: listing: %w", err)
	}
	return nil
}

// writeListing writes the listing in its state file's form: object i
// is names.At(i), of size(i) bytes and ETag etag(i).
func writeListing(w io.Writer, endpoint string, loc Location, at time.Time, names dataset.Names, size func(int) int64, etag func(int) string) error {
	bw := binfile.NewWriter(w, listingMagic)
	bw.String(endpoint)
	bw.String(loc.Bucket)
	bw.String(loc.Prefix)
	bw.Uvarint(uint64(at.UnixNano()))
	bw.Uvarint(uint64(names.Len()))
	for i, name := range names.AllBytes() {
		bw.Bytes(name)
		bw.Uvarint(uint64(size(i)))
		bw.String(etag(i))
	}
	return bw.Close()
}
