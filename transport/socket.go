// Package transport holds Shade's wire protocols: the trainer socket, which
// speaks the Redis protocol (RESP) on a local Unix socket, and the QUIC peer
// protocol between nodes.
package transport

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/shade-mesh/shade/internal/budget"
	"github.com/shade-mesh/shade/internal/redcon"

	"github.com/shade-mesh/shade/protocol/shm"
)

// Backend is what the trainer socket serves. The node implements it. All
// methods are called concurrently from many connections and must be safe for
// that. Byte slices passed in belong to the caller and are valid only during
// the call; slices returned belong to the receiver.
type Backend interface {
	// LendGet reads key and appends its value to dst, preceded by
	// head(dst, n)'s framing of a value of n bytes (nil head: none), and
	// returns the result as append does; dst as given (its length) when
	// not found or on err. found is false only where Redis would answer
	// nil: an unknown free-form key, a sample index out of range, an
	// unknown dataset. A value held in memory of at least MinLent bytes
	// may be lent in place instead of appended: result then ends with
	// head's framing, and loan.Value is the value, which neither changes
	// nor goes away until the caller gives it back with
	// Return(loan.Token), exactly once; loan.Value is nil otherwise. A
	// cached value is checksum-verified, where it lies or as it is copied.
	// head may run under a lock of the cache: it must be quick and must
	// not call the backend.
	LendGet(ctx context.Context, key, dst []byte, head func(dst []byte, n int) []byte) (result []byte, loan Loan, found bool, err error)
	// LendHeld is LendGet for a caller that must not wait: where LendGet
	// would read the value from elsewhere than this node's memory (an
	// owner, the source), it does nothing and returns held false, and the
	// caller calls LendGet. Otherwise it answers as LendGet, with held
	// true.
	LendHeld(ctx context.Context, key, dst []byte, head func(dst []byte, n int) []byte) (result []byte, loan Loan, found, held bool, err error)
	// LendHeldPrefix answers keys of an MGET for a caller that must not
	// wait, a prefix of them at a time: the longest whose values take at
	// most maxBytes, and at least the first key. It lends the value of
	// every key of the prefix held in memory in place, whatever its size,
	// checksum-verified there, and appends one Held per key of the prefix
	// to into, in order, answered as LendGet would answer it: how many it
	// appends is the prefix's length. Where any key of the prefix would
	// have to be read from elsewhere than this node's memory, it lends and
	// counts nothing and returns ok false; the caller then answers those
	// keys with MGet. The caller gives every value lent back with Return,
	// exactly once.
	LendHeldPrefix(ctx context.Context, keys [][]byte, maxBytes int, into []Held) (held []Held, ok bool)
	// Return gives back a value lent by LendGet. It is safe after the
	// backend is closed.
	Return(token uint64)
	// Prefetch hints that key is about to be read, some PrefetchAhead
	// reads from now: the backend may start loading its value into the
	// CPU's caches. It must return at once and change nothing.
	Prefetch(key []byte)
	// MGet begins reading keys, one part of an MGET: it reads the values
	// not held in memory now, in parallel where that helps, and returns a
	// Batch through which the caller appends every value in turn. The
	// values read through are held by the Batch until they are appended or
	// it is closed.
	MGet(ctx context.Context, keys [][]byte) Batch
	// Set stores a free-form key (cache-aside use). stored is false when the
	// admission policy declined it.
	Set(key, value []byte) (stored bool, err error)
	Exists(key []byte) bool
	Delete(key []byte) bool
	DBSize() int
	// Manifest returns the names of a dataset's samples in order
	// (SHADE.MANIFEST).
	Manifest(dataset string) (Names, error)
	// Report, Done, Order and Reset act on one job of a dataset: job is
	// the name the trainer gave it, "" where it named none (the dataset's
	// default job).
	Report(dataset, job string, epoch int, ids []uint32, losses []float64) error
	// Done records that rank finished epoch and tells the leader; ctx
	// bounds the telling.
	Done(ctx context.Context, dataset, job string, epoch, rank int) error
	// Order blocks until epoch's order is published or ctx ends, and
	// returns rank's slice of it with the importance weight of each id
	// (nil when every weight is 1).
	Order(ctx context.Context, dataset, job string, epoch, rank, world int) (ids []uint32, weights []float32, err error)
	// Reset forgets a job's epochs and world, keeping its scores.
	Reset(dataset, job string) error
	// Warm preloads a dataset into the cache, most important samples
	// first, and returns how many it loaded. It blocks until done.
	Warm(ctx context.Context, dataset string) (int, error)
	// ValueSize returns about how many bytes key's value has without
	// reading it (a sample's size in its manifest, a free-form value's
	// stored length), or 0 when unknown. It must not block: MGET asks it
	// for every key to answer a long batch in parts.
	ValueSize(key []byte) int
	// Stats returns a JSON document of counters: one dataset, or all for "".
	Stats(dataset string) ([]byte, error)
	// Info returns "key:value" lines for the INFO reply's shade section.
	Info() []string
	// SharedArena returns a new read-only descriptor of the memory that
	// holds the cached samples (the caller closes it), the memory's size
	// and its ID, for SHADE.MAP; an error where it cannot be shared.
	SharedArena() (fd int, size int64, id uint64, err error)
	// Locate finds the samples held in the shared memory, for a trainer
	// that maps it: locs[i] is where the value of keys[i] lies, or zero
	// (Gen 0) where it is not held; the trainer reads those with MGET. id
	// is the ID of the memory the locations refer to.
	Locate(ctx context.Context, keys [][]byte) (id uint64, locs []shm.Location)
	// Settle does the work of the reads answered so far that their
	// replies need not wait for (the eviction policy hearing of them).
	// The socket calls it once it has sent a pipeline's replies.
	Settle()
}

