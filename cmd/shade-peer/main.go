// Command shade-peer is the Shade daemon: one per GPU node, it caches
// training samples in off-heap memory and serves them, with importance-
// sampled epoch orders, to the node's trainers over a Unix socket that
// speaks the Redis protocol.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/shade-mesh/shade/admin"
	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/dataset/claim"
	"github.com/shade-mesh/shade/dataset/s3source"
	"github.com/shade-mesh/shade/dataset/shards"
	"github.com/shade-mesh/shade/internal/bytesize"
	"github.com/shade-mesh/shade/internal/gcfloor"
	"github.com/shade-mesh/shade/mesh"
	"github.com/shade-mesh/shade/mesh/leader"
	"github.com/shade-mesh/shade/mesh/member"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/sampling"
	"github.com/shade-mesh/shade/transport"
	"github.com/shade-mesh/shade/transport/peer"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const envPrefix = "SHADE_"

var (
	_ mesh.Source = (*s3source.Source)(nil)
	_ mesh.Source = (*shards.Source)(nil)
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, log, err := parseConfig(args, os.LookupEnv, stdout, stderr)
	if errors.Is(err, pflag.ErrHelp) || errors.Is(err, errVersion) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "shade-peer: %v\n", err)
		return 2
	}
	// The samples are off the Go heap, which is small: let it grow to 64
	// MiB between collections (package gcfloor). GOGC, where set, is the
	// operator's choice instead.
	if _, set := os.LookupEnv("GOGC"); !set {
		defer gcfloor.Floor{}.Start()()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		log.Info().Str("signal", s.String()).Msg("draining; a second signal forces exit")
		cancel()
		s = <-sigs
		log.Warn().Str("signal", s.String()).Msg("forced exit")
		os.Exit(1)
	}()
	if err := openSources(ctx, &cfg, log); err != nil {
		log.Error().Err(err).Msg("shade-peer failed")
		fmt.Fprintf(stderr, "shade-peer: %v\n", err)
		return 1
	}
	var adm *admin.Server
	var admErr error
	err = mesh.Run(ctx, cfg.PeerConfig, func(node *mesh.Node, sock *transport.SocketServer) {
		acfg := cfg.Admin
		acfg.Clients = sock
		s, err := admin.Listen(acfg, node)
		switch {
		case err == nil:
			adm = s
		case cfg.adminChosen:
			admErr = err
			cancel()
		default:
			// Several peers on one host (deploy/local/mesh.sh) share the
			// default port; only a chosen address is worth failing for.
			log.Warn().Err(err).Msg("no admin listener: the default --admin-addr is taken (set --admin-addr, or off)")
		}
	})
	if err := adm.Close(); err != nil {
		log.Warn().Err(err).Msg("closing the admin listener")
	}
	if err == nil {
		err = admErr
	}
	if err != nil {
		log.Error().Err(err).Msg("shade-peer failed")
		return 1
	}
	return 0
}

// daemonConfig is the node's PeerConfig and the admin listener's Config.
type daemonConfig struct {
	mesh.PeerConfig
	Admin admin.Config
	// adminChosen: --admin-addr is not the default, so failing to listen
	// on it stops the daemon.
	adminChosen bool
	// opened are the datasets whose source must be listed or indexed
	// (s3://, shards:), opened by openSources before the node starts:
	// Node.Datasets[opened[k].index] gets the Source.
	opened []openedDataset
}

// openedDataset is an s3:// or shards: dataset of the command line, not
// yet opened: exactly one of s3 and shards is set.
type openedDataset struct {
	index  int
	s3     *s3source.Config
	shards *shards.Config
}

