// Package wire holds the mesh's peer protocol: the method numbers, the
// msgpack messages peers exchange, the intervals of the loops that send
// them, and the leader's queue of merged scores for the samples' owners.
// It is the one reference for that protocol: package mesh serves and sends
// these messages, and shadectl scale encodes and decodes them to measure a
// leader's work, so the simulator runs the daemon's own code.
//
// The struct tags are the wire format: never reuse or change one (a field
// whose encoding changes takes a new tag and retires the old, as the
// packed lists of ALPN shade/2 did). wire imports only transport/peer (for
// Method and the frame header) and msgpack; it must not import mesh,
// store, policy or any network package.
package wire

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/shade-mesh/shade/internal/nozero"
	"github.com/shade-mesh/shade/transport/peer"
)

// Methods of the peer protocol. Numbers are part of the wire format: never
// reuse one.
const (
	MethodFetch     peer.Method = 1  // read samples from an owner
	MethodOffer     peer.Method = 2  // an owner hands a co-owner a sample it read
	MethodReport    peer.Method = 3  // minibatch losses, to the leader
	MethodJoin      peer.Method = 4  // a rank announces itself, to the leader
	MethodDone      peer.Method = 5  // a rank finished an epoch, to the leader
	MethodPublish   peer.Method = 6  // the leader publishes an epoch's order
	MethodScores    peer.Method = 7  // the leader sends owners merged scores
	MethodReplicate peer.Method = 8  // the leader replicates a score table
	MethodState     peer.Method = 9  // a new leader asks a peer what it knows
	MethodGetOrder  peer.Method = 10 // a new leader fetches a newer order
	MethodReset     peer.Method = 11 // a job starts over, to the leader
	MethodGetTable  peer.Method = 12 // a new leader fetches a better score table
	MethodResident  peer.Method = 13 // a node tells the leader what it caches
	// MethodFetchStream reads samples from an owner as MethodFetch does,
	// the reply's sample bytes unencoded: a FetchHead, then the values (see
	// FetchHead). Older peers answer it CodeBadRequest (an unknown method);
	// a caller then asks them with MethodFetch.
	MethodFetchStream peer.Method = 14
	// MethodRelay hands a member an epoch's order to install and to pass
	// on to other members (RelayMsg), so that the leader's link carries a
	// few copies of it, not one per member.
	MethodRelay peer.Method = 15
	// MethodPing asks a member to answer at once, with nothing: a node
	// waiting on the member's answer to another request learns that it is
	// still there. Any answer counts, an older peer's CodeBadRequest too.
	MethodPing peer.Method = 16
	// MethodGetPart asks a peer for part of its answer to a
	// MethodGetOrder or MethodGetTable request (GetPartReq), so that a new
	// leader gets an order or a score table larger than a frame, in parts.
	// Older peers answer it CodeBadRequest (an unknown method); a caller
	// then asks them the request itself.
	MethodGetPart peer.Method = 17
	// MethodReportDone is MethodDone with the node's queued reports
	// (DoneReq.Reports), which the leader merges before it counts the
	// done: a rank's done is one request where it was two (the reports,
	// then the done). Its answer is a DoneResp whose Refused says why the
	// done was refused: an error answer means nothing was merged. Older
	// peers answer it CodeBadRequest (an unknown method); a caller then
	// sends the reports (MethodReport) and the done (MethodDone).
	MethodReportDone peer.Method = 18
	// MethodPublishPart hands a member its part of an epoch's order
	// (PublishMsg.Part), from a relay that holds the whole. Older peers
	// answer it CodeBadRequest (an unknown method), never taking a part
	// for a whole order; the relay then sends them the whole.
	MethodPublishPart peer.Method = 19
)

// FrameHeader is the size in bytes of a peer-protocol frame's header (the
// u32 length prefix and the u16 method), as transport/peer writes it.
const FrameHeader = peer.HeaderLen

