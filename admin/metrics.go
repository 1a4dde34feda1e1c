package admin

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shade-mesh/shade/protocol/stats"
)

// collector turns a node's snapshot into Prometheus metrics at scrape time
// (the pull model: the node keeps its own counters and the collector only
// reads them). Counters are the node's totals since it started, summed over
// epochs; gauges are current values.
type collector struct {
	src Source

	// Node and cache.
	nodeInfo, cacheCapacity, cacheUsed, cacheEntries, cacheHugePages, cacheIndex, policyMem *prometheus.Desc
	freeKeyReads, freeKeyRejected                                                           *prometheus.Desc

	// Per dataset: reads and their outcome.
	reads, hits, misses, evictions, rejected        *prometheus.Desc
	sourceReads, sourceBytes, sourceErrors          *prometheus.Desc
	sourceLatency, checksumErrors                   *prometheus.Desc
	servedPeers, sourceFallbacks, prefetchHits      *prometheus.Desc
	hedged                                          *prometheus.Desc
	datasetInfo, samples, resident, hitRatio, epoch *prometheus.Desc
	decileReads, decileHits, decileRatio, orderLag  *prometheus.Desc

	// Per dataset: its default job.
	jobWorld, pendingRanks, pendingRank, reports, reportedSamples *prometheus.Desc
	scoredSamples, meanScore                                      *prometheus.Desc

	// Per job of a dataset, the default job included.
	perJobEpoch, perJobRanks, perJobPending, perJobReports     *prometheus.Desc
	perJobReads, perJobSourceBytes, perJobHitRatio, perJobIdle *prometheus.Desc
	perJobHeld, perJobHeldSeconds                              *prometheus.Desc
	perJobOrderParts                                           *prometheus.Desc

	// Mesh.
	leaderTerm, isLeader, members, reportsQueued, reportsDropped *prometheus.Desc

	// Read-ahead of the local ranks' slices.
	readAheadFetched, readAheadUnused, readAheadBytes *prometheus.Desc
	readAheadGaveUp                                   *prometheus.Desc

	// Per peer, over QUIC.
	peerConnected, peerRTT, peerRequests, peerErrors, peerServed, peerBytes, peerLastCall *prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

func newCollector(src Source) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("shade_"+name, help, labels, nil)
	}
	ds := "dataset"
	// The job's label is job_name: Prometheus gives every scraped series
	// a job label of its own (the scrape job) and would rename ours.
	job := "job_name"
	return &collector{
		src:           src,
		nodeInfo:      d("node_info", "Always 1; labels name the node, its cache policy and whether PADS orders are on.", "node", "policy", "pads"),
		cacheCapacity: d("cache_capacity_bytes", "Off-heap sample memory of this node (--cache-size), in bytes."),
		cacheUsed:     d("cache_used_bytes", "Bytes of the cache's memory in use by cached values."),
		cacheEntries:  d("cache_entries", "Values in the cache: samples and free-form keys."),
		cacheHugePages: d("cache_huge_page_bytes",
			"Bytes of the cache's memory the kernel mapped in huge pages at start; 0: 4 KiB pages only (see the README's Huge pages)."),
		cacheIndex: d("cache_index_bytes",
			"Bytes of the cache's index (its tables, 31-37 bytes a value), outside the cache's memory and the Go heap."),
		policyMem: d("policy_bytes",
			"Bytes of the cache policy's tables (its heap of residents and their index, 58-68 bytes a value cached, and its memory of each dataset sample read or scored and not cached and of the epoch order's places, 21-43 bytes each), outside the cache's memory and the Go heap."),
		freeKeyReads: d("free_key_reads_total",
			"Reads of free-form (non-dataset) keys, by result: hit (in the cache) or miss.", "result"),
		freeKeyRejected: d("free_key_rejected_admissions_total", "SETs of free-form keys the admission policy refused."),

		reads: d("reads_total",
			"Sample reads on this node by where they were served from: local (this node's memory), peer (another node's memory) or source (the dataset's backing store; every miss).",
			ds, "served"),
		hits: d("hits_total", "Sample reads served from memory, this node's or a peer's (reads_total local + peer).", ds),
		misses: d("misses_total",
			"Sample reads that no node served from memory, by kind: cold (first read of the sample on this node) or capacity (read before, since evicted or never admitted).",
			ds, "kind"),
		evictions:        d("evictions_total", "Samples this node evicted from its cache.", ds),
		rejected:         d("rejected_admissions_total", "Samples read from the source that the admission policy did not cache.", ds),
		sourceReads:      d("source_reads_total", "Reads of the dataset's backing store (the directory).", ds),
		sourceBytes:      d("source_read_bytes_total", "Bytes read from the dataset's backing store.", ds),
		sourceErrors:     d("source_errors_total", "Failed reads of the dataset's backing store (a file missing or changed).", ds),
		sourceLatency:    d("source_read_duration_seconds", "Duration of reads of the dataset's backing store, in seconds.", ds),
		checksumErrors:   d("checksum_errors_total", "Samples from a peer whose bytes did not match their checksum (discarded: a read goes elsewhere, an offer is refused).", ds),
		servedPeers:      d("served_peers_total", "Sample reads this node answered for other peers.", ds),
		sourceFallbacks:  d("source_fallbacks_total", "Reads of samples this node does not own for which no owner answered, so this node read the source.", ds),
		prefetchHits:     d("prefetch_hits_total", "Reads that missed every node's memory but found their sample already read ahead, so did not wait for the source.", ds),
		hedged:           d("hedged_requests_total", "Reads of a sample sent to another owner, or to the source, because the one asked before had not answered within the hedge wait (--hedge-after); a hedged request of several samples counts each of them.", ds),
		readAheadFetched: d("readahead_fetched_total", "Samples read ahead of the local ranks' reads into the read-ahead buffer."),
		readAheadUnused:  d("readahead_unused_total", "Samples read ahead and dropped without being read (the rank passed them, or a newer order came)."),
		readAheadBytes:   d("readahead_bytes", "Bytes the read-ahead buffer holds or is fetching now (bounded by --prefetch-memory)."),
		readAheadGaveUp:  d("readahead_gave_up_total", "Reads that found their sample being read ahead, waited the hedge wait (--hedge-after) and read it themselves."),
		datasetInfo:      d("dataset_info", "Always 1; the version label is the hash of the dataset's file names and sizes (every peer must serve the same).", ds, "version"),
		samples:          d("dataset_samples", "Samples in the dataset.", ds),
		resident:         d("resident_samples", "Samples of the dataset in this node's cache.", ds),
		decileReads:      d("decile_reads_total", "Sample reads by the importance decile of the sample read (0 least important, by its score within ln 10..ln 73 at the time of the read).", ds, "decile"),
		decileHits:       d("decile_hits_total", "Sample reads served from memory (this node's or a peer's), by importance decile.", ds, "decile"),
		decileRatio:      d("hit_ratio_by_decile", "Hit ratio of the reads of each importance decile since start: hits / reads, 0 before any read.", ds, "decile"),
		orderLag:         d("order_lag_epochs", "Epochs between the newest order published and the newest epoch this node's ranks have asked for.", ds),
		hitRatio:         d("hit_ratio", "Hit ratio on this node of the newest epoch that reads are counted against: hits / (hits + misses), 0 before any read.", ds),
		epoch:            d("epoch", "Newest epoch whose order was published for the dataset's default job; -1 before its first SHADE.ORDER.", ds),

		jobWorld:        d("job_world", "Ranks in the dataset's default job (fixed by its first SHADE.ORDER); 0 before it. Every job's: shade_job_ranks.", ds),
		pendingRanks:    d("pending_ranks", "Ranks of the dataset's default job the leader still waits on (SHADE.DONE not received) before it publishes the next epoch; reported by the leader only.", ds),
		pendingRank:     d("pending_rank", "Always 1, one series per rank of the default job the leader still waits on; reported by the leader only.", ds, "rank"),
		reports:         d("reports_total", "SHADE.REPORT loss reports of the dataset's default job merged into its scores.", ds),
		reportedSamples: d("reported_samples_total", "Per-sample losses in the merged reports of the dataset's default job.", ds),
		scoredSamples:   d("scored_samples", "Samples of the dataset that have an importance score in its default job.", ds),
		meanScore:       d("mean_score", "Mean importance score of the scored samples of the dataset's default job.", ds),

		perJobEpoch:   d("job_epoch", "Newest epoch whose order was published for the job; -1 before its first SHADE.ORDER. The default job's job_name is default.", ds, job),
		perJobRanks:   d("job_ranks", "Ranks in the job (its world, fixed by its first SHADE.ORDER); 0 before it.", ds, job),
		perJobPending: d("job_pending_ranks", "Ranks of the job the leader still waits on (SHADE.DONE not received) before it publishes the next epoch; reported by the leader only.", ds, job),
		perJobReports: d("job_reports_total", "SHADE.REPORT loss reports of the job received on this node.", ds, job),
		perJobReads: d("job_reads_total",
			"Sample reads on this node by the job's trainers (connections that named the job with SHADE.JOB or SHADE.ORDER ... JOB; others count for the default job), by where they were served: memory (this node's, a peer's or the read-ahead's) or source.",
			ds, job, "served"),
		perJobSourceBytes: d("job_source_read_bytes_total", "Bytes of the samples the job's reads on this node took from the dataset's backing store.", ds, job),
		perJobHitRatio:    d("job_hit_ratio", "Hit ratio of the job's reads on this node since the job started here: reads served from memory / reads, 0 before any read.", ds, job),
		perJobIdle:        d("job_idle_seconds", "Seconds since the job's last join, SHADE.DONE, SHADE.REPORT or SHADE.ORDER on this node; a job idle for --job-idle is retired.", ds, job),
		perJobHeld: d("job_held_total",
			"Epoch starts of the job held for the dataset's other jobs to catch up (--job-sync), by where: leader (an epoch whose draw this node held as the job's leader, orders drawn when due; since it began to lead the job) or peer (a start of an epoch by one of the job's ranks on this node, held here, orders drawn ahead).",
			ds, job, "at"),
		perJobHeldSeconds: d("job_held_seconds_total",
			"Seconds the held starts of job_held_total waited in all, by where (a leader's held epoch counts once its hold ends).", ds, job, "at"),
		perJobOrderParts: d("job_order_parts_total",
			"Epochs' orders of the job this node received as its part of them (its ranks' slices, the reads of its samples) from a relay, not whole.", ds, job),

		leaderTerm:     d("leader_term", "Highest leader term this node has seen."),
		isLeader:       d("is_leader", "1 if this node is the mesh's leader (a standalone node leads itself), else 0."),
		members:        d("members", "Alive mesh members as this node sees them, itself included."),
		reportsQueued:  d("reports_queued", "Loss reports queued on this node for the leader."),
		reportsDropped: d("reports_dropped_total", "Loss reports dropped because the queue for the leader was full."),

		peerConnected: d("peer_connected", "1 while this node holds a QUIC connection to the peer, else 0.", "peer", "addr"),
		peerRTT:       d("peer_rtt_seconds", "QUIC smoothed round-trip time to the peer, in seconds; only while connected.", "peer", "addr"),
		peerRequests:  d("peer_requests_total", "Requests this node sent to the peer.", "peer", "addr"),
		peerErrors:    d("peer_errors_total", "Requests to the peer that failed, an error reply included.", "peer", "addr"),
		peerServed:    d("peer_served_total", "Requests this node served for the peer.", "peer", "addr"),
		peerBytes:     d("peer_bytes_total", "Frame bytes exchanged with the peer, by direction: in (received) or out (sent).", "peer", "addr", "direction"),
		peerLastCall:  d("peer_last_call_seconds", "Duration of the latest successful request to the peer, in seconds.", "peer", "addr"),
	}
}

