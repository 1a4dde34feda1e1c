package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/vmihailenco/msgpack/v5"
	"golang.org/x/sync/singleflight"

	"github.com/shade-mesh/shade/internal/budget"
	"github.com/shade-mesh/shade/internal/ctxsleep"
	"github.com/shade-mesh/shade/mesh/member"
	"github.com/shade-mesh/shade/mesh/ring"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport/peer"
)

// ClusterConfig joins a node to a mesh. A zero GossipAddr leaves the node
// standalone: it owns every sample and leads its own jobs. The zero value
// of every other field means its default.
type ClusterConfig struct {
	// GossipAddr is the memberlist bind address, host:port ("" standalone).
	GossipAddr string
	// Seeds are other peers' gossip addresses.
	Seeds []string
	// GossipKey encrypts gossip (16, 24 or 32 bytes); nil means none.
	GossipKey []byte
	// PeerAddr is the QUIC listen address; "" means the gossip host with
	// port 7947.
	PeerAddr string
	// TLS is the node's certificate and the cluster CA; required in a mesh.
	TLS *peer.TLSConfig
	// Replicas is R, the owners of each sample; 0 means 2.
	Replicas int
	// MaxPeerMemory bounds the bytes the requests this node serves for
	// other peers hold at once (peer.Config.MaxRequestMemory); 0 means
	// its default, 256 MiB.
	MaxPeerMemory int64
	// Partitions of the ring, the same on every peer; 0 means the mesh's:
	// the count most of the peers the node joins advertise with its
	// Replicas (a peer of an earlier build advertises none and uses 271),
	// or NewMeshPartitions where none advertises one (meshShape); and
	// later the count of a larger group of peers, where one appears
	// (Node.followMeshShape).
	Partitions int
	// Expect is the cluster's expected size; a leader acts only while it
	// sees a majority of it. 0 means 1.
	Expect int
	// Profile tunes failure detection: "lan" (default) or "local".
	Profile string
	// FetchTimeout bounds one request to one peer; 0 means 2 s.
	FetchTimeout time.Duration
	// HedgeAfter is how long a read of a sample waits for an owner's
	// answer before it also asks the next owner, or the source (a hedged
	// request, package hedge); the first answer is kept. 0 learns it from
	// the latencies of recent answers (hedge.Delay: their 99th
	// percentile, 10 ms to 500 ms); negative never: the next is asked
	// only once the one before has failed, or the peer was found dead.
	// An owner reads the source beside a co-owner only once it no longer
	// hears from it (see Node.throughWait).
	HedgeAfter time.Duration
	// RetryEvery is how often waiting ranks and unsent reports retry;
	// 0 means 250 ms.
	RetryEvery time.Duration
	// ReplicateEvery is how often the leader replicates changed score
	// tables to the standbys (the members that lead next); 0 means 500 ms.
	ReplicateEvery time.Duration
	// ResidentEvery is how often a node tells the leader which samples
	// it caches, where draws are cache-aware
	// (Config.Boost); 0 means wire.ResidentEvery.
	ResidentEvery time.Duration
	// ReplicateBudget bounds, in bytes per second, the leader's sending of
	// changed score tables to every other member (standbys aside); 0 means
	// 64 MiB/s. A small mesh gets them every ReplicateEvery.
	ReplicateBudget int64
	// JoinWait is how long epoch 0 waits for every rank to ask for it;
	// 0 means 5 s.
	JoinWait time.Duration
	// EpochDeadline publishes the next epoch this long after the first
	// rank finished, even if others have not; 0 means never.
	EpochDeadline time.Duration
	// YieldWait is how long a node that leads, or takes over, gives way
	// to a member of a lower name that asks for its state to take over
	// (see Node.giveWay) while its own membership does not show that
	// member yet; once it does, the member leads here too. If it never
	// does (it died at once), the node takes over again after YieldWait.
	// 0 means 3 s: gossip brings a member that joins within a second.
	YieldWait time.Duration
	// Prefetch is how many samples ahead of each local rank's reads in its
	// slice of the order are kept read ahead (see Config.PrefetchMemory);
	// 0 means 1024, negative none.
	Prefetch int
	// NoLocality turns off the locality-aware split of orders.
	NoLocality bool
	// RelayFanout is how many members the leader hands an epoch's order
	// to when the mesh has more, each passing it on to its share of the
	// rest (MethodRelay); 0 means wire.DefaultRelayFanout (4)
	// (shade-peer --relay-fanout).
	RelayFanout int
	// RelayPiece is the size in bytes of the pieces in which an order
	// longer than it is relayed, each passed on as soon as it is in; 0
	// means wire.DefaultRelayPiece (1 MiB). It is cut to what a frame
	// holds (MaxFrame).
	RelayPiece int
	// MaxFrame is the largest message, in bytes, this node sends or takes
	// from a peer in one frame (peer.Config.MaxFrame); 0 means
	// peer.DefaultMaxFrame (64 MiB). A fetch's reply is cut to fit one
	// (the samples past it are answered with an error and read
	// elsewhere). An order that does not fit one (9 bytes a sample with
	// weights: a dataset of more than about 7 M samples at 64 MiB) goes
	// in pieces of RelayPiece to every member, however few (see
	// Node.publish), bounded by MaxPeerMemory where it arrives; so do an
	// epoch's order a node asks the leader for while its ranks wait, and
	// a score table the leader replicates (4 bytes a scored sample: more
	// than about 16 M). A new leader asks its peers for the newest order
	// and the best score table in parts of a frame each (see getParts).
	// Other messages go whole, and one that does not fit is refused as too
	// large.
	MaxFrame int
	// DrainTimeout bounds the hand-over of a graceful stop (tables to the
	// peers, cached samples to their next owners); 0 means 10 s, negative
	// none.
	DrainTimeout time.Duration
	// Build is this node's version, gossiped in its metadata.
	Build string

	// handlers, set by this package's tests only, edits the node's peer
	// handlers before it listens: a test stands a peer of an earlier
	// protocol in the mesh with its handler of a method.
	handlers func(*Node, map[peer.Method]peerHandler)
}