// ScoresPerOwner is how many samples' scores the leader lets gather for
// each other member, on average, before it sends its score queue sooner
// than ScoresEvery says (8 KiB a message, in ids and scores).
const ScoresPerOwner = 1024

// ScoresEvery is how long the leader of a mesh of members peers lets
// merged scores gather before it sends each owner its share: FlushEvery
// up to 9 members, in proportion to the other members beyond (a small
// message between peers takes 60-80 us of CPU, both ends together, and
// the owners need the scores only to rank what they keep), at most
// ScoresMaxWait. At 1,000 peers and FlushEvery, the leader sent 40,000
// messages a second.
func ScoresEvery(members int) time.Duration { return perMembers(members, ScoresMaxWait) }

// ReportsEvery is how long a node of a mesh of members peers lets its
// ranks' reports gather before it forwards them to the leader: FlushEvery
// up to 9 members, in proportion to the other members beyond, at most
// ReportsMaxWait. The leader so gets about 8 report requests each
// FlushEvery from the whole mesh, and at most one a ReportsMaxWait from
// each member, where at FlushEvery from every member a mesh of 1,000
// peers sent it 40,000 a second. A rank's reports go before its done
// whenever they are due (the next order counts them), so what waits is
// only the scores' merging within an epoch.
func ReportsEvery(members int) time.Duration { return perMembers(members, ReportsMaxWait) }

// perMembers is FlushEvery up to 9 members, in proportion to the other
// members beyond (so that the messages from every member to one, or from
// one to every member, come about 8 each FlushEvery), at most most.
func perMembers(members int, most time.Duration) time.Duration {
	every := FlushEvery * time.Duration(max(members-1, 8)) / 8
	return min(every, most)
}

// Intervals of a node's background loops.
const (
	// ResidentEvery is how often a node tells the leader which samples
	// it caches (where draws are cache-aware).
	ResidentEvery = 10 * time.Second
	// FlushEvery is how long after something is queued a node forwards
	// its queued reports to the leader, sends queued scores to their
	// owners and queued offers to co-owners (what is queued meanwhile
	// goes with it); while nothing is queued it sends nothing.
	FlushEvery = 25 * time.Millisecond
	// ScoresMaxWait bounds how long the leader keeps merged scores from
	// their owners (see ScoresEvery).
	ScoresMaxWait = time.Second
	// ReportsMaxWait bounds how long a node keeps its ranks' reports
	// from the leader (see ReportsEvery).
	ReportsMaxWait = time.Second
	// ReplicateEvery is the default interval at which the leader
	// replicates changed score tables (mesh.ClusterConfig.ReplicateEvery).
	ReplicateEvery = 500 * time.Millisecond
	// TableStandbys is how many members get every change of a score
	// table: the next in line to lead, so that a takeover loses at most
	// one replication interval of merged losses.
	TableStandbys = 2
)

// FetchReq asks an owner for samples of one dataset.
type FetchReq struct {
	Dataset string   `msgpack:"d"`
	Version string   `msgpack:"v"`
	IDs     []uint32 `msgpack:"i"`
	// MemoryOnly: answer from memory, never read the source.
	MemoryOnly bool `msgpack:"m"`
	// Warm: read through and admit, but send no bytes back (prefetch).
	Warm bool `msgpack:"w"`
	// First: the asker is a co-owner deferring to the receiver as the
	// samples' first owner; the receiver reads through itself (its memory,
	// then the source) and asks no other owner to. Older peers leave it
	// false.
	First bool `msgpack:"p,omitempty"`
}

// FetchItem is an owner's answer for one sample of a FetchReq.
type FetchItem struct {
	Found bool   `msgpack:"f"`
	Hit   bool   `msgpack:"h"` // served from the owner's memory
	Sum   uint64 `msgpack:"s"` // shm.Checksum of Value
	Value []byte `msgpack:"b"`
	Err   string `msgpack:"e"`
	// Verified says that Value's bytes were summed as they were read and
	// match Sum (ReadFetchValues); never sent.
	Verified bool `msgpack:"-"`
}

