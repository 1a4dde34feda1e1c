package client

// Stats is the SHADE.STATS document: the node, its cache, and its datasets.
// The types mirror the peer's JSON; fields a newer peer adds are ignored.
type Stats struct {
	Node           string         `json:"node"`
	Members        []string       `json:"members"`
	Leader         string         `json:"leader"`
	Leading        bool           `json:"leading"`
	Term           uint64         `json:"term"`
	ReportsQueued  int            `json:"reports_queued"`
	ReportsDropped int64          `json:"reports_dropped"`
	Policy         string         `json:"policy"`
	PADS           bool           `json:"pads"`
	CacheCapacity  int64          `json:"cache_capacity"` // bytes
	CacheUsed      int64          `json:"cache_used"`     // bytes
	CacheEntries   int            `json:"cache_entries"`
	FreeKeys       FreeKeyStats   `json:"free_keys"`
	ReadAhead      ReadAheadStats `json:"read_ahead"`
	Datasets       []DatasetStats `json:"datasets"` // sorted by name
}

// ReadAheadStats describes the samples the node reads ahead of its ranks.
type ReadAheadStats struct {
	Fetched int64 `json:"fetched"` // samples put into the read-ahead buffer
	Unused  int64 `json:"unused"`  // of those, dropped without being read
	Bytes   int64 `json:"bytes"`   // bytes held or being fetched now
}

// FreeKeyStats counts cache-aside use of free-form keys (SET/GET of keys
// that name no dataset sample).
type FreeKeyStats struct {
	Hits     int64 `json:"hits"`
	Misses   int64 `json:"misses"`
	Rejected int64 `json:"rejected_admissions"`
}

// DatasetStats is one dataset's counters on the node and its job.
type DatasetStats struct {
	Dataset       string       `json:"dataset"`
	Version       string       `json:"version"`
	Samples       int          `json:"samples"`
	Resident      int64        `json:"resident"` // samples in the cache
	Epoch         int          `json:"epoch"`
	Total         EpochStats   `json:"total"` // every epoch; Epoch is -1
	Epochs        []EpochStats `json:"epochs"`
	SourceLatency Histogram    `json:"source_latency"`
	Job           JobStats     `json:"job"`
}

// EpochStats counts one epoch's reads of a dataset.
type EpochStats struct {
	Epoch          int     `json:"epoch"`
	Hits           int64   `json:"hits"` // LocalHits + PeerHits
	LocalHits      int64   `json:"local_hits"`
	PeerHits       int64   `json:"peer_hits"`
	ServedPeers    int64   `json:"served_peers"`
	SourceFallback int64   `json:"source_fallbacks"`
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

// JobStats is a dataset's job: its world, newest published epoch (-1 for
// none), importance reports, and the ranks the next epoch waits for.
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