func (c ClusterConfig) withDefaults() ClusterConfig {
	if c.Replicas == 0 {
		c.Replicas = ring.DefaultReplicas
	}
	if c.Expect == 0 {
		c.Expect = 1
	}
	if c.FetchTimeout == 0 {
		c.FetchTimeout = 2 * time.Second
	}
	if c.RetryEvery == 0 {
		c.RetryEvery = 250 * time.Millisecond
	}
	if c.ReplicateEvery == 0 {
		c.ReplicateEvery = wire.ReplicateEvery
	}
	if c.ResidentEvery == 0 {
		c.ResidentEvery = wire.ResidentEvery
	}
	if c.ReplicateBudget == 0 {
		c.ReplicateBudget = 64 << 20
	}
	if c.JoinWait == 0 {
		c.JoinWait = 5 * time.Second
	}
	if c.YieldWait == 0 {
		c.YieldWait = 3 * time.Second
	}
	if c.Prefetch == 0 {
		c.Prefetch = 1024
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 10 * time.Second
	}
	if c.RelayFanout <= 0 {
		c.RelayFanout = wire.DefaultRelayFanout
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = peer.DefaultMaxFrame
	}
	if c.RelayPiece <= 0 {
		c.RelayPiece = wire.DefaultRelayPiece
	}
	c.RelayPiece = min(c.RelayPiece, c.frameRoom())
	return c
}

// frameRoom is the payload one frame surely holds, its envelope (a
// message's other fields, a relayed piece's head) aside.
func (c ClusterConfig) frameRoom() int { return c.MaxFrame - c.MaxFrame/8 }

// peerInfo is an alive member as the mesh uses it.
type peerInfo struct {
	name     string
	addr     string            // QUIC host:port
	datasets map[string]string // name -> version
	capacity int64
}

// cluster is a node's view of the mesh: membership, rings, and the wire.
type cluster struct {
	cfg  ClusterConfig
	list *member.List
	wire *peer.Node
	// partitions is the ring partition count in use: cfg.Partitions, or
	// where that is 0 the mesh's (takeMeshShape, followMeshShape). Only
	// followMembers changes it.
	partitions atomic.Int64

	// serving holds the sample bytes of the fetch replies being built for
	// other peers, within ClusterConfig.MaxPeerMemory.
	serving *budget.Budget

	// relays holds the orders being relayed to this node in pieces,
	// charged to serving.
	relays relayBook
	// parts holds the answers this node sends in parts (MethodGetPart),
	// charged to serving.
	parts partBook

	// recheck, when sent to, has followMembers refresh the membership
	// and the leader without an event (a yield that ended, see
	// Node.giveWay).
	recheck chan struct{}

	// pings shares the MethodPing to a member among the reads that ask
	// whether it is there at once (answers), by member name.
	pings singleflight.Group

	// events counts the membership events followMembers read, refreshes
	// refreshMembers' calls: how many events a refresh answers (the
	// crowd tests and BenchmarkCrowd read them).
	events, refreshes atomic.Int64

	mu      sync.RWMutex
	members map[string]peerInfo // alive, by name, self included
	// lives holds, for each member in members, a context that ends when
	// the member leaves them: the calls to the member end with it
	// (callName).
	lives map[string]memberLife
}

// memberLife is a context that a member's departure cancels.
type memberLife struct {
	ctx context.Context
	end context.CancelFunc
}

func (c *cluster) alive() []peerInfo {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]peerInfo, 0, len(c.members))
	for _, p := range c.members {
		out = append(out, p)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	return out
}

// size is the number of members alive, this node among them.
func (c *cluster) size() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.members)
}

func (c *cluster) call(ctx context.Context, p peerInfo, m peer.Method, req, out any) error {
	return c.wire.Call(ctx, p.addr, p.name, m, req, out)
}

// callName calls a method on the alive member called name. The call ends
// when the member leaves the mesh (is found dead, or leaves), with an
// error of peer.CodeUnavailable, rather than when its timeout does: a
// crashed member answers nothing, and its callers have other members to
// turn to.
func (c *cluster) callName(ctx context.Context, name string, m peer.Method, req, out any) error {
	p, life, err := c.member(name)
	if err != nil {
		return err
	}
	ctx, stop := whileAlive(ctx, life)
	defer stop()
	return goneErr(c.call(ctx, p, m, req, out), name, life)
}

// heard returns how many packets this node has received from the member
// called name on the connection its calls use, and whether there is one
// (see peer.Node.Heard).
func (c *cluster) heard(name string) (uint64, bool) {
	c.mu.RLock()
	p, ok := c.members[name]
	c.mu.RUnlock()
	if !ok {
		return 0, false
	}
	return c.wire.Heard(p.addr)
}

// answers reports whether the member called name answers a MethodPing
// within wait: any answer, an error from an older peer's handler
// included, shows it there. Calls for one member while a ping to it is
// out share that ping: it runs whatever the caller that started it does,
// bounded by wait, and each caller stops waiting for it when its own ctx
// ends.
func (c *cluster) answers(ctx context.Context, name string, wait time.Duration) bool {
	shared := c.pings.DoChan(name, func() (any, error) {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
		defer cancel()
		err := c.callName(pctx, name, wire.MethodPing, nil, nil)
		var perr *peer.Error
		return err == nil || errors.As(err, &perr) && perr.Code == peer.CodeBadRequest, nil
	})
	select {
	case r := <-shared:
		return r.Val.(bool)
	case <-ctx.Done():
		return false
	}
}

// callRawName calls a method whose reply is a peer.RawReply on a member
// (see peer.Node.CallRaw), ending as callName does.
func (c *cluster) callRawName(ctx context.Context, name string, m peer.Method, req, head any, values func(io.Reader, int) error) error {
	p, life, err := c.member(name)
	if err != nil {
		return err
	}
	ctx, stop := whileAlive(ctx, life)
	defer stop()
	return goneErr(c.wire.CallRaw(ctx, p.addr, p.name, m, req, head, values), name, life)
}

// member returns the alive member called name, and the context that its
// departure ends.
func (c *cluster) member(name string) (peerInfo, context.Context, error) {
	c.mu.RLock()
	p, ok := c.members[name]
	life := c.lives[name].ctx
	c.mu.RUnlock()
	if !ok || life == nil {
		return peerInfo{}, nil, &peer.Error{Code: peer.CodeUnavailable, Msg: "mesh: " + name + " is not an alive member"}
	}
	return p, life, nil
}

// whileMember returns a context that ends with ctx or once name leaves
// the alive members, whichever comes first, and the function that
// releases it; ok is false, and nothing is to be released, where name is
// not an alive member now.
func (c *cluster) whileMember(ctx context.Context, name string) (_ context.Context, release func(), ok bool) {
	_, life, err := c.member(name)
	if err != nil {
		return nil, nil, false
	}
	ctx, release = whileAlive(ctx, life)
	return ctx, release, true
}