// FetchResp answers a FetchReq, item by item in the order of its IDs.
type FetchResp struct {
	Items []FetchItem `msgpack:"i"`
}

// FetchHead is the head of an owner's reply to a MethodFetchStream
// request (a FetchReq), item by item in the order of its IDs. The reply is
// a peer.RawReply: after the head come the values of the found items, in
// the order of Items, back to back, each Len bytes, not encoded; the
// caller reads them straight into one buffer of its own (ReadFetchValues).
type FetchHead struct {
	Items []FetchMeta `msgpack:"i"`
}

// FetchMeta is a FetchItem without its bytes: their length instead.
type FetchMeta struct {
	Found bool   `msgpack:"f"`
	Hit   bool   `msgpack:"h"` // served from the owner's memory
	Sum   uint64 `msgpack:"s"` // shm.Checksum of the value
	Len   uint32 `msgpack:"n"` // bytes of the value; 0 when not Found
	Err   string `msgpack:"e,omitempty"`
}

// ErrBadFetchReply reports a reply to MethodFetchStream whose head does
// not match the request or the bytes that follow it.
var ErrBadFetchReply = errors.New("wire: malformed fetch reply")

// FetchRawReply is an owner's reply to MethodFetchStream: the head of
// items and their Values, which go to the stream from where they lie (the
// transport writes values that lie next to each other in one array with
// one write). The values are the reply's own and must never change, not
// even after release: the transport sends them without a copy, and its
// frames keep them until the peer acknowledges them (peer.RawReply.Owned).
// release, which the transport calls once the reply is written or dropped
// (nil: nothing to release), gives back what the reply reserved.
func FetchRawReply(items []FetchItem, release func()) *peer.RawReply {
	head := FetchHead{Items: make([]FetchMeta, len(items))}
	values := make([][]byte, 0, len(items))
	for i, it := range items {
		m := FetchMeta{Found: it.Found, Hit: it.Hit, Sum: it.Sum, Err: it.Err}
		if it.Found {
			m.Len = uint32(len(it.Value))
			values = append(values, it.Value)
		}
		head.Items[i] = m
	}
	return &peer.RawReply{Head: &head, Values: values, Release: release, Owned: true}
}

// ReadFetchValues reads the values of a reply to MethodFetchStream from r,
// size bytes after the head h, for a request whose i-th id may carry at
// most maxLen[i] bytes (its size in the manifest). It checks h before it
// allocates anything: one item per id, a length within maxLen for each
// found item and 0 for the others, and lengths that add up to size;
// otherwise it returns ErrBadFetchReply. It then reads the values into
// one buffer of size bytes (at most the sum of maxLen, what the caller
// asked for), summing each as it is read (peer.ReadSummed), and returns
// the items with their Values cut from it, Verified where the sum is the
// item's Sum. It refuses no item for its sum: the caller does, and need
// not sum a Verified one again.
func ReadFetchValues(r io.Reader, size int, h *FetchHead, maxLen []int64) ([]FetchItem, error) {
	if len(h.Items) != len(maxLen) {
		return nil, fmt.Errorf("%w: %d items for %d ids", ErrBadFetchReply, len(h.Items), len(maxLen))
	}
	var total int64
	for i, m := range h.Items {
		switch {
		case !m.Found && m.Len != 0:
			return nil, fmt.Errorf("%w: item %d not found but %d bytes long", ErrBadFetchReply, i, m.Len)
		case int64(m.Len) > maxLen[i]:
			return nil, fmt.Errorf("%w: item %d of %d bytes, at most %d expected", ErrBadFetchReply, i, m.Len, maxLen[i])
		}
		total += int64(m.Len)
	}
	if total != int64(size) {
		return nil, fmt.Errorf("%w: items of %d bytes in all, %d bytes follow the head", ErrBadFetchReply, total, size)
	}
	// Read in full or not at all: the buffer is not cleared first.
	buf := nozero.Bytes(size)[:size]
	lens := make([]uint32, 2*len(h.Items))
	lens, sums := lens[:len(h.Items)], lens[len(h.Items):]
	for i, m := range h.Items {
		lens[i] = m.Len
	}
	if err := peer.ReadSummed(r, buf, lens, sums); err != nil {
		return nil, err
	}
	items := make([]FetchItem, len(h.Items))
	off := 0
	for i, m := range h.Items {
		items[i] = FetchItem{Found: m.Found, Hit: m.Hit, Sum: m.Sum, Err: m.Err}
		if m.Found {
			items[i].Verified = uint64(sums[i]) == m.Sum // shm.Checksum's
			items[i].Value = buf[off : off+int(m.Len) : off+int(m.Len)]
			off += int(m.Len)
		}
	}
	return items, nil
}

