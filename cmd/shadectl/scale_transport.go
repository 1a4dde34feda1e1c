package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/internal/workers"
	"github.com/shade-mesh/shade/transport/peer"
)

// callPair is two peer-transport nodes in this process, over loopback
// QUIC with a mesh certificate each, the second answering every request
// at once with nothing: what the leader's transport does for a request,
// without the mesh's work on it, which the model's other steps measure.
type callPair struct {
	dir      string
	from, to *peer.Node
}

func newCallPair() (*callPair, error) {
	dir, err := os.MkdirTemp("", "shade-scale-")
	if err != nil {
		return nil, err
	}
	p := &callPair{dir: dir}
	listen := func(name string) (*peer.Node, error) {
		tc, err := peer.DevTLS(dir, name)
		if err != nil {
			return nil, err
		}
		return peer.Listen(peer.Config{ListenAddr: "127.0.0.1:0", TLS: tc, RequestTimeout: time.Minute, MaxFrame: 64 << 20, MaxRequestMemory: 1 << 30},
			peer.HandlerFunc(func(context.Context, string, peer.Method, []byte) (any, error) { return nil, nil }))
	}
	if p.to, err = listen("leader"); err == nil {
		p.from, err = listen("member")
	}
	if err != nil {
		p.close()
		return nil, fmt.Errorf("transport for the model: %w", err)
	}
	return p, nil
}

func (p *callPair) close() {
	for _, n := range []*peer.Node{p.from, p.to} {
		if n != nil {
			n.Close()
		}
	}
	os.RemoveAll(p.dir)
}

// measure runs calls requests of body (a message's msgpack) through the
// pair into s, parallel at a time (as requests from many members reach
// the leader together), after one untimed call that opens the
// connection. Both ends' CPU is counted: the leader's share is less.
func (p *callPair) measure(s *mergeStep, m peer.Method, body []byte, calls, parallel int) error {
	ctx := context.Background()
	raw := msgpack.RawMessage(body)
	call := func() error { return p.from.Call(ctx, p.to.Addr(), "leader", m, raw, nil) }
	if err := call(); err != nil {
		return fmt.Errorf("transport for the model: %w", err)
	}
	return s.run(func() error {
		var mu sync.Mutex
		var first error
		workers.Each(calls, parallel, func(int) {
			if err := call(); err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		})
		return first
	})
}

// transportSteps adds to res the transport's work for the requests the
// leader takes and sends in an epoch, each kind measured with calls of
// its average size: the reports (a rank's, or its done's), the scores
// sent to owners, the nodes' resident sets, the table replicated and the
// order published (in relay pieces). Each call's body is a msgpack bin
// of the kind's average size, which the transport checks and carries as
// it does any body of that size.
func transportSteps(res *mergeResult, kinds []transportKind) error {
	p, err := newCallPair()
	if err != nil {
		return err
	}
	defer p.close()
	for _, k := range kinds {
		if k.count < 1 || k.size < 1 {
			continue
		}
		measured := min(int(k.count+0.5), k.limit)
		measured = max(measured, 1)
		s := &mergeStep{Name: k.name, Times: k.count / float64(measured), Between: k.between,
			Note: fmt.Sprintf("%.0f requests an epoch of %s each: QUIC between two peer-transport nodes on loopback in this process, %d measured, %d at a time; both ends' CPU (an upper bound of the leader's)",
				k.count, scaleBytes(float64(k.size)), measured, k.parallel)}
		res.Steps = append(res.Steps, s)
		body, err := binOfSize(k.size)
		if err != nil {
			return err
		}
		if err := p.measure(s, k.method, body, measured, k.parallel); err != nil {
			return err
		}
	}
	return nil
}

// binOfSize is a msgpack bin of size bytes in all, header included: a
// call's body of that size, which the transport checks and carries as it
// does any body of that size.
func binOfSize(size int) ([]byte, error) { return msgpack.Marshal(make([]byte, max(0, size-5))) }

// transportKind is one kind of request the leader takes or sends in an
// epoch: how many, of what average size (bytes), by which method.
type transportKind struct {
	name     string
	method   peer.Method
	count    float64
	size     int
	limit    int // the most calls measured
	parallel int
	between  bool
}
