package mesh

import (
	"encoding/json"
	"sort"

	"github.com/shade-mesh/shade/transport/peer"
)

// JobStats is a snapshot of a dataset's job.
type JobStats struct {
	Leader        string  `json:"leader"`
	Term          uint64  `json:"term"`
	Generation    uint64  `json:"generation"`
	World         int     `json:"world"`
	LatestEpoch   int     `json:"latest_epoch"`
	Reports       int64   `json:"reports"`
	ReportedIDs   int64   `json:"reported_samples"`
	ScoredSamples int     `json:"scored_samples"`
	MeanScore     float64 `json:"mean_score"`
	PendingRanks  []int   `json:"pending_ranks"`
}

func (n *Node) jobStats(ds *datasetState) JobStats {
	st := JobStats{LatestEpoch: -1, Reports: ds.reports.Load(), ReportedIDs: ds.reported.Load(), Leader: n.lead.leader()}
	if p := ds.book.Newest(); p != nil {
		st.World, st.LatestEpoch, st.Term, st.Generation = p.World, p.Epoch, p.Term, p.Gen
	}
	st.ScoredSamples, st.MeanScore = ds.scores.Summary()
	if lj := ds.leaderJob(); lj != nil {
		lj.mu.Lock()
		if lj.world > 0 {
			st.World = lj.world
			st.PendingRanks = lj.pendingLocked()
		}
		lj.mu.Unlock()
	}
	return st
}

// NodeStats is what SHADE.STATS returns.
type NodeStats struct {
	Node           string         `json:"node"`
	Members        []string       `json:"members"`
	Leader         string         `json:"leader"`
	Leading        bool           `json:"leading"`
	Term           uint64         `json:"term"`
	ReportsQueued  int            `json:"reports_queued"`
	ReportsDropped int64          `json:"reports_dropped"`
	OffersDropped  int64          `json:"offers_dropped"`
	Policy         string         `json:"policy"`
	PADS           bool           `json:"pads"`
	CacheCapacity  int64          `json:"cache_capacity"`
	CacheUsed      int64          `json:"cache_used"`
	CacheEntries   int            `json:"cache_entries"`
	FreeKeys       FreeKeyStats   `json:"free_keys"`
	ReadAhead      ReadAheadStats `json:"read_ahead"`
	Datasets       []DatasetEntry `json:"datasets"`
}

// ReadAheadStats describes the samples read ahead of the local ranks.
type ReadAheadStats struct {
	Fetched int64 `json:"fetched"` // samples put into the read-ahead buffer
	Unused  int64 `json:"unused"`  // of those, dropped without being read
	Bytes   int64 `json:"bytes"`   // bytes held or being fetched now
}

// FreeKeyStats counts cache-aside use of free-form keys.
type FreeKeyStats struct {
	Hits     int64 `json:"hits"`
	Misses   int64 `json:"misses"`
	Rejected int64 `json:"rejected_admissions"`
}

// DatasetEntry is one dataset in NodeStats.
type DatasetEntry struct {
	DatasetStats
	Job JobStats `json:"job"`
}

// Snapshot returns the node's counters for every dataset: what
// SHADE.STATS serves, as a value.
func (n *Node) Snapshot() NodeStats {
	st, _ := n.snapshot("")
	return st
}

// Stats implements transport.Backend: a JSON document of NodeStats, with
// one dataset or all of them.
func (n *Node) Stats(name string) ([]byte, error) {
	st, err := n.snapshot(name)
	if err != nil {
		return nil, err
	}
	return json.Marshal(st)
}

func (n *Node) snapshot(name string) (NodeStats, error) {
	sel := n.ordered
	if name != "" {
		ds, err := n.dataset(name)
		if err != nil {
			return NodeStats{}, err
		}
		sel = []*datasetState{ds}
	}
	st := n.store.Stats()
	out := NodeStats{
		Node: n.cfg.Name, Policy: n.pol.Name(), PADS: !n.cfg.Uniform,
		CacheCapacity: st.Capacity, CacheUsed: st.UsedBytes, CacheEntries: st.Entries,
		FreeKeys: FreeKeyStats{Hits: n.freeHits.Load(), Misses: n.freeMisses.Load(), Rejected: n.freeRejected.Load()},
	}
	if n.cluster != nil {
		for _, p := range n.cluster.alive() {
			out.Members = append(out.Members, p.name)
		}
	} else {
		out.Members = []string{n.cfg.Name}
	}
	for _, ds := range sel {
		out.Datasets = append(out.Datasets, DatasetEntry{DatasetStats: ds.stats(), Job: n.jobStats(ds)})
	}
	sort.Slice(out.Datasets, func(a, b int) bool { return out.Datasets[a].Dataset < out.Datasets[b].Dataset })
	out.Leader = n.lead.leader()
	out.Leading = n.lead.leading()
	out.Term = n.lead.highest()
	out.ReportsQueued, out.ReportsDropped = n.out.QueuedReports(), n.out.ReportsDropped()
	out.OffersDropped = n.out.OffersDropped()
	ra := n.readAhead.Stats()
	out.ReadAhead = ReadAheadStats{Fetched: ra.Fetched, Unused: ra.Unused, Bytes: ra.Bytes}
	return out, nil
}

// PeerStats returns, per peer, the QUIC connection's counters and round
// trip time; nil for a standalone node.
func (n *Node) PeerStats() map[string]peer.PeerStats {
	if n.cluster == nil {
		return nil
	}
	return n.cluster.wire.PeerStats()
}

// Ready reports whether the node serves its datasets: always for a
// standalone node; in a mesh once it has joined and follows a leader.
func (n *Node) Ready() bool {
	if n.closed.Load() {
		return false
	}
	if n.cluster == nil {
		return true
	}
	return n.lead.leader() != "" && len(n.cluster.alive()) > 0
}
