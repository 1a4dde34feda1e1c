package mesh

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/internal/budget"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport/peer"
)

// A new leader asks its peers for the newest order and the best score
// table they hold (takeover). Either may be larger than a frame: an
// order with weights takes about 9 bytes a sample, a table about 4 a scored sample, so
// past about 7 M samples an order no longer fits the default 64 MiB. The
// leader sends such messages in pieces through relays, but the new leader
// must have them before it rebuilds its jobs, from a peer it chooses. So
// it asks for them in parts (MethodGetPart): each call carries as much of
// the encoded answer as a frame holds, from an offset, and the answer's
// hash. The peer holds the answer it encoded for the first part while
// the parts are asked for (partBook); a part of an answer it no longer
// holds, and that changed in between, is refused, and the whole is asked
// for again.

// partTries is how many times an answer is asked for from its start when
// it changes between parts (an order published, a table replicated, in
// between) and the peer no longer holds the first.
const partTries = 3

// serveGetPart answers a part of what serveGetOrder (a newest order) or
// serveGetTable would answer: the bytes from req.Off of the encoded answer
// that a frame holds. An answer longer than a frame is encoded once, at
// its first part, and held in the node's part book for the parts that
// follow (see partBook).
func (n *Node) serveGetPart(ctx context.Context, from string, req *wire.GetPartReq) (any, error) {
	var key string
	switch {
	case req.Order != nil && req.Table == nil && !req.Order.Exact:
		key = "order\x00" + req.Order.Dataset + "\x00" + req.Order.Job
	case req.Table != nil && req.Order == nil:
		key = "table\x00" + req.Table.Dataset + "\x00" + req.Table.Job
	default:
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "mesh: a part of one newest order or one score table is asked for"}
	}
	if req.Off < 0 {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("mesh: part at %d", req.Off)}
	}
	room := n.cfg.Cluster.frameRoom()
	book := &n.cluster.parts
	a := book.get(from, key, req.Sum)
	if a == nil {
		var err error
		a, err = book.encode(ctx, func() ([]byte, error) {
			var answer any
			var err error
			if req.Order != nil {
				answer, err = n.serveGetOrder(ctx, from, req.Order)
			} else {
				answer, err = n.serveGetTable(ctx, from, req.Table)
			}
			if err != nil {
				return nil, err
			}
			if pub, ok := answer.(*wire.PublishMsg); ok {
				return pub.Encode() // into a buffer sized for it at once
			}
			return msgpack.Marshal(answer)
		})
		if err != nil {
			return nil, err
		}
		if req.Sum != 0 && req.Sum != a.sum {
			book.release(a)
			return nil, &peer.Error{Code: peer.CodeStale, Msg: "mesh: the answer changed since its first part"}
		}
		if len(a.body) > room {
			book.hold(n.ctx, from, key, a, partLife(len(a.body), room, n.cfg.Cluster.FetchTimeout))
		} else {
			book.release(a) // one part: sent as the reply, charged by the transport
		}
	}
	if req.Off > len(a.body) {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("mesh: part at %d of an answer of %d bytes", req.Off, len(a.body))}
	}
	end := min(len(a.body), req.Off+room)
	if end == len(a.body) {
		book.done(from, a)
	}
	return &wire.GetPartResp{Size: len(a.body), Sum: a.sum, Part: a.body[req.Off:end]}, nil
}

// partLife is how long an answer of size bytes, sent in parts of room,
// is held for its asker: twice the timeout of each call its parts take.
func partLife(size, room int, timeout time.Duration) time.Duration {
	return 2 * timeout * time.Duration(1+size/room)
}

// partBook holds the answers a node sends in parts (serveGetPart), each
// encoded once, at its first part, so that its parts are cut from one
// snapshot, however the order or table changes meanwhile, and the
// encoding is paid once. A member has one answer in the book at most: a
// first part of another replaces it. An answer leaves the book when its
// last part is served or its life ends, whichever is first; a part asked
// for after that is encoded again, and refused (CodeStale) if the answer
// changed.
//
// An answer's bytes are charged to the node's serving memory
// (ClusterConfig.MaxPeerMemory) from its encoding until it leaves the
// book; one larger than all of it is refused, as its asker would refuse
// it. Answers are encoded one at a time, each charged before the next
// begins, so that encodings not yet charged take one answer at most.
type partBook struct {
	budget *budget.Budget // nil: nothing charged

	mu       sync.Mutex
	held     map[string]*partAnswer // by member
	encoding chan struct{}          // holds a token while an answer is encoded; made on first use
}

// partAnswer is one encoded answer.
type partAnswer struct {
	key    string // which request it answers
	body   []byte
	sum    uint64
	cancel context.CancelFunc // ends its life in the book; nil while not held
}

// get returns the answer held for member from to the request key with
// sum (its first part's), or nil.
func (b *partBook) get(from, key string, sum uint64) *partAnswer {
	if sum == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if a := b.held[from]; a != nil && a.key == key && a.sum == sum {
		return a
	}
	return nil
}

// encode runs enc, charging the bytes it returns to the budget before
// the next answer is encoded; the caller releases them (release, or
// done once it is held).
func (b *partBook) encode(ctx context.Context, enc func() ([]byte, error)) (*partAnswer, error) {
	b.mu.Lock()
	if b.encoding == nil {
		b.encoding = make(chan struct{}, 1)
	}
	token := b.encoding
	b.mu.Unlock()
	select {
	case token <- struct{}{}:
	default:
		select {
		case token <- struct{}{}:
		case <-ctx.Done():
			return nil, &peer.Error{Code: peer.CodeUnavailable, Msg: "mesh: another answer in parts is being encoded"}
		}
	}
	defer func() { <-token }()
	body, err := enc()
	if err != nil {
		return nil, err
	}
	if b.budget != nil {
		if err := b.budget.Reserve(ctx, int64(len(body))); err != nil {
			return nil, &peer.Error{Code: peer.CodeUnavailable, Msg: fmt.Sprintf("mesh: an answer of %d bytes: serving memory: %v", len(body), err)}
		}
	}
	return &partAnswer{body: body, sum: xxhash.Sum64(body)}, nil
}

