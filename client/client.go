// Package client is the Go client of a node's shade-peer: it reads samples,
// asks for epoch orders and reports importance losses over the peer's
// trainer socket, a Unix socket that speaks the Redis protocol (RESP2).
//
// It mirrors the Python package in client/python: the same commands, the
// same reconnection and the same errors. It does not depend on the server's
// packages; the wire is the contract, and the leaf packages under protocol
// that the peer uses too define it: protocol/samplekey (sample keys),
// protocol/shm (the zero-copy path) and protocol/stats (SHADE.STATS).
package client

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/protocol/samplekey"
	"github.com/shade-mesh/shade/protocol/stats"
)

const (
	defaultDialTimeout = 5 * time.Second
	defaultReadTimeout = 60 * time.Second
	defaultRetryFor    = 30 * time.Second

	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second

	// ReportChunk is the most (id, loss) pairs sent in one SHADE.REPORT.
	// Larger reports are split; the peer ranks each part as its own
	// minibatch, which only matters for batches far bigger than any trainer
	// uses.
	ReportChunk = 16384

	// serverOrderLimit is how long the peer lets SHADE.ORDER block at most
	// (the trainer socket's fixed limit; transport.SocketConfig.MaxOrderWait).
	serverOrderLimit = 10 * time.Minute
)

// Options configures a Client. The zero value of every field but Socket
// means its default. New reads it and keeps a copy.
type Options struct {
	// Socket is the path of the peer's trainer socket (shade-peer --socket).
	Socket string
	// Password is sent with AUTH when the peer runs with --requirepass.
	Password string
	// DialTimeout bounds one connection attempt; 0 means 5s.
	DialTimeout time.Duration
	// ReadTimeout bounds the wait for any reply but SHADE.ORDER's, and the
	// write of any request; 0 means 60s. SHADE.ORDER waits its own wait
	// plus ReadTimeout.
	ReadTimeout time.Duration
	// RetryFor is how long a command keeps retrying while the peer cannot
	// be reached, from the first failure; 0 means 30s.
	RetryFor time.Duration
	// NoSharedMemory turns off the zero-copy path. By default the client
	// maps the peer's cache memory (SHADE.MAP; the socket is local, so the
	// peer is on this node) and copies samples held there straight out of
	// it, validating each copy, instead of receiving them over the socket.
	// Where the peer cannot share its memory, the client uses MGET.
	NoSharedMemory bool
	// PoolSize is the most connections of each of the client's two pools
	// (ordinary commands; blocking SHADE.ORDER); 0 means go-redis's default,
	// 10 per GOMAXPROCS.
	PoolSize int
	// Job names the training job the client's orders, reports and dones
	// belong to (JOB <name> on SHADE.ORDER, REPORT, DONE and RESET), and
	// its reads too (SHADE.JOB on every connection), so that several jobs
	// share one dataset and the peer counts each one's hits apart. "" is
	// the dataset's default job, which clients that name none share.
	Job string
}

func (o Options) withDefaults() Options {
	if o.DialTimeout == 0 {
		o.DialTimeout = defaultDialTimeout
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = defaultReadTimeout
	}
	if o.RetryFor == 0 {
		o.RetryFor = defaultRetryFor
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Socket == "":
		return errors.New("client: Options.Socket is empty")
	case o.DialTimeout < 0, o.ReadTimeout < 0, o.RetryFor < 0:
		return fmt.Errorf("client: negative timeout in Options (dial %v, read %v, retry for %v)",
			o.DialTimeout, o.ReadTimeout, o.RetryFor)
	case o.PoolSize < 0:
		return fmt.Errorf("client: negative Options.PoolSize %d", o.PoolSize)
	}
	if o.Job != "" {
		if err := samplekey.ValidName(o.Job); err != nil {
			return fmt.Errorf("client: Options.Job: %w", err)
		}
	}
	return nil
}