// Names is a dataset's sample names in order, as the backend keeps them
// (dataset.Names: packed, read in one pass).
type Names interface {
	Len() int
	// AllBytes yields each index and name's bytes in order, valid until
	// the next.
	AllBytes() iter.Seq2[int, []byte]
}

// Loan is a value a Backend lends in place (LendGet), to be written out
// without a copy and then given back with Return(Token).
type Loan struct {
	Value []byte
	Token uint64
}

// Held is one key's answer from LendHeldPrefix: its value lent (Found), or
// not found, or Err.
type Held struct {
	Loan  Loan
	Found bool
	Err   error
}

// MinLent is the shortest value LendGet lends; shorter ones cost less to
// copy than to write out from where they lie: the socket takes one run of
// reply bytes faster than a vector of small pieces, and the copy is
// checked in the CPU's cache (redis-benchmark GET of 4 KiB with 8
// clients: 0.86-1.07x redis-server lent, 0.90-1.36x copied; medians 0.93
// and 1.05, eight runs each; test/results/socket-vs-redis.md). Replies
// are written out every 256 KiB, and an MGET holds at most replyPart and
// one chunk lent (cmdMGet), which bounds the values a connection holds
// lent.
const MinLent = 8 << 10

// Batch is one MGet's keys being answered. It is used by one goroutine.
type Batch interface {
	// Append appends key i's value to dst as Backend.LendGet appends a
	// value it does not lend: a Batch never lends. The
	// caller appends each key once, in order (0, 1, ...), and may write
	// its reply out between two calls: no lock is held between them.
	Append(i int, dst []byte, head func(dst []byte, n int) []byte) (result []byte, found bool, err error)
	// Close ends the batch, and releases the values read through that
	// were not appended. The caller closes every batch once.
	Close()
}

// Coded is implemented by errors that carry a RESP error code other than
// ERR (for example TIMEOUT or WRONGTYPE); the reply is "<Code> <message>".
type Coded interface {
	error
	Code() string
}

