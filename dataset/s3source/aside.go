package s3source

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/shade-mesh/shade/dataset/claim"
)

// AsideFolder is the folder under a dataset's prefix that holds what tools
// keep beside the dataset, such as a shards dataset's published index. It
// is hidden: Open never lists what it holds as samples, so nothing written
// there changes the dataset's version.
const AsideFolder = ".shade/"

// ErrNoAside is wrapped by ReadAside's error when the object is not there.
var ErrNoAside = errors.New("s3source: nothing kept beside the dataset under that name")

// AsideURL is the s3:// URL of the object name beside the dataset.
func (s *Source) AsideURL(name string) string {
	return "s3://" + s.loc.Bucket + "/" + s.loc.asideKey(name)
}

// asideKey is the key of the object name beside the dataset at loc.
func (loc Location) asideKey(name string) string { return loc.Prefix + AsideFolder + name }

// minRate is the slowest, in bytes a second, an object's body may move
// once its request began: ReadAside's and a PUT's time for the body on
// top of RequestTimeout.
const minRate = 1 << 20

// ReadAside returns the object name beside the dataset
// (PREFIX/.shade/NAME) as a stream, and its size. It holds one of the
// MaxInFlight slots until closed. The answer must begin within
// RequestTimeout and its body come at 1 MiB/s or faster, or ctx ends it. An
// object that is not there gives an error wrapping ErrNoAside; any other
// failure, one wrapping ErrRead. It is not retried.
func (s *Source) ReadAside(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	key := s.loc.asideKey(name)
	s.slots <- struct{}{}
	ctx, cancel := context.WithCancel(ctx)
	deadline := time.AfterFunc(s.cfg.RequestTimeout, cancel)
	fail := func(err error) (io.ReadCloser, int64, error) {
		deadline.Stop()
		cancel()
		<-s.slots
		return nil, 0, err
	}
	body, info, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.loc.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		if notThere(err) {
			return fail(fmt.Errorf("%w: %s", ErrNoAside, s.AsideURL(name)))
		}
		return fail(fmt.Errorf("%w: %s: %w", ErrRead, key, err))
	}
	if info.Size < 0 {
		body.Close()
		return fail(fmt.Errorf("%w: %s: the answer gave no length", ErrRead, key))
	}
	deadline.Reset(s.cfg.RequestTimeout + time.Duration(info.Size)*time.Second/minRate)
	return &asideStream{stream: stream{body: body, s: s, o: object{Key: key, Size: info.Size}}, end: func() {
		deadline.Stop()
		cancel()
	}}, info.Size, nil
}

// asideStream is ReadAside's stream: closing it ends its deadline.
type asideStream struct {
	stream
	end func()
}

func (a *asideStream) Close() error {
	defer a.end()
	return a.stream.Close()
}

// HasAside reports whether the object name is beside cfg.URL's dataset
// (PREFIX/.shade/NAME), without listing the prefix.
func HasAside(ctx context.Context, cfg Config, name string) (bool, error) {
	client, loc, cfg, err := asideClient(cfg)
	if err != nil {
		return false, err
	}
	return statAside(ctx, client, cfg, loc, name)
}

// RemoveAside deletes the object name beside cfg.URL's dataset
// (PREFIX/.shade/NAME), without listing the prefix, and returns its
// s3:// URL, or "" where none was there.
func RemoveAside(ctx context.Context, cfg Config, name string) (string, error) {
	client, loc, cfg, err := asideClient(cfg)
	if err != nil {
		return "", err
	}
	if there, err := statAside(ctx, client, cfg, loc, name); err != nil || !there {
		return "", err
	}
	return "s3://" + loc.Bucket + "/" + loc.asideKey(name), removeObject(ctx, client, cfg, loc, name)
}

// statAside reports whether the object name is beside loc's dataset, by
// a HEAD within the request timeout.
func statAside(ctx context.Context, client *minio.Client, cfg Config, loc Location, name string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	_, err := client.StatObject(ctx, loc.Bucket, loc.asideKey(name), minio.StatObjectOptions{})
	if notThere(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%w: %s: %w", ErrRead, loc.asideKey(name), err)
	}
	return true, nil
}

// asideClient is a client of cfg's store and the place of its dataset,
// with cfg's defaults filled.
func asideClient(cfg Config) (*minio.Client, Location, Config, error) {
	cfg = cfg.withDefaults()
	loc, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, Location{}, cfg, err
	}
	client, err := NewClient(cfg)
	return client, loc, cfg, err
}

// removeObject deletes the object name beside loc's dataset within the
// request timeout; one not there is no error.
func removeObject(ctx context.Context, client *minio.Client, cfg Config, loc Location, name string) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	err := client.RemoveObject(ctx, loc.Bucket, loc.asideKey(name), minio.RemoveObjectOptions{})
	if err != nil && !notThere(err) {
		return fmt.Errorf("s3source: deleting s3://%s/%s: %w", loc.Bucket, loc.asideKey(name), err)
	}
	return nil
}

// notThere reports whether err is the store's answer that the object is
// not there.
func notThere(err error) bool {
	er := minio.ToErrorResponse(err)
	return er.Code == "NoSuchKey" || er.StatusCode == http.StatusNotFound
}