// Client is a connection pool to one shade-peer's trainer socket. It is
// safe for concurrent use by many goroutines; each command takes a pooled
// connection for its round trip.
//
// Every method blocks until the peer answers, ctx ends, or the peer stays
// unreachable for Options.RetryFor. ctx's deadline bounds reads as well as
// retries; a cancellation without a deadline is noticed between attempts
// and during backoff, not while a reply is being read.
//
// Reconnection: when the peer cannot be reached (socket file missing,
// connection refused or reset, the peer restarted mid-command, a reply
// that does not come within the read timeout), the command is retried on a
// fresh connection with backoff (50ms doubling to 1s) until RetryFor has
// passed since the first failure; then it fails with ErrUnavailable. Every
// command is retried, SHADE.REPORT included: a report the dead peer had
// merged is merged again, and one duplicated minibatch report only nudges
// importance scores. Error replies are returned at once as *ServerError,
// never retried. A restarted peer has lost the job (epochs, world, scores).
type Client struct {
	socket   string
	job      []any // JOB <name>, appended to the job's commands; nil for the default job
	retryFor time.Duration
	readWait time.Duration
	rdb      *redis.Client // ordinary commands, read timeout ReadTimeout
	blocking *redis.Client // SHADE.ORDER: reads bounded per call instead
	shm      *shared
	// packedRefused: the peer refused PACKED (it predates it): orders are
	// asked with an element per id, reports sent with an argument each.
	packedRefused atomic.Bool
}

// New returns a client of the peer at o.Socket. It validates o and does not
// connect: the first command dials.
func New(o Options) (*Client, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	base := redis.Options{
		Network:         "unix",
		Addr:            o.Socket,
		Password:        o.Password,
		Protocol:        2,
		DialTimeout:     o.DialTimeout,
		WriteTimeout:    o.ReadTimeout,
		PoolSize:        o.PoolSize,
		MaxRetries:      -1, // retries are ours, with our backoff and deadline
		DialerRetries:   1,
		DisableIdentity: true,
		// A ctx deadline shortens reads, so SHADE.ORDER can bound each wait.
		ContextTimeoutEnabled: true,
	}
	var job []any
	if o.Job != "" {
		job = []any{"JOB", o.Job}
		// Every connection names the job, so the peer counts its reads.
		base.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
			return cn.Do(ctx, "SHADE.JOB", o.Job).Err()
		}
	}
	ordinary := base
	ordinary.ReadTimeout = o.ReadTimeout
	blocking := base
	blocking.ReadTimeout = -1 // no timeout of its own: Order sets a deadline per call
	return &Client{
		job:      job,
		socket:   o.Socket,
		retryFor: o.RetryFor,
		readWait: o.ReadTimeout,
		rdb:      redis.NewClient(&ordinary),
		blocking: redis.NewClient(&blocking),
		shm: &shared{
			off:      o.NoSharedMemory || !sharedSupported,
			socket:   o.Socket,
			password: o.Password,
			timeout:  o.DialTimeout,
		},
	}, nil
}

// Close closes the client's connections. Commands in flight fail; the
// client must not be used afterwards.
func (c *Client) Close() error {
	c.shm.close()
	return errors.Join(c.rdb.Close(), c.blocking.Close())
}

// SharedMemory reports whether the client reads samples held by the peer
// straight from its memory (mapping it now if it has not yet).
func (c *Client) SharedMemory() bool { return c.shm.mapping() != nil }

// Ping checks that the peer answers (and accepts the password).
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.do(ctx, c.rdb, 0, "PING")
	return err
}

