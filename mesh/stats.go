package mesh

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/shade-mesh/shade/policy"
	"github.com/shade-mesh/shade/protocol/stats"
	"github.com/shade-mesh/shade/transport/peer"
)

func (n *Node) jobStats(js *jobState, now time.Time) stats.Job {
	st := stats.Job{Name: displayJob(js.name), LatestEpoch: -1, Reports: js.reports.Load(), ReportedIDs: js.reported.Load(), Leader: n.lead.leader()}
	if p := js.book.Newest(); p != nil {
		st.World, st.LatestEpoch, st.Term, st.Generation = p.World, p.Epoch, p.Term, p.Gen
	}
	st.ScoredSamples, st.MeanScore = js.scores.Summary()
	if lj := js.leaderJob(); lj != nil {
		ls := lj.Status()
		if ls.World > 0 {
			st.World, st.PendingRanks = ls.World, ls.Pending
		}
		st.HeldEpochs, st.HeldEpochSeconds = ls.Holds, ls.HeldFor.Seconds()
	}
	st.HeldStarts, st.HeldStartSeconds = js.heldStarts.Load(), time.Duration(js.heldStartNanos.Load()).Seconds()
	st.OrderParts = js.parts.Load()
	st.Reads, st.Hits = js.reads.Load(), js.hits.Load()
	st.SourceReads, st.SourceBytes = js.sourceReads.Load(), js.sourceBytes.Load()
	if st.Reads > 0 {
		st.HitRatio = float64(st.Hits) / float64(st.Reads)
	}
	st.IdleSeconds = js.idle(now).Seconds()
	return st
}

// Snapshot returns the node's counters for every dataset: what
// SHADE.STATS serves, as a value.
func (n *Node) Snapshot() stats.Node {
	st, _ := n.snapshot("")
	return st
}

// Stats implements transport.Backend: the JSON document of stats.Node, with
// one dataset or all of them.
func (n *Node) Stats(name string) ([]byte, error) {
	st, err := n.snapshot(name)
	if err != nil {
		return nil, err
	}
	return json.Marshal(st)
}

func (n *Node) snapshot(name string) (stats.Node, error) {
	sel := n.ordered
	if name != "" {
		ds, err := n.dataset(name)
		if err != nil {
			return stats.Node{}, err
		}
		sel = []*datasetState{ds}
	}
	st := n.store.Stats()
	out := stats.Node{
		Node: n.cfg.Name, Policy: n.pol.Name(), PADS: !n.cfg.Uniform, Sampler: n.cfg.samplerName(),
		CacheCapacity: st.Capacity, CacheUsed: st.UsedBytes, CacheEntries: st.Entries, CacheHugePages: st.HugePageBytes, CacheIndexBytes: st.IndexBytes,
		PolicyBytes: n.policyBytes(),
		FreeKeys:    stats.FreeKeys{Hits: n.freeHits.Load(), Misses: n.freeMisses.Load(), Rejected: n.freeRejected.Load()},
	}
	if n.cluster != nil {
		for _, p := range n.cluster.alive() {
			out.Members = append(out.Members, p.name)
		}
		out.RingPartitions, out.RingReplicas = int(n.cluster.partitions.Load()), n.cluster.cfg.Replicas
	} else {
		out.Members = []string{n.cfg.Name}
	}
	now := time.Now()
	for _, ds := range sel {
		d := stats.Dataset{DatasetCounters: ds.stats(), Sharing: n.Sharing(ds.name)}
		for _, js := range ds.jobList() {
			d.Jobs = append(d.Jobs, n.jobStats(js, now))
		}
		d.Job = d.Jobs[0] // the default job sorts first
		out.Datasets = append(out.Datasets, d)
	}
	sort.Slice(out.Datasets, func(a, b int) bool { return out.Datasets[a].Dataset < out.Datasets[b].Dataset })
	out.Leader = n.lead.leader()
	out.Leading = n.lead.leading()
	out.Term = n.lead.highest()
	out.ReportsQueued, out.ReportsDropped = n.out.QueuedReports(), n.out.ReportsDropped()
	out.OffersDropped = n.out.OffersDropped()
	ra := n.readAhead.Stats()
	out.ReadAhead = stats.ReadAhead{Fetched: ra.Fetched, Unused: ra.Unused, Bytes: ra.Bytes, GaveUp: ra.GaveUp}
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

// policyBytes is the memory of the policy's tables outside the Go heap,
// read without polMu (policy.OffHeap).
func (n *Node) policyBytes() int64 {
	if p, ok := n.pol.(policy.OffHeap); ok {
		return p.OffHeapBytes()
	}
	return 0
}