// whileAlive returns a context that ends with ctx or with life, whichever
// ends first, and the function that releases it.
func whileAlive(ctx, life context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(life, cancel)
	return ctx, func() {
		unhook()
		cancel()
	}
}

// goneErr returns err, or where the member called name left the mesh
// during the call, an error that says so.
func goneErr(err error, name string, life context.Context) error {
	if err != nil && life.Err() != nil {
		return &peer.Error{Code: peer.CodeUnavailable, Msg: "mesh: " + name + " left the mesh during the call"}
	}
	return err
}

// setMembersLocked publishes the alive members: a member no longer
// among them has its life ended, which ends the calls to it; a new one
// gets a life. The caller holds c.mu.
func (c *cluster) setMembersLocked(alive map[string]peerInfo) {
	if c.lives == nil {
		c.lives = make(map[string]memberLife, len(alive))
	}
	for name, life := range c.lives {
		if _, ok := alive[name]; !ok {
			life.end()
			delete(c.lives, name)
		}
	}
	for name := range alive {
		if _, ok := c.lives[name]; !ok {
			ctx, end := context.WithCancel(context.Background())
			c.lives[name] = memberLife{ctx: ctx, end: end}
		}
	}
	c.members = alive
}

// startCluster listens for peers, joins the gossip and starts the loop
// that follows membership.
func (n *Node) startCluster(cc ClusterConfig) error {
	if cc.TLS == nil {
		return fmt.Errorf("%w: a mesh needs TLS certificates from the cluster CA", ErrConfig)
	}
	peerAddr := cc.PeerAddr
	if peerAddr == "" {
		host, _, err := net.SplitHostPort(cc.GossipAddr)
		if err != nil {
			return fmt.Errorf("%w: gossip address %q: %v", ErrConfig, cc.GossipAddr, err)
		}
		peerAddr = net.JoinHostPort(host, "7947")
	}
	pn, err := peer.Listen(peer.Config{
		Name: n.cfg.Name, ListenAddr: peerAddr, TLS: cc.TLS, RequestTimeout: cc.FetchTimeout,
		MaxRequestMemory: cc.MaxPeerMemory,
		MaxFrame:         cc.MaxFrame,
		Logger:           n.cfg.Logger.With().Str("part", "peer").Logger(),
	}, peerDispatch(n.peerHandlers(cc.handlers)))
	if err != nil {
		return fmt.Errorf("mesh: peer transport: %w", err)
	}
	serving := cc.MaxPeerMemory
	if serving <= 0 {
		serving = peer.DefaultMaxRequestMemory
	}
	c := &cluster{cfg: cc, wire: pn, serving: budget.New(serving), members: make(map[string]peerInfo), recheck: make(chan struct{}, 1)}
	c.relays.budget = c.serving
	c.parts.budget = c.serving
	n.cluster = c
	// A node that is to take the mesh's ring shape joins advertising no
	// dataset, so that no peer routes to it by a shape it has not chosen,
	// and advertises them once it has.
	meta := member.Meta{PeerAddr: pn.Addr(), Capacity: n.cfg.CacheSize, Build: cc.Build}
	if cc.Partitions > 0 {
		c.partitions.Store(int64(cc.Partitions))
		meta.Datasets = n.datasetsMeta(cc.Partitions)
	}
	ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
	defer cancel()
	list, err := member.Join(ctx, member.Config{
		Name: n.cfg.Name, BindAddr: cc.GossipAddr, Seeds: cc.Seeds, Key: cc.GossipKey, Meta: meta,
		Profile: cc.Profile, Logger: n.cfg.Logger.With().Str("part", "gossip").Logger(),
	})
	if err != nil {
		pn.Close()
		return fmt.Errorf("mesh: gossip: %w", err)
	}
	if cc.Partitions == 0 {
		parts := n.takeMeshShape(list.Members(), cc.Replicas)
		c.partitions.Store(int64(parts))
		meta.Datasets = n.datasetsMeta(parts)
		// ErrBroadcast: the meta is in force here, and gossip carries it on.
		if err := list.UpdateMeta(meta); err != nil && !errors.Is(err, member.ErrBroadcast) {
			_ = list.Close()
			pn.Close()
			return fmt.Errorf("mesh: gossip: %w", err)
		}
	}
	c.list = list
	n.refreshMembers()
	n.goBackground(n.followMembers)
	return nil
}

// followMembers rebuilds the rings and the leader on membership events,
// and when asked to (cluster.recheck), until the node closes. The events
// already queued behind one are read with it and answered by one refresh,
// which reads the membership as it is: a node that joins a mesh of a
// thousand hears of every member at once, and a refresh of each would
// cost it a thousand times the work.
func (n *Node) followMembers(ctx context.Context) {
	list := n.cluster.list
	for readEvents(ctx, list.Events(), n.cluster.recheck, list.Queued, n.sawMember) {
		n.refreshMembers()
	}
}

// recheckMembers has followMembers refresh the membership and the leader
// soon, without an event.
func (n *Node) recheckMembers() {
	select {
	case n.cluster.recheck <- struct{}{}:
	default: // one is due already
	}
}

// readEvents waits for an event, or for a wake, then reads the events
// queued behind it (as many as queued counts, at most maxEventsARefresh),
// handing each to seen. It reports false once ctx ends or events is
// closed.
func readEvents(ctx context.Context, events <-chan member.Event, wake <-chan struct{}, queued func() int, seen func(member.Event)) bool {
	read := func(wake <-chan struct{}) bool {
		select {
		case <-ctx.Done():
			return false
		case <-wake:
			return true
		case ev, ok := <-events:
			if ok {
				seen(ev)
			}
			return ok
		}
	}
	if !read(wake) {
		return false
	}
	for range min(queued(), maxEventsARefresh-1) {
		if !read(nil) {
			return false
		}
	}
	return true
}

// maxEventsARefresh bounds the events one refresh answers, so that a
// flood of them still refreshes the membership as it goes.
const maxEventsARefresh = 4096

// sawMember logs a membership event and counts it.
func (n *Node) sawMember(ev member.Event) {
	n.cluster.events.Add(1)
	n.cfg.Logger.Info().Str("member", ev.Member.Name).Str("event", ev.Kind.String()).Msg("membership")
}