// Get returns the bytes of sample id of dataset, read through from the
// source on a cache miss. The slice belongs to the caller. A nil reply
// (index past the end, unknown dataset) is a *SampleError wrapping
// ErrNotFound; an error reply for the sample is a *SampleError wrapping the
// *ServerError (but an authentication failure is the bare *ServerError).
func (c *Client) Get(ctx context.Context, dataset string, id int) ([]byte, error) {
	if c.shm.mapping() != nil {
		v, err := c.MGet(ctx, dataset, []int{id})
		if err != nil {
			return nil, err
		}
		return v[0], nil
	}
	key := sampleKey(dataset, id)
	v, err := c.do(ctx, c.rdb, 0, "GET", key)
	var se *ServerError
	switch {
	case errors.As(err, &se) && se.Code != "NOAUTH" && se.Code != "WRONGPASS":
		return nil, &SampleError{Key: key, Err: se}
	case err != nil:
		return nil, err
	case v == nil:
		return nil, &SampleError{Key: key, Err: ErrNotFound}
	}
	s, ok := v.(string)
	if !ok {
		return nil, unexpected("GET", v)
	}
	return []byte(s), nil
}

// MGet returns the bytes of every sample in ids, in the order of ids, in one
// MGET round trip (the peer takes at most 65,536 keys). The slices belong to
// the caller. If any sample is missing or failed, MGet returns a
// *SampleError naming the first such key (wrapping ErrNotFound or the
// *ServerError) and no samples.
//
// Samples the peer holds are copied straight out of its memory where it
// can be shared (see Options.NoSharedMemory); the result is the same.
func (c *Client) MGet(ctx context.Context, dataset string, ids []int) ([][]byte, error) {
	out, err := c.MGetInto(ctx, dataset, ids, nil)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MGetInto is MGet into the caller's buffers, for a loop that reads batch
// after batch: sample ids[k] goes into dst[k]'s memory where it has room
// (append(dst[k][:0], sample...)), and the result reuses dst's array
// where it is long enough; pass the result of one call as dst of the
// next. A batch of a few MB into fresh slices costs more than the copies
// themselves: the allocation, and the garbage collections it brings
// (BenchmarkMGet). dst's buffers must not overlap. On an error it
// returns no samples: an empty slice on dst's array, the buffers still
// in it past its length for the next call (their contents undefined).
func (c *Client) MGetInto(ctx context.Context, dataset string, ids []int, dst [][]byte) ([][]byte, error) {
	if len(ids) == 0 {
		if dst == nil {
			return [][]byte{}, nil
		}
		return dst[:0], nil
	}
	out := slices.Grow(dst[:0], len(ids))[:len(ids)]
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = sampleKey(dataset, id)
	}
	if err := c.readInto(ctx, keys, out); err != nil {
		return out[:0], err
	}
	return out, nil
}

// readInto reads keys into out's slots of the same indexes: from the
// peer's memory where it is mapped, over the socket where it is not or
// the peer restarted.
func (c *Client) readInto(ctx context.Context, keys []string, out [][]byte) error {
	if m := c.shm.mapping(); m != nil {
		err := c.locate(ctx, m, keys, out)
		if !errors.Is(err, errStale) {
			return err
		}
		c.shm.drop(m) // the peer restarted: map its new memory next time
	}
	return c.mgetKeys(ctx, keys, out)
}

// mgetKeys is MGet of keys over the socket, each value into out's slot
// of the same index (appended to its [:0]).
func (c *Client) mgetKeys(ctx context.Context, keys []string, out [][]byte) error {
	args := command("MGET", keys)
	v, err := c.do(ctx, c.rdb, 0, args...)
	if err != nil {
		return err
	}
	elems, ok := v.([]any)
	if !ok || len(elems) != len(keys) {
		return unexpected("MGET", v)
	}
	for i, e := range elems {
		switch e := e.(type) {
		case string:
			out[i] = append(out[i][:0], e...)
		case nil:
			return &SampleError{Key: args[1+i].(string), Err: ErrNotFound}
		case redis.Error:
			return &SampleError{Key: args[1+i].(string), Err: parseServerError(e.Error())}
		default:
			return unexpected("MGET", e)
		}
	}
	return nil
}

