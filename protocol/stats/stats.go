// Package stats holds the types of the SHADE.STATS document: the JSON
// that a shade-peer serves about itself, its cache and its datasets. The
// peer fills them (package mesh), and the Go client, shadectl status and
// the admin metrics read them; it imports no server package.
//
// Compatibility: fields are only added. A reader decoding a newer peer's
// document ignores the fields it does not know.
package stats

import "slices"

// Node is the SHADE.STATS document: the node, its cache, and its datasets.
type Node struct {
	Node           string   `json:"node"`
	Members        []string `json:"members"` // alive members as this node sees them
	Leader         string   `json:"leader"`
	Leading        bool     `json:"leading"`
	Term           uint64   `json:"term"` // newest leader term seen
	ReportsQueued  int      `json:"reports_queued"`
	ReportsDropped int64    `json:"reports_dropped"`
	OffersDropped  int64    `json:"offers_dropped"`
	Policy         string   `json:"policy"`
	PADS           bool     `json:"pads"`
	// Sampler names the sampler that draws this node's orders and its
	// settings, e.g. "uniform permutation" or "pads magnitude
	// max-weight=4 boost=3".
	Sampler       string `json:"sampler"`
	CacheCapacity int64  `json:"cache_capacity"` // bytes
	CacheUsed     int64  `json:"cache_used"`     // bytes
	// CacheHugePages is how much of the cache's memory the kernel mapped in
	// huge pages at start, in bytes (0: 4 KiB pages only).
	CacheHugePages int64 `json:"cache_huge_page_bytes"`
	// CacheIndexBytes is the memory of the cache's index, in bytes: its
	// tables, outside the cache's memory and the Go heap.
	CacheIndexBytes int64 `json:"cache_index_bytes"`
	// PolicyBytes is the memory of the cache policy's tables, in bytes:
	// outside the cache's memory and the Go heap (0 for a policy without
	// such tables).
	PolicyBytes  int64     `json:"policy_bytes"`
	CacheEntries int       `json:"cache_entries"`
	FreeKeys     FreeKeys  `json:"free_keys"`
	ReadAhead    ReadAhead `json:"read_ahead"`
	Datasets     []Dataset `json:"datasets"` // sorted by name

	// RingPartitions and RingReplicas are the shape of the node's
	// datasets' rings, the same on every peer of a mesh; 0 for a node
	// outside one (and in the document of an earlier build).
	RingPartitions int `json:"ring_partitions,omitempty"`
	RingReplicas   int `json:"ring_replicas,omitempty"`
}

// ReadAhead describes the samples the node reads ahead of its local ranks.
type ReadAhead struct {
	Fetched int64 `json:"fetched"` // samples put into the read-ahead buffer
	Unused  int64 `json:"unused"`  // of those, dropped without being read
	Bytes   int64 `json:"bytes"`   // bytes held or being fetched now
	GaveUp  int64 `json:"gave_up"` // reads that did not wait longer for a slow fetch
}

// FreeKeys counts cache-aside use of free-form keys (SET/GET of keys that
// name no dataset sample).
type FreeKeys struct {
	Hits     int64 `json:"hits"`
	Misses   int64 `json:"misses"`
	Rejected int64 `json:"rejected_admissions"`
}

// Dataset is one dataset of Node: its counters on the node and its jobs.
type Dataset struct {
	DatasetCounters
	// Job is the dataset's default job (the one trainers that name no
	// job train in); Jobs is every job, the default first, then by name.
	Job  Job   `json:"job"`
	Jobs []Job `json:"jobs"`
	// Sharing names the members that share the dataset with this node,
	// sorted, this node among them: its ring's members, whose owners of
	// the samples are this node's. A peer that has just joined is
	// among the members before it shares (it advertises its datasets
	// once it has its ring's shape). Absent in an earlier build's
	// document.
	Sharing []string `json:"sharing,omitempty"`
}

// DatasetCounters is a snapshot of one dataset's counters on a node.
type DatasetCounters struct {
	Dataset string `json:"dataset"`
	Version string `json:"version"` // the manifest hash
	// Encoding is how a sample's bytes are read: absent for a file's own
	// bytes, "wds" for a WebDataset sample, one MessagePack map from
	// member extension to bytes (package dataset/shards).
	Encoding string  `json:"encoding,omitempty"`
	Samples  int     `json:"samples"`
	Resident int64   `json:"resident"` // samples in this node's cache
	Epoch    int     `json:"epoch"`    // the epoch reads are counted against
	Total    Epoch   `json:"total"`    // every epoch; its Epoch is -1
	Epochs   []Epoch `json:"epochs"`
	// SourceLatency is the distribution of source read times.
	SourceLatency Histogram `json:"source_latency"`
	// DecileReads and DecileHits count reads and hits by the importance
	// decile of the sample read (0 least important); 10 entries each.
	DecileReads []int64 `json:"decile_reads"`
	DecileHits  []int64 `json:"decile_hits"`
}

