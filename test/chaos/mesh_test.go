package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/protocol/stats"
)

// peerProc is one named peer across its incarnations: it is restarted
// with the same name, socket, ports and flags.
type peerProc struct {
	name, socket, logPath string
	gossip                string
	args                  []string

	mu          sync.Mutex
	proc        *testsupport.Peer // the current incarnation; nil before the first
	alive       bool              // serving: answered PING, not killed since
	gen         uint64            // raised on every kill and every readiness
	incarnation int
	readyAt     time.Time
	killing     bool // the test is killing it: its exit is expected

	unexpected chan<- string // where unexpected exits are reported
}

// state returns whether the peer serves and its generation: a call made
// between two equal generations of a serving peer was made to a live peer.
func (p *peerProc) state() (alive bool, gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.alive, p.gen
}

// genName names the peer with its generation now, for traces.
func (p *peerProc) genName() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%s gen %d", p.name, p.gen)
}

func (p *peerProc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil || !p.alive {
		return 0
	}
	return p.proc.PID()
}

// start starts a new incarnation and waits until its socket answers PING.
func (p *peerProc) start(ctx context.Context) error {
	flags := os.O_CREATE | os.O_APPEND | os.O_WRONLY
	if p.incarnation == 0 {
		flags |= os.O_TRUNC // a kept CHAOS_LOG_DIR starts afresh
	}
	f, err := os.OpenFile(p.logPath, flags, 0o644)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.incarnation++
	inc := p.incarnation
	p.mu.Unlock()
	fmt.Fprintf(f, "=== chaos: %s incarnation %d started %s\n", p.name, inc, time.Now().Format(time.RFC3339Nano))
	proc, err := testsupport.Launch(ctx, testsupport.PeerOptions{
		Bin: bins.Path("shade-peer"), Socket: p.socket, Args: p.args, Log: f, Env: []string{"GORACE=halt_on_error=1"},
	})
	if err != nil {
		f.Close()
		return fmt.Errorf("%s: %w; log %s", p.name, err, p.logPath)
	}
	p.mu.Lock()
	p.proc, p.killing = proc, false
	p.alive = true
	p.gen++
	p.readyAt = time.Now()
	p.mu.Unlock()
	go func() { // ends when the incarnation exits (kill waits for it)
		<-proc.Exited()
		f.Close()
		p.mu.Lock()
		expected := p.killing
		p.alive = false
		p.gen++
		p.mu.Unlock()
		if !expected {
			p.unexpected <- fmt.Sprintf("%s (incarnation %d, pid %d) exited on its own: %v", p.name, inc, proc.PID(), proc.Err())
		}
	}()
	return nil
}

// kill sends SIGKILL and waits for the process to be gone. The peer is
// marked down before the signal, so every call it breaks sees a new
// generation.
func (p *peerProc) kill() {
	p.mu.Lock()
	proc := p.proc
	p.alive = false
	p.gen++
	p.killing = true
	p.mu.Unlock()
	if proc != nil {
		proc.Kill()
	}
}

// logTail returns the last n lines of the peer's log.
func (p *peerProc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// callTimeout bounds one command, as the Python client's default timeout
// does: a slower reply from a live peer is a failure. (The test machines
// are small and shared; a few seconds are not the product's fault.)
const callTimeout = 60 * time.Second

// newClient is a go-redis client on a peer socket that never retries on
// its own: the test decides what a connection error means.
func newClient(sock string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Network: "unix", Addr: sock, Protocol: 2, MaxRetries: -1, DisableIdentity: true,
		DialTimeout: 2 * time.Second, ReadTimeout: callTimeout, WriteTimeout: 5 * time.Second,
		PoolSize: 4,
	})
}

// clients keeps one client per peer generation, so that no connection of
// a killed incarnation is ever reused. Not safe for concurrent use.
type clients struct {
	byPeer map[*peerProc]genClient
}

type genClient struct {
	gen uint64
	c   *redis.Client
}

func newClients() *clients { return &clients{byPeer: make(map[*peerProc]genClient)} }

func (cs *clients) get(p *peerProc, gen uint64) *redis.Client {
	gc, ok := cs.byPeer[p]
	if ok && gc.gen == gen {
		return gc.c
	}
	if ok {
		gc.c.Close()
	}
	gc = genClient{gen, newClient(p.socket)}
	cs.byPeer[p] = gc
	return gc.c
}

func (cs *clients) close() {
	for _, gc := range cs.byPeer {
		gc.c.Close()
	}
}

// isReply tells a Redis error reply (the peer answered) from a connection
// or timeout error.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func statsOf(ctx context.Context, c *redis.Client) (stats.Node, error) {
	var st stats.Node
	js, err := c.Do(ctx, "SHADE.STATS").Text()
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal([]byte(js), &st)
}