// SocketConfig configures the trainer socket. The zero value of every field
// but Path means its default.
type SocketConfig struct {
	// Path of the Unix socket file. A stale socket file left by a dead
	// process is replaced; a live one is an error.
	Path string
	// Mode of the socket file; 0 means 0660.
	Mode fs.FileMode
	// RequirePass, when set, makes every command but AUTH and QUIT answer
	// NOAUTH until the connection authenticates.
	RequirePass string
	// IdleTimeout closes connections that send nothing for this long; 0
	// means never (as Redis's "timeout 0").
	IdleTimeout time.Duration
	// MaxKeys bounds the keys of one MGET, EXISTS, DEL or SHADE.LOCATE,
	// and the id/loss pairs of one SHADE.REPORT; 0 means 65536.
	MaxKeys int
	// MaxValue bounds one bulk argument (a SET's value, a key) in bytes;
	// a longer one is refused as it is announced, before it is read, and
	// the connection closed. 0 means DefaultMaxValue.
	MaxValue int
	// MaxClientMemory bounds the bytes held for all connections together:
	// their input buffers and their replies waiting to be written. A
	// connection whose input would go past it gets an error and is
	// closed; an MGET waits for room for each part of its reply (up to
	// MaxReplyWait) and answers the keys it found none for with errors.
	// 0 means DefaultMaxClientMemory.
	MaxClientMemory int64
	// MaxWorld bounds the world size SHADE.ORDER accepts; 0 means
	// DefaultMaxWorld.
	MaxWorld int
	// MaxConnections bounds the open trainer connections, as Redis's
	// maxclients; one more is answered an error and closed. 0 means
	// DefaultMaxConnections.
	MaxConnections int
	// WriteTimeout closes a connection whose replies could not be written
	// for this long (a client that stopped reading); 0 means 60 seconds.
	WriteTimeout time.Duration
	// MaxOrderWait bounds how long SHADE.ORDER blocks; 0 means 10 minutes.
	MaxOrderWait time.Duration
	// Loops is how many event loops serve the connections, each from one
	// epoll set: a loop answers the commands that never wait (a GET of a
	// value held in memory, a short MGET of values all held in memory,
	// a short SET, EXISTS, SHADE.LOCATE, PING, ...) itself, and hands
	// any other, with the rest of its pipeline, to a goroutine. 0 means
	// DefaultLoops(); a negative value serves every connection from a
	// goroutine of its own instead.
	Loops int
	// Logger receives connection-level events; the zero Logger is silent.
	Logger zerolog.Logger
}

// DefaultLoops is the number of event loops a zero SocketConfig.Loops
// means: one for every four CPUs the process may use, at least one.
func DefaultLoops() int { return max(1, runtime.GOMAXPROCS(0)/4) }

// Defaults of the input bounds.
const (
	DefaultMaxValue        = 64 << 20
	DefaultMaxClientMemory = 256 << 20
	DefaultMaxWorld        = 4096
	DefaultMaxConnections  = 10000
	// MaxInline is the longest inline (telnet-style) command line, as
	// Redis's limit.
	MaxInline = 64 << 10
	// maxValueLimit is the largest MaxValue may be: Redis's
	// proto-max-bulk-len.
	maxValueLimit = 512 << 20
	// replyPart is how many bytes of values one part of an MGET reply
	// read through holds at most (one value may be larger), and how many
	// bytes of an MGET's lent values wait to be written at most before
	// the next are lent; maxReplyWait is how long a part waits for room
	// in the clients' budget.
	replyPart    = 4 << 20
	maxReplyWait = 5 * time.Second
	// replyFlush is how many bytes of an MGET's reply read through wait
	// at most (and one value) before they are written out, and how many
	// bytes of values an MGET lends at a time, on a loop or a goroutine,
	// before it hands them to the socket.
	replyFlush = 256 << 10
	// maxLoopSet is the longest value a SET an event loop answers may
	// store; a longer one goes to a goroutine, so that its copy into the
	// cache does not hold up the loop's other connections.
	maxLoopSet = 256 << 10
)