// OfferItem hands a co-owner a sample read from the source.
type OfferItem struct {
	Dataset string `msgpack:"d"`
	Version string `msgpack:"v"`
	ID      uint32 `msgpack:"i"`
	Sum     uint64 `msgpack:"s"`
	Value   []byte `msgpack:"b"`
	// Leaving: sent by a member handing its cache over before it leaves,
	// to the owners of the ring without it, which the receiver may not
	// have rebuilt yet.
	Leaving bool `msgpack:"l,omitempty"`
	// Tries counts the deliveries the sender attempted; never sent.
	Tries int `msgpack:"-"`
}

// OfferReq carries offered samples to one co-owner.
type OfferReq struct {
	Items []OfferItem `msgpack:"o"`
}

// ReportBatch is one trained minibatch: losses keyed by sample id.
type ReportBatch struct {
	Dataset string `msgpack:"d"`
	Job     string `msgpack:"j,omitempty"` // the dataset's job; "" for its default job
	Epoch   int    `msgpack:"e"`
	// IDs and Losses travel packed (U32s, F32s). Tags "i" and "l", the
	// msgpack arrays they were before ALPN shade/2, are retired. A loss
	// is a single, as a trainer's model computes it (in float32 or less)
	// and as the peer takes it (Node.Report): 8 bytes a sample where it
	// took 12 as a double.
	IDs    U32s `msgpack:"I"`
	Losses F32s `msgpack:"F"`
	// Doubles are the losses as builds before Losses sent them (tag "L");
	// decoded, not sent. See Singles.
	Doubles F64s `msgpack:"L,omitempty"`
}

// Singles returns the losses: Losses, or those of a build that sent them
// as Doubles, narrowed to singles.
func (b *ReportBatch) Singles() []float32 { return singles(b.Losses, b.Doubles) }

// singles returns s, or where it is empty d narrowed to singles.
func singles(s F32s, d F64s) []float32 {
	if len(s) > 0 || len(d) == 0 {
		return s
	}
	return Narrow(d)
}

// ReportReq is a node's queued minibatches, forwarded to the leader.
type ReportReq struct {
	Batches []ReportBatch `msgpack:"b"`
}

// JoinReq announces that rank of a job of world ranks trains on Node.
type JoinReq struct {
	Dataset string `msgpack:"d"`
	Job     string `msgpack:"j,omitempty"` // the dataset's job; "" for its default job
	Rank    int    `msgpack:"r"`
	World   int    `msgpack:"w"`
	Node    string `msgpack:"n"`
	Gen     uint64 `msgpack:"g"` // the job generation the rank has seen
	Have    int    `msgpack:"h"` // the newest epoch its node holds, -1 for none
}

