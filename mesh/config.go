// Package mesh is a Shade node: the datasets it serves, its share of the
// cache, the admission policy that guards it, and the jobs whose epochs it
// orders. It is the composition root below the daemon's main: it wires the
// leaf packages (store, policy, sampling, dataset) together.
package mesh

import (
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/mesh/leader"
	"github.com/shade-mesh/shade/sampling"
)

// Source is a dataset's backing store: the manifest and the samples'
// bytes. *dataset.Dir implements it.
type Source interface {
	Manifest() *dataset.Manifest
	// Read appends sample i's bytes to dst. It is called concurrently,
	// with a dst whose spare capacity was not cleared: the result must
	// end at the last byte Read wrote, never at bytes it only resliced
	// into (a short read is an error).
	Read(i int, dst []byte) ([]byte, error)
}

var _ Source = (*dataset.Dir)(nil)

// DatasetConfig names one dataset the node serves.
type DatasetConfig struct {
	// Name is the dataset's name in keys ("<name>/<index>").
	Name string
	// Dir is the dataset's directory; ignored when Source is set.
	Dir string
	// Source, when set, serves the samples instead of Dir (tests, other
	// backing stores).
	Source Source
}

// DefaultSourceReads is Config.SourceReads' default. An MGET's reads
// through wait on the source, an object store's time to first byte most
// of all, and each DataLoader worker asks one MGET at a time: the reads in
// flight for one MGET bound how fast a cold or undersized cache serves
// it.
const DefaultSourceReads = 64

// Config configures a Node. The zero value of every field means its
// default; New fills defaults on a copy and never writes into the caller's
// Config.
type Config struct {
	// Name is the node's stable name; "" means the host name.
	Name string
	// CacheSize is the off-heap sample memory in bytes; 0 means 1 GiB.
	CacheSize int64
	// Policy is the eviction and admission policy: app (default), lru,
	// fifo, lfu or minio.
	Policy string
	// Datasets the node serves.
	Datasets []DatasetConfig

	// Uniform turns PADS off: every epoch is a uniform permutation, as
	// PyTorch's DistributedSampler gives.
	Uniform bool
	// Seed is the job seed; every epoch's order is a function of the seed,
	// the epoch and the scores.
	Seed uint64
	// Alpha weighs a new score against the old in the merge; 0 means the
	// sampling package's default.
	Alpha float64
	// Lambda is added to every score to form PADS weights: positive
	// flattens the distribution toward uniform, negative sharpens it.
	Lambda float64
	// UniformFloor is the share of draws that are uniform; 0 means the
	// sampling package's default, a negative value none.
	UniformFloor float64
	// CoverageEpochs is the coverage floor K: a sample is drawn at least
	// once every K epochs. 0 means the sampling package's default; a
	// negative value turns the floor off.
	CoverageEpochs int
	// Score is how a reported loss becomes an importance score: SHADE's
	// rank within the minibatch (the zero value) or the loss's magnitude.
	Score sampling.ScoreKind
	// MaxWeight caps the importance weight ω = 1/(N·p) of a drawn sample
	// (at least 1; 0: no cap).
	MaxWeight float64
	// Boost β raises the draw probability of samples cached in the mesh
	// by the factor 1+β within their importance stratum (0: off).
	Boost float64
	// Strata is the number of importance strata of Boost; 0 means the
	// sampling package's default.
	Strata int
	// OrderAhead is how many epochs orders are published ahead of
	// training, 0 or 1 (see leader.Config.Ahead).
	OrderAhead int
	// OrderAheadAt, with OrderAhead 0, runs a job's orders an epoch
	// ahead once its ranks waited for an order more than this share of
	// their time, and the order took the leader leader.MinAheadDraw or
	// more (see leader.Config.AheadAt); 0 means leader.DefaultAheadAt,
	// negative never.
	OrderAheadAt float64
	// minAheadDraw, set by this package's tests only, is
	// leader.Config.MinDraw (0: its default).
	minAheadDraw time.Duration

	// MaxWorld bounds a job's world size (ranks), from trainers and from
	// peers alike; 0 means 4096. A larger one is refused with
	// ErrWorldMismatch and leaves the job as it was.
	MaxWorld int

	// KeepEpochs is how many published orders a job keeps for late ranks;
	// 0 means 4.
	KeepEpochs int
	// MaxJobs bounds the jobs of one dataset, its default job counted; 0
	// means 16. A trainer that would start one more is refused with
	// ErrTooManyJobs.
	MaxJobs int
	// JobIdle retires a job whose trainers have not joined, finished an
	// epoch or reported for this long: a named job is dropped on every
	// peer (its scores kept in StateDir), the default job is reset. 0
	// means 10 minutes; negative, never.
	JobIdle time.Duration
	// IsolateJobs makes each job's orders depend on its own seed, scores
	// and the mesh's cache alone: a job neither draws with the dataset's
	// shared random numbers (sampling.Config.DrawSeed), nor starts an
	// epoch where the dataset's other jobs are (see sampling.Align), nor
	// waits for them (JobSync). Jobs then share the cache but not their
	// reads.
	IsolateJobs bool
	// JobSync lets the jobs of a dataset begin their epochs together: a
	// job that finished an epoch another job is still training, and is
	// expected to finish within JobSync times the job's own time for that
	// epoch, waits for it that long at most before its next order is
	// published; where its orders run ahead (it holds its next order),
	// before its ranks begin that order. Aligned jobs then read their
	// common samples at the same time, from one source read, at the cost
	// of the faster job's wait. 0 means 0.25; negative, never (as with
	// IsolateJobs).
	JobSync float64
	// SourceReads bounds the concurrent reads through (source reads, at
	// worst) of the samples of one MGET that this node owns, and of one
	// fetch another node asks of it, and the fetches in flight of each
	// rank's read-ahead; 0 means DefaultSourceReads. An MGET's samples
	// that other nodes own are asked of them, each owner for its share at
	// once (up to 64 samples and 4 MiB a request).
	SourceReads int
	// SourceThrottle slows every dataset's source down like a remote
	// object store (latency, a shared byte rate, bounded connections); the
	// zero value leaves sources as they are.
	SourceThrottle dataset.ThrottleConfig
	// PrefetchMemory bounds the off-heap bytes of samples read ahead of the
	// local ranks (ClusterConfig.Prefetch), beside CacheSize; 0 means
	// 64 MiB.
	PrefetchMemory int64
	// TracePath, when set, records every sample read, score change and
	// epoch this node's policy sees into that file (policy.ReadTrace's
	// format), for offline comparison of policies.
	TracePath string
	// StateDir, when set, keeps each dataset's merged score table there
	// (saved as it changes, loaded at start), so a restarted job starts
	// with the importance the last one learned.
	StateDir string
	// NoWarm turns off preloading the most important samples when a job
	// starts and scores are known.
	NoWarm bool
	// Cluster joins the node to a mesh; the zero value runs standalone.
	Cluster ClusterConfig
	// Logger receives the node's events; the zero Logger is silent.
	Logger zerolog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return c, fmt.Errorf("mesh: node name: %w", err)
		}
		c.Name = h
	}
	if c.CacheSize == 0 {
		c.CacheSize = 1 << 30
	}
	if c.CacheSize < 0 {
		return c, fmt.Errorf("%w: cache size %d", ErrConfig, c.CacheSize)
	}
	if c.Policy == "" {
		c.Policy = "app"
	}
	if c.KeepEpochs == 0 {
		c.KeepEpochs = 4
	}
	if c.MaxJobs == 0 {
		c.MaxJobs = 16
	}
	if c.MaxJobs < 0 {
		return c, fmt.Errorf("%w: max jobs %d", ErrConfig, c.MaxJobs)
	}
	if c.JobIdle == 0 {
		c.JobIdle = 10 * time.Minute
	}
	switch {
	case c.JobSync == 0:
		c.JobSync = 0.25
	case math.IsNaN(c.JobSync) || math.IsInf(c.JobSync, 0):
		return c, fmt.Errorf("%w: job sync %v", ErrConfig, c.JobSync)
	}
	if c.MaxWorld == 0 {
		c.MaxWorld = 4096
	}
	if c.MaxWorld < 0 {
		return c, fmt.Errorf("%w: max world %d", ErrConfig, c.MaxWorld)
	}
	if c.SourceReads == 0 {
		c.SourceReads = DefaultSourceReads
	}
	if c.SourceReads < 0 {
		return c, fmt.Errorf("%w: source reads %d", ErrConfig, c.SourceReads)
	}
	if c.PrefetchMemory == 0 {
		c.PrefetchMemory = 64 << 20
	}
	if c.PrefetchMemory < 0 {
		return c, fmt.Errorf("%w: prefetch memory %d", ErrConfig, c.PrefetchMemory)
	}
	if c.OrderAhead < 0 || c.OrderAhead > 1 {
		return c, fmt.Errorf("%w: orders %d epochs ahead (0 or 1)", ErrConfig, c.OrderAhead)
	}
	if c.OrderAheadAt == 0 {
		c.OrderAheadAt = leader.DefaultAheadAt
	}
	if math.IsNaN(c.OrderAheadAt) || c.OrderAheadAt >= 1 {
		return c, fmt.Errorf("%w: orders ahead at %v of the ranks' time (a share below 1, or negative for never)", ErrConfig, c.OrderAheadAt)
	}
	if err := c.samplingConfig().Validate(); err != nil {
		return c, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c.Cluster = c.Cluster.withDefaults()
	return c, nil
}

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("mesh: invalid config")

