package wire

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/transport/peer"
)

// DefaultRelayFanout is how many members a sender of a relayed message
// hands it to, each passing it on to a share of the rest: with 4, the
// order of 1,000 members goes out of the leader 4 times, not 999, and
// reaches everyone in 5 hops. Each hop's links carry fanout copies: at
// 1,000 peers an order of 1.28 M samples (11 MB) relayed whole reaches the
// last one after 74 ms of links with 4, 118 ms with 8, 177 ms with 16
// (shadectl scale --relay-fanout, test/results/scale.md); in pieces
// (DefaultRelayPiece), after 20 ms with 4.
const DefaultRelayFanout = 4

// PartsWithin is how many members a relay hands their parts of an order
// to directly, at a fanout: a relay with at most fanout² members to pass
// the order on to cuts each its part (PublishMsg.Part) instead of
// passing the whole on to fanout of them. A part is a member's share of
// the order (its ranks' slices, the reads of its samples: 40 KiB of 11
// MiB at 1,000 peers), so fanout² of them are fewer bytes than one whole
// copy, and a member gets one in a hop where the whole took two. A relay
// that holds the whole hands a smaller group its group's part instead
// (GroupWithin).
func PartsWithin(fanout int) int { return fanout * fanout }

// MaxBelow is the most members a group's part names Below its head
// (PublishMsg.Below), those the head hands their parts to: PartsWithin a
// fanout of 16.
const MaxBelow = 256

// GroupWithin is how many members a group may have, its head among them,
// that a relay holding the whole order hands its group's part
// (PublishMsg.Below) instead of the whole: a head that then hands all the
// rest their parts (PartsWithin the fanout), at most MaxBelow of them.
func GroupWithin(fanout int) int { return 1 + min(PartsWithin(fanout), MaxBelow) }

// PartsFit reports whether a member's part of an order of size bytes is
// likely to fit a relay piece in a mesh of members of R replicas: size
// times a member's share of the ranks (one of the members) and of the
// reads (R of them). A part larger than a piece reaches its member later
// than the whole passed on piece by piece; in a mesh of a few members a
// member's share is large.
func PartsFit(size, replicas, members, piece int) bool {
	return int64(size)*int64(1+replicas)/int64(max(members, 1)) <= int64(piece)
}

// GroupPartResp answers a group's part of an order relayed to its head
// (MethodRelay of MethodPublishPart, PublishMsg.Below): Whole names the
// members below it that are to get the whole order instead (builds
// before parts, which refused theirs), which the sender relays them.
type GroupPartResp struct {
	Whole []string `msgpack:"w,omitempty"`
}

// DefaultRelayPiece is the size of the pieces a message longer than it
// is relayed in (RelayPieceParts). A relay passes each piece on as soon
// as it has it, so the hops work at once, each on its own piece: the
// last member has an order of P pieces after about (P + hops - 1) times
// a piece's time on fanout links, not hops times the whole order's. At
// 1,000 peers an order of 11 MB reaches the last one after 20 ms of
// links instead of 74 ms (shadectl scale, test/results/scale.md).
const DefaultRelayPiece = 1 << 20

// RelayMsg is a message (an encoded PublishMsg, Method MethodPublish; or
// an encoded ReplicateReq, Method MethodReplicate, for a score table that
// does not fit a frame) for the member that receives it and for the
// members in To, to whom that member passes it on (RelayGroups,
// RelayParts). Peers from before tables were relayed refuse the latter
// (CodeBadRequest). A group's part of an order (an encoded PublishMsg
// with Below, Method MethodPublishPart, never in pieces) goes to its
// head this way with To the members below it, whose parts the head cuts
// from it and hands them itself (answered by GroupPartResp); peers from
// before group parts refuse it.
//
// A message longer than a relay's piece size travels in pieces instead,
// each its own RelayMsg with Body empty: Piece holds bytes Off to
// Off+len(Piece) of the message, which is Size bytes long, cut in pieces
// of PieceSize bytes (the last one shorter), and whose xxhash64 is Sum
// (see Assembly). Older peers refuse a piece (CodeBadRequest), and are
// sent the whole message.
type RelayMsg struct {
	To     []string           `msgpack:"t"`
	Method uint16             `msgpack:"m"`
	Body   msgpack.RawMessage `msgpack:"b,omitempty"`

	Size      int    `msgpack:"s,omitempty"`
	PieceSize int    `msgpack:"z,omitempty"`
	Sum       uint64 `msgpack:"c,omitempty"`
	Off       int    `msgpack:"o,omitempty"`
	Piece     []byte `msgpack:"p,omitempty"`
}