// Epoch is a snapshot of one epoch's counters of a dataset on a node.
//
// PrefetchHits counts reads that missed every node's memory but found
// their sample read ahead from the source: misses that did not wait for
// it. They count as misses too, so the hit ratio stays the policy's own.
// (A sample read ahead from a peer's memory counts as a peer hit, as it
// would have without read-ahead.)
type Epoch struct {
	Epoch          int     `json:"epoch"`
	Hits           int64   `json:"hits"` // LocalHits + PeerHits
	LocalHits      int64   `json:"local_hits"`
	PeerHits       int64   `json:"peer_hits"`
	ServedPeers    int64   `json:"served_peers"`
	SourceFallback int64   `json:"source_fallbacks"`
	Hedged         int64   `json:"hedged_requests"` // requests sent because the one before had not answered in time
	ChecksumErrors int64   `json:"checksum_errors"`
	ColdMisses     int64   `json:"cold_misses"`
	CapacityMisses int64   `json:"capacity_misses"`
	Evictions      int64   `json:"evictions"`
	Rejected       int64   `json:"rejected_admissions"`
	SourceReads    int64   `json:"source_reads"`
	SourceBytes    int64   `json:"source_bytes"`
	SourceErrors   int64   `json:"source_errors"`
	PrefetchHits   int64   `json:"prefetch_hits"` // misses served from the read-ahead
	HitRatio       float64 `json:"hit_ratio"`     // hits / (hits + misses); 0 with no reads
}

// Histogram is a latency distribution: Counts[i] observations at most
// Bounds[i] seconds (and above the previous bound); the last count is
// above every bound. Sum is in seconds.
type Histogram struct {
	Bounds []float64 `json:"bounds"`
	Counts []int64   `json:"counts"`
	Sum    float64   `json:"sum"`
}

// Job is a snapshot of a dataset's job: its world, newest published epoch
// (-1 for none), importance reports, the ranks the next epoch waits for,
// and its trainers' reads on this node.
type Job struct {
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
	// Reads by the job's trainers on this node (the connections that
	// named the job): all of them, those served from memory (this node's,
	// a peer's or the read-ahead's), and those read from the source, with
	// their bytes. HitRatio is Hits/Reads, 0 with no reads.
	Reads       int64   `json:"reads"`
	Hits        int64   `json:"hits"`
	HitRatio    float64 `json:"hit_ratio"`
	SourceReads int64   `json:"source_reads"`
	SourceBytes int64   `json:"source_bytes"`
	// IdleSeconds is how long the job has had no join, done, report or
	// order on this node.
	IdleSeconds float64 `json:"idle_seconds"`
	// Epochs whose start was held for the dataset's other jobs to catch
	// up (--job-sync), and how long they waited in all. HeldEpochs counts
	// the epochs whose draw this node held as the job's leader (orders
	// drawn when due), since it began to lead the job; HeldEpochSeconds
	// their wait (an epoch held now counts once its hold ends).
	// HeldStarts counts the starts of an epoch by the job's ranks on this
	// node that this node held (orders drawn ahead), HeldStartSeconds
	// their wait.
	HeldEpochs       int     `json:"held_epochs"`
	HeldEpochSeconds float64 `json:"held_epoch_seconds"`
	HeldStarts       int64   `json:"held_starts"`
	HeldStartSeconds float64 `json:"held_start_seconds"`
	// OrderParts counts the epochs' orders this node received as its part
	// of them (its ranks' slices, the reads of its samples) from a relay,
	// not whole, since it started.
	OrderParts int64 `json:"order_parts"`
	// Name is the job's name, "default" for the dataset's default job.
	Name string `json:"name"`
}

// SharesWith reports whether the node shares each of its datasets with
// exactly members, sorted (Dataset.Sharing). A peer that has just joined
// is among the members before it is among the sharing.
func (n Node) SharesWith(members []string) bool {
	for _, d := range n.Datasets {
		if !slices.Equal(d.Sharing, members) {
			return false
		}
	}
	return true
}
