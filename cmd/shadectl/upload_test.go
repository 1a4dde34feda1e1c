package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/dataset/s3source"
	"github.com/shade-mesh/shade/dataset/shards"
	"github.com/shade-mesh/shade/internal/s3test"
)

func TestDatasetUpload(t *testing.T) {
	g := s3test.Start(t)
	dir := t.TempDir()
	for i := range 50 {
		class := filepath.Join(dir, fmt.Sprintf("class%d", i%5))
		os.MkdirAll(class, 0o755)
		os.WriteFile(filepath.Join(class, fmt.Sprintf("%03d.png", i)), bytes.Repeat([]byte{byte(i)}, 10+i), 0o644)
	}
	os.WriteFile(filepath.Join(dir, ".shade-import.json"), []byte("{}"), 0o644)
	t.Setenv("AWS_ACCESS_KEY_ID", g.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", g.SecretKey)
	args := []string{dir, "s3://shade-up/fm/train", "--s3-endpoint", g.Endpoint, "--s3-path-style"}
	var out bytes.Buffer
	if err := runDatasetUpload(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "uploaded 50 samples") {
		t.Fatalf("report: %s", out.String())
	}
	local, err := dataset.OpenDir(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	src, err := s3source.Open(context.Background(), s3source.Config{URL: "s3://shade-up/fm/train", Endpoint: g.Endpoint, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := src.Manifest().Names.Strings(), local.Manifest().Names.Strings(); !slices.Equal(got, want) {
		t.Fatalf("names in the bucket %v, want %v", got, want)
	}
	for i := range local.Manifest().Len() {
		a, _ := local.Read(i, nil)
		b, err := src.Read(i, nil)
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("sample %d: %v", i, err)
		}
	}
	out.Reset()
	if err := runDatasetIndex([]string{"s3://shade-up/fm/train", "--json", "--s3-endpoint", g.Endpoint, "--s3-path-style"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"samples": 50`) || !strings.Contains(out.String(), `"classes": 5`) ||
		!strings.Contains(out.String(), src.Manifest().Version) {
		t.Fatalf("index of the bucket: %s", out.String())
	}
	out.Reset()
	if err := runDatasetIndex([]string{"s3://shade-up/fm/train", "--publish", "--s3-endpoint", g.Endpoint, "--s3-path-style"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "published s3://shade-up/fm/train/.shade/listing\n") {
		t.Fatalf("index --publish of the bucket: %s", out.String())
	}
	pub, err := s3source.Open(context.Background(), s3source.Config{URL: "s3://shade-up/fm/train", Endpoint: g.Endpoint, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	if from, _, _ := pub.Listing(); from != s3source.ListingPublished || pub.Manifest().Version != src.Manifest().Version {
		t.Fatalf("Open after index --publish: listing %s, version %s; want the published listing of %s", from, pub.Manifest().Version, src.Manifest().Version)
	}
	out.Reset()
	if err := runDatasetUpload(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "uploaded 0 samples") || !strings.Contains(out.String(), "50 already there") {
		t.Fatalf("a second upload: %s", out.String())
	}
	// An upload that adds a sample publishes the listing again.
	os.WriteFile(filepath.Join(dir, "class0", "new.png"), []byte("a sample added later"), 0o644)
	out.Reset()
	if err := runDatasetUpload(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "uploaded 1 samples") || !strings.Contains(out.String(), "published s3://shade-up/fm/train/.shade/listing again (51 samples)") {
		t.Fatalf("an upload after publishing: %s", out.String())
	}
	if pub, err = s3source.Open(context.Background(), s3source.Config{URL: "s3://shade-up/fm/train", Endpoint: g.Endpoint, PathStyle: true}); err != nil {
		t.Fatal(err)
	}
	if from, _, _ := pub.Listing(); from != s3source.ListingPublished || pub.Manifest().Len() != 51 {
		t.Fatalf("Open after the upload: listing %s, %d samples; want the published listing of 51", from, pub.Manifest().Len())
	}
	out.Reset()
	if err := runDatasetUnpublish([]string{"s3://shade-up/fm/train", "--s3-endpoint", g.Endpoint, "--s3-path-style"}, &out, io.Discard); err != nil ||
		out.String() != "removed s3://shade-up/fm/train/.shade/listing\n" {
		t.Fatalf("unpublish of the bucket: %v, printed %q", err, out.String())
	}
	if pub, err = s3source.Open(context.Background(), s3source.Config{URL: "s3://shade-up/fm/train", Endpoint: g.Endpoint, PathStyle: true}); err != nil {
		t.Fatal(err)
	}
	if from, _, _ := pub.Listing(); from != s3source.ListingListed {
		t.Fatalf("Open after unpublish: listing %s, want listed", from)
	}
	if err := runDatasetUpload([]string{dir}, io.Discard, io.Discard); err == nil {
		t.Fatal("upload without a URL accepted")
	}
}

// "dataset index shards:s3://... --publish" writes the index beside the
// shards, and a peer's Open then reads it instead of the shards.
func TestDatasetIndexPublish(t *testing.T) {
	g := s3test.Start(t)
	g.CreateBucket(t, "shade-wds")
	dir := t.TempDir()
	for s := range 2 {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for j := range 5 {
			data := []byte(fmt.Sprintf("sample %d of shard %d", j, s))
			tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("s%d-%d.txt", s, j), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
			tw.Write(data)
		}
		tw.Close()
		g.Put(t, "shade-wds", fmt.Sprintf("wds/shard-%d.tar", s), buf.Bytes())
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("shard-%d.tar", s)), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("AWS_ACCESS_KEY_ID", g.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", g.SecretKey)
	// A peer indexed the shards and kept the index in its state
	// directory: publishing from there reads no shard again.
	state := t.TempDir()
	if _, err := shards.Open(context.Background(), shards.Config{Location: "s3://shade-wds/wds", StateDir: state,
		S3: s3source.Config{Endpoint: g.Endpoint, PathStyle: true}}); err != nil {
		t.Fatal(err)
	}
	before := g.GetCounts(t, "shade-wds")
	var out bytes.Buffer
	if err := runDatasetIndex([]string{"shards:s3://shade-wds/wds", "--publish", "--state-dir", state, "--s3-endpoint", g.Endpoint, "--s3-path-style"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if after := g.GetCounts(t, "shade-wds"); after["wds/shard-0.tar"] != before["wds/shard-0.tar"] || after["wds/shard-1.tar"] != before["wds/shard-1.tar"] {
		t.Fatalf("publishing the index kept in a state directory read the shards: GETs %v, before %v", after, before)
	}
	if want := "published s3://shade-wds/wds/.shade/shards.index\n"; !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "samples  10\n") {
		t.Fatalf("index --publish printed\n%s\nwant the 10 samples and %q", out.String(), want)
	}
	src, err := shards.Open(context.Background(), shards.Config{Location: "s3://shade-wds/wds",
		S3: s3source.Config{Endpoint: g.Endpoint, PathStyle: true}})
	if err != nil {
		t.Fatal(err)
	}
	if from, skipped := src.IndexFrom(); from != shards.IndexPublished || src.Manifest().Len() != 10 {
		t.Fatalf("Open after index --publish: index %s (%v), %d samples; want the published index of 10", from, skipped, src.Manifest().Len())
	}
	out.Reset()
	if err := runDatasetIndex([]string{"shards:" + dir, "--publish"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := "published " + filepath.Join(dir, ".shade", "shards.index") + "\n"; !strings.Contains(out.String(), want) {
		t.Fatalf("index shards:DIR --publish printed\n%s\nwant %q", out.String(), want)
	}
	if err := runDatasetIndex([]string{t.TempDir(), "--publish"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--publish is for s3://") {
		t.Fatalf("index DIR --publish: %v, want refused", err)
	}

	// Unpublished: the index (and a claim a dead peer left) deleted, in
	// the bucket and in the directory; an Open builds the index again.
	g.Put(t, "shade-wds", "wds/.shade/"+shards.ClaimName, []byte("peer\n0123\nbeat 3, 1 of 2 done\n"))
	for _, c := range []struct{ loc, want string }{
		{"shards:s3://shade-wds/wds", "removed s3://shade-wds/wds/.shade/shards.index\nremoved s3://shade-wds/wds/.shade/shards.index.claim\n"},
		{"shards:" + dir, "removed " + filepath.Join(dir, ".shade", "shards.index") + "\n"},
	} {
		out.Reset()
		if err := runDatasetUnpublish([]string{c.loc, "--s3-endpoint", g.Endpoint, "--s3-path-style"}, &out, io.Discard); err != nil || out.String() != c.want {
			t.Fatalf("unpublish %s: %v, printed\n%s\nwant\n%s", c.loc, err, out.String(), c.want)
		}
		out.Reset()
		if err := runDatasetUnpublish([]string{c.loc, "--s3-endpoint", g.Endpoint, "--s3-path-style"}, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "nothing published beside") {
			t.Fatalf("unpublish %s again: %v, printed %q; want nothing to remove", c.loc, err, out.String())
		}
	}
	src, err = shards.Open(context.Background(), shards.Config{Location: "s3://shade-wds/wds", S3: s3source.Config{Endpoint: g.Endpoint, PathStyle: true}})
	if err != nil {
		t.Fatal(err)
	}
	if from, _ := src.IndexFrom(); from != shards.IndexBuilt {
		t.Fatalf("Open after unpublish: index %s, want built", from)
	}
	if err := runDatasetUnpublish([]string{t.TempDir()}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "nothing is published beside a dataset folder") {
		t.Fatalf("unpublish DIR: %v, want refused", err)
	}
}