// refreshMembers reads the alive members, rebuilds each dataset's ring
// over the members that serve the same version of it, and elects the
// leader: the lowest name among the alive members, if they are a majority
// of the expected cluster.
func (n *Node) refreshMembers() {
	c := n.cluster
	c.refreshes.Add(1)
	members := c.list.Members()
	alive := make(map[string]peerInfo, len(members))
	for _, m := range members {
		if m.State != member.Alive {
			continue
		}
		p := peerInfo{name: m.Name, addr: dialAddr(m.Meta.PeerAddr, m.Addr), capacity: m.Meta.Capacity, datasets: map[string]string{}}
		for _, d := range m.Meta.Datasets {
			if name, version, ok := strings.Cut(d, "="); ok {
				p.datasets[name] = version
			}
		}
		alive[m.Name] = p
	}
	c.mu.RLock()
	var joined []string
	for name := range alive {
		if _, known := c.members[name]; !known && name != n.cfg.Name {
			joined = append(joined, name)
		}
	}
	c.mu.RUnlock()

	if c.cfg.Partitions == 0 {
		n.followMeshShape(members)
	}
	parts := int(c.partitions.Load())
	var moved []*datasetState // datasets whose rings changed
	for _, ds := range n.ordered {
		var names []string
		want := sharedVersion(ds.manifest.Version, parts, c.cfg.Replicas)
		_, ours, _ := strings.Cut(want, "@")
		for _, p := range alive {
			v, ok := p.datasets[ds.name]
			switch version, theirs, _ := strings.Cut(v, "@"); {
			case p.name == n.cfg.Name:
				// Its own datasets, at the count it serves now: its gossip
				// meta lags a move to another until UpdateMeta has run.
				names = append(names, p.name)
			case !ok:
			case v == want:
				names = append(names, p.name)
			case version == ds.manifest.Version:
				n.cfg.Logger.Error().Str("dataset", ds.name).Str("peer", p.name).Str("theirs", ringShape(theirs)).
					Str("ours", ringShape(ours)).
					Msg("ring differs (--ring-partitions x --replicas): not sharing the dataset with this peer, whose owners of its samples are not ours")
			default:
				n.cfg.Logger.Error().Str("dataset", ds.name).Str("peer", p.name).Str("theirs", version).
					Str("ours", ds.manifest.Version).Msg("dataset version differs: not sharing it with this peer")
			}
		}
		cur := ds.ring.Load()
		same := cur != nil && cur.Config().Partitions == parts
		if same && slices.Equal(cur.Members(), sortedCopy(names)) {
			continue // this dataset's members did not change
		}
		var r *ring.Ring
		var err error
		if same {
			r, err = cur.Update(names) // O(changes x members), not New's O(members x log)
		} else {
			r, err = ring.New(ring.Config{Partitions: parts, Replicas: c.cfg.Replicas}, names)
			n.hashSamples(ds, parts)
		}
		if err != nil {
			n.cfg.Logger.Error().Err(err).Str("dataset", ds.name).Msg("ring")
			continue
		}
		logCapChange(n.cfg.Logger, ds.name, cur, r)
		logFewPartitions(n.cfg.Logger, ds.name, cur, r)
		ds.ring.Store(r)
		n.followRingScoresSoon(ds)
		moved = append(moved, ds)
	}
	// The members are published after the rings, so that whoever sees a
	// member (Members, callName) finds it in the rings too.
	c.mu.Lock()
	c.setMembersLocked(alive)
	c.mu.Unlock()
	if n.lead.leading() {
		// A member that joins (or comes back) may have missed orders.
		for _, name := range joined {
			n.sendNewestOrders(name)
		}
		for _, ds := range moved {
			n.sendRingScoresSoon(ds, false)
		}
	}

	leader := ""
	if len(alive) >= c.cfg.Expect/2+1 {
		for name := range alive {
			if leader == "" || name < leader {
				leader = name
			}
		}
	}
	old := n.lead.setLeader(leader)
	if leader != old {
		n.cfg.Logger.Info().Str("leader", leader).Str("was", old).Int("alive", len(alive)).Msg("leader changed")
	}
	yielding := n.lead.yieldingTo(time.Now())
	if _, seen := alive[yielding]; yielding != "" && seen {
		// The member given way to is here: it leads (its name is lower),
		// and once it goes, this node may take over at once.
		n.lead.endYield(yielding)
		yielding = ""
	}
	switch {
	case leader == n.cfg.Name && !n.lead.leading() && yielding == "" && n.lead.startTakeover():
		n.goBackground(func(ctx context.Context) {
			defer n.lead.endTakeover()
			n.takeover(ctx)
			n.lead.turn.Lock()
			lead := n.lead.leader() == n.cfg.Name && n.lead.yieldingTo(time.Now()) == ""
			if lead {
				n.lead.setLeading(true)
			} else {
				n.stepDown()
			}
			n.lead.turn.Unlock()
			if lead {
				n.prepareFirstOrders()
				for _, ds := range n.ordered {
					n.sendRingScoresSoon(ds, true)
				}
			}
		})
	case leader != n.cfg.Name && n.lead.leading():
		n.stepDown()
	}
	for _, js := range n.allJobs() {
		js.book.Wake()
	}
	n.kickReconcile()
}

// sendNewestOrders sends a member the newest order of every job, in the
// background; installing is idempotent, so a member that has it already
// ignores it.
func (n *Node) sendNewestOrders(name string) {
	for _, js := range n.allJobs() {
		for _, pub := range js.book.Current() {
			if pub.Part != "" {
				continue // a new leader's part of an order it could not adopt whole
			}
			n.sendEach([]string{name}, wire.MethodPublish, pub) // in pieces if larger than a frame
		}
	}
}

// stepDown drops the leader's state; the new leader rebuilds it.
func (n *Node) stepDown() {
	n.lead.setLeading(false)
	for _, js := range n.allJobs() {
		js.setLeaderJob(nil)
	}
	for _, ds := range n.ordered {
		ds.first.Store(nil)
	}
	n.cfg.Logger.Info().Msg("no longer leading")
}

// dialAddr turns a peer's advertised QUIC address into one to dial: an
// unspecified host is replaced by the host it gossips from.
func dialAddr(advertised, gossip string) string {
	host, port, err := net.SplitHostPort(advertised)
	if err != nil {
		return advertised
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if gh, _, err := net.SplitHostPort(gossip); err == nil {
			host = gh
		}
	}
	return net.JoinHostPort(host, port)
}

