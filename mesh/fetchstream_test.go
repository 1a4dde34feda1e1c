package mesh

import (
	"context"
	"errors"
	"io"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/protocol/shm"
	"github.com/shade-mesh/shade/transport/peer"
)

// TestFetchStreamRoundTrip: a fetch of many samples from an owner comes
// back by MethodFetchStream, each value the file's bytes, read through
// the first time and from memory the second, and the owner gives its
// serving memory back once each reply is sent.
func TestFetchStreamRoundTrip(t *testing.T) {
	m := startMesh(t, 2, meshOpts{samples: 48, minSize: 1 << 10, maxSize: 64 << 10, replicas: 2})
	a, b := m.peers[0].node, m.peers[1].node
	ds := a.ordered[0]
	ids := make([]uint32, 48)
	for i := range ids {
		ids[i] = uint32(i)
	}
	var head wire.FetchHead
	err := b.cluster.callRawName(context.Background(), a.Name(), wire.MethodFetchStream,
		&wire.FetchReq{Dataset: "ds", Version: ds.manifest.Version, IDs: ids[:1], MemoryOnly: true}, &head,
		func(r io.Reader, size int) error { _, err := io.CopyN(io.Discard, r, int64(size)); return err })
	if err != nil {
		t.Fatalf("the owner does not answer MethodFetchStream: %v", err)
	}
	for round, wantHit := range []bool{false, true} {
		items, err := a.fetchFrom(context.Background(), b.Name(), ds, ids, fetchMode{})
		if err != nil {
			t.Fatal(err)
		}
		for i, it := range items {
			if !it.Found || string(it.Value) != string(m.files[i]) {
				t.Fatalf("round %d, sample %d: found %v, %d bytes, want the file's %d", round, i, it.Found, len(it.Value), len(m.files[i]))
			}
			if wantHit && !it.Hit {
				t.Fatalf("round %d, sample %d: not served from memory", round, i)
			}
		}
		waitFor(t, 5*time.Second, "the owner's serving memory to be given back", func() bool { return b.cluster.serving.Used() == 0 })
	}
	if got := ds.counters.Current().ChecksumErrors.Load(); got != 0 {
		t.Fatalf("%d checksum errors", got)
	}
}