// DoneReq says that a rank finished an epoch.
type DoneReq struct {
	Dataset string `msgpack:"d"`
	Job     string `msgpack:"j,omitempty"` // the dataset's job; "" for its default job
	Gen     uint64 `msgpack:"g"`
	Epoch   int    `msgpack:"e"`
	Rank    int    `msgpack:"r"`
	Node    string `msgpack:"n"`
	// Resident and Sparse are the dataset's samples cached on Node when
	// the rank finished, as a bitmap or a list (ResidentSet, which
	// ResidentSet returns); the leader's cache-aware draws prefer them.
	// Both empty from a node that sends none.
	Resident []byte `msgpack:"b,omitempty"`
	Sparse   []byte `msgpack:"s,omitempty"`
	// Reports are Node's queued minibatches, for the leader to merge
	// before the done (MethodReportDone only; empty in a MethodDone).
	Reports []ReportBatch `msgpack:"p,omitempty"`
}

// ResidentSet is r's cached samples.
func (r *DoneReq) ResidentSet() ResidentSet { return ResidentSet{Bits: r.Resident, Sparse: r.Sparse} }

// DoneResp is the leader's answer to a DoneReq. Where the job's orders run
// ahead, the rank holds the order of the next epoch already; Wait, if
// positive, is how long its node holds the rank's start of that epoch at
// most (in nanoseconds), and Jobs the dataset's other jobs it waits for:
// it begins as soon as each of them has begun the next epoch too. The
// zero value (and an empty answer) holds nothing. Refused, in an answer
// to MethodReportDone, is why the leader refused the done after it merged
// the reports ("" when it took it).
type DoneResp struct {
	Wait    int64    `msgpack:"w,omitempty"`
	Jobs    []string `msgpack:"j,omitempty"`
	Refused string   `msgpack:"x,omitempty"`
}

// ResidentReq tells the leader which of a dataset's samples Node caches,
// for the cache-aware draws of generation Gen of its job: a bitmap (Bits)
// or a list (Sparse), as ResidentSet has them, sent every ResidentEvery
// (and, by nodes whose ranks finish epochs, with their dones).
type ResidentReq struct {
	Dataset string `msgpack:"d"`
	Job     string `msgpack:"j,omitempty"` // the dataset's job; "" for its default job
	Gen     uint64 `msgpack:"g"`
	Node    string `msgpack:"n"`
	Bits    []byte `msgpack:"b,omitempty"`
	Sparse  []byte `msgpack:"s,omitempty"`
}

// ResidentSet is r's cached samples.
func (r *ResidentReq) ResidentSet() ResidentSet { return ResidentSet{Bits: r.Bits, Sparse: r.Sparse} }

// ResetReq starts a dataset's job over.
type ResetReq struct {
	Dataset string `msgpack:"d"`
	Job     string `msgpack:"j,omitempty"` // the dataset's job; "" for its default job
}