// hold puts a in the book for member from as the answer to key, to
// last life within parent, replacing the member's answer before it.
func (b *partBook) hold(parent context.Context, from, key string, a *partAnswer, life time.Duration) {
	var ctx context.Context
	ctx, a.cancel = context.WithTimeout(parent, life)
	a.key = key
	b.mu.Lock()
	old := b.held[from]
	if b.held == nil {
		b.held = make(map[string]*partAnswer)
	}
	b.held[from] = a
	b.mu.Unlock()
	if old != nil { // out of the book: its done finds it gone
		old.cancel()
		b.release(old)
	}
	context.AfterFunc(ctx, func() { b.done(from, a) })
}

// done lets a, held for member from, leave the book; it may be called
// more than once.
func (b *partBook) done(from string, a *partAnswer) {
	b.mu.Lock()
	if b.held[from] != a {
		b.mu.Unlock()
		return
	}
	delete(b.held, from)
	b.mu.Unlock()
	a.cancel()
	b.release(a)
}

// release gives back a's charge.
func (b *partBook) release(a *partAnswer) {
	if b.budget != nil {
		b.budget.Release(int64(len(a.body)))
	}
}

// heldBytes is the bytes of the answers in the book.
func (b *partBook) heldBytes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int
	for _, a := range b.held {
		n += len(a.body)
	}
	return n
}

// getParts asks the member called name for the answer to req's request
// in parts, each call within timeout, and decodes it into out. The
// answer is held in serving memory while its parts come in; one larger
// than all of it is refused. A member from before parts (CodeBadRequest
// to MethodGetPart) is asked the request itself, whose answer must then
// fit a frame.
func (n *Node) getParts(ctx context.Context, name string, req wire.GetPartReq, out any, timeout time.Duration) error {
	for try := 1; ; try++ {
		err := n.getPartsOnce(ctx, name, req, out, timeout)
		switch {
		case errors.Is(err, errNoParts):
			return n.getWhole(ctx, name, req, out, timeout)
		case peer.CodeOf(err) == peer.CodeStale && try < partTries:
			continue
		default:
			return err
		}
	}
}

// errNoParts is a member's refusal of MethodGetPart.
var errNoParts = errors.New("mesh: parts refused")

// getPartsOnce is one try of getParts, from the answer's first part.
func (n *Node) getPartsOnce(ctx context.Context, name string, req wire.GetPartReq, out any, timeout time.Duration) error {
	call := func(req *wire.GetPartReq, resp *wire.GetPartResp) error {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return n.cluster.callName(cctx, name, wire.MethodGetPart, req, resp)
	}
	var first wire.GetPartResp // req.Off is 0
	if err := call(&req, &first); err != nil {
		if peer.CodeOf(err) == peer.CodeBadRequest {
			return fmt.Errorf("%w: %w", errNoParts, err)
		}
		return err
	}
	if first.Size <= 0 {
		return fmt.Errorf("mesh: an answer of %d bytes from %s", first.Size, name)
	}
	serving := n.cluster.serving
	rctx, cancel := context.WithTimeout(ctx, timeout)
	err := serving.Reserve(rctx, int64(first.Size))
	cancel()
	if err != nil {
		return fmt.Errorf("mesh: an answer of %d bytes from %s: %w", first.Size, name, err)
	}
	defer serving.Release(int64(first.Size))
	// The parts are the answer's pieces, each of the first part's length
	// but the last: the assembly checks each one's place and length, and
	// the whole's hash.
	a, err := wire.NewAssembly(first.Size, len(first.Part), first.Sum, first.Size)
	if err != nil {
		return fmt.Errorf("mesh: answer from %s: %w", name, err)
	}
	req.Sum = first.Sum
	for part := &first; ; {
		piece := &wire.RelayMsg{Size: part.Size, PieceSize: len(first.Part), Sum: part.Sum, Off: req.Off, Piece: part.Part}
		if !a.Matches(piece) {
			return fmt.Errorf("mesh: part at %d, of an answer of %d bytes hashing to %x, from %s: the first was of %d hashing to %x",
				req.Off, part.Size, part.Sum, name, first.Size, first.Sum)
		}
		if err := a.Put(piece); err != nil {
			return fmt.Errorf("mesh: answer from %s: %w", name, err)
		}
		if req.Off += len(part.Part); req.Off == first.Size {
			break
		}
		part = &wire.GetPartResp{}
		if err := call(&req, part); err != nil {
			return err
		}
	}
	body, _, err := a.Whole() // checked as one msgpack value
	if err != nil {
		return fmt.Errorf("mesh: answer from %s: %w", name, err)
	}
	return msgpack.Unmarshal(body, out)
}

// getWhole asks the member called name req's request itself.
func (n *Node) getWhole(ctx context.Context, name string, req wire.GetPartReq, out any, timeout time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if req.Order != nil {
		return n.cluster.callName(cctx, name, wire.MethodGetOrder, req.Order, out)
	}
	return n.cluster.callName(cctx, name, wire.MethodGetTable, req.Table, out)
}