// Describe sends every metric's descriptor.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.nodeInfo, c.cacheCapacity, c.cacheUsed, c.cacheEntries, c.cacheHugePages, c.cacheIndex, c.policyMem, c.freeKeyReads, c.freeKeyRejected,
		c.reads, c.hits, c.misses, c.evictions, c.rejected, c.sourceReads, c.sourceBytes, c.sourceErrors,
		c.sourceLatency, c.checksumErrors, c.servedPeers, c.sourceFallbacks, c.prefetchHits, c.hedged,
		c.readAheadFetched, c.readAheadUnused, c.readAheadBytes, c.readAheadGaveUp,
		c.datasetInfo, c.samples, c.resident, c.hitRatio, c.epoch,
		c.decileReads, c.decileHits, c.decileRatio, c.orderLag,
		c.jobWorld, c.pendingRanks, c.pendingRank, c.reports, c.reportedSamples, c.scoredSamples, c.meanScore,
		c.perJobEpoch, c.perJobRanks, c.perJobPending, c.perJobReports,
		c.perJobReads, c.perJobSourceBytes, c.perJobHitRatio, c.perJobIdle, c.perJobHeld, c.perJobHeldSeconds, c.perJobOrderParts,
		c.leaderTerm, c.isLeader, c.members, c.reportsQueued, c.reportsDropped,
		c.peerConnected, c.peerRTT, c.peerRequests, c.peerErrors, c.peerServed, c.peerBytes, c.peerLastCall,
	} {
		ch <- d
	}
}