// IsPiece reports whether m carries a piece of a message, not the whole.
func (m *RelayMsg) IsPiece() bool { return m.Size > 0 }

// RelayGroups cuts names into at most fanout groups of consecutive names,
// their sizes differing by one at most: the first name of each group is
// handed the message, with the rest of its group to pass it on to. fanout
// below 1 counts as 1.
func RelayGroups(names []string, fanout int) [][]string {
	k := min(max(fanout, 1), len(names))
	groups := make([][]string, 0, k)
	for i, start := 0, 0; i < k; i++ {
		end := start + len(names)/k
		if i < len(names)%k {
			end++
		}
		groups = append(groups, names[start:end:end])
		start = end
	}
	return groups
}

// RelayHops is how many hops a relayed message takes to reach n members
// at the fanout: the smallest h with fanout + fanout^2 + ... + fanout^h
// >= n (n itself at fanout 1).
func RelayHops(n, fanout int) int {
	fanout = max(fanout, 1)
	if fanout == 1 {
		return n
	}
	hops, reach, level := 0, 0, 1
	for reach < n {
		level *= fanout
		reach += level
		hops++
	}
	return hops
}

// RelayParts encodes a RelayMsg of body (a message of method m, encoded
// already) for the members to, as parts for peer.Node.Call: the small head
// on its own, then body as it is, never copied, however many members a
// sender hands it to.
func RelayParts(to []string, m peer.Method, body []byte) (peer.Encoded, error) {
	head, err := relayHead(to, m, 3, func(enc *msgpack.Encoder) []error {
		return []error{enc.EncodeString("b")}
	})
	if err != nil {
		return nil, err
	}
	return peer.Encoded{head, body}, nil
}

// RelayPieceParts encodes piece i of a (complete up to piece i) as a
// RelayMsg for the members to, as parts for peer.Node.Call: the small head
// on its own, then the piece's bytes as a holds them, never copied.
func RelayPieceParts(to []string, m peer.Method, a *Assembly, i int) (peer.Encoded, error) {
	off, piece := i*a.piece, a.Piece(i)
	head, err := relayHead(to, m, 7, func(enc *msgpack.Encoder) []error {
		return []error{
			enc.EncodeString("s"), enc.EncodeInt(int64(a.size)),
			enc.EncodeString("z"), enc.EncodeInt(int64(a.piece)),
			enc.EncodeString("c"), enc.EncodeUint(a.sum),
			enc.EncodeString("o"), enc.EncodeInt(int64(off)),
			enc.EncodeString("p"), enc.EncodeBytesLen(len(piece)),
		}
	})
	if err != nil {
		return nil, err
	}
	return peer.Encoded{head, piece}, nil
}

// relayHead encodes the head of a RelayMsg of fields fields: To and
// Method, then what more encodes, up to the bytes that follow the head.
// Each encoding runs (writes to a bytes.Buffer do not fail); an error of
// any is returned.
func relayHead(to []string, m peer.Method, fields int, more func(*msgpack.Encoder) []error) ([]byte, error) {
	var head bytes.Buffer
	enc := msgpack.NewEncoder(&head)
	errs := []error{
		enc.EncodeMapLen(fields),
		enc.EncodeString("t"), enc.Encode(to),
		enc.EncodeString("m"), enc.EncodeUint16(uint16(m)),
	}
	if err := errors.Join(append(errs, more(enc)...)...); err != nil {
		return nil, err
	}
	return head.Bytes(), nil
}

// ErrBadPiece marks a relayed piece that does not fit its message.
var ErrBadPiece = errors.New("wire: bad relayed piece")

// Assembly gathers the pieces of a message relayed in pieces, for the
// member that installs it and for the relays that pass each piece on as
// soon as it is in. It is safe for concurrent use. A piece put twice
// must be the same bytes (a sender that lost a relay sends its group's
// next member every piece again); the whole message is handed out only
// once every piece is in and the bytes hash to the message's Sum.
type Assembly struct {
	size, piece int
	sum         uint64
	buf         []byte
	ready       []chan struct{} // closed once piece i is in buf

	mu   sync.Mutex
	left int // pieces not in yet
}

