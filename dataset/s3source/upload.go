package s3source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/internal/ctxsleep"
)

// UploadReport counts what Upload did.
type UploadReport struct {
	// Uploaded and Skipped count samples; Skipped ones were already in the
	// bucket with the same size.
	Uploaded, Skipped int
	// Bytes is the size of what was uploaded.
	Bytes int64
}

// Upload puts every sample of the directory dir (dataset.Scan's samples:
// hidden files skipped, links followed) under cfg.URL's prefix, keyed by
// its manifest name, so that Open on the same URL serves the same names.
// It creates the bucket if it does not exist; an object already there with
// the same size is skipped, so an interrupted upload resumes. At most
// cfg.MaxInFlight objects are sent at once. progress, if not nil, is called
// with (done, total) samples, from one goroutine at a time.
//
// For a CLASS/FILE tree the S3 key order equals the directory's order; in
// deeper trees they can differ, and Open's manifest follows key order.
func Upload(ctx context.Context, cfg Config, dir string, progress func(done, total int)) (UploadReport, error) {
	var rep UploadReport
	cfg = cfg.withDefaults()
	loc, err := ParseURL(cfg.URL)
	if err != nil {
		return rep, err
	}
	m, err := dataset.Scan(dir, nil)
	if err != nil {
		return rep, err
	}
	client, err := NewClient(cfg)
	if err != nil {
		return rep, err
	}
	s := &Source{cfg: cfg, loc: loc, client: client}
	ok, err := client.BucketExists(ctx, loc.Bucket)
	if err != nil {
		return rep, s.openError(err)
	}
	if !ok {
		if err := client.MakeBucket(ctx, loc.Bucket, minio.MakeBucketOptions{Region: cfg.Region}); err != nil {
			return rep, s.openError(err)
		}
	}
	have := map[string]int64{}
	for o := range client.ListObjects(ctx, loc.Bucket, minio.ListObjectsOptions{Prefix: loc.Prefix, Recursive: true}) {
		if o.Err != nil {
			return rep, s.openError(o.Err)
		}
		have[o.Key] = o.Size
	}

	var (
		mu       sync.Mutex
		done     int
		firstErr error
		uploaded atomic.Int64
		bytes    atomic.Int64
		wg       sync.WaitGroup
		slots    = make(chan struct{}, cfg.MaxInFlight)
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	finish := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil && firstErr == nil {
			firstErr = err
			cancel()
		}
		done++
		if progress != nil {
			progress(done, m.Len())
		}
	}
	for i, name := range m.Names.All() {
		key := loc.Prefix + name
		if size, ok := have[key]; ok && size == m.Sizes.At(i) {
			rep.Skipped++
			finish(nil)
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			path := filepath.Join(dir, filepath.FromSlash(name))
			err := s.put(ctx, key, m.Sizes.At(i), func() (io.ReadCloser, error) { return os.Open(path) })
			if err == nil {
				uploaded.Add(1)
				bytes.Add(m.Sizes.At(i))
			}
			finish(err)
		}()
	}
	wg.Wait()
	rep.Uploaded, rep.Bytes = int(uploaded.Load()), bytes.Load()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return rep, firstErr
}

// put uploads one object of size bytes, from what open returns at each
// attempt, retrying throttled or failed attempts.
func (s *Source) put(ctx context.Context, key string, size int64, open func() (io.ReadCloser, error)) error {
	var err error
	for attempt := 0; ; attempt++ {
		err = s.putOnce(ctx, key, size, open)
		if err == nil || !retryable(err) || attempt >= s.cfg.Retries || ctx.Err() != nil {
			break
		}
		ctxsleep.Sleep(ctx, backoff(attempt))
	}
	if err != nil {
		return fmt.Errorf("s3source: upload %s: %w", key, err)
	}
	return nil
}

// putOnce PUTs the object once, within RequestTimeout and the time its
// body takes at 1 MiB/s. The request's head is signed and the body
// sent as it is, with its MD5 for the store to check (Content-MD5): to an
// endpoint without TLS minio-go would otherwise sign the body in signed
// chunks (aws-chunked), about a tenth of the client's CPU for a PUT of a
// small object (BenchmarkUpload, four runs each: 492-563 against
// 546-622 us of CPU an object).
func (s *Source) putOnce(ctx context.Context, key string, size int64, open func() (io.ReadCloser, error)) error {
	body, err := open()
	if err != nil {
		return err
	}
	defer body.Close()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout+time.Duration(size)*time.Second/minRate)
	defer cancel()
	info, err := s.client.PutObject(ctx, s.loc.Bucket, key, body, size, minio.PutObjectOptions{
		ContentType: "application/octet-stream", SendContentMd5: true, DisableContentSha256: true})
	if err != nil {
		return err
	}
	if info.Size != size {
		return errors.New("size changed while uploading")
	}
	return nil
}