// peerHandler serves one method of the peer protocol: body is the
// request, already checked by the transport (see peer.Handler).
type peerHandler func(ctx context.Context, from string, body []byte) (any, error)

// serve adapts a handler of one request type to peerHandler: it decodes
// the body into a new Req and calls fn with it.
func serve[Req any](fn func(ctx context.Context, from string, req *Req) (any, error)) peerHandler {
	return func(ctx context.Context, from string, body []byte) (any, error) {
		var req Req
		if err := decode(body, &req); err != nil {
			return nil, err
		}
		return fn(ctx, from, &req)
	}
}

// noReply adapts a handler that answers only with an error.
func noReply[Req any](fn func(req *Req) error) peerHandler {
	return serve(func(_ context.Context, _ string, req *Req) (any, error) { return nil, fn(req) })
}

// peerHandlers is the node's side of the peer protocol, one handler per
// method of package wire, built once when the node joins a mesh; edit,
// if set, may change them (ClusterConfig.handlers).
func (n *Node) peerHandlers(edit func(*Node, map[peer.Method]peerHandler)) map[peer.Method]peerHandler {
	h := map[peer.Method]peerHandler{
		wire.MethodFetch:       serve(n.serveFetch),
		wire.MethodFetchStream: serve(n.serveFetchStream),
		wire.MethodOffer:       n.serveOffer,
		wire.MethodReport:      serve(n.serveReport),
		wire.MethodJoin:        noReply(n.leaderJoin),
		wire.MethodDone:        serve(n.serveDone),
		wire.MethodReportDone:  serve(n.serveReportDone),
		wire.MethodReset:       noReply(n.leaderReset),
		wire.MethodPublish:     serve(n.servePublish),
		wire.MethodPublishPart: serve(n.servePublishPart),
		wire.MethodRelay:       serve(n.serveRelay),
		wire.MethodScores:      noReply(n.applyScores),
		wire.MethodReplicate:   noReply(n.applyReplica),
		wire.MethodState:       serve(n.serveState),
		wire.MethodGetTable:    serve(n.serveGetTable),
		wire.MethodGetOrder:    serve(n.serveGetOrder),
		wire.MethodGetPart:     serve(n.serveGetPart),
		wire.MethodResident:    noReply(n.leaderResident),
		wire.MethodPing:        func(context.Context, string, []byte) (any, error) { return nil, nil },
	}
	if edit != nil {
		edit(n, h)
	}
	return h
}

// peerDispatch implements peer.Handler over handlers: each method's
// handler, or CodeBadRequest for a method it does not know.
func peerDispatch(handlers map[peer.Method]peerHandler) peer.HandlerFunc {
	return func(ctx context.Context, from string, m peer.Method, body []byte) (any, error) {
		h, ok := handlers[m]
		if !ok {
			return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("unknown method %d", m)}
		}
		return h(ctx, from, body)
	}
}

// serveReport merges minibatch losses forwarded by a peer, on the leader.
func (n *Node) serveReport(_ context.Context, from string, req *wire.ReportReq) (any, error) {
	if !n.lead.leading() {
		return nil, errNotLeader
	}
	if err := n.leaderReport(req.Batches); err != nil {
		n.cfg.Logger.Warn().Err(err).Str("from", from).Msg("refused part of a forwarded report")
	}
	return nil, nil
}

// servePublish installs an order the leader published, once checked; a
// retirement drops its job.
func (n *Node) servePublish(_ context.Context, from string, p *wire.PublishMsg) (any, error) {
	if err := n.checkPublish(p); err != nil {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: err.Error()}
	}
	if p.Part != "" {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("%s's part of the order for %s epoch %d sent as a whole order", p.Part, p.Dataset, p.Epoch)}
	}
	return n.installPublished(from, p)
}

// servePublishPart installs this node's part of an order, from a relay
// that holds the whole (wire.PublishMsg.Part), once checked.
func (n *Node) servePublishPart(_ context.Context, from string, p *wire.PublishMsg) (any, error) {
	if err := n.checkPublish(p); err != nil {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: err.Error()}
	}
	if p.Part != n.cfg.Name || p.Epoch < 0 || p.Retired {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("a part of the order for %s epoch %d for %q sent to %s", p.Dataset, p.Epoch, p.Part, n.cfg.Name)}
	}
	return n.installPublished(from, p)
}

// installPublished installs a checked order, or part of one, from member
// from; a retirement drops its job.
func (n *Node) installPublished(from string, p *wire.PublishMsg) (any, error) {
	n.lead.observe(p.Term)
	ds, _ := n.dataset(p.Dataset)
	if p.Retired {
		if js := ds.lookupJob(p.Job); js != nil {
			n.installOrder(js, p)
		} else {
			ds.noteRetired(p.Job, p.Gen)
		}
		return nil, nil
	}
	if p.Gen < ds.retiredGen(p.Job) {
		// An order from before the job's retirement, delayed: the job is
		// over and must not start again here.
		n.cfg.Logger.Debug().Str("dataset", p.Dataset).Str("job", displayJob(p.Job)).Uint64("gen", p.Gen).Str("from", from).Msg("order of a retired job ignored")
		return nil, nil
	}
	js, err := n.job(ds, p.Job, true)
	if err != nil {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: err.Error()}
	}
	if n.installOrder(js, p) {
		if p.Part != "" {
			js.parts.Add(1)
		}
		n.cfg.Logger.Debug().Str("dataset", p.Dataset).Str("job", displayJob(p.Job)).Int("epoch", p.Epoch).Uint64("term", p.Term).Bool("part", p.Part != "").Int("below", len(p.Below)).Str("from", from).Msg("order installed")
	}
	return nil, nil
}

// installOrder installs an order of a job in its book, and drops the job
// if the order retires it. It reports whether the order was new.
func (n *Node) installOrder(js *jobState, p *wire.PublishMsg) bool {
	if !js.book.Install(p) {
		return false
	}
	if p.Retired {
		js.ds.noteRetired(js.name, p.Gen)
		n.dropJob(js)
	}
	return true
}

// serveState tells a new leader what this node knows of every job and
// score table. A node that leads, or takes over, in its own view gives
// way first to an asker of a lower name (see giveWay).
func (n *Node) serveState(ctx context.Context, from string, req *wire.StateReq) (any, error) {
	n.lead.observe(req.Term)
	if from < n.cfg.Name && n.lead.leader() == n.cfg.Name {
		n.giveWay(ctx, from)
	}
	resp := wire.StateResp{MaxTerm: n.lead.highest()}
	for _, js := range n.allJobs() {
		resp.Jobs = append(resp.Jobs, js.state())
		resp.Tables = append(resp.Tables, js.tableInfo())
	}
	return &resp, nil
}