// Manifest returns the relative paths of the dataset's samples, in index
// order. The slice belongs to the caller.
func (c *Client) Manifest(ctx context.Context, dataset string) ([]string, error) {
	v, err := c.do(ctx, c.rdb, 0, "SHADE.MANIFEST", dataset)
	if err != nil {
		return nil, err
	}
	elems, ok := v.([]any)
	if !ok {
		return nil, unexpected("SHADE.MANIFEST", v)
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		if out[i], ok = e.(string); !ok {
			return nil, unexpected("SHADE.MANIFEST", e)
		}
	}
	return out, nil
}

// Labels returns the class index of every sample of dataset, as
// torchvision's ImageFolder numbers them (see LabelsFromManifest).
func (c *Client) Labels(ctx context.Context, dataset string) ([]int, error) {
	paths, err := c.Manifest(ctx, dataset)
	if err != nil {
		return nil, err
	}
	return LabelsFromManifest(paths)
}

// LabelsFromManifest returns the class index of every ImageFolder-style
// path "<class>/<file>": the position of its first path component among the
// sorted distinct class names. A path outside any class folder is an error.
func LabelsFromManifest(paths []string) ([]int, error) {
	tops := make([]string, len(paths))
	for i, p := range paths {
		top, _, ok := strings.Cut(p, "/")
		if !ok {
			return nil, fmt.Errorf("client: manifest path %q is not inside a class folder", p)
		}
		tops[i] = top
	}
	classes := slices.Clone(tops)
	slices.Sort(classes)
	classes = slices.Compact(classes)
	index := make(map[string]int, len(classes))
	for k, name := range classes {
		index[name] = k
	}
	labels := make([]int, len(tops))
	for i, top := range tops {
		labels[i] = index[top]
	}
	return labels, nil
}

// Order returns this rank's slice of the epoch's order: sample ids, which
// may repeat. The slice belongs to the caller.
//
// It blocks until the epoch is published (epoch 0 on the first request,
// epoch e+1 once every rank of the world called Done for e) or until wait
// has passed, then fails with an error matching ErrOrderTimeout (a
// *ServerError whose message names the ranks still training). wait 0 means
// the peer's own limit, 10 minutes. Its connection waits wait plus
// Options.ReadTimeout for the reply, so a long wait never trips the ordinary
// read timeout.
func (c *Client) Order(ctx context.Context, dataset string, epoch, rank, world int, wait time.Duration) ([]int, error) {
	ids, _, err := c.order(ctx, dataset, epoch, rank, world, wait, false)
	return ids, err
}

// OrderWeights is Order with the importance weight of each id: weights[i]
// is ω = 1/(N·p) for ids[i], drawn with probability p per draw, so that a
// trainer that weighs each sample's loss by it minimises the loss over the
// whole dataset without bias. Every weight is 1 in a permutation.
func (c *Client) OrderWeights(ctx context.Context, dataset string, epoch, rank, world int, wait time.Duration) (ids []int, weights []float64, err error) {
	return c.order(ctx, dataset, epoch, rank, world, wait, true)
}

// order asks for the order PACKED: its ids (and weights) as binary, in one
// bulk string each (see packedOrText for a peer that predates it).
func (c *Client) order(ctx context.Context, dataset string, epoch, rank, world int, wait time.Duration, withWeights bool) (ids []int, weights []float64, err error) {
	if wait < 0 {
		return nil, nil, fmt.Errorf("client: SHADE.ORDER: negative wait %v", wait)
	}
	args := []any{"SHADE.ORDER", dataset, epoch, rank, world}
	serverWait := serverOrderLimit
	if wait > 0 {
		args = append(args, max(1, wait.Milliseconds()))
		serverWait = min(wait, serverOrderLimit)
	}
	if withWeights {
		args = append(args, "WITHWEIGHTS")
	}
	err = c.packedOrText(func() error {
		v, err := c.do(ctx, c.blocking, serverWait+c.readWait, slices.Concat(args, []any{"PACKED"}, c.job)...)
		if err != nil {
			return err
		}
		ids, weights, err = packedOrder(v, withWeights)
		return err
	}, func() (err error) {
		ids, weights, err = c.textOrder(ctx, serverWait, args, withWeights)
		return err
	})
	return ids, weights, err
}