// openSources lists or indexes (or loads from the state directory) every
// s3:// and shards: dataset and sets it as its DatasetConfig's Source.
func openSources(ctx context.Context, cfg *daemonConfig, log zerolog.Logger) error {
	for _, d := range cfg.opened {
		dc := &cfg.Node.Datasets[d.index]
		start := time.Now()
		var (
			src   mesh.Source
			where string
			err   error
		)
		// Said when the wait begins and every half minute while it goes
		// on (claim.ReportBeats), with the other peer's progress.
		waiting := func(w claim.Wait) {
			ev := log.Info().Str("dataset", dc.Name).Str("source", where).Str("holder", w.Holder).Dur("waited", w.For)
			if w.Total > 0 {
				ev = ev.Int64("shards_read", w.Done).Int64("shards", w.Total)
			}
			ev.Msg("waiting for the listing or index another peer is making (--publish-index)")
		}
		if d.s3 != nil {
			where = d.s3.URL
			c := *d.s3
			c.Claim.Waiting = waiting
			src, err = s3source.Open(ctx, c)
		} else {
			where = shards.Prefix + d.shards.Location
			c := *d.shards
			c.Claim.Waiting = waiting
			c.Progress = indexProgress(log, dc.Name, where)
			src, err = shards.Open(ctx, c)
		}
		if err != nil {
			return fmt.Errorf("--dataset %s=%s: %w", dc.Name, where, err)
		}
		m := src.Manifest()
		ev := log.Info().Str("dataset", dc.Name).Str("source", where).Int("samples", m.Len()).
			Int64("bytes", m.TotalBytes()).Str("version", m.Version).Dur("took", time.Since(start))
		switch src := src.(type) {
		case *shards.Source:
			from, skipped := src.IndexFrom()
			ev = ev.Str("index", string(from))
			ev = shared(ev, log, dc.Name, "index_built_by", src)
			if skipped != nil {
				log.Warn().Str("dataset", dc.Name).Err(skipped).
					Msg("the index published beside the shards was not used: they were indexed again; publish it again with 'shadectl dataset index --publish'")
			}
		case *s3source.Source:
			from, at, skipped := src.Listing()
			ev = ev.Str("listing", string(from)).Time("listed_at", at)
			ev = shared(ev, log, dc.Name, "listed_by", src)
			switch {
			case errors.Is(skipped, s3source.ErrTooOld):
				log.Info().Str("dataset", dc.Name).Err(skipped).
					Msg("the listing published beside the dataset is older than --s3-listing-max-age: the prefix was listed")
			case skipped != nil:
				log.Warn().Str("dataset", dc.Name).Err(skipped).
					Msg("the listing published beside the dataset was not used: the prefix was listed; publish it again with 'shadectl dataset index --publish'")
			}
		}
		ev.Msg("opened dataset")
		dc.Source = src
	}
	return nil
}

// indexProgress logs the shards read as their index is built, every 30
// seconds (a bucket of small samples is read whole, which may take
// minutes), and when all are read where that took 30 seconds or more.
func indexProgress(log zerolog.Logger, dataset, where string) func(done, total int) {
	start := time.Now()
	last := start
	return func(done, total int) {
		if now := time.Now(); now.Sub(last) >= 30*time.Second || (done == total && last != start) {
			last = now
			log.Info().Str("dataset", dataset).Str("source", where).Int("shards_read", done).Int("shards", total).
				Dur("took", now.Sub(start)).Msg("indexing the shards")
		}
	}
}

// shared adds to ev (as key) the peer whose published listing or index
// src waited for, and warns where src's could not be shared
// (--publish-index).
func shared(ev *zerolog.Event, log zerolog.Logger, dataset, key string, src interface{ Shared() (string, error) }) *zerolog.Event {
	by, err := src.Shared()
	if err != nil {
		log.Warn().Str("dataset", dataset).Err(err).
			Msg("not shared with the other peers (--publish-index): each lists or indexes the dataset itself")
	}
	if by != "" {
		ev = ev.Str(key, by)
	}
	return ev
}

var errVersion = errors.New("version printed")

