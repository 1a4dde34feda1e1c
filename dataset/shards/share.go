package shards

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/shade-mesh/shade/dataset/claim"
	"github.com/shade-mesh/shade/dataset/s3source"
)

// ClaimName is the claim on building the index (Config.Share, package
// claim), in the shards' location's hidden folder (s3source.AsideFolder)
// beside PublishedIndex.
const ClaimName = PublishedIndex + ".claim"

// shared returns the index of st's shards, built by this Open under a
// claim or published by the Open that held the claim (s.from says which).
// Where the claim cannot be read or written, it builds the index alone
// (s.share says why). With a claim of its own, release is not nil
// and must be called once the index is published (or Open failed).
func (s *Source) shared(ctx context.Context, st store, cfg Config) (*indexBuilder, func(), error) {
	b, out, release, err := claim.Build(ctx, st.claimPlace(), cfg.Claim,
		func(ctx context.Context) (*indexBuilder, bool, error) {
			b, err := st.published(ctx)
			return b, b != nil, err
		},
		func(ctx context.Context, progress func(done, total int)) (*indexBuilder, error) {
			return buildIndex(ctx, st, cfg.IndexShards, func(done, total int) {
				progress(done, total)
				if cfg.Progress != nil {
					cfg.Progress(done, total)
				}
			})
		})
	if err != nil {
		return nil, nil, err
	}
	s.share, s.from = out, IndexBuilt
	if out.BuiltBy != "" {
		s.from = IndexPublished
	}
	s.skipped = cmp.Or(out.Skipped, s.skipped)
	return b, release, nil
}

// claimPlace is a directory's claim: DIR/.shade/shards.index.claim.
func (d *dirStore) claimPlace() claim.Place {
	return claim.File(filepath.Join(d.root, filepath.FromSlash(s3source.AsideFolder), ClaimName))
}

// claimPlace is a bucket's claim: PREFIX/.shade/shards.index.claim.
func (s *s3Store) claimPlace() claim.Place { return s.src.AsideClaim(ClaimName) }

// Unpublish deletes the index published beside the shards at
// cfg.Location (and a claim on building it, left by an Open that ended
// while it built), without listing or reading the shards, and returns
// where what it deleted was. Every later Open with no index kept builds
// it again (and with Share, publishes it again).
func Unpublish(ctx context.Context, cfg Config) ([]string, error) {
	var removed []string
	for _, name := range []string{PublishedIndex, ClaimName} {
		if s3source.IsURL(cfg.Location) {
			c := cfg.S3
			c.URL = cfg.Location
			url, err := s3source.RemoveAside(ctx, c, name)
			if err != nil {
				return removed, err
			}
			if url != "" {
				removed = append(removed, url)
			}
			continue
		}
		path := filepath.Join(cfg.Location, filepath.FromSlash(s3source.AsideFolder), name)
		switch err := os.Remove(path); {
		case err == nil:
			removed = append(removed, path)
		case !errors.Is(err, fs.ErrNotExist):
			return removed, fmt.Errorf("shards: %w", err)
		}
	}
	return removed, nil
}