// samplingConfig translates the node's Config, where zero means default,
// into sampling's, where a negative value does.
func (cfg Config) samplingConfig() sampling.Config {
	c := sampling.Config{Seed: cfg.Seed, Lambda: cfg.Lambda, PADS: !cfg.Uniform,
		Score: cfg.Score, MaxWeight: cfg.MaxWeight, Boost: cfg.Boost, Strata: cfg.Strata}
	switch {
	case cfg.UniformFloor == 0:
		c.UniformFloor = -1
	case cfg.UniformFloor > 0:
		c.UniformFloor = cfg.UniformFloor
	}
	switch {
	case cfg.CoverageEpochs == 0:
		c.CoverageEpochs = -1
	case cfg.CoverageEpochs > 0:
		c.CoverageEpochs = cfg.CoverageEpochs
	}
	return c
}

// samplerName names the sampler of cfg and the settings that differ from
// plain PADS, as SHADE.STATS reports it.
func (cfg Config) samplerName() string {
	c := cfg.samplingConfig()
	if !c.PADS {
		return "uniform permutation"
	}
	name := "pads " + c.Score.String()
	if c.Lambda != 0 {
		name += fmt.Sprintf(" lambda=%g", c.Lambda)
	}
	if c.UniformFloor >= 0 && c.UniformFloor != sampling.DefaultUniformFloor {
		name += fmt.Sprintf(" uniform-floor=%g", c.UniformFloor)
	}
	if c.MaxWeight > 0 {
		name += fmt.Sprintf(" max-weight=%g", c.MaxWeight)
	}
	if c.Boost > 0 {
		name += fmt.Sprintf(" boost=%g", c.Boost)
	}
	return name
}