func (c SocketConfig) withDefaults() SocketConfig {
	if c.Mode == 0 {
		c.Mode = 0o660
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = 65536
	}
	if c.MaxValue == 0 {
		c.MaxValue = DefaultMaxValue
	}
	if c.MaxClientMemory == 0 {
		c.MaxClientMemory = DefaultMaxClientMemory
	}
	if c.MaxWorld == 0 {
		c.MaxWorld = DefaultMaxWorld
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 60 * time.Second
	}
	if c.MaxOrderWait == 0 {
		c.MaxOrderWait = 10 * time.Minute
	}
	if c.Loops == 0 {
		c.Loops = DefaultLoops()
	}
	return c
}

// Validate reports a bound that cannot work.
func (c SocketConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.MaxValue < 0 || c.MaxValue > maxValueLimit:
		return fmt.Errorf("transport: max value %d bytes: must be between 1 and %d (512 MiB)", c.MaxValue, maxValueLimit)
	case c.MaxClientMemory < 0:
		return fmt.Errorf("transport: max client memory %d bytes: must be positive", c.MaxClientMemory)
	case c.MaxClientMemory < 2*int64(c.MaxValue) && c.MaxClientMemory < 1<<30:
		return fmt.Errorf("transport: max client memory (%d bytes) must hold at least two values of the max value (%d bytes)", c.MaxClientMemory, c.MaxValue)
	case c.MaxWorld < 1 || c.MaxWorld > 1<<20:
		return fmt.Errorf("transport: max world %d: must be between 1 and 1048576", c.MaxWorld)
	case c.MaxConnections < 1:
		return fmt.Errorf("transport: max connections %d: must be positive", c.MaxConnections)
	case c.MaxKeys < 1:
		return fmt.Errorf("transport: max keys %d: must be positive", c.MaxKeys)
	}
	return nil
}

// ErrSocketInUse reports that another live process serves the socket path.
var ErrSocketInUse = errors.New("transport: socket in use by a live process")

// SocketServer serves the Redis protocol to trainers on a Unix socket.
type SocketServer struct {
	cfg      SocketConfig
	backend  Backend
	giveBack func(token uint64) // backend.Return, made once
	handlers map[string]handler
	srv      *redcon.Server
	ln       net.Listener
	ino      uint64 // inode of our socket file, so Close removes only ours
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	started  time.Time
	clients  *budget.Budget // input and replies held for all connections
	refused  refusals
	connWG   sync.WaitGroup // one per connection, done when redcon closes it

	mu    sync.Mutex
	conns int
	total int64
}

// connState is one connection's private state.
type connState struct {
	authed bool
	// fresh: the command being run is the first of its pipeline, so no
	// reply is waiting in redcon's buffer (SHADE.MAP writes its own).
	fresh bool
	// ctx is the context of the connection's reads: the server's, with
	// the job the connection last named (SHADE.JOB, or JOB on
	// SHADE.ORDER); nil until it names one.
	ctx context.Context
	// held is the answers of an MGET's values lent (lendPrefix), kept for
	// the next one; mgetFrom, where not 0, is the key an MGET an event
	// loop began goes on from on a goroutine (fastMGet, cmdMGet).
	held     []Held
	mgetFrom int
}

// readCtx is the context a connection's reads are served with.
func (s *SocketServer) readCtx(st *connState) context.Context {
	if st.ctx != nil {
		return st.ctx
	}
	return s.ctx
}

// setJob makes job the connection's job for its reads.
func (s *SocketServer) setJob(st *connState, job string) {
	if JobOf(st.ctx) != job {
		st.ctx = WithJob(s.ctx, job)
	}
}

type jobKey struct{}

// WithJob returns a context that names the training job its reads are
// for; the backend counts a job's reads apart (Backend.AppendGet, MGet).
func WithJob(ctx context.Context, job string) context.Context {
	return context.WithValue(ctx, jobKey{}, job)
}

// JobOf returns the job ctx names, "" for none (the default job).
func JobOf(ctx context.Context) string {
	if ctx == nil {
		return ""
	}
	job, _ := ctx.Value(jobKey{}).(string)
	return job
}