// serveGetTable sends a new leader this node's copy of a job's score
// table.
func (n *Node) serveGetTable(_ context.Context, _ string, req *wire.GetTableReq) (any, error) {
	js, err := n.knownJob(req.Dataset, req.Job)
	if err != nil {
		return nil, &peer.Error{Code: peer.CodeNotFound, Msg: err.Error()}
	}
	b, term, err := js.scores.Marshal()
	if err != nil {
		return nil, err
	}
	return &wire.ReplicateReq{Dataset: js.ds.name, Job: js.name, Version: js.ds.manifest.Version, Term: term, Table: b}, nil
}

// serveGetOrder sends a new leader the newest order of a job this node
// holds, or a node whose ranks wait the order of an epoch (Exact). An
// exact order that does not fit a frame goes to the asker in pieces, as
// a publish, in the background; the answer then says it is on its way.
func (n *Node) serveGetOrder(_ context.Context, from string, req *wire.GetOrderReq) (any, error) {
	js, err := n.knownJob(req.Dataset, req.Job)
	if err != nil {
		return nil, &peer.Error{Code: peer.CodeNotFound, Msg: err.Error()}
	}
	p := js.book.Newest()
	if req.Exact {
		p = js.book.Kept(req.Epoch)
	}
	if req.Exact && req.Settled && js.recentlyPublished(req.Epoch, n.cfg.Cluster.FetchTimeout) {
		return nil, &peer.Error{Code: peer.CodeNotFound, Msg: "order just published: on its way"}
	}
	if p == nil {
		return nil, &peer.Error{Code: peer.CodeNotFound, Msg: "no order"}
	}
	if p.Part != "" {
		return nil, &peer.Error{Code: peer.CodeNotFound, Msg: "only this peer's part of the order"}
	}
	if req.Exact {
		body, err := p.Encode()
		if err != nil {
			return nil, err
		}
		if len(body) > n.cfg.Cluster.frameRoom() {
			n.relayEach([]string{from}, wire.MethodPublish, body, func() {})
			return nil, &peer.Error{Code: peer.CodeNotFound, Msg: "order larger than a frame: sent in pieces"}
		}
		return msgpack.RawMessage(body), nil
	}
	return p, nil
}

// decode unmarshals a request body handed to servePeer, by v's own
// UnmarshalMsgpack where it has one (a fetch's request: straight from the
// bytes). The transport has checked it with peer.CheckMsgpack already
// (see peer.Handler), so msgpack's decoder does not walk it again here
// (an UnmarshalMsgpack may, for a layout it does not read itself).
func decode(body []byte, v any) error {
	var err error
	if u, ok := v.(msgpack.Unmarshaler); ok {
		err = u.UnmarshalMsgpack(body)
	} else {
		err = msgpack.Unmarshal(body, v)
	}
	if err != nil {
		return &peer.Error{Code: peer.CodeBadRequest, Msg: "mesh: " + err.Error()}
	}
	return nil
}

// toLeader sends a request to the leader, or serves it here if this node
// leads.
func (n *Node) toLeader(ctx context.Context, m peer.Method, req any) error {
	return n.askLeader(ctx, m, req, nil)
}

// askLeader is toLeader that decodes the leader's answer into reply
// (nil: none is wanted). Of the methods the leader serves here only a
// done (reply *wire.DoneResp) answers.
func (n *Node) askLeader(ctx context.Context, m peer.Method, req, reply any) error {
	if n.lead.leading() {
		switch r := req.(type) {
		case *wire.JoinReq:
			return n.leaderJoin(r)
		case *wire.DoneReq:
			resp, err := n.leaderDone(r)
			if out, ok := reply.(*wire.DoneResp); ok && out != nil && resp != nil {
				*out = *resp // reply may be a nil *wire.DoneResp: no answer wanted
			}
			return err
		case *wire.ResetReq:
			return n.leaderReset(r)
		}
		return fmt.Errorf("mesh: no local handler for method %d", m)
	}
	leader := n.lead.leader()
	if leader == "" || n.cluster == nil {
		return errNoLeader
	}
	if leader == n.cfg.Name {
		return &peer.Error{Code: peer.CodeUnavailable, Msg: "mesh: this node is taking over as leader"}
	}
	err := n.cluster.callName(ctx, leader, m, req, reply)
	if errors.Is(err, ErrWorldMismatch) || peer.CodeOf(err) == codeWorldMismatch {
		return fmt.Errorf("%w: %s", ErrWorldMismatch, strings.TrimPrefix(err.Error(), "peer: "))
	}
	return err
}

// publish sends an epoch's order to every other alive member in the
// background, retrying a few times; in a mesh of more than RelayFanout
// other members, or where the order does not fit a frame (MaxFrame),
// through relays (see relayEach), which send it in pieces. held, unless
// nil, is called once: when a member has answered that it holds the
// whole order, or when every send has ended without one (at once where
// there is no other member to send to).
func (n *Node) publish(p *wire.PublishMsg, held func()) {
	if held == nil {
		held = func() {}
	}
	if n.cluster == nil {
		held()
		return
	}
	var names []string
	for _, m := range n.cluster.alive() {
		if m.name != n.cfg.Name {
			names = append(names, m.name)
		}
	}
	if len(names) == 0 {
		held()
		return
	}
	body, err := p.Encode() // once for every member
	if err != nil {
		n.cfg.Logger.Error().Err(err).Msg("encoding an order")
		held()
		return
	}
	if len(names) > n.cfg.Cluster.RelayFanout || len(body) > n.cfg.Cluster.frameRoom() {
		n.relayEach(names, wire.MethodPublish, body, held)
		return
	}
	sent := firstDelivery(len(names), held)
	for _, name := range names {
		n.goBackground(func(ctx context.Context) {
			sent(n.sendWithRetries(ctx, name, wire.MethodPublish, msgpack.RawMessage(body)))
		})
	}
}

// firstDelivery returns the report of one of sends sends: fn is called
// once, at the first that delivered, or once all sends have ended
// without one.
func firstDelivery(sends int, fn func()) func(delivered bool) {
	fn = sync.OnceFunc(fn)
	var left atomic.Int32
	left.Store(int32(sends))
	return func(delivered bool) {
		if delivered || left.Add(-1) == 0 {
			fn()
		}
	}
}

