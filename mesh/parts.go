package mesh

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/vmihailenco/msgpack/v5"

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
// hash, so that a part of an answer that changed in between is refused
// and the whole is asked for again.

// partTries is how many times an answer is asked for from its start when
// it changes between parts (an order published, a table replicated, in
// between).
const partTries = 3

// serveGetPart answers a part of what serveGetOrder (a newest order) or
// serveGetTable would answer: the answer is encoded whole, and the bytes
// from req.Off that a frame holds are sent.
func (n *Node) serveGetPart(ctx context.Context, from string, req *wire.GetPartReq) (any, error) {
	var answer any
	var err error
	switch {
	case req.Order != nil && req.Table == nil && !req.Order.Exact:
		answer, err = n.serveGetOrder(ctx, from, req.Order)
	case req.Table != nil && req.Order == nil:
		answer, err = n.serveGetTable(ctx, from, req.Table)
	default:
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "mesh: a part of one newest order or one score table is asked for"}
	}
	if err != nil {
		return nil, err
	}
	body, err := msgpack.Marshal(answer)
	if err != nil {
		return nil, err
	}
	sum := xxhash.Sum64(body)
	if req.Sum != 0 && req.Sum != sum {
		return nil, &peer.Error{Code: peer.CodeStale, Msg: "mesh: the answer changed since its first part"}
	}
	if req.Off < 0 || req.Off > len(body) {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("mesh: part at %d of an answer of %d bytes", req.Off, len(body))}
	}
	end := min(len(body), req.Off+n.cfg.Cluster.frameRoom())
	return &wire.GetPartResp{Size: len(body), Sum: sum, Part: body[req.Off:end]}, nil
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
	body, _, err := a.Whole()
	if err != nil {
		return fmt.Errorf("mesh: answer from %s: %w", name, err)
	}
	if err := peer.CheckMsgpack(body); err != nil {
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
