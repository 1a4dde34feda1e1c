package s3test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/minio/minio-go/v7"
)

// TestStopAndRestart stops a gateway and starts it again: while stopped
// nothing answers on its port; after Restart it answers on the same
// endpoint with the same keys and serves the objects it held.
func TestStopAndRestart(t *testing.T) {
	g := Start(t)
	g.CreateBucket(t, "shade-restart")
	want := []byte("kept across a restart")
	g.Put(t, "shade-restart", "k", want)
	endpoint := g.Endpoint
	get := func() ([]byte, error) {
		obj, err := g.client.GetObject(context.Background(), "shade-restart", "k", minio.GetObjectOptions{})
		if err != nil {
			return nil, err
		}
		defer obj.Close()
		return io.ReadAll(obj)
	}

	g.Stop(t)
	if b, err := get(); err == nil {
		t.Fatalf("stopped gateway served %q", b)
	}
	g.Stop(t) // a second Stop does nothing

	g.Restart(t)
	if g.Endpoint != endpoint {
		t.Fatalf("endpoint %s after Restart, was %s", g.Endpoint, endpoint)
	}
	got, err := get()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after Restart: %q, %v; want %q", got, err, want)
	}
}
