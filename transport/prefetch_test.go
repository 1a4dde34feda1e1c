package transport_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shade-mesh/shade/mesh"
	"github.com/shade-mesh/shade/transport"
)

// hinted is a node that records the keys the socket hints to Prefetch.
type hinted struct {
	*mesh.Node
	mu   sync.Mutex
	keys []string
}

func (h *hinted) Prefetch(key []byte) {
	h.mu.Lock()
	h.keys = append(h.keys, string(key))
	h.mu.Unlock()
	h.Node.Prefetch(key)
}

// TestPipelinedGetsHintEachKeyOnce: in a pipeline of GETs answered on an
// event loop, every key after the first is hinted to Prefetch once, in
// order, before its GET runs; other commands in the pipeline are not
// hinted; and every answer is the value.
func TestPipelinedGetsHintEachKeyOnce(t *testing.T) {
	node, err := mesh.New(mesh.Config{Name: "hints", CacheSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h := &hinted{Node: node}
	path := filepath.Join(t.TempDir(), "s.sock")
	sock, err := transport.ListenSocket(transport.SocketConfig{Path: path, Loops: 1}, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close(); node.Close() })
	const n = 3*transport.PrefetchAhead + 5
	var want []string
	var pipeline bytes.Buffer
	for i := range n {
		key := fmt.Sprintf("key:%d", i)
		if _, err := node.Set([]byte(key), []byte(key+"-value")); err != nil {
			t.Fatal(err)
		}
		if i == 7 {
			pipeline.WriteString("PING\r\n") // hinted nothing
		}
		fmt.Fprintf(&pipeline, "*2\r\n$3\r\n%s\r\n$%d\r\n%s\r\n", []string{"GET", "get", "Get"}[i%3], len(key), key)
		if i > 0 {
			want = append(want, key)
		}
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(pipeline.Bytes()); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	for i := range n {
		if i == 7 {
			if line, err := r.ReadString('\n'); line != "+PONG\r\n" {
				t.Fatalf("PING: %q %v", line, err)
			}
		}
		value := fmt.Sprintf("key:%d-value", i)
		header, err := r.ReadString('\n')
		if err != nil || header != fmt.Sprintf("$%d\r\n", len(value)) {
			t.Fatalf("GET %d: %q %v", i, header, err)
		}
		got := make([]byte, len(value)+2)
		if _, err := io.ReadFull(r, got); err != nil || string(got) != value+"\r\n" {
			t.Fatalf("GET %d: %q %v", i, got, err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Equal(h.keys, want) {
		t.Fatalf("hinted %d keys %q,\nwant %d %q", len(h.keys), h.keys, len(want), want)
	}
}