// PublishMsg is one epoch's order as the leader published it.
type PublishMsg struct {
	Dataset string `msgpack:"d"`
	Job     string `msgpack:"j,omitempty"` // the dataset's job; "" for its default job
	Version string `msgpack:"v"`
	Gen     uint64 `msgpack:"g"` // job generation: a reset starts a new one
	Epoch   int    `msgpack:"e"`
	Term    uint64 `msgpack:"t"`
	World   int    `msgpack:"w"`
	// Ahead is how many epochs the job's orders run ahead of training (0
	// or 1): with 1, this order was published while epoch Epoch-1 was
	// still being trained, and ranks' dones of Epoch-1 still count.
	Ahead int `msgpack:"a,omitempty"`
	// Slices are the ranks' parts of the order, rank by rank, packed (tag
	// "s", their msgpack arrays before ALPN shade/2, is retired).
	Slices []U32s `msgpack:"S"`
	// Sampler is the sampler's state after drawing this order, so a new
	// leader draws the next epoch exactly as the old one would have.
	Sampler []byte `msgpack:"c"`
	// Ranks names the node each rank trains on ("" if unknown).
	Ranks []string `msgpack:"r"`
	// Weights are the importance weights of the samples in Slices,
	// position by position: ω = 1/(N·p) for a sample drawn with
	// probability p per draw, so that a loss weighted by ω is an
	// unbiased estimate of the loss over the whole dataset. Empty means
	// every weight is 1 (a permutation). Packed: tag "x", their msgpack
	// arrays before ALPN shade/2, is retired.
	Weights []F32s `msgpack:"X,omitempty"`
	// Retired, on the empty order of a reset (Epoch -1), says the job is
	// over for good: its trainers stopped, and peers drop its orders and
	// scores (keeping the scores in their state directory, if they have
	// one), and refuse its orders of older generations that arrive later.
	// A job of the same name that starts later begins afresh, at this
	// generation.
	Retired bool `msgpack:"z,omitempty"`
	// Part, where set, names the member this is a part of the order for.
	// A relay that holds the whole order cuts one for each member it
	// passes the order on to last (one with no members to pass it on to
	// itself), so that member receives and decodes what it uses, not the
	// whole: Slices and Weights hold the slices of the ranks that Ranks
	// puts on that member (HasSlice), the others empty; Sampler is left
	// out; Reads are the reads of the samples the member owns, in the
	// order the ranks are expected to read them (its cache policy's
	// lookahead, see orders.Reads); Size is the whole order's reads. A
	// part is never passed on, served as an order or adopted by a new
	// leader, and the whole order of the same epoch and term supersedes
	// it (Newer). A part travels by MethodPublishPart alone.
	Part  string `msgpack:"P,omitempty"`
	Reads U32s   `msgpack:"R,omitempty"`
	Size  int    `msgpack:"n,omitempty"`
	// Below, on a part, names the members Part hands their parts to: a
	// group's part, which a relay that holds the whole cuts for a group
	// whose head hands the rest theirs (at most PartsWithin the fanout),
	// holds their ranks' slices and the reads of their samples too, and
	// Part cuts their parts from it. It travels to Part by MethodRelay
	// (of MethodPublishPart, To the members of Below), which builds
	// before group parts refuse; they get the whole instead. Part
	// installs it as its own part.
	Below []string `msgpack:"B,omitempty"`
}

// HasSlice reports whether p holds rank's slice: a whole order holds
// every rank's, a part those of the ranks on its member and on the
// members Below it.
func (p *PublishMsg) HasSlice(rank int) bool {
	if rank < 0 || rank >= len(p.Slices) {
		return false
	}
	if p.Part == "" {
		return true
	}
	if rank >= len(p.Ranks) {
		return false
	}
	node := p.Ranks[rank]
	return node != "" && (node == p.Part || slices.Contains(p.Below, node))
}

// Len is the number of reads in the whole order: every rank's slice.
func (p *PublishMsg) Len() int {
	if p.Part != "" {
		return p.Size
	}
	total := 0
	for _, s := range p.Slices {
		total += len(s)
	}
	return total
}

// TrainingEpoch is the epoch the job trains while p is its newest order:
// p's own, or where orders run ahead (Ahead 1) the one before it.
func (p *PublishMsg) TrainingEpoch() int { return p.Epoch - p.Ahead }

// Weight returns the weights of rank's slice: nil when every weight is 1.
func (p *PublishMsg) Weight(rank int) []float32 {
	if rank < 0 || rank >= len(p.Weights) {
		return nil
	}
	return p.Weights[rank]
}

// Newer reports whether p supersedes q (nil q is superseded by anything).
func (p *PublishMsg) Newer(q *PublishMsg) bool {
	if q == nil {
		return true
	}
	if p.Gen != q.Gen {
		return p.Gen > q.Gen
	}
	if p.Epoch != q.Epoch {
		return p.Epoch > q.Epoch
	}
	if p.Term != q.Term {
		return p.Term > q.Term
	}
	return p.Part == "" && q.Part != "" // the whole order over a member's part of it
}

