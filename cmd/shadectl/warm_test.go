package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh/meshtest"
)

func TestWarmPreloadsMostImportantFirst(t *testing.T) {
	p := meshtest.Start(t, meshtest.Options{Node: "node-a", Dataset: "toy", Data: testsupport.DatasetSpec{Samples: 60}, CacheSize: 64 << 20})
	c := p.Client(t)
	args := []any{"SHADE.REPORT", p.Dataset, 0}
	for i := 0; i < 60; i++ {
		args = append(args, i, float64(i%10))
	}
	if err := c.Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := runWarm([]string{"--sockets", p.Socket, p.Dataset}, &out, &errOut); err != nil {
		t.Fatalf("warm: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "60 samples of "+p.Dataset+" preloaded") {
		t.Errorf("warm printed %q; want all 60 samples preloaded", out.String())
	}
	if n, _ := c.DBSize(context.Background()).Result(); n != 60 {
		t.Errorf("%d entries cached after warm, want 60", n)
	}
	if err := runWarm([]string{"--sockets", p.Socket, "nosuch"}, &out, &errOut); err == nil {
		t.Error("warming an unknown dataset succeeded")
	}
}