// ListenSocket creates the socket file with cfg.Mode and starts serving in
// a goroutine that Close stops. The socket is bound under a temporary name,
// given its mode, then renamed into place, so it is never reachable with
// looser permissions.
func ListenSocket(cfg SocketConfig, backend Backend) (*SocketServer, error) {
	cfg = cfg.withDefaults()
	if cfg.Path == "" {
		return nil, errors.New("transport: socket path is empty")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkSocketDir(filepath.Dir(cfg.Path)); err != nil {
		return nil, err
	}
	if err := clearStaleSocket(cfg.Path); err != nil {
		return nil, err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", cfg.Path, os.Getpid())
	_ = os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("transport: listen on %s: %w", cfg.Path, err)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, cfg.Mode); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("transport: chmod socket: %w", err)
	}
	if err := os.Rename(tmp, cfg.Path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("transport: place socket: %w", err)
	}
	var ino uint64
	if fi, err := os.Lstat(cfg.Path); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &SocketServer{
		cfg: cfg, backend: backend, giveBack: backend.Return, handlers: commandTable(), ln: ln, ino: ino,
		ctx: ctx, cancel: cancel, done: make(chan struct{}), started: time.Now(),
		clients: budget.New(cfg.MaxClientMemory),
	}
	s.srv = redcon.NewServerNetwork("unix", cfg.Path, s.handle, s.accept, s.closed)
	s.srv.SetLimits(redcon.Limits{
		MaxInline:    MaxInline,
		MaxBulk:      cfg.MaxValue,
		MaxArgs:      2*cfg.MaxKeys + 8,
		Budget:       s.clients,
		WriteTimeout: cfg.WriteTimeout,
	})
	if cfg.IdleTimeout > 0 {
		s.srv.SetIdleClose(cfg.IdleTimeout)
	}
	if cfg.Loops > 0 {
		s.srv.SetLoops(cfg.Loops, s.fast)
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil {
			cfg.Logger.Error().Err(err).Msg("trainer socket stopped")
		}
	}()
	return s, nil
}

// ErrSocketDir reports a socket directory that others could write into
// (and so replace the socket with their own).
var ErrSocketDir = errors.New("transport: unsafe socket directory")

// checkSocketDir creates the socket's directory (mode 0750) if missing and
// refuses one that every user may write to.
func checkSocketDir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("transport: socket directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("transport: socket directory: %w", err)
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return fmt.Errorf("%w: %s is world-writable (mode %v); use a directory only the peer and its trainers can write, such as /run/shade",
			ErrSocketDir, dir, fi.Mode().Perm())
	}
	return nil
}

// clearStaleSocket removes a socket file nobody answers on, refuses a live
// one and anything that is not a socket.
func clearStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("transport: %w", err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("transport: %s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: %s", ErrSocketInUse, path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("transport: remove stale socket: %w", err)
	}
	return nil
}

// Path returns the socket file's path.
func (s *SocketServer) Path() string { return s.cfg.Path }

// Connections returns the number of open trainer connections.
func (s *SocketServer) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// Close stops accepting, closes every connection, cancels blocked
// SHADE.ORDER calls, waits for the serving goroutine and every
// connection's goroutine, and removes the socket file if it is still ours.
func (s *SocketServer) Close() error {
	s.cancel()
	// Closing the listener ends redcon's accept loop, which then closes every
	// connection. (redcon's own Close fails if called before Serve began.)
	err := s.ln.Close()
	<-s.done
	s.connWG.Wait()
	if fi, e := os.Lstat(s.cfg.Path); e == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Ino == s.ino {
			os.Remove(s.cfg.Path)
		}
	}
	return err
}