// ScoresReq carries merged scores from the leader to the samples' owners.
type ScoresReq struct {
	Dataset string `msgpack:"d"`
	Job     string `msgpack:"j,omitempty"` // the dataset's job; "" for its default job
	// IDs and Scores travel packed (U32s, F32s). Tags "i" and "s", the
	// msgpack arrays they were before ALPN shade/2, are retired. A score
	// is a score table's single (sampling.Table): sent as one, it takes 8
	// bytes a sample where it took 12 as a double.
	IDs    U32s    `msgpack:"I"`
	Scores F32s    `msgpack:"T"`
	Mean   float64 `msgpack:"m"`
	// Doubles are the scores as builds before Scores sent them (tag "S");
	// decoded, not sent. See Singles.
	Doubles F64s `msgpack:"S,omitempty"`
	// Pass, from the leader, is how many of the first IDs the receiver,
	// their first owner, passes on to their other owners (in scores
	// messages of its own, without Pass): the leader sends the scores of
	// a sample it does not own once, not once per owner.
	Pass int `msgpack:"p,omitempty"`
	// Term and Seqs stamp the scores (see Merged): Seqs, where not
	// empty, has one for each of IDs. Builds before them send neither,
	// and their scores are taken as they come.
	Term uint64 `msgpack:"t,omitempty"`
	Seqs U32s   `msgpack:"q,omitempty"`
}

// Singles returns the scores: Scores, or those of a build that sent them
// as Doubles, narrowed to what the owner keeps.
func (r *ScoresReq) Singles() []float32 { return singles(r.Scores, r.Doubles) }

// Merged is a run of one job's merged scores on their way to the
// samples' owners, each stamped with how new it is: read from the table
// of the leader of Term after the table's seq-th change (counted from 1
// and around again past 2^32, never 0). Of two scores of a sample the
// one of the greater term is newer, and of one term the one of the
// greater seq; a seq of 0 is a score without a stamp, from a build
// before them. The leader's messages cross on the network, two merges
// may read the table in one order and queue their scores in the other,
// and a sample's first owner passes scores on: the stamps keep the
// newest (scores.Stamps).
type Merged struct {
	Term   uint64
	IDs    []uint32
	Scores []float32 // Scores[i] is IDs[i]'s
	// Seqs, where not nil, has each score's seq; where nil, Seq is every
	// score's (a minibatch read from the table at once).
	Seqs []uint32
	Seq  uint32
}

// Stamped returns the merged scores of ids, all read after the seq-th
// change of the table of the leader of term.
func Stamped(term uint64, seq uint32, ids []uint32, scores []float32) Merged {
	return Merged{Term: term, IDs: ids, Scores: scores, Seq: seq}
}

// HasStamps reports whether m's scores carry stamps: those of a build
// before them do not.
func (m Merged) HasStamps() bool { return m.Seqs != nil || m.Seq != 0 }

// SeqOf returns the seq of m's i-th score.
func (m Merged) SeqOf(i int) uint32 {
	if m.Seqs != nil {
		return m.Seqs[i]
	}
	return m.Seq
}

// Stamps returns each score's seq: Seqs, or Seq for each.
func (m Merged) Stamps() []uint32 {
	if m.Seqs != nil {
		return m.Seqs
	}
	seqs := make([]uint32, len(m.IDs))
	for i := range seqs {
		seqs[i] = m.Seq
	}
	return seqs
}

// Slice returns m's scores from i to j.
func (m Merged) Slice(i, j int) Merged {
	out := Merged{Term: m.Term, IDs: m.IDs[i:j:j], Scores: m.Scores[i:j:j], Seq: m.Seq}
	if m.Seqs != nil {
		out.Seqs = m.Seqs[i:j:j]
	}
	return out
}

// ReplicateReq carries a whole score table (sampling.Table.MarshalBinary)
// as the leader of Term wrote it.
type ReplicateReq struct {
	Dataset string `msgpack:"d"`
	Job     string `msgpack:"j,omitempty"` // the dataset's job; "" for its default job
	Version string `msgpack:"v"`
	Term    uint64 `msgpack:"t"`
	Table   []byte `msgpack:"b"`
}

// StateReq asks a peer what it knows of every job.
type StateReq struct {
	Term uint64 `msgpack:"t"` // the asking leader's term
}