// mesh is the peers of one test.
type mesh struct {
	peers      []*peerProc
	files      [][]byte
	dataset    string
	cacheSize  int64
	unexpected chan string
}

// startMesh starts k peers named n0..n(k-1) serving dataset dsName from
// dir; every peer lists every other as a seed, so that any of them can
// come back alone.
func startMesh(t *testing.T, ctx context.Context, k int, dsName, dir, logDir string, cacheSize int64, extra ...string) *mesh {
	t.Helper()
	tlsDir := t.TempDir()
	sockDir, err := os.MkdirTemp("", "shade-chaos-sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	m := &mesh{dataset: dsName, cacheSize: cacheSize, unexpected: make(chan string, 64)}
	gossip := make([]string, k)
	quic := make([]string, k)
	for i := range gossip {
		gossip[i] = testsupport.LoopbackAddr(t)
		quic[i] = testsupport.LoopbackAddr(t)
	}
	for i := 0; i < k; i++ {
		name := fmt.Sprintf("n%d", i)
		var seeds []string
		for j, g := range gossip {
			if j != i {
				seeds = append(seeds, g)
			}
		}
		// The test's own settings below give way to the same flags in
		// extra (CHAOS_PEER_FLAGS).
		p := &peerProc{
			name: name, socket: filepath.Join(sockDir, name+".sock"), logPath: filepath.Join(logDir, name+".log"),
			gossip: gossip[i], unexpected: m.unexpected,
		}
		p.args = append([]string{"--name", name, "--dataset", dsName + "=" + dir,
			"--cache-size", strconv.FormatInt(cacheSize, 10) + "B",
			"--gossip-addr", gossip[i], "--peer-addr", quic[i], "--seeds", strings.Join(seeds, ","),
			"--dev-tls-dir", tlsDir, "--gossip-profile", "local", "--expect", strconv.Itoa(k), "--replicas", "2",
			"--join-wait", "2s", "--log-format", "json"}, extra...)
		if peerHasFlag("--admin-addr") {
			p.args = append(p.args, "--admin-addr", "off") // five peers on one host
		}
		if peerHasFlag("--relay-fanout") && !slices.Contains(extra, "--relay-fanout") {
			// The leader hands each order to 2 peers, which pass it on:
			// the kills hit relays as well as the leader and the ranks.
			p.args = append(p.args, "--relay-fanout", "2")
		}
		if peerHasFlag("--relay-piece") && !slices.Contains(extra, "--relay-piece") {
			// An order of 5,000 samples (40 KB) goes in about 10 pieces,
			// so the kills hit relays in the middle of passing one on.
			// (A peer's part of an order, 8-30 KB, is larger than such a
			// piece: every peer gets the whole. CHAOS_PEER_FLAGS
			// "--order-ahead 1 --relay-piece 32KiB" has the relays cut
			// the parts of orders in two pieces, published ahead.)
			p.args = append(p.args, "--relay-piece", "4KiB")
		}
		m.peers = append(m.peers, p)
	}
	t.Cleanup(func() {
		for _, p := range m.peers {
			p.kill()
		}
	})
	// All start at once: each joins through whichever seeds answer.
	if err := testsupport.Parallel(len(m.peers), func(i int) error {
		p := m.peers[i]
		if err := p.start(ctx); err != nil {
			return fmt.Errorf("%v\n%s", err, p.logTail(20))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.waitConverged(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	return m
}

// alivePeers returns the peers that serve now.
func (m *mesh) alivePeers() []*peerProc {
	var out []*peerProc
	for _, p := range m.peers {
		if a, _ := p.state(); a {
			out = append(out, p)
		}
	}
	return out
}

func (m *mesh) byName(name string) *peerProc {
	for _, p := range m.peers {
		if p.name == name {
			return p
		}
	}
	return nil
}

// waitConverged waits until every serving peer reports exactly the serving
// peers as members, and returns how long that took.
func (m *mesh) waitConverged(ctx context.Context, d time.Duration) (time.Duration, error) {
	cs := newClients()
	defer cs.close()
	var want []string
	var last string
	took, err := testsupport.Poll(ctx, d, func() bool {
		alive := m.alivePeers()
		want = want[:0]
		for _, p := range alive {
			want = append(want, p.name)
		}
		ok := true
		var views []string
		for _, p := range alive {
			a, gen := p.state()
			if !a {
				ok = false
				break
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := statsOf(sctx, cs.get(p, gen))
			cancel()
			if err != nil {
				ok = false
				views = append(views, fmt.Sprintf("%s: %v", p.name, err))
				continue
			}
			views = append(views, fmt.Sprintf("%s sees %v", p.name, st.Members))
			if !slices.Equal(st.Members, want) {
				ok = false
			}
		}
		last = strings.Join(views, "; ")
		return ok
	})
	if err != nil {
		return took, fmt.Errorf("members did not converge on %v within %v: %s", want, d, last)
	}
	return took, nil
}

// unexpectedExits drains the reports of peers that exited on their own.
func (m *mesh) unexpectedExits() []string {
	var out []string
	for {
		select {
		case msg := <-m.unexpected:
			out = append(out, msg)
		default:
			return out
		}
	}
}

// leaderName asks the serving peers whom they follow; "" if none answers.
func (m *mesh) leaderName(ctx context.Context) string {
	cs := newClients()
	defer cs.close()
	for _, p := range m.alivePeers() {
		if l := followed(ctx, cs, p); l != "" {
			return l
		}
	}
	return ""
}

// followed is the leader peer p names now; "" if it does not answer
// within a second.
func followed(ctx context.Context, cs *clients, p *peerProc) string {
	_, gen := p.state()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := statsOf(sctx, cs.get(p, gen))
	if err != nil {
		return ""
	}
	return st.Leader
}

// vmRSS reads a process's resident set size in bytes from /proc.
func vmRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// logEvent is one JSON line of a peer's log.
type logEvent struct {
	Level   string `json:"level"`
	Message string `json:"message"`
	Dataset string `json:"dataset"`
	Job     string `json:"job"`
	Epoch   *int   `json:"epoch"`
	Term    uint64 `json:"term"`
	Time    string `json:"time"`
}

// publication is an "order published" line of a peer's log: a leader
// drew an epoch's order and broadcast it.
type publication struct {
	peer string
	term uint64
	time string
}

func (p publication) String() string { return fmt.Sprintf("%s term %d at %s", p.peer, p.term, p.time) }

// publishedOrders lists, per epoch, the "order published" lines of a job
// ("" for the default job) in the peers' logs: a leader logs each epoch
// it draws and broadcasts.
func (m *mesh) publishedOrders(job string) (map[int][]publication, error) {
	out := make(map[int][]publication)
	err := m.eachLogEvent(job, "order published", func(p *peerProc, ev *logEvent) {
		out[*ev.Epoch] = append(out[*ev.Epoch], publication{peer: p.name, term: ev.Term, time: ev.Time})
	})
	return out, err
}

// orderKey names one leader's order of an epoch: the epoch and the
// leader's term.
type orderKey struct {
	epoch int
	term  uint64
}

// installedOrders lists, per epoch and term, the peers that logged "order
// installed" of a job ("" for the default job): an order a leader
// published reached them. Peers log it at debug level (--log-level
// debug).
func (m *mesh) installedOrders(job string) (map[orderKey][]string, error) {
	out := make(map[orderKey][]string)
	err := m.eachLogEvent(job, "order installed", func(p *peerProc, ev *logEvent) {
		k := orderKey{*ev.Epoch, ev.Term}
		out[k] = append(out[k], p.name)
	})
	return out, err
}

// eachLogEvent calls fn with every line of the peers' logs whose message
// is msg, of a job ("" for the default job) of the mesh's dataset, that
// names an epoch.
func (m *mesh) eachLogEvent(job, msg string, fn func(*peerProc, *logEvent)) error {
	if job == "" {
		job = "default"
	}
	quoted := []byte(`"` + msg + `"`)
	for _, p := range m.peers {
		b, err := os.ReadFile(p.logPath)
		if err != nil {
			return err
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if !bytes.Contains(line, quoted) {
				continue
			}
			var ev logEvent
			if json.Unmarshal(line, &ev) != nil || ev.Message != msg || ev.Epoch == nil || ev.Dataset != m.dataset || ev.Job != job {
				continue
			}
			fn(p, &ev)
		}
	}
	return nil
}

// panics returns log lines that show a panic or a fatal error.
func (m *mesh) panics() []string {
	var out []string
	for _, p := range m.peers {
		b, err := os.ReadFile(p.logPath)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") ||
				strings.HasPrefix(line, "WARNING: DATA RACE") || strings.Contains(line, `"level":"fatal"`) ||
				strings.Contains(line, `"level":"panic"`) {
				out = append(out, p.name+": "+line)
			}
		}
	}
	return out
}

var helpOnce struct {
	sync.Once
	text string
}

// peerHasFlag tells whether the built shade-peer knows a flag.
func peerHasFlag(flag string) bool {
	helpOnce.Do(func() {
		out, _ := exec.Command(bins.Path("shade-peer"), "--help").CombinedOutput()
		helpOnce.text = string(out)
	})
	return strings.Contains(helpOnce.text, flag+" ")
}
