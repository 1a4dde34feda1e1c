package main

import (
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
	if err := runDatasetUpload(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "uploaded 0 samples") || !strings.Contains(out.String(), "50 already there") {
		t.Fatalf("a second upload: %s", out.String())
	}
	if err := runDatasetUpload([]string{dir}, io.Discard, io.Discard); err == nil {
		t.Fatal("upload without a URL accepted")
	}
}