// sendEach sends msg to every named member in the background, encoded once
// for all: a score table of a large dataset is megabytes, and encoding it
// per member cost more than the epoch (publish does the same for orders).
// A message of a relayable method that does not fit a frame goes through
// relays, in pieces, as an order does.
func (n *Node) sendEach(names []string, m peer.Method, msg any) {
	if len(names) == 0 {
		return
	}
	if raw, err := msgpack.Marshal(msg); err == nil {
		if len(raw) > n.cfg.Cluster.frameRoom() && relayable(m) {
			n.relayEach(names, m, raw, func() {}) // in pieces
			return
		}
		msg = msgpack.RawMessage(raw)
	}
	for _, name := range names {
		n.sendInBackground(name, m, msg)
	}
}

// sendInBackground sends one message to a member in the background (see
// sendWithRetries).
func (n *Node) sendInBackground(name string, m peer.Method, msg any) {
	n.goBackground(func(ctx context.Context) { n.sendWithRetries(ctx, name, m, msg) })
}

// sendTries is how often a message to one member is tried before it is
// given up (sendWithRetries, and a relayed order's last member).
const sendTries = 5

// sendWithRetries sends one message to a member, retrying up to
// sendTries times with a growing pause unless the member refuses it as
// bad or leaves the mesh (a member that comes back is sent the newest
// orders, and changed tables are sent again). It reports whether the
// member answered it.
func (n *Node) sendWithRetries(ctx context.Context, name string, m peer.Method, msg any) bool {
	return n.sendTo(ctx, name, m, msg) == nil
}

// sendTo is sendWithRetries, with the last error: the refusal
// (peer.CodeBadRequest) where the member refused the message.
func (n *Node) sendTo(ctx context.Context, name string, m peer.Method, msg any) error {
	ctx, release, ok := n.cluster.whileMember(ctx, name) // the pauses too end when it leaves
	if !ok {
		return fmt.Errorf("mesh: %s is not a member", name)
	}
	defer release()
	var err error
	for attempt := 0; attempt < sendTries; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, n.cfg.Cluster.FetchTimeout)
		err = n.cluster.callName(cctx, name, m, msg, nil)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if peer.CodeOf(err) == peer.CodeBadRequest {
			n.cfg.Logger.Warn().Err(err).Str("peer", name).Msg("message refused")
			return err
		}
		if !ctxsleep.Sleep(ctx, time.Duration(attempt+1)*n.cfg.Cluster.RetryEvery) {
			return ctx.Err()
		}
	}
	return err
}

// GossipAddr is the address other peers use as a seed; "" standalone.
func (n *Node) GossipAddr() string {
	if n.cluster == nil {
		return ""
	}
	return n.cluster.list.Addr()
}

// Members returns the names of the alive members this node sees, sorted.
func (n *Node) Members() []string {
	if n.cluster == nil {
		return []string{n.cfg.Name}
	}
	var out []string
	for _, p := range n.cluster.alive() {
		out = append(out, p.name)
	}
	return out
}

// Sharing returns the members this node shares dataset name with (those
// in its ring of the dataset: the same version and ring shape), itself
// included, sorted: itself alone outside a mesh; nil for a dataset it
// does not serve, and before its first ring of it.
func (n *Node) Sharing(name string) []string {
	ds := n.datasets[name]
	switch {
	case ds == nil:
		return nil
	case n.cluster == nil:
		return []string{n.cfg.Name}
	}
	if r := ds.ring.Load(); r != nil {
		return r.Members()
	}
	return nil
}

// Leader returns the leader this node follows; "" while there is none.
func (n *Node) Leader() string { return n.lead.leader() }

// sharedVersion is what a node advertises for a dataset of version, and
// requires of a peer it shares the dataset with: the version, and where
// the node's ring is not of 271 partitions and 2 replicas (the shape
// earlier builds took by default) the ring's shape after it, "@16381x2".
// Peers of two shapes would compute two owner tables for one dataset and
// ask each other for samples the other does not hold, each reading
// through what it thinks it owns; a peer of another shape is left out of
// the dataset's ring, as one of another version is. 271x2 adds nothing,
// so that a peer of it shares with peers of earlier builds, which
// advertise the version alone for it (a peer of an earlier build with
// another shape cannot be told apart).
func sharedVersion(version string, partitions, replicas int) string {
	if partitions == ring.DefaultPartitions && replicas == ring.DefaultReplicas {
		return version
	}
	return fmt.Sprintf("%s@%dx%d", version, partitions, replicas)
}

// datasetsMeta lists the node's datasets as its gossip meta carries them
// for rings of partitions: name=sharedVersion.
func (n *Node) datasetsMeta(partitions int) []string {
	sets := make([]string, 0, len(n.ordered))
	for _, ds := range n.ordered {
		sets = append(sets, ds.name+"="+sharedVersion(ds.manifest.Version, partitions, n.cluster.cfg.Replicas))
	}
	return sets
}

// NewMeshPartitions is the ring partition count a node configured with
// none takes where no peer it joins advertises one: a new mesh's. It is
// ring.Advised for meshes of up to 256 peers.
const NewMeshPartitions = 16381

// takeMeshShape returns the partition count of a node configured with
// none (meshShape over members, NewMeshPartitions where they tell none)
// and logs where it came from.
func (n *Node) takeMeshShape(members []member.Member, replicas int) int {
	counts := meshShape(members, n.cfg.Name, replicas)
	if len(counts) == 0 {
		n.cfg.Logger.Info().Int("partitions", NewMeshPartitions).Int("replicas", replicas).
			Msg("ring partitions: no peer advertises a ring with these replicas, so this is a new mesh's count")
		return NewMeshPartitions
	}
	best := counts[0]
	ev := n.cfg.Logger.Info()
	if len(counts) > 1 {
		ev = n.cfg.Logger.Warn().Interface("advertised", counts)
	}
	ev.Int("partitions", best.Partitions).Int("peers", best.Peers).Int("replicas", replicas).
		Msg("ring partitions: the count the mesh's peers advertise (peers of another count are left out of the datasets' rings; --ring-partitions sets one)")
	return best.Partitions
}