// WriteAside puts data as the object name beside the dataset
// (PREFIX/.shade/NAME), replacing what was there, retrying throttled or
// failed attempts. The store checks the body against its MD5.
func (s *Source) WriteAside(ctx context.Context, name string, data []byte) error {
	return s.put(ctx, s.loc.asideKey(name), int64(len(data)), func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}

// RemoveAside deletes the object name beside the dataset
// (PREFIX/.shade/NAME), within RequestTimeout; one that is not there is
// no error. It is not retried.
func (s *Source) RemoveAside(ctx context.Context, name string) error {
	s.slots <- struct{}{}
	defer func() { <-s.slots }()
	return removeObject(ctx, s.client, s.cfg, s.loc, name)
}

// AsideClaim is a claim.Place in the object name beside the dataset
// (PREFIX/.shade/NAME): a claim on building what is published there.
func (s *Source) AsideClaim(name string) claim.Place { return asideClaim{s, name} }

type asideClaim struct {
	s    *Source
	name string
}

func (a asideClaim) Read(ctx context.Context) (string, error) {
	r, _, err := a.s.ReadAside(ctx, a.name)
	if errors.Is(err, ErrNoAside) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, claim.MaxText))
	return string(b), err
}

func (a asideClaim) Write(ctx context.Context, text string) error {
	return a.s.WriteAside(ctx, a.name, []byte(text))
}

func (a asideClaim) Drop(ctx context.Context) error { return a.s.RemoveAside(ctx, a.name) }

// ListingOrigin is where Open found a Source's listing.
type ListingOrigin string

const (
	// ListingListed: the prefix was listed.
	ListingListed ListingOrigin = "listed"
	// ListingKept: read from Config.StateDir.
	ListingKept ListingOrigin = "kept"
	// ListingPublished: read from the listing published beside the
	// dataset (PublishListing, by any machine).
	ListingPublished ListingOrigin = "published"
)

// PublishedListing is the published listing's name beside the dataset.
const PublishedListing = "listing"

// Listing says where Open found the listing, when the prefix was listed
// and, where a published listing was there but not used (of another
// place, damaged, not readable, or older than Config.MaxAge), why: the
// prefix was then listed.
func (s *Source) Listing() (from ListingOrigin, listedAt time.Time, skipped error) {
	return s.from, s.listedAt, s.skipped
}

// PublishListing puts the Source's listing beside the dataset
// (PREFIX/.shade/listing), for an Open on any machine with none kept to
// read in one GET instead of listing the prefix. What it holds is the
// dataset until it is published again, as a kept listing is until
// Relist: objects added after are not served, and an object changed or
// deleted after fails its reads (dataset.ErrChanged), never serving
// other bytes. Open with Relist first, to publish what the prefix holds
// now.
func (s *Source) PublishListing(ctx context.Context) error {
	var buf bytes.Buffer
	// Written with no endpoint: the bucket and prefix name the place,
	// whichever address of the store reaches it.
	if err := writeListing(&buf, "", s.loc, s.listedAt, s.m.Names, s.m.Sizes.At, s.etags.at); err != nil {
		return err
	}
	return s.WriteAside(ctx, PublishedListing, buf.Bytes())
}

// ListingClaim is the claim on listing the prefix (Config.Share) beside
// the dataset, next to PublishedListing.
const ListingClaim = PublishedListing + ".claim"

// Shared says, for an Open with Config.Share, whose published listing it
// waited for ("" where it read none it waited for), and why the listing
// it made was not shared (an error wrapping claim.ErrNotShared; nil where
// it was, or where it listed nothing).
func (s *Source) Shared() (builtBy string, err error) {
	return s.share.BuiltBy, cmp.Or(s.share.Alone, s.publishErr)
}

// sharedListing returns the prefix's listing, listed by this Open under a
// claim or published by the Open that held the claim (s.from says which).
// Where the claim cannot be read or written, it lists alone (s.share says
// why). With a claim of its own, release is not nil and must be called
// once the listing is published (or Open failed).
func (s *Source) sharedListing(ctx context.Context) (*listed, func(), error) {
	l, out, release, err := claim.Build(ctx, s.AsideClaim(ListingClaim), s.cfg.Claim,
		func(ctx context.Context) (*listed, bool, error) {
			l, err := s.publishedListing(ctx)
			return l, l != nil, err
		},
		func(ctx context.Context, _ func(done, total int)) (*listed, error) { return s.list(ctx) })
	if err != nil {
		return nil, nil, err
	}
	s.share, s.from = out, ListingListed
	if out.BuiltBy != "" {
		s.from = ListingPublished
	}
	s.skipped = cmp.Or(out.Skipped, s.skipped)
	return l, release, nil
}

// publishedListing reads the listing published beside the dataset: nil
// where none is, or an error saying why the one there is not used (of
// another place, damaged, or older than Config.MaxAge).
func (s *Source) publishedListing(ctx context.Context) (*listed, error) {
	r, size, err := s.ReadAside(ctx, PublishedListing)
	if errors.Is(err, ErrNoAside) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer r.Close()
	l, err := readListing(r, size, "", s.loc, s.tooOld)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.AsideURL(PublishedListing), err)
	}
	return l, nil
}