// parseConfig reads flags, then SHADE_<FLAG> environment variables for the
// flags not given (a flag wins over its variable).
func parseConfig(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) (daemonConfig, zerolog.Logger, error) {
	var (
		cfg         daemonConfig
		nop         = zerolog.Nop()
		fs          = pflag.NewFlagSet("shade-peer", pflag.ContinueOnError)
		name        = fs.String("name", "", "stable node name (default: the host name)")
		socket      = fs.String("socket", "/run/shade/shade.sock", "trainer socket path (Redis protocol); its file is created with mode 0660")
		datasets    = fs.StringArray("dataset", nil, "serve a dataset: NAME=DIR, NAME=s3://BUCKET/PREFIX for the objects under a bucket prefix (see --s3-endpoint), or NAME=shards:DIR or NAME=shards:s3://BUCKET/PREFIX for WebDataset .tar shards (a sample is a msgpack map of its members); repeatable (in the environment: comma-separated)")
		s3Endpoint  = fs.String("s3-endpoint", "", "URL of the S3-compatible store of s3:// datasets, http(s)://HOST[:PORT] (default: AWS S3); credentials come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN or the shared AWS credentials and config files")
		s3Region    = fs.String("s3-region", "", "region of the s3:// datasets' buckets (default: found by the client, or us-east-1)")
		s3PathStyle = fs.Bool("s3-path-style", false, "address buckets as ENDPOINT/BUCKET rather than BUCKET.ENDPOINT (most stores other than AWS)")
		s3InFlight  = fs.Int("s3-max-in-flight", s3source.DefaultMaxInFlight, "GET requests in flight to the store for each s3:// dataset (and the connections kept open to it); a store with a high time to first byte needs many to keep trainers fed")
		s3Relist    = fs.Bool("s3-relist", false, "list s3:// datasets and index shards: datasets again even when --state-dir holds their listing or index, or one is published beside them ('shadectl dataset index --publish')")
		maxAge      = fs.Duration("s3-listing-max-age", 0, "list an s3:// dataset again at start when its kept or published listing was made longer ago than this (e.g. 24h), so that objects added since are served; with --publish-index the new listing is published, once for the peers starting together (0: any age)")
		pubIndex    = fs.Bool("publish-index", false, "list s3:// datasets and index shards: datasets once for every peer: the first peer to find none published beside the dataset claims the work (.shade/listing.claim or .shade/shards.index.claim), does it and publishes the result there (.shade/listing or .shade/shards.index); peers starting meanwhile wait for it and read it, later ones read it at once. A published listing is the dataset until published again (--s3-relist lists afresh and publishes). Needs write access to the bucket or directory; where a peer has none, it lists or indexes alone")
		cacheSize   = fs.String("cache-size", "1GiB", "off-heap sample memory, with units (KiB, MiB, GiB, TiB; KB, MB, GB); 0 caches nothing (every read goes to the source)")
		pol         = fs.String("policy", "order", "eviction and admission policy: order (APP that also evicts by next use in the published orders), app (SHADE's), lru, fifo, lfu, minio, none (cache nothing)")
		pads        = fs.String("pads", "on", "importance sampling of epoch orders: on (PADS) or off (uniform, as DistributedSampler)")
		seed        = fs.Uint64("seed", 0, "job seed: every epoch's order is a function of seed, epoch and scores")
		alpha       = fs.Float64("alpha", sampling.DefaultAlpha, "weight of a new importance score against the old one in the merge")
		lambda      = fs.Float64("lambda", 0, "added to every score to form sampling weights: positive flattens toward uniform, negative sharpens")
		floor       = fs.Float64("uniform-floor", sampling.DefaultUniformFloor, "share of each epoch's draws that are uniform (0: none)")
		coverage    = fs.Int("coverage-epochs", sampling.DefaultCoverageEpochs, "every sample is drawn at least once every K epochs (0: no floor)")
		score       = fs.String("score", "magnitude", "importance score of a reported loss: magnitude (1-exp(-loss) over the minibatch's mean) or rank (SHADE's rank within the minibatch)")
		maxWeight   = fs.Float64("max-weight", sampling.PeerMaxWeight, "cap on a drawn sample's importance weight 1/(N*p), at least 1 (0: no cap)")
		boost       = fs.Float64("boost", sampling.PeerBoost, "cache-aware draws: samples cached in the mesh are 1+BOOST times as likely within their importance stratum (0: off)")
		strata      = fs.Int("strata", sampling.DefaultStrata, "importance strata of --boost: each keeps its share of the draws")
		orderAhead  = fs.Int("order-ahead", 0, "epochs by which orders are published ahead of training, 0 or 1: with 1, epoch e+2 is drawn when every rank finished e, so caches see the next epoch's reads while the current one runs")
		aheadAt     = fs.Float64("order-ahead-at", leader.DefaultAheadAt, "with --order-ahead 0, a job's orders run an epoch ahead once its ranks waited for an order more than this share of their time, and the order took the leader 50 ms or more (0: never)")
		gossipAddr  = fs.String("gossip-addr", "", "gossip (memberlist) bind address host:port; empty runs standalone unless --seeds is set (then :7946)")
		seeds       = fs.StringSlice("seeds", nil, "gossip addresses of other peers, comma-separated (host:port)")
		gossipKey   = fs.String("gossip-key", "", "base64 key (16, 24 or 32 bytes) that encrypts gossip; every peer needs the same")
		peerAddr    = fs.String("peer-addr", "", "QUIC listen address for peer traffic (default: the gossip host, port 7947)")
		tlsCA       = fs.String("tls-ca", "", "cluster CA certificate (PEM), from 'shadectl certs init'")
		tlsCert     = fs.String("tls-cert", "", "this node's certificate (PEM), from 'shadectl certs issue NAME'")
		tlsKey      = fs.String("tls-key", "", "this node's private key (PEM)")
		devTLS      = fs.String("dev-tls-dir", "", "development: make (or reuse) a CA and this node's certificate in DIR; for local clusters")
		replicas    = fs.Int("replicas", 2, "owners of each sample (R); every peer must use the same (a peer of another is left out of the datasets' rings)")
		expect      = fs.Int("expect", 1, "expected number of peers; a leader publishes orders only while it sees a majority")
		profile     = fs.String("gossip-profile", "lan", "failure-detection tuning: lan or local (loopback)")
		joinWait    = fs.Duration("join-wait", 5*time.Second, "how long epoch 0 waits for every rank to ask for it")
		deadline    = fs.Duration("epoch-deadline", 0, "publish the next epoch this long after the first rank finished, even if others have not (0: wait for all)")
		prefetch    = fs.Int("prefetch", 1024, "samples kept read ahead of each local rank's reads in its slice of the epoch's order (0: no read-ahead)")
		prefetchMem = fs.String("prefetch-memory", "64MiB", "off-heap memory for samples read ahead, beside --cache-size")
		srcReads    = fs.Int("source-reads", mesh.DefaultSourceReads, "reads through in flight (from the source at worst) for one MGET's samples this node owns and does not hold, and for one other peer's request; and fetches in flight for each local rank's read-ahead")
		hedgeAfter  = fs.String("hedge-after", "auto", "how long a read waits for the owner it asked before it also asks the next owner, or the source, and keeps the first answer: auto (the 99th percentile of recent answers' latencies, within 10ms..500ms), a duration such as 50ms, or off (ask the next only once the one before failed); an owner reads the source beside a co-owner only once it no longer hears from it")
		throttle    = fs.String("source-throttle", "off", "slow dataset sources down like a remote object store: rate=BYTES/s,latency=DURATION,concurrency=N, each optional (e.g. rate=20MiB/s,latency=10ms,concurrency=16); off: none")
		locality    = fs.String("locality", "on", "give each drawn sample to a rank on one of its owners: on or off")
		drain       = fs.Duration("drain-timeout", 10*time.Second, "on SIGTERM, how long to hand score tables and cached samples to the other peers before leaving (0: none)")
		partitions  = fs.Int("ring-partitions", 0, "partitions of the consistent-hash ring, the same on every peer (a peer of another count is left out of the datasets' rings; shadectl reads it from the peers); 0 takes the count the peers it joins advertise (271 for peers of earlier builds; later a larger group's, should another appear), and in a new mesh 16381, which suits up to 256 peers; above, set a prime of about 64.5 per peer (e.g. 64513 for 1,000), at most 65521: with fewer, a dead peer's data goes unevenly to the survivors and a join can move several times its share (shadectl members says what to use)")
		repBudget   = fs.String("replicate-budget", "64MiB", "per second: the leader's bandwidth for sending changed score tables to peers other than the two next in line to lead, which get every change")
		relayFanout = fs.Int("relay-fanout", wire.DefaultRelayFanout, "in a mesh of more peers, the leader hands an epoch's order to this many, each passing it on to its share of the rest")
		relayPiece  = fs.String("relay-piece", "1MiB", "an order longer than this is relayed in pieces of this size, each passed on as soon as a relay has it (1KiB to 32MiB)")
		requirepass = fs.String("requirepass", "", "password trainers must AUTH with (empty: none)")
		tracePath   = fs.String("trace", "", "record every sample read, score change and epoch into FILE, for 'shadectl sim'")
		stateDir    = fs.String("state-dir", "", "keep each dataset's merged importance scores in DIR, so a restarted job starts warm (empty: none)")
		warm        = fs.String("warm", "on", "when a job starts and scores are known, preload the most important samples: on or off")
		idle        = fs.Duration("idle-timeout", 0, "close trainer connections idle this long (0: never)")
		maxValue    = fs.String("max-value", "64MiB", "largest bulk argument a trainer may send (a SET's value, a key); a longer one is refused as it is announced and the connection closed (at most 512MiB)")
		maxClients  = fs.String("max-client-memory", "256MiB", "input and replies the trainer socket may hold for all connections together; a connection whose input would go past it is closed")
		maxKeys     = fs.Int("max-keys", 65536, "most keys in one MGET, EXISTS, DEL or SHADE.LOCATE, and id/loss pairs in one SHADE.REPORT")
		maxWorld    = fs.Int("max-world", 4096, "largest world size (ranks) a job may have")
		maxJobs     = fs.Int("max-jobs", 16, "most training jobs on one dataset at once, its default job counted; one more is refused until a job is retired (see --job-idle)")
		isolateJobs = fs.Bool("isolate-jobs", false, "each job's orders depend on its own seed, scores and the cache alone: a job neither draws with the dataset's shared random numbers, nor starts an epoch where the dataset's other jobs are, nor waits for them (see --job-sync); jobs then share the cache but not their reads")
		jobSync     = fs.Float64("job-sync", 0.25, "let the jobs of a dataset begin each epoch together: a job that finished an epoch another job is still training, and will finish within this share of the job's own epoch time, waits for it that long at most (0: never); aligned jobs read their common samples from one source read")
		jobIdle     = fs.Duration("job-idle", 10*time.Minute, "retire a job whose trainers have not joined, finished an epoch or reported for this long: a named job is dropped on every peer (its scores kept in --state-dir as DATASET@JOB.scores), the default job is reset (0 or negative: never)")
		maxConns    = fs.Int("max-clients", 10000, "most open trainer connections; one more is answered an error and closed")
		writeTO     = fs.Duration("client-write-timeout", time.Minute, "close a trainer connection whose replies could not be written for this long (a client that stopped reading)")
		loops       = fs.Int("socket-loops", 0, "event loops serving trainer connections: each answers the commands that never wait (GET of a sample held in memory, MGET as far as its samples are held in memory, SET of up to 256 KiB, EXISTS, DEL, SHADE.LOCATE, PING) itself and hands others to goroutines (0: one per 4 CPUs, at least one; -1: none, a goroutine per connection)")
		maxPeerMem  = fs.String("max-peer-memory", "256MiB", "bytes the requests this peer serves for other peers may hold at once; a request past it is refused and retried elsewhere")
		adminAddr   = fs.String("admin-addr", admin.DefaultAddr, "admin HTTP listener host:port: /metrics, /healthz, /readyz, /debug/pprof/ (off: none)")
		logLevel    = fs.String("log-level", "info", "log level: debug, info, warn, error")
		logFormat   = fs.String("log-format", "", "log format: json or console (default: console on a terminal, json otherwise)")
		showVersion = fs.Bool("version", false, "print the version and exit")
		flagsDoc    = fs.Bool("flags-markdown", false, "print the configuration reference (every flag, its variable and default) as Markdown and exit")
	)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: shade-peer [flags]\n\n"+
			"Caches training samples in off-heap memory and serves them, with importance-sampled\n"+
			"epoch orders, to this node's trainers over a Unix socket speaking the Redis protocol.\n\n"+
			"Every flag can also be set as SHADE_<FLAG> in the environment (--cache-size as\n"+
			"SHADE_CACHE_SIZE); a flag on the command line wins.\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		return cfg, nop, err
	}
	if fs.NArg() > 0 {
		return cfg, nop, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	var envErr error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || envErr != nil {
			return
		}
		v, ok := lookupEnv(envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")))
		if !ok {
			return
		}
		parts := []string{v}
		if f.Value.Type() == "stringArray" {
			parts = strings.Split(v, ",")
		}
		for _, p := range parts {
			if err := f.Value.Set(p); err != nil {
				envErr = fmt.Errorf("%s%s: %w", envPrefix, strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")), err)
				return
			}
		}
	})
	if envErr != nil {
		return cfg, nop, envErr
	}
	if *flagsDoc {
		writeFlagsMarkdown(stdout, fs)
		return cfg, nop, errVersion
	}
	if *showVersion {
		fmt.Fprintf(stdout, "shade-peer %s\n", version)
		return cfg, nop, errVersion
	}

	log, err := newLogger(*logLevel, *logFormat, stderr)
	if err != nil {
		return cfg, nop, err
	}
	size, err := bytesize.Parse(*cacheSize)
	if err != nil || size < 0 {
		return cfg, nop, fmt.Errorf("--cache-size %q: want a size such as 2GiB (0: cache nothing)", *cacheSize)
	}
	if size == 0 {
		// Nothing is cached: every read goes to the source.
		*pol, size = "none", 1<<16
	}
	raMem, err := bytesize.Parse(*prefetchMem)
	if err != nil || raMem <= 0 {
		return cfg, nop, fmt.Errorf("--prefetch-memory %q: want a positive size such as 64MiB", *prefetchMem)
	}
	if *srcReads < 1 {
		return cfg, nop, fmt.Errorf("--source-reads %d: want at least 1", *srcReads)
	}
	if *s3InFlight < 1 {
		return cfg, nop, fmt.Errorf("--s3-max-in-flight %d: want at least 1", *s3InFlight)
	}
	sizes := map[string]*int64{}
	for _, f := range []struct {
		flag, val string
	}{{"max-value", *maxValue}, {"max-client-memory", *maxClients}, {"max-peer-memory", *maxPeerMem}} {
		v, err := bytesize.Parse(f.val)
		if err != nil || v <= 0 {
			return cfg, nop, fmt.Errorf("--%s %q: want a positive size such as 64MiB", f.flag, f.val)
		}
		sizes[f.flag] = &v
	}
	if *maxWorld < 1 || *maxKeys < 1 || *maxConns < 1 || *writeTO <= 0 {
		return cfg, nop, fmt.Errorf("--max-world, --max-keys, --max-clients and --client-write-timeout must be positive")
	}
	shape, err := dataset.ParseThrottle(*throttle)
	if err != nil {
		return cfg, nop, fmt.Errorf("--source-throttle %q: %w", *throttle, err)
	}
	if *warm != "on" && *warm != "off" {
		return cfg, nop, fmt.Errorf("--warm %q: want on or off", *warm)
	}
	var uniform bool
	switch strings.ToLower(*pads) {
	case "on", "true", "1":
	case "off", "false", "0":
		uniform = true
	default:
		return cfg, nop, fmt.Errorf("--pads %q: want on or off", *pads)
	}
	if *alpha <= 0 || *alpha > 1 {
		return cfg, nop, fmt.Errorf("--alpha %v: want a weight in (0, 1]", *alpha)
	}
	if *floor < 0 || *floor > 1 {
		return cfg, nop, fmt.Errorf("--uniform-floor %v: want a share in [0, 1]", *floor)
	}
	scoreKind, err := sampling.ParseScoreKind(*score)
	if err != nil {
		return cfg, nop, fmt.Errorf("--score %q: want rank or magnitude", *score)
	}
	if *maxWeight != 0 && !(*maxWeight >= 1) || math.IsInf(*maxWeight, 0) {
		return cfg, nop, fmt.Errorf("--max-weight %v: want 0 (no cap) or a finite weight of at least 1", *maxWeight)
	}
	if !(*boost >= 0) || math.IsInf(*boost, 0) {
		return cfg, nop, fmt.Errorf("--boost %v: want a finite factor of at least 0", *boost)
	}
	if *orderAhead < 0 || *orderAhead > 1 {
		return cfg, nop, fmt.Errorf("--order-ahead %d: want 0 or 1", *orderAhead)
	}
	if !(*aheadAt >= 0 && *aheadAt < 1) {
		return cfg, nop, fmt.Errorf("--order-ahead-at %v: want a share of the ranks' time, at least 0 and below 1", *aheadAt)
	}
	if *aheadAt == 0 {
		*aheadAt = -1 // never
	}
	if *strata < 1 {
		return cfg, nop, fmt.Errorf("--strata %d: want at least 1", *strata)
	}
	if *maxJobs < 1 {
		return cfg, nop, fmt.Errorf("--max-jobs %d: want at least 1", *maxJobs)
	}
	cfg.Node = mesh.Config{
		Name: *name, CacheSize: size, Policy: *pol, Uniform: uniform, Seed: *seed,
		Alpha: *alpha, Lambda: *lambda, UniformFloor: orNone(*floor), CoverageEpochs: int(orNone(float64(*coverage))),
		Score: scoreKind, MaxWeight: *maxWeight, Boost: *boost, Strata: *strata, OrderAhead: *orderAhead, OrderAheadAt: *aheadAt,
		TracePath: *tracePath, StateDir: *stateDir, NoWarm: *warm == "off", Logger: log,
		PrefetchMemory: raMem, SourceThrottle: shape, SourceReads: *srcReads,
	}
	for _, d := range *datasets {
		n, dir, ok := strings.Cut(d, "=")
		if !ok || n == "" || dir == "" {
			return cfg, nop, fmt.Errorf("--dataset %q: want NAME=DIR", d)
		}
		s3cfg := s3source.Config{Endpoint: *s3Endpoint, Region: *s3Region, PathStyle: *s3PathStyle,
			StateDir: *stateDir, Relist: *s3Relist, MaxInFlight: *s3InFlight, MaxAge: *maxAge, Share: *pubIndex, Claim: claim.Config{Holder: *name}}
		switch loc, isShards := strings.CutPrefix(dir, shards.Prefix); {
		case isShards:
			if loc == "" {
				return cfg, nop, fmt.Errorf("--dataset %q: want NAME=shards:DIR or NAME=shards:s3://BUCKET/PREFIX", d)
			}
			if s3source.IsURL(loc) {
				if _, err := s3source.ParseURL(loc); err != nil {
					return cfg, nop, fmt.Errorf("--dataset %q: %w", d, err)
				}
			}
			cfg.opened = append(cfg.opened, openedDataset{index: len(cfg.Node.Datasets), shards: &shards.Config{
				Location: loc, S3: s3cfg, StateDir: *stateDir, Reindex: *s3Relist,
				Share: *pubIndex, Claim: claim.Config{Holder: *name}}})
			cfg.Node.Datasets = append(cfg.Node.Datasets, mesh.DatasetConfig{Name: n})
			continue
		case s3source.IsURL(dir):
			if _, err := s3source.ParseURL(dir); err != nil {
				return cfg, nop, fmt.Errorf("--dataset %q: %w", d, err)
			}
			s3cfg.URL = dir
			cfg.opened = append(cfg.opened, openedDataset{index: len(cfg.Node.Datasets), s3: &s3cfg})
			cfg.Node.Datasets = append(cfg.Node.Datasets, mesh.DatasetConfig{Name: n})
			continue
		}
		cfg.Node.Datasets = append(cfg.Node.Datasets, mesh.DatasetConfig{Name: n, Dir: dir})
	}
	if cfg.Node.Cluster, err = clusterConfig(clusterFlags{
		gossipAddr: *gossipAddr, seeds: *seeds, gossipKey: *gossipKey, peerAddr: *peerAddr,
		tlsCA: *tlsCA, tlsCert: *tlsCert, tlsKey: *tlsKey, devTLS: *devTLS, name: cfg.Node.Name,
		replicas: *replicas, expect: *expect, profile: *profile, joinWait: *joinWait,
		deadline: *deadline, prefetch: *prefetch, locality: *locality, drain: *drain,
		partitions: *partitions, repBudget: *repBudget, relayFanout: *relayFanout, relayPiece: *relayPiece,
		hedgeAfter: *hedgeAfter,
	}); err != nil {
		return cfg, nop, err
	}
	cfg.Socket = transport.SocketConfig{
		Path: *socket, RequirePass: *requirepass, IdleTimeout: *idle, Logger: log,
		MaxValue: int(*sizes["max-value"]), MaxClientMemory: *sizes["max-client-memory"],
		MaxKeys: *maxKeys, MaxWorld: *maxWorld, MaxConnections: *maxConns, WriteTimeout: *writeTO,
		Loops: *loops,
	}
	if err := cfg.Socket.Validate(); err != nil {
		return cfg, nop, err
	}
	cfg.Node.MaxWorld, cfg.Node.MaxJobs, cfg.Node.JobIdle, cfg.Node.IsolateJobs = *maxWorld, *maxJobs, *jobIdle, *isolateJobs
	if *jobIdle <= 0 {
		// The flag's 0 is "never"; the Config's 0 is the default.
		cfg.Node.JobIdle = -1
	}
	switch cfg.Node.JobSync = *jobSync; {
	case math.IsNaN(*jobSync) || math.IsInf(*jobSync, 0) || *jobSync < 0:
		return cfg, nop, fmt.Errorf("--job-sync %v: want a share of an epoch, 0 or more", *jobSync)
	case *jobSync == 0:
		cfg.Node.JobSync = -1 // the flag's 0 is "never"; the Config's 0 is the default
	}
	cfg.Node.Cluster.MaxPeerMemory = *sizes["max-peer-memory"]
	cfg.Admin = admin.Config{Addr: *adminAddr, Logger: log}
	cfg.adminChosen = *adminAddr != admin.DefaultAddr
	return cfg, log, nil
}