// JobState is what a peer knows of one dataset's job.
type JobState struct {
	Dataset string `msgpack:"d"`
	Job     string `msgpack:"j,omitempty"` // the dataset's job; "" for its default job
	Gen     uint64 `msgpack:"g"`
	Epoch   int    `msgpack:"e"` // newest order held, -1 for none
	Term    uint64 `msgpack:"t"`
	// Ranks trained on this peer and their world; Done lists those that
	// finished Epoch, DonePrev those that finished Epoch-1 (which still
	// count where orders run ahead of training).
	Ranks    []RankWorld `msgpack:"r"`
	Done     []int       `msgpack:"x"`
	DonePrev []int       `msgpack:"p,omitempty"`
	// Part says the newest order held is this peer's part of it
	// (PublishMsg.Part), which a new leader cannot adopt.
	Part bool `msgpack:"P,omitempty"`
}

// RankWorld is one rank of a job and the job's world size.
type RankWorld struct {
	Rank  int `msgpack:"r"`
	World int `msgpack:"w"`
}

// StateResp answers a StateReq.
type StateResp struct {
	MaxTerm uint64      `msgpack:"t"`
	Jobs    []JobState  `msgpack:"j"`
	Tables  []TableInfo `msgpack:"s"`
}

// TableInfo says how much a peer's copy of a score table knows: the term
// of the leader that wrote it and how many samples it has scored.
type TableInfo struct {
	Dataset string `msgpack:"d"`
	Job     string `msgpack:"j,omitempty"` // the dataset's job; "" for its default job
	Term    uint64 `msgpack:"t"`
	Scored  int    `msgpack:"n"`
}

// Better reports whether a table described by t supersedes one by o: a
// later leader's, or the same leader's knowing more.
func (t TableInfo) Better(o TableInfo) bool {
	if t.Term != o.Term {
		return t.Term > o.Term
	}
	return t.Scored > o.Scored
}

// GetOrderReq asks a peer for the newest order it holds of a dataset.
type GetOrderReq struct {
	Dataset string `msgpack:"d"`
	Job     string `msgpack:"j,omitempty"` // the dataset's job; "" for its default job
	// Exact asks for the order of Epoch, if the peer holds it; otherwise
	// the newest is asked for.
	Exact bool `msgpack:"x,omitempty"`
	Epoch int  `msgpack:"e,omitempty"`
	// Settled, with Exact, asks only for an order the leader published at
	// least a request's time (Cluster.FetchTimeout) ago: a node that asks
	// while its ranks wait, in case the order's relays failed it, must not
	// pull from the leader an order that is still on its way.
	Settled bool `msgpack:"s,omitempty"`
}

// GetTableReq asks a peer for its copy of a dataset's score table.
type GetTableReq struct {
	Dataset string `msgpack:"d"`
	Job     string `msgpack:"j,omitempty"` // the dataset's job; "" for its default job
}

// GetPartReq asks a peer for the bytes from Off of its encoded answer to
// Order (a newest order, not Exact) or Table, whichever is set: as many
// as a frame holds. Sum is the answer's xxhash64 as the first part gave
// it (0 in the first request). The peer cuts the parts from the answer
// it encoded for the first, while it holds it; where it no longer does,
// it encodes the answer again, and Sum lets it refuse a part of an
// answer that has changed since (CodeStale).
type GetPartReq struct {
	Order *GetOrderReq `msgpack:"o,omitempty"`
	Table *GetTableReq `msgpack:"t,omitempty"`
	Off   int          `msgpack:"f,omitempty"`
	Sum   uint64       `msgpack:"c,omitempty"`
}

// GetPartResp is one part of an answer: Part holds its bytes from the
// request's Off; the whole answer is Size bytes long and hashes to Sum.
type GetPartResp struct {
	Size int    `msgpack:"s"`
	Sum  uint64 `msgpack:"c"`
	Part []byte `msgpack:"p"`
}