func (s *SocketServer) accept(conn redcon.Conn) bool {
	s.mu.Lock()
	if s.conns >= s.cfg.MaxConnections {
		s.mu.Unlock()
		s.refused.add(refusedConnections)
		conn.WriteError("ERR max number of clients reached")
		return false // redcon writes the error out and closes the connection
	}
	conn.SetContext(&connState{authed: s.cfg.RequirePass == "", fresh: true})
	s.connWG.Add(1)
	s.conns++
	s.total++
	s.mu.Unlock()
	return true
}

func (s *SocketServer) closed(conn redcon.Conn, err error) {
	defer s.connWG.Done()
	s.mu.Lock()
	s.conns--
	s.mu.Unlock()
	if err == nil {
		return
	}
	if r := refusalOf(err); r != refusedNone {
		s.refused.add(r)
		s.cfg.Logger.Warn().Err(err).Str("bound", r.String()).Msg("trainer connection closed: over a bound")
		return
	}
	s.cfg.Logger.Debug().Err(err).Msg("trainer connection closed")
}

// handle runs one command. redcon calls it from the connection's goroutine,
// commands of one connection in order, and flushes after a pipeline.
func (s *SocketServer) handle(conn redcon.Conn, cmd redcon.Command) {
	st := conn.Context().(*connState)
	defer s.replied(conn, st)
	var lower [32]byte
	name := commandName(&lower, cmd.Args[0])
	if !st.authed && string(name) != "auth" && string(name) != "quit" && string(name) != "hello" {
		conn.WriteError("NOAUTH Authentication required.")
		return
	}
	h, ok := s.handlers[string(name)]
	if !ok {
		conn.WriteError(fmt.Sprintf("ERR unknown command '%s'", truncate(cmd.Args[0], 64)))
		return
	}
	if !h.takes(len(cmd.Args)) {
		conn.WriteError(fmt.Sprintf("ERR wrong number of arguments for '%s' command", string(name)))
		return
	}
	h.run(s, conn, st, cmd.Args)
}

// fast answers, on an event loop, a command that needs no wait: a GET of a
// value held in memory, an MGET as far as its values are held in memory
// (see fastMGet), a SHADE.LOCATE, a PING (see handler.fast). It reports
// whether it did; anything else, and anything handle would refuse, goes
// to handle on a goroutine.
func (s *SocketServer) fast(conn redcon.Conn, cmd redcon.Command) bool {
	st := conn.Context().(*connState)
	if !st.authed {
		return false
	}
	var lower [32]byte
	h, ok := s.handlers[string(commandName(&lower, cmd.Args[0]))]
	if !ok || h.fast == nil || !h.takes(len(cmd.Args)) {
		return false
	}
	hintAhead(s, conn, st)
	if !h.fast(s, conn, st, cmd.Args) {
		return false
	}
	s.replied(conn, st)
	return true
}

// replied ends a command. Where it was the last of its pipeline, its
// replies go to the socket, as far as it takes them at once, and the
// backend then settles the reads they answered (Backend.Settle): the
// client has its replies while the backend ends the reads' work.
func (s *SocketServer) replied(conn redcon.Conn, st *connState) {
	st.fresh = len(conn.PeekPipeline()) == 0
	if st.fresh {
		conn.FlushSome()
		s.backend.Settle()
	}
}

// commandName lower-cases an ASCII command name into buf and returns it, or
// returns b itself if it is longer than any command. The caller compares
// and looks it up as string(name), which does not allocate.
func commandName(buf *[32]byte, b []byte) []byte {
	if len(b) > len(buf) {
		return b
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return buf[:len(b)]
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// writeErr writes err as a RESP error with its code (ERR by default).
func writeErr(conn redcon.Conn, err error) {
	code := "ERR"
	var c Coded
	if errors.As(err, &c) {
		code = c.Code()
	}
	conn.WriteError(code + " " + oneLine(err.Error()))
}

// oneLine keeps an error message on one RESP line.
func oneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\r' || c == '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}

func parseInt(b []byte, name string) (int, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < 0 || n > 1<<31-1 {
		return 0, fmt.Errorf("%s must be a non-negative integer, got '%s'", name, truncate(b, 32))
	}
	return int(n), nil
}