// NewAssembly returns an empty assembly of a message of size bytes in
// pieces of piece bytes, hashing to sum. size is checked against limit,
// the largest message the caller takes.
func NewAssembly(size, piece int, sum uint64, limit int) (*Assembly, error) {
	if size <= 0 || piece <= 0 || size > limit {
		return nil, fmt.Errorf("%w: a message of %d bytes in pieces of %d (limit %d bytes)", ErrBadPiece, size, piece, limit)
	}
	return newAssembly(make([]byte, size), piece, sum), nil
}

// WholeAssembly is the assembly of body, every piece in, for a sender
// that relays body in pieces of piece bytes. It holds body itself, not a
// copy.
func WholeAssembly(body []byte, piece int) *Assembly {
	a := newAssembly(body, piece, xxhash.Sum64(body))
	for _, ready := range a.ready {
		close(ready)
	}
	a.left = 0
	return a
}

// newAssembly is the assembly of a message held in buf, no piece in yet.
func newAssembly(buf []byte, piece int, sum uint64) *Assembly {
	n := (len(buf) + piece - 1) / piece
	a := &Assembly{size: len(buf), piece: piece, sum: sum, buf: buf, ready: make([]chan struct{}, n), left: n}
	for i := range a.ready {
		a.ready[i] = make(chan struct{})
	}
	return a
}

// Pieces is how many pieces the message is cut in.
func (a *Assembly) Pieces() int { return len(a.ready) }

// Size is the message's size in bytes.
func (a *Assembly) Size() int { return a.size }

// Matches reports whether m is a piece of this assembly's message (same
// size, piece size and sum).
func (a *Assembly) Matches(m *RelayMsg) bool {
	return m.Size == a.size && m.PieceSize == a.piece && m.Sum == a.sum
}

// Ready is closed once piece i is in.
func (a *Assembly) Ready(i int) <-chan struct{} { return a.ready[i] }

// Piece returns piece i's bytes; only once Ready(i) is closed.
func (a *Assembly) Piece(i int) []byte {
	off := i * a.piece
	return a.buf[off:min(off+a.piece, a.size)]
}

// Put stores the piece of m (which Matches the assembly). A piece at an
// offset that is not a piece's, of the wrong length, or unlike the bytes
// already in for it, is refused (ErrBadPiece) and changes nothing.
func (a *Assembly) Put(m *RelayMsg) error {
	if m.Off < 0 || m.Off%a.piece != 0 || m.Off >= a.size {
		return fmt.Errorf("%w: offset %d of a message of %d bytes in pieces of %d", ErrBadPiece, m.Off, a.size, a.piece)
	}
	i := m.Off / a.piece
	if want := min(a.piece, a.size-m.Off); len(m.Piece) != want {
		return fmt.Errorf("%w: %d bytes at offset %d, want %d", ErrBadPiece, len(m.Piece), m.Off, want)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.ready[i]: // in already
		if !bytes.Equal(a.Piece(i), m.Piece) {
			return fmt.Errorf("%w: piece at offset %d differs from the one already in", ErrBadPiece, m.Off)
		}
		return nil
	default:
	}
	copy(a.buf[m.Off:], m.Piece)
	a.left--
	close(a.ready[i])
	return nil
}

// Complete reports whether every piece is in.
func (a *Assembly) Complete() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.left == 0
}

// Whole returns the message once every piece is in: ok is false while
// one is missing. A message whose bytes do not hash to its sum (pieces
// of two messages alike in size and sum, as good as never) is an error,
// and so is one that is not one msgpack value (peer.CheckMsgpack): the
// transport walks each frame so before it is decoded, but a message put
// together from pieces was never one frame. Errors wrap ErrBadPiece.
func (a *Assembly) Whole() (body []byte, ok bool, err error) {
	if !a.Complete() {
		return nil, false, nil
	}
	if xxhash.Sum64(a.buf) != a.sum {
		return nil, false, fmt.Errorf("%w: the pieces of a message of %d bytes do not hash to its sum", ErrBadPiece, a.size)
	}
	if err := peer.CheckMsgpack(a.buf); err != nil {
		return nil, false, fmt.Errorf("%w: a message of %d bytes: %w", ErrBadPiece, a.size, err)
	}
	return a.buf, true, nil
}
