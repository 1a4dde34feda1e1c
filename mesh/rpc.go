package mesh

import (
	"github.com/shade-mesh/shade/transport/peer"
)

// Methods of the peer protocol. Numbers are part of the wire format: never
// reuse one.
const (
	methodFetch     peer.Method = 1  // read samples from an owner
	methodOffer     peer.Method = 2  // an owner hands a co-owner a sample it read
	methodReport    peer.Method = 3  // minibatch losses, to the leader
	methodJoin      peer.Method = 4  // a rank announces itself, to the leader
	methodDone      peer.Method = 5  // a rank finished an epoch, to the leader
	methodPublish   peer.Method = 6  // the leader publishes an epoch's order
	methodScores    peer.Method = 7  // the leader sends owners merged scores
	methodReplicate peer.Method = 8  // the leader replicates a score table
	methodState     peer.Method = 9  // a new leader asks a peer what it knows
	methodGetOrder  peer.Method = 10 // a new leader fetches a newer order
	methodReset     peer.Method = 11 // a job starts over, to the leader
	methodGetTable  peer.Method = 12 // a new leader fetches a better score table
)

// fetchReq asks an owner for samples of one dataset.
type fetchReq struct {
	Dataset string   `msgpack:"d"`
	Version string   `msgpack:"v"`
	IDs     []uint32 `msgpack:"i"`
	// MemoryOnly: answer from memory, never read the source.
	MemoryOnly bool `msgpack:"m"`
	// Warm: read through and admit, but send no bytes back (prefetch).
	Warm bool `msgpack:"w"`
}

type fetchItem struct {
	Found bool   `msgpack:"f"`
	Hit   bool   `msgpack:"h"` // served from the owner's memory
	Sum   uint64 `msgpack:"s"` // shm.Checksum of Value
	Value []byte `msgpack:"b"`
	Err   string `msgpack:"e"`
}

type fetchResp struct {
	Items []fetchItem `msgpack:"i"`
}

// offerItem hands a co-owner a sample read from the source.
type offerItem struct {
	Dataset string `msgpack:"d"`
	Version string `msgpack:"v"`
	ID      uint32 `msgpack:"i"`
	Sum     uint64 `msgpack:"s"`
	Value   []byte `msgpack:"b"`
	// Leaving: sent by a member handing its cache over before it leaves,
	// to the owners of the ring without it, which the receiver may not
	// have rebuilt yet.
	Leaving bool `msgpack:"l,omitempty"`
	tries   int  // deliveries attempted; not sent
}

type offerReq struct {
	Items []offerItem `msgpack:"o"`
}

// reportBatch is one trained minibatch: losses keyed by sample id.
type reportBatch struct {
	Dataset string    `msgpack:"d"`
	Epoch   int       `msgpack:"e"`
	IDs     []uint32  `msgpack:"i"`
	Losses  []float64 `msgpack:"l"`
}

type reportReq struct {
	Batches []reportBatch `msgpack:"b"`
}

// joinReq announces that rank of a job of world ranks trains on Node.
type joinReq struct {
	Dataset string `msgpack:"d"`
	Rank    int    `msgpack:"r"`
	World   int    `msgpack:"w"`
	Node    string `msgpack:"n"`
	Gen     uint64 `msgpack:"g"` // the job generation the rank has seen
	Have    int    `msgpack:"h"` // the newest epoch its node holds, -1 for none
}

type doneReq struct {
	Dataset string `msgpack:"d"`
	Gen     uint64 `msgpack:"g"`
	Epoch   int    `msgpack:"e"`
	Rank    int    `msgpack:"r"`
	Node    string `msgpack:"n"`
}

type resetReq struct {
	Dataset string `msgpack:"d"`
}

// publishMsg is one epoch's order as the leader published it.
type publishMsg struct {
	Dataset string `msgpack:"d"`
	Version string `msgpack:"v"`
	Gen     uint64 `msgpack:"g"` // job generation: a reset starts a new one
	Epoch   int    `msgpack:"e"`
	Term    uint64 `msgpack:"t"`
	World   int    `msgpack:"w"`
	// Slices are the ranks' parts of the order, rank by rank.
	Slices [][]uint32 `msgpack:"s"`
	// Sampler is the sampler's state after drawing this order, so a new
	// leader draws the next epoch exactly as the old one would have.
	Sampler []byte `msgpack:"c"`
	// Ranks names the node each rank trains on ("" if unknown).
	Ranks []string `msgpack:"r"`
}

// newer reports whether p supersedes q (nil q is superseded by anything).
func (p *publishMsg) newer(q *publishMsg) bool {
	if q == nil {
		return true
	}
	if p.Gen != q.Gen {
		return p.Gen > q.Gen
	}
	if p.Epoch != q.Epoch {
		return p.Epoch > q.Epoch
	}
	return p.Term > q.Term
}

type scoresReq struct {
	Dataset string    `msgpack:"d"`
	IDs     []uint32  `msgpack:"i"`
	Scores  []float64 `msgpack:"s"`
	Mean    float64   `msgpack:"m"`
}

type replicateReq struct {
	Dataset string `msgpack:"d"`
	Version string `msgpack:"v"`
	Term    uint64 `msgpack:"t"`
	Table   []byte `msgpack:"b"`
}

type stateReq struct {
	Term uint64 `msgpack:"t"` // the asking leader's term
}

// jobState is what a peer knows of one dataset's job.
type jobState struct {
	Dataset string `msgpack:"d"`
	Gen     uint64 `msgpack:"g"`
	Epoch   int    `msgpack:"e"` // newest order held, -1 for none
	Term    uint64 `msgpack:"t"`
	// Ranks trained on this peer and their world; Done lists those that
	// finished Epoch.
	Ranks []rankWorld `msgpack:"r"`
	Done  []int       `msgpack:"x"`
}

type rankWorld struct {
	Rank  int `msgpack:"r"`
	World int `msgpack:"w"`
}

type stateResp struct {
	MaxTerm uint64      `msgpack:"t"`
	Jobs    []jobState  `msgpack:"j"`
	Tables  []tableInfo `msgpack:"s"`
}

// tableInfo says how much a peer's copy of a score table knows: the term
// of the leader that wrote it and how many samples it has scored.
type tableInfo struct {
	Dataset string `msgpack:"d"`
	Term    uint64 `msgpack:"t"`
	Scored  int    `msgpack:"n"`
}

// better reports whether a table described by t supersedes one by o: a
// later leader's, or the same leader's knowing more.
func (t tableInfo) better(o tableInfo) bool {
	if t.Term != o.Term {
		return t.Term > o.Term
	}
	return t.Scored > o.Scored
}

type getOrderReq struct {
	Dataset string `msgpack:"d"`
}

type getTableReq struct {
	Dataset string `msgpack:"d"`
}