// packedOrText runs packed, a command sent PACKED, unless the peer refused
// PACKED before. A peer that predates PACKED refuses it with an ERR reply:
// text, the same command with an element per id, then runs instead, and
// once it succeeds this client sends that peer everything with an element
// per id (an ERR that text gets too was about the command itself, and is
// returned).
func (c *Client) packedOrText(packed, text func() error) error {
	if c.packedRefused.Load() {
		return text()
	}
	err := packed()
	var se *ServerError
	if !errors.As(err, &se) || se.Code != "ERR" {
		return err
	}
	if err := text(); err != nil {
		return err
	}
	c.packedRefused.Store(true)
	return nil
}

// textOrder asks for the order with an element per id.
func (c *Client) textOrder(ctx context.Context, serverWait time.Duration, args []any, withWeights bool) ([]int, []float64, error) {
	v, err := c.do(ctx, c.blocking, serverWait+c.readWait, slices.Concat(args, c.job)...)
	if err != nil {
		return nil, nil, err
	}
	if !withWeights {
		ids, err := orderIDs(v)
		return ids, nil, err
	}
	pair, ok := v.([]any)
	if !ok || len(pair) != 2 {
		return nil, nil, unexpected("SHADE.ORDER WITHWEIGHTS", v)
	}
	ids, err := orderIDs(pair[0])
	if err != nil {
		return nil, nil, err
	}
	elems, ok := pair[1].([]any)
	if !ok || len(elems) != len(ids) {
		return nil, nil, unexpected("SHADE.ORDER WITHWEIGHTS", pair[1])
	}
	weights := make([]float64, len(elems))
	for i, e := range elems {
		str, ok := e.(string)
		if !ok {
			return nil, nil, unexpected("SHADE.ORDER WITHWEIGHTS", e)
		}
		w, err := strconv.ParseFloat(str, 64)
		if err != nil || !validWeight(w) {
			return nil, nil, unexpected("SHADE.ORDER WITHWEIGHTS", str)
		}
		weights[i] = w
	}
	return ids, weights, nil
}

// orderIDs reads a SHADE.ORDER reply's array of ids.
func orderIDs(v any) ([]int, error) {
	elems, ok := v.([]any)
	if !ok {
		return nil, unexpected("SHADE.ORDER", v)
	}
	ids := make([]int, len(elems))
	for i, e := range elems {
		n, ok := e.(int64)
		if !ok {
			return nil, unexpected("SHADE.ORDER", e)
		}
		ids[i] = int(n)
	}
	return ids, nil
}

// packedOrder reads a SHADE.ORDER ... PACKED reply: the ids as
// little-endian uint32 in a bulk string, and with weights an array of that
// and the weights as little-endian float32.
func packedOrder(v any, withWeights bool) ([]int, []float64, error) {
	idBytes := v
	var weightBytes any
	if withWeights {
		pair, ok := v.([]any)
		if !ok || len(pair) != 2 {
			return nil, nil, unexpected("SHADE.ORDER WITHWEIGHTS PACKED", v)
		}
		idBytes, weightBytes = pair[0], pair[1]
	}
	b, ok := idBytes.(string)
	if !ok || len(b)%4 != 0 {
		return nil, nil, unexpected("SHADE.ORDER PACKED", idBytes)
	}
	ids := make([]int, len(b)/4)
	for i := range ids {
		ids[i] = int(le32(b, i))
	}
	if !withWeights {
		return ids, nil, nil
	}
	wb, ok := weightBytes.(string)
	if !ok || len(wb) != len(b) {
		return nil, nil, unexpected("SHADE.ORDER WITHWEIGHTS PACKED", weightBytes)
	}
	weights := make([]float64, len(ids))
	for i := range weights {
		w := float64(math.Float32frombits(le32(wb, i)))
		if !validWeight(w) {
			return nil, nil, fmt.Errorf("client: SHADE.ORDER WITHWEIGHTS PACKED: weight %v of id %d is not a positive finite number", w, ids[i])
		}
		weights[i] = w
	}
	return ids, weights, nil
}