// followMeshShape moves a node configured with no partition count to the
// count of a larger group of peers than its own, where members advertise
// one: peers started together that reached none of the running ones as
// they joined take a new mesh's count beside them, and the smaller group
// moves. Of two groups as large, the smaller count moves (as meshShape
// orders them), so every node of a count configured by none ends in one
// group; peers given a count keep theirs. The move rebuilds the datasets'
// rings at the new count (refreshMembers, called from it) and advertises
// it. Called from refreshMembers only.
func (n *Node) followMeshShape(members []member.Member) {
	c := n.cluster
	ours := int(c.partitions.Load())
	counts := meshShape(members, n.cfg.Name, c.cfg.Replicas)
	if len(counts) == 0 {
		return
	}
	with := 1 // this node
	for _, sc := range counts {
		if sc.Partitions == ours {
			with += sc.Peers
		}
	}
	best := counts[0]
	if best.Partitions == ours || best.Peers < with || best.Peers == with && best.Partitions < ours {
		return
	}
	n.cfg.Logger.Warn().Int("partitions", best.Partitions).Int("peers", best.Peers).Int("was", ours).Int("with", with).
		Msg("ring partitions: a larger group of the mesh's peers uses another count; taking theirs (--ring-partitions sets one)")
	c.partitions.Store(int64(best.Partitions))
	meta := c.list.Local().Meta
	meta.Datasets = n.datasetsMeta(best.Partitions)
	n.goBackground(func(context.Context) {
		// ErrBroadcast: the meta is in force here, and gossip carries it
		// on; ErrClosed: the node is closing.
		if err := c.list.UpdateMeta(meta); err != nil && !errors.Is(err, member.ErrBroadcast) && !errors.Is(err, member.ErrClosed) {
			n.cfg.Logger.Error().Err(err).Msg("advertising the ring's new partition count")
		}
	})
}

// shapeCount is a partition count and how many peers advertise it.
type shapeCount struct {
	Partitions int `json:"partitions"`
	Peers      int `json:"peers"`
}

// meshShape returns the partition counts the alive members other than
// self advertise for rings of replicas owners a sample, the count most
// of them advertise first (of two as many, the larger). A member
// advertises its shape after each dataset's version (sharedVersion); one
// that advertises a dataset's version alone, a peer of an earlier build
// or of the default shape, has 271 partitions and 2 replicas. Members that
// advertise no dataset (one still choosing its own) tell nothing.
func meshShape(members []member.Member, self string, replicas int) []shapeCount {
	by := map[int]int{}
	for _, m := range members {
		if m.Name == self || m.State != member.Alive || len(m.Meta.Datasets) == 0 {
			continue
		}
		_, v, _ := strings.Cut(m.Meta.Datasets[0], "=")
		if parts, reps, ok := parseShape(v); ok && reps == replicas {
			by[parts]++
		}
	}
	out := make([]shapeCount, 0, len(by))
	for p, k := range by {
		out = append(out, shapeCount{Partitions: p, Peers: k})
	}
	slices.SortFunc(out, func(a, b shapeCount) int {
		if a.Peers != b.Peers {
			return b.Peers - a.Peers
		}
		return b.Partitions - a.Partitions
	})
	return out
}

// parseShape reads the ring shape after a version that sharedVersion
// wrote: 271 x 2 for a version alone; ok is false for a shape it cannot
// read.
func parseShape(v string) (partitions, replicas int, ok bool) {
	_, shape, found := strings.Cut(v, "@")
	if !found {
		return ring.DefaultPartitions, ring.DefaultReplicas, true
	}
	p, r, _ := strings.Cut(shape, "x")
	partitions, err1 := strconv.Atoi(p)
	replicas, err2 := strconv.Atoi(r)
	return partitions, replicas, err1 == nil && err2 == nil && partitions > 0 && replicas > 0
}

// ringShape names a ring's shape as sharedVersion writes it, the default
// where it writes none.
func ringShape(shape string) string {
	if shape == "" {
		return fmt.Sprintf("%dx%d", ring.DefaultPartitions, ring.DefaultReplicas)
	}
	return shape
}

// logCapChange tells the operator when a membership change moved a
// dataset ring's bounded load (ring.Ring.Cap). The members at the old cap
// then hand on, or where it rose take back, about a partition each on top
// of the change's share of partitions: several times that share at 16
// partitions a peer in a mesh of hundreds (README, "Ownership"). Nothing
// is logged where no member was at the cap; it warns, with what to set,
// where the members at the cap are over a fifth of the share.
func logCapChange(log zerolog.Logger, dataset string, was, now *ring.Ring) {
	if was == nil || now == nil || was.Cap() == 0 || now.Cap() == 0 || was.Cap() == now.Cap() {
		return
	}
	atCap := was.AtCap()
	if atCap == 0 {
		return
	}
	peers := len(now.Members())
	share := float64(now.Config().Partitions) / float64(max(peers, len(was.Members())))
	ev, msg := log.Info(), "ring's bounded load changed: the peers at it move about a partition each besides this change's share"
	if float64(atCap) > share/5 {
		ev, msg = log.Warn().Int("advised", ring.Advised(peers)),
			msg+"; --ring-partitions of the advised count, the same on every peer, makes that small"
	}
	ev.Str("dataset", dataset).Int("cap", now.Cap()).Int("was", was.Cap()).Int("at_cap", atCap).
		Float64("share", share).Int("peers", peers).Msg(msg)
}

// logFewPartitions warns, once each time a dataset's ring grows into it,
// where the ring has too few partitions for its peers (ring.FewPartitions:
// from 8 peers, under a quarter of ring.Advised). A dead peer's data then
// goes unevenly to the survivors (with 271, a mesh of earlier builds, up
// to 2.5x the average share to one of 10, 3.9x of 16) and a join can move
// several times its share; the line names the count to set on every peer.
func logFewPartitions(log zerolog.Logger, dataset string, was, now *ring.Ring) {
	if now == nil {
		return
	}
	parts, peers := now.Config().Partitions, len(now.Members())
	if !ring.FewPartitions(parts, peers) || (was != nil && ring.FewPartitions(parts, len(was.Members()))) {
		return
	}
	log.Warn().Str("dataset", dataset).Int("partitions", parts).Int("peers", peers).Int("advised", ring.Advised(peers)).
		Msg("few ring partitions for this many peers: a dead peer's data goes unevenly to the survivors and a join can move several times its share; set --ring-partitions to the advised count on every peer (README, \"Ownership\")")
}

// sortedCopy returns names sorted, as ring.Ring.Members returns them.
func sortedCopy(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return out
}