// TestFetchFromLyingOwner: an owner (a real peer node with a member's
// certificate) that sends a wrong checksum has that copy discarded and
// counted; one whose head lies about lengths has its reply refused; one
// that does not know MethodFetchStream is asked with MethodFetch.
func TestFetchFromLyingOwner(t *testing.T) {
	var tlsCfg *peer.TLSConfig
	m := startMesh(t, 2, meshOpts{samples: 20, minSize: 100, maxSize: 200,
		configure: func(i int, c *Config) {
			if i == 1 {
				tlsCfg = c.Cluster.TLS
			}
		}})
	a := m.peers[0].node
	ds := a.ordered[0]
	ids := []uint32{0, 1, 2, 3}
	items := func() []wire.FetchItem {
		out := make([]wire.FetchItem, len(ids))
		for i, id := range ids {
			v := m.files[id]
			out[i] = wire.FetchItem{Found: true, Sum: shm.Checksum(v), Value: v}
		}
		return out
	}
	// The liar's answers, set by the test between fetches and read by the
	// liar's handler: the network between them is no synchronisation the
	// race detector sees, so they go through mu.
	var mu sync.Mutex
	var stream, old func() (any, error)
	answer := func(s, o func() (any, error)) {
		mu.Lock()
		defer mu.Unlock()
		stream, old = s, o
	}
	liar, err := peer.Listen(peer.Config{Name: "n1", ListenAddr: "127.0.0.1:0", TLS: tlsCfg}, peer.HandlerFunc(
		func(_ context.Context, _ string, method peer.Method, body []byte) (any, error) {
			var req wire.FetchReq
			if err := msgpack.Unmarshal(body, &req); err != nil {
				return nil, err
			}
			mu.Lock()
			s, o := stream, old
			mu.Unlock()
			switch method {
			case wire.MethodFetchStream:
				return s()
			case wire.MethodFetch:
				return o()
			}
			return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "unknown method"}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer liar.Close()
	fetch := func() ([]wire.FetchItem, error) {
		a.cluster.mu.Lock()
		members := maps.Clone(a.cluster.members)
		members["liar"] = peerInfo{name: "n1", addr: liar.Addr()}
		a.cluster.setMembersLocked(members)
		a.cluster.mu.Unlock()
		return a.fetchFrom(context.Background(), "liar", ds, ids, fetchMode{})
	}

	// A wrong checksum: that copy is discarded and counted.
	answer(func() (any, error) {
		it := items()
		it[1].Sum++
		return wire.FetchRawReply(it, nil), nil
	}, nil)
	before := ds.counters.Current().ChecksumErrors.Load()
	got, err := fetch()
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range got {
		if want := i != 1; it.Found != want || want && string(it.Value) != string(m.files[ids[i]]) {
			t.Fatalf("sample %d: found %v, want %v and the file's bytes", i, it.Found, want)
		}
	}
	if n := ds.counters.Current().ChecksumErrors.Load() - before; n != 1 {
		t.Fatalf("%d checksum errors counted, want 1", n)
	}

	// Heads that lie about the bytes that follow: the reply is refused.
	for name, head := range map[string]*wire.FetchHead{
		"a length of 1 GiB": {Items: []wire.FetchMeta{{Found: true, Len: 1 << 30}, {}, {}, {}}},
		"lengths the bytes do not match": {Items: []wire.FetchMeta{
			{Found: true, Len: uint32(len(m.files[0]))}, {Found: true, Len: uint32(len(m.files[1]))}, {}, {}}},
		"too few items": {Items: []wire.FetchMeta{{}}},
	} {
		answer(func() (any, error) {
			return &peer.RawReply{Head: head, Values: [][]byte{m.files[0]}}, nil
		}, nil)
		if _, err := fetch(); !errors.Is(err, wire.ErrBadFetchReply) {
			t.Errorf("%s: %v, want wire.ErrBadFetchReply", name, err)
		}
	}

	// An owner of an older build: MethodFetchStream is unknown to it.
	answer(func() (any, error) { return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "unknown method 14"} },
		func() (any, error) { return &wire.FetchResp{Items: items()}, nil })
	got, err = fetch()
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range got {
		if !it.Found || string(it.Value) != string(m.files[ids[i]]) {
			t.Fatalf("from an older owner, sample %d: found %v", i, it.Found)
		}
	}
}

// TestCopyBuffer: values copied into a fetch reply's buffer lie back to
// back in it, one that does not fit in the room left is refused without
// the buffer growing, and a copy given back leaves no byte behind.
func TestCopyBuffer(t *testing.T) {
	c := newCopyBuffer(10)
	var got []string
	add := func(v string) bool {
		dst, ok := c.reserve(len(v))
		if ok {
			if len(dst) != len(v) || cap(dst) != len(v) {
				t.Fatalf("reserved %d bytes (capacity %d) for %q", len(dst), cap(dst), v)
			}
			copy(dst, v)
			got = append(got, string(dst))
		}
		return ok
	}
	for _, v := range []string{"abcd", "", "efg"} {
		if !add(v) {
			t.Fatalf("%q refused with room left", v)
		}
	}
	if add("hijk") {
		t.Fatal("a value past the room was taken")
	}
	if !add("xy") {
		t.Fatal("a value to give back was refused")
	}
	c.unreserve(2)
	got = got[:len(got)-1]
	if !add("hij") {
		t.Fatal("the last value fitting the room was refused")
	}
	if string(c.b) != "abcdefghij" || strings.Join(got, "") != "abcdefghij" {
		t.Fatalf("buffer %q, values %q", c.b, got)
	}
	if d, ok := newCopyBuffer(0).reserve(0); !ok || len(d) != 0 {
		t.Fatalf("an empty buffer refused an empty value")
	}
}
