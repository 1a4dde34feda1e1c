package s3source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/minio/minio-go/v7"
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
	return "s3://" + s.loc.Bucket + "/" + s.loc.Prefix + AsideFolder + name
}

// ReadAside returns the object name beside the dataset
// (PREFIX/.shade/NAME) as a stream, and its size. It holds one of the
// MaxInFlight slots until closed and has no timeout: the caller bounds it
// with ctx. An object that is not there gives an error wrapping
// ErrNoAside; any other failure, one wrapping ErrRead. It is not retried.
func (s *Source) ReadAside(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	key := s.loc.Prefix + AsideFolder + name
	s.slots <- struct{}{}
	body, info, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.loc.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		<-s.slots
		if er := minio.ToErrorResponse(err); er.Code == "NoSuchKey" || er.StatusCode == http.StatusNotFound {
			return nil, 0, fmt.Errorf("%w: %s", ErrNoAside, s.AsideURL(name))
		}
		return nil, 0, fmt.Errorf("%w: %s: %w", ErrRead, key, err)
	}
	if info.Size < 0 {
		body.Close()
		<-s.slots
		return nil, 0, fmt.Errorf("%w: %s: the answer gave no length", ErrRead, key)
	}
	return &stream{body: body, s: s, o: object{Key: key, Size: info.Size}}, info.Size, nil
}

// WriteAside puts data as the object name beside the dataset
// (PREFIX/.shade/NAME), replacing what was there, retrying throttled or
// failed attempts. The store checks the body against its MD5.
func (s *Source) WriteAside(ctx context.Context, name string, data []byte) error {
	return s.put(ctx, s.loc.Prefix+AsideFolder+name, int64(len(data)), func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}