// le32 is the i-th little-endian uint32 of s.
func le32(s string, i int) uint32 {
	s = s[4*i : 4*i+4]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// validWeight reports whether w can be an importance weight: positive and
// finite.
func validWeight(w float64) bool { return w > 0 && !math.IsInf(w, 0) }

// Report sends the per-sample losses of one trained minibatch of epoch,
// keyed by the ids that were trained: losses[i] is the loss of ids[i]. More
// than ReportChunk pairs are sent as several reports. Ids out of range or a
// non-finite loss make the peer refuse a part with a *ServerError; the
// parts before it stay merged. Report only reads its arguments.
func (c *Client) Report(ctx context.Context, dataset string, epoch int, ids []int, losses []float64) error {
	if len(ids) != len(losses) {
		return fmt.Errorf("client: SHADE.REPORT: %d ids but %d losses", len(ids), len(losses))
	}
	for start := 0; start < len(ids); start += ReportChunk {
		end := min(start+ReportChunk, len(ids))
		if err := c.report(ctx, dataset, epoch, ids[start:end], losses[start:end]); err != nil {
			return err
		}
	}
	return nil
}

// report sends one SHADE.REPORT PACKED: the ids as little-endian uint32
// and the losses as little-endian float64, in two arguments (see
// packedOrText for a peer that predates it). Ids that do not fit a uint32
// go with an argument each, for the peer to refuse them.
func (c *Client) report(ctx context.Context, dataset string, epoch int, ids []int, losses []float64) error {
	text := func() error { return c.textReport(ctx, dataset, epoch, ids, losses) }
	if slices.ContainsFunc(ids, func(id int) bool { return id < 0 || id > math.MaxUint32 }) {
		return text()
	}
	return c.packedOrText(func() error {
		idBytes := make([]byte, 0, 4*len(ids))
		for _, id := range ids {
			idBytes = binary.LittleEndian.AppendUint32(idBytes, uint32(id))
		}
		lossBytes := make([]byte, 0, 8*len(losses))
		for _, x := range losses {
			lossBytes = binary.LittleEndian.AppendUint64(lossBytes, math.Float64bits(x))
		}
		_, err := c.do(ctx, c.rdb, 0, slices.Concat([]any{"SHADE.REPORT", dataset, epoch, "PACKED", idBytes, lossBytes}, c.job)...)
		return err
	}, text)
}

// textReport sends one SHADE.REPORT with an argument per id and per loss.
func (c *Client) textReport(ctx context.Context, dataset string, epoch int, ids []int, losses []float64) error {
	args := make([]any, 0, 5+2*len(ids))
	args = append(args, "SHADE.REPORT", dataset, epoch)
	for i := range ids {
		args = append(args, ids[i], formatLoss(losses[i]))
	}
	args = append(args, c.job...)
	_, err := c.do(ctx, c.rdb, 0, args...)
	return err
}

// formatLoss writes a loss as the peer parses it: the shortest decimal that
// round-trips; NaN and ±Inf as strconv spells them (the peer refuses those).
func formatLoss(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// Done tells the peer that rank finished epoch of dataset. It is
// idempotent.
func (c *Client) Done(ctx context.Context, dataset string, epoch, rank int) error {
	_, err := c.do(ctx, c.rdb, 0, append([]any{"SHADE.DONE", dataset, epoch, rank}, c.job...)...)
	return err
}

// Reset starts the client's job on dataset over: epoch 0 again, any world
// size. The importance scores are kept.
func (c *Client) Reset(ctx context.Context, dataset string) error {
	_, err := c.do(ctx, c.rdb, 0, append([]any{"SHADE.RESET", dataset}, c.job...)...)
	return err
}

// Warm asks the peer to preload a dataset into its share of the cache,
// the most important samples first (SHADE.WARM), and returns how many it
// loaded. It blocks until the peer is done or ctx ends.
func (c *Client) Warm(ctx context.Context, dataset string) (int, error) {
	wait := 10 * time.Minute // the peer reads the dataset: allow for a slow source
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	v, err := c.do(ctx, c.blocking, wait, "SHADE.WARM", dataset)
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("client: SHADE.WARM answered %T", v)
	}
	return int(n), nil
}

// Stats returns the peer's counters (SHADE.STATS): the node and one
// dataset, or every dataset for dataset "". The document's types are
// package protocol/stats, the ones the peer fills; fields that a newer
// peer adds are ignored. The value belongs to the caller.
func (c *Client) Stats(ctx context.Context, dataset string) (stats.Node, error) {
	args := []any{"SHADE.STATS"}
	if dataset != "" {
		args = append(args, dataset)
	}
	v, err := c.do(ctx, c.rdb, 0, args...)
	if err != nil {
		return stats.Node{}, err
	}
	doc, ok := v.(string)
	if !ok {
		return stats.Node{}, unexpected("SHADE.STATS", v)
	}
	var st stats.Node
	if err := json.Unmarshal([]byte(doc), &st); err != nil {
		return stats.Node{}, fmt.Errorf("client: SHADE.STATS: %w", err)
	}
	return st, nil
}

// do runs one command on rc, retrying connection errors until c.retryFor
// has passed since the first failure. attempt, when positive, bounds each
// attempt (the blocking pool has no read timeout of its own). A nil reply
// is (nil, nil); an error reply is a *ServerError wrapped with the command.
func (c *Client) do(ctx context.Context, rc *redis.Client, attempt time.Duration, args ...any) (any, error) {
	var (
		deadline time.Time // of the retries; set on the first failure
		delay    = minBackoff
	)
	for {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if attempt > 0 {
			actx, cancel = context.WithTimeout(ctx, attempt)
		}
		v, err := rc.Do(actx, args...).Result()
		cancel()
		if err == nil {
			return v, nil
		}
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("client: %s: %w", describe(args), ctxErr)
		}
		var re redis.Error
		if errors.As(err, &re) {
			return nil, fmt.Errorf("client: %s: %w", describe(args), parseServerError(re.Error()))
		}
		if !retryable(err) {
			return nil, fmt.Errorf("client: %s: %w", describe(args), err)
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(c.retryFor)
		}
		left := deadline.Sub(now)
		if left <= 0 {
			return nil, fmt.Errorf("%w: no shade-peer answers on %s (retried %s for %v; is shade-peer running with --socket %s?): %w",
				ErrUnavailable, c.socket, args[0], c.retryFor, c.socket, err)
		}
		t := time.NewTimer(min(delay, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("client: %s: %w (peer unreachable: %v)", describe(args), ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, maxBackoff)
	}
}

// retryable reports whether err means the peer could not be reached or
// the connection broke: worth a fresh connection. Error replies and a
// closed client are not.
func retryable(err error) bool {
	if errors.Is(err, redis.ErrClosed) {
		return false
	}
	for _, e := range []error{io.EOF, io.ErrUnexpectedEOF, syscall.ENOENT, syscall.ECONNREFUSED,
		syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error // dial failures and read timeouts
	return errors.As(err, &ne)
}

// command is a command's arguments: its name, then keys.
func command(name string, keys []string) []any {
	args := make([]any, 0, 1+len(keys))
	args = append(args, name)
	for _, k := range keys {
		args = append(args, k)
	}
	return args
}

// describe names a command for an error: its name and first argument.
func describe(args []any) string {
	if len(args) > 1 {
		return fmt.Sprint(args[0], " ", args[1])
	}
	return fmt.Sprint(args[0])
}

func sampleKey(dataset string, id int) string {
	return samplekey.Format(dataset, id)
}

func unexpected(cmd string, v any) error {
	return fmt.Errorf("client: %s: unexpected reply of type %T", cmd, v)
}