// Collect reads the node's snapshot and sends its metrics.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Snapshot()
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		send(ch, d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		send(ch, d, prometheus.GaugeValue, v, labels...)
	}

	gauge(c.nodeInfo, 1, st.Node, st.Policy, strconv.FormatBool(st.PADS))
	gauge(c.cacheCapacity, float64(st.CacheCapacity))
	gauge(c.cacheUsed, float64(st.CacheUsed))
	gauge(c.cacheEntries, float64(st.CacheEntries))
	gauge(c.cacheHugePages, float64(st.CacheHugePages))
	gauge(c.cacheIndex, float64(st.CacheIndexBytes))
	gauge(c.policyMem, float64(st.PolicyBytes))
	counter(c.freeKeyReads, float64(st.FreeKeys.Hits), "hit")
	counter(c.freeKeyReads, float64(st.FreeKeys.Misses), "miss")
	counter(c.freeKeyRejected, float64(st.FreeKeys.Rejected))

	gauge(c.leaderTerm, float64(st.Term))
	gauge(c.isLeader, boolValue(st.Leading))
	gauge(c.members, float64(len(st.Members)))
	gauge(c.reportsQueued, float64(st.ReportsQueued))
	counter(c.reportsDropped, float64(st.ReportsDropped))
	counter(c.readAheadFetched, float64(st.ReadAhead.Fetched))
	counter(c.readAheadUnused, float64(st.ReadAhead.Unused))
	gauge(c.readAheadBytes, float64(st.ReadAhead.Bytes))
	counter(c.readAheadGaveUp, float64(st.ReadAhead.GaveUp))

	for _, e := range st.Datasets {
		name, t := e.Dataset, e.Total
		counter(c.reads, float64(t.LocalHits), name, "local")
		counter(c.reads, float64(t.PeerHits), name, "peer")
		counter(c.reads, float64(t.ColdMisses+t.CapacityMisses), name, "source")
		counter(c.hits, float64(t.Hits), name)
		counter(c.misses, float64(t.ColdMisses), name, "cold")
		counter(c.misses, float64(t.CapacityMisses), name, "capacity")
		counter(c.evictions, float64(t.Evictions), name)
		counter(c.rejected, float64(t.Rejected), name)
		counter(c.sourceReads, float64(t.SourceReads), name)
		counter(c.sourceBytes, float64(t.SourceBytes), name)
		counter(c.sourceErrors, float64(t.SourceErrors), name)
		counter(c.checksumErrors, float64(t.ChecksumErrors), name)
		counter(c.servedPeers, float64(t.ServedPeers), name)
		counter(c.sourceFallbacks, float64(t.SourceFallback), name)
		counter(c.prefetchHits, float64(t.PrefetchHits), name)
		counter(c.hedged, float64(t.Hedged), name)
		c.histogram(ch, c.sourceLatency, e.SourceLatency, name)

		gauge(c.datasetInfo, 1, name, e.Version)
		gauge(c.samples, float64(e.Samples), name)
		gauge(c.resident, float64(e.Resident), name)
		var ratio float64
		if n := len(e.Epochs); n > 0 {
			ratio = e.Epochs[n-1].HitRatio
		}
		gauge(c.hitRatio, ratio, name)
		gauge(c.epoch, float64(e.Job.LatestEpoch), name)
		gauge(c.orderLag, float64(max(0, e.Job.LatestEpoch-e.Epoch)), name)
		for d := range e.DecileReads {
			dec := strconv.Itoa(d)
			counter(c.decileReads, float64(e.DecileReads[d]), name, dec)
			counter(c.decileHits, float64(e.DecileHits[d]), name, dec)
			var r float64
			if e.DecileReads[d] > 0 {
				r = float64(e.DecileHits[d]) / float64(e.DecileReads[d])
			}
			gauge(c.decileRatio, r, name, dec)
		}

		j := e.Job
		gauge(c.jobWorld, float64(j.World), name)
		gauge(c.pendingRanks, float64(len(j.PendingRanks)), name)
		for _, r := range j.PendingRanks {
			gauge(c.pendingRank, 1, name, strconv.Itoa(r))
		}
		counter(c.reports, float64(j.Reports), name)
		counter(c.reportedSamples, float64(j.ReportedIDs), name)
		gauge(c.scoredSamples, float64(j.ScoredSamples), name)
		gauge(c.meanScore, j.MeanScore, name)

		for _, j := range e.Jobs {
			job := j.Name
			gauge(c.perJobEpoch, float64(j.LatestEpoch), name, job)
			gauge(c.perJobRanks, float64(j.World), name, job)
			gauge(c.perJobPending, float64(len(j.PendingRanks)), name, job)
			counter(c.perJobReports, float64(j.Reports), name, job)
			counter(c.perJobReads, float64(j.Hits), name, job, "memory")
			counter(c.perJobReads, float64(j.SourceReads), name, job, "source")
			counter(c.perJobSourceBytes, float64(j.SourceBytes), name, job)
			gauge(c.perJobHitRatio, j.HitRatio, name, job)
			gauge(c.perJobIdle, j.IdleSeconds, name, job)
			counter(c.perJobHeld, float64(j.HeldEpochs), name, job, "leader")
			counter(c.perJobHeld, float64(j.HeldStarts), name, job, "peer")
			counter(c.perJobHeldSeconds, j.HeldEpochSeconds, name, job, "leader")
			counter(c.perJobHeldSeconds, j.HeldStartSeconds, name, job, "peer")
			counter(c.perJobOrderParts, float64(j.OrderParts), name, job)
		}
	}

	peers := c.src.PeerStats()
	addrs := make([]string, 0, len(peers))
	for a := range peers {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	for _, addr := range addrs {
		p := peers[addr]
		// A peer is named by its certificate's CN once connected; the
		// address keeps series apart when a name moves to a new address.
		gauge(c.peerConnected, boolValue(p.Connected), p.Name, addr)
		if p.Connected {
			gauge(c.peerRTT, p.RTT.Seconds(), p.Name, addr)
		}
		counter(c.peerRequests, float64(p.Requests), p.Name, addr)
		counter(c.peerErrors, float64(p.Errors), p.Name, addr)
		counter(c.peerServed, float64(p.Served), p.Name, addr)
		counter(c.peerBytes, float64(p.BytesIn), p.Name, addr, "in")
		counter(c.peerBytes, float64(p.BytesOut), p.Name, addr, "out")
		gauge(c.peerLastCall, p.LastCall.Seconds(), p.Name, addr)
	}
}

// histogram sends a const histogram of h: mesh's counts are per bucket,
// Prometheus's are cumulative, and the last count (above every bound) is
// only in the total.
func (c *collector) histogram(ch chan<- prometheus.Metric, d *prometheus.Desc, h stats.Histogram, labels ...string) {
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, n := range h.Counts {
		cum += uint64(max(n, 0))
		if i < len(h.Bounds) {
			buckets[h.Bounds[i]] = cum
		}
	}
	m, err := prometheus.NewConstHistogram(d, cum, h.Sum, buckets, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

// send sends one const metric, or an invalid one that makes the scrape
// report the error rather than panic.
func send(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