type clusterFlags struct {
	gossipAddr, gossipKey, peerAddr, tlsCA, tlsCert, tlsKey, devTLS, name, profile, locality, repBudget, relayPiece, hedgeAfter string
	seeds                                                                                                                       []string
	replicas, expect, prefetch, partitions, relayFanout                                                                         int
	joinWait, deadline, drain                                                                                                   time.Duration
}

// clusterConfig turns the mesh flags into the node's ClusterConfig; no
// gossip address and no seeds leave the node standalone.
func clusterConfig(f clusterFlags) (mesh.ClusterConfig, error) {
	// Epoch timing and prefetch apply to a standalone node too.
	cc := mesh.ClusterConfig{JoinWait: f.joinWait, EpochDeadline: f.deadline, Prefetch: f.prefetch, Build: version}
	if f.prefetch == 0 {
		cc.Prefetch = -1
	}
	if f.joinWait <= 0 || f.deadline < 0 || f.prefetch < 0 {
		return cc, fmt.Errorf("--join-wait must be positive; --epoch-deadline and --prefetch not negative")
	}
	if f.partitions < 0 {
		return cc, fmt.Errorf("--ring-partitions %d: want at least 1, or 0 for the mesh's", f.partitions)
	}
	budget, err := bytesize.Parse(f.repBudget)
	if err != nil || budget <= 0 {
		return cc, fmt.Errorf("--replicate-budget %q: want a positive size per second, such as 64MiB", f.repBudget)
	}
	if f.relayFanout < 1 {
		return cc, fmt.Errorf("--relay-fanout %d: want at least 1", f.relayFanout)
	}
	piece, err := bytesize.Parse(f.relayPiece)
	if err != nil || piece < 1<<10 || piece > 32<<20 {
		return cc, fmt.Errorf("--relay-piece %q: want a size from 1KiB to 32MiB, such as 1MiB", f.relayPiece)
	}
	cc.Partitions, cc.ReplicateBudget, cc.RelayFanout, cc.RelayPiece = f.partitions, budget, f.relayFanout, int(piece)
	switch f.hedgeAfter {
	case "auto": // learned: the Config's 0
	case "off":
		cc.HedgeAfter = -1
	default:
		d, err := time.ParseDuration(f.hedgeAfter)
		if err != nil || d <= 0 {
			return cc, fmt.Errorf("--hedge-after %q: want auto, off or a positive duration such as 50ms", f.hedgeAfter)
		}
		cc.HedgeAfter = d
	}
	if f.gossipAddr == "" && len(f.seeds) == 0 {
		return cc, nil
	}
	if f.gossipAddr == "" {
		f.gossipAddr = ":7946"
	}
	if f.replicas < 1 || f.expect < 1 {
		return cc, fmt.Errorf("--replicas and --expect must be at least 1")
	}
	cc.GossipAddr, cc.Seeds, cc.PeerAddr = f.gossipAddr, f.seeds, f.peerAddr
	cc.Replicas, cc.Expect, cc.Profile, cc.NoLocality = f.replicas, f.expect, f.profile, f.locality == "off"
	cc.DrainTimeout = f.drain
	if f.drain == 0 {
		cc.DrainTimeout = -1
	}
	if f.locality != "on" && f.locality != "off" {
		return cc, fmt.Errorf("--locality %q: want on or off", f.locality)
	}
	if f.gossipKey != "" {
		key, err := member.DecodeKey(f.gossipKey)
		if err != nil {
			return cc, fmt.Errorf("--gossip-key: %w", err)
		}
		cc.GossipKey = key
	}
	switch {
	case f.devTLS != "":
		name := f.name
		if name == "" {
			if name, err = os.Hostname(); err != nil {
				return cc, err
			}
		}
		cc.TLS, err = peer.DevTLS(f.devTLS, name)
	case f.tlsCA != "" && f.tlsCert != "" && f.tlsKey != "":
		cc.TLS, err = peer.LoadTLS(f.tlsCA, f.tlsCert, f.tlsKey)
	default:
		return cc, fmt.Errorf("a mesh needs --tls-ca, --tls-cert and --tls-key (or --dev-tls-dir for a local cluster)")
	}
	if err != nil {
		return cc, fmt.Errorf("TLS: %w", err)
	}
	return cc, nil
}

// orNone maps a flag's explicit 0 ("none") to the node Config's negative
// value, since in a Config zero means the default.
func orNone(v float64) float64 {
	if v == 0 {
		return -1
	}
	return v
}

func newLogger(level, format string, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	if format == "" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				format = "console"
			}
		}
	}
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	default:
		return zerolog.Nop(), fmt.Errorf("--log-format %q: want json or console", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("service", "shade-peer").Logger(), nil
}

// writeFlagsMarkdown prints the configuration reference: docs/configuration.md
// is this output, and a test keeps the two equal.
func writeFlagsMarkdown(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprint(w, "# shade-peer configuration reference\n\n"+
		"Generated by `shade-peer --flags-markdown`; do not edit. Every flag can also be set\n"+
		"in the environment; a flag given on the command line wins.\n\n"+
		"| flag | environment | default | meaning |\n| --- | --- | --- | --- |\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "flags-markdown" || f.Name == "version" {
			return
		}
		def := f.DefValue
		if def == "" || def == "[]" {
			def = "-"
		} else {
			def = "`" + def + "`"
		}
		usage := strings.ReplaceAll(f.Usage, "|", "\\|")
		fmt.Fprintf(w, "| `--%s` | `%s%s` | %s | %s |\n", f.Name, envPrefix,
			strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")), def, usage)
	})
}
