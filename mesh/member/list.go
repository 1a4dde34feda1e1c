package member

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"
)

// List is this node's membership view. Its methods are safe for concurrent
// use.
type List struct {
	name string
	addr string // advertised gossip address
	prof profile
	log  zerolog.Logger
	ml   *memberlist.Memberlist
	keys *memberlist.Keyring // nil without encryption
	ev   *eventQueue

	lifeMu  sync.Mutex // serializes UpdateMeta, Leave and Close
	closed  bool
	left    bool
	meta    Meta // guarded by lifeMu
	metaMu  sync.Mutex
	metaEnc []byte // what NodeMeta gossips; guarded by metaMu

	mu        sync.Mutex
	members   map[string]*entry
	pending   map[string]reclaim // names whose new address waits for the old one's death
	refused   map[string]bool    // peers whose meta was refused, logged once
	selfClaim string             // last address seen claiming our name, logged once

	seeds []string // other peers' gossip addresses, re-joined while not alive

	wake chan struct{} // nudges the reclaimer
	stop chan struct{}
	wg   sync.WaitGroup
}

type entry struct {
	m       Member
	leaving bool      // its last meta carried flagLeaving
	since   time.Time // when it became Dead or Left
}

// reclaim is a node that announced itself under a known name from a new
// address while the old one was not yet reclaimable.
type reclaim struct {
	addr string
	seen time.Time
}

// Join creates the local node and joins the cluster through cfg.Seeds. It
// retries the seeds, pausing up to a second or two between rounds, until
// one answers or ctx ends; an attempt in flight when ctx ends may run on
// for up to the profile's TCP timeout. With no seeds but itself the node
// starts a cluster alone. On error nothing is left running.
func Join(ctx context.Context, cfg Config) (*List, error) {
	cfg.Seeds = slices.Clone(cfg.Seeds)
	cfg.Key = bytes.Clone(cfg.Key)
	if cfg.Name == "" {
		return nil, fmt.Errorf("%w: name is required", ErrConfig)
	}
	prof, err := lookupProfile(cfg.Profile)
	if err != nil {
		return nil, err
	}
	metaEnc, err := cfg.Meta.encode(0)
	if err != nil {
		return nil, err
	}
	if cfg.BindAddr == "" {
		cfg.BindAddr = ":7946"
	}
	host, portStr, err := net.SplitHostPort(cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("%w: bind address %q: %w", ErrConfig, cfg.BindAddr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%w: bind port %q", ErrConfig, portStr)
	}
	if host == "" {
		host = "0.0.0.0"
	}

	l := &List{
		name:    cfg.Name,
		prof:    prof,
		log:     cfg.Logger.With().Str("member", cfg.Name).Logger(),
		ev:      newEventQueue(maxQueuedEvents),
		meta:    cfg.Meta,
		metaEnc: metaEnc,
		members: make(map[string]*entry),
		pending: make(map[string]reclaim),
		refused: make(map[string]bool),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
	l.meta.Version = MetaVersion
	l.meta.Datasets = slices.Clone(l.meta.Datasets)

	mc := memberlist.DefaultLANConfig()
	prof.apply(mc)
	mc.Name = cfg.Name
	mc.BindAddr = host
	mc.BindPort = int(port)
	mc.AdvertisePort = int(port) // memberlist fills it from BindPort only for port 0
	a := &adapter{l: l}
	mc.Delegate = a
	mc.Events = a
	mc.Conflict = a
	mc.Alive = a
	mc.Logger = log.New(logWriter{l.log}, "", 0)
	if len(cfg.Key) > 0 {
		if err := validKey(cfg.Key); err != nil {
			return nil, err
		}
		kr, err := memberlist.NewKeyring(nil, cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrKey, err)
		}
		l.keys = kr
		mc.Keyring = kr
	} else {
		l.log.Warn().Msg("gossip is not encrypted: no key configured")
	}

	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("member: start gossip on %s: %w", cfg.BindAddr, err)
	}
	l.ml = ml
	l.addr = l.Local().Addr // Create reported the local node's Join
	if l.addr == "" {
		l.addr = ml.LocalNode().Address()
	}
	seeds := make([]string, 0, len(cfg.Seeds))
	for _, s := range cfg.Seeds {
		if s != "" && s != l.addr && s != cfg.BindAddr {
			seeds = append(seeds, s)
		}
	}
	l.seeds = seeds
	l.wg.Add(3)
	go l.ev.pump(l.stop, &l.wg)
	go l.reclaimer()
	go l.reconnector()
	if len(seeds) == 0 {
		l.log.Info().Str("addr", l.addr).Str("profile", prof.name).Msg("started a new cluster")
		return l, nil
	}
	backoff := 100 * time.Millisecond
	for {
		n, err := ml.Join(seeds)
		if n > 0 {
			l.log.Info().Str("addr", l.addr).Str("profile", prof.name).Int("seeds_answered", n).
				Int("members", len(l.Members())).Msg("joined")
			return l, nil
		}
		l.log.Debug().Err(err).Strs("seeds", seeds).Msg("join attempt failed")
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = l.Close()
			return nil, fmt.Errorf("%w: %v: %w", ErrJoin, err, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, prof.joinBackoff)
	}
}

// Addr returns the advertised gossip address, host:port.
func (l *List) Addr() string { return l.addr }

// Events returns the membership events, in the order this node saw them.
// The first is the local node's own EventJoin. The channel is closed by Close.
//
// Delivery never blocks gossip: memberlist's callbacks append to a queue
// that a goroutine drains into the channel. The queue holds up to 65,536
// events; beyond that the oldest is dropped and counted (Dropped), so a
// consumer that stops reading loses history, not liveness. Members and
// All are always current regardless.
func (l *List) Events() <-chan Event { return l.ev.out }

// Queued returns how many events wait to be read from Events: a lower
// bound, since an event on its way to the channel may be missed. Each of
// them has changed Members and All already, so a reader that acts on the
// membership as it is, not on each event, may read them all and act once:
// a node that joins a cluster of n hears of n members at once.
func (l *List) Queued() int { return l.ev.queued() }

// Dropped returns how many events were dropped because nobody read them.
func (l *List) Dropped() uint64 { return l.ev.droppedCount() }

// Members returns the alive members, the local node included, sorted by
// name.
func (l *List) Members() []Member {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Member, 0, len(l.members))
	for _, e := range l.members {
		if e.m.State == Alive {
			out = append(out, cloneMember(e.m))
		}
	}
	return sortMembers(out)
}

// All returns every member this node knows, dead and left ones included
// until memberlist forgets them, sorted by name.
func (l *List) All() []Member {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Member, 0, len(l.members))
	for name, e := range l.members {
		if e.m.State != Alive && time.Since(e.since) > l.prof.deadKeep {
			delete(l.members, name)
			continue
		}
		out = append(out, cloneMember(e.m))
	}
	return sortMembers(out)
}

// Local returns the local node.
func (l *List) Local() Member {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.members[l.name]; ok {
		return cloneMember(e.m)
	}
	return Member{Name: l.name, Addr: l.addr, State: Alive}
}

// UpdateMeta replaces the local node's metadata and gossips it. It returns
// once the update has been gossiped or, with ErrBroadcast, after a
// profile-dependent wait (the new Meta is in force locally either way).
// After Leave or Close it fails with ErrClosed.
func (l *List) UpdateMeta(m Meta) error {
	enc, err := m.encode(0)
	if err != nil {
		return err
	}
	l.lifeMu.Lock()
	defer l.lifeMu.Unlock()
	if l.closed || l.left {
		return ErrClosed
	}
	m.Version = MetaVersion
	m.Datasets = slices.Clone(m.Datasets)
	l.meta = m
	l.setMetaEnc(enc)
	if err := l.ml.UpdateNode(l.prof.broadcast); err != nil {
		return fmt.Errorf("%w: %w", ErrBroadcast, err)
	}
	return nil
}

func (l *List) setMetaEnc(b []byte) {
	l.metaMu.Lock()
	l.metaEnc = b
	l.metaMu.Unlock()
}

// Leave announces a graceful departure, so that peers report EventLeave
// rather than EventFail, and waits up to timeout (0 means 5 s) for the
// announcement to be gossiped. The node keeps answering gossip until
// Close, which should follow. Leave is idempotent.
//
// memberlist does not tell its callbacks whether a node left or died
// (hashicorp/memberlist#293), so the leaving node first gossips its meta
// with a leaving flag, then memberlist's leave message; a peer that missed
// the flag reports EventFail.
func (l *List) Leave(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = defaultLeaveTimeout
	}
	deadline := time.Now().Add(timeout)
	l.lifeMu.Lock()
	defer l.lifeMu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.left {
		return nil
	}
	l.left = true
	enc, err := l.meta.encode(flagLeaving)
	if err != nil {
		return err // cannot happen: l.meta encoded before
	}
	l.setMetaEnc(enc)
	if err := l.ml.UpdateNode(timeout / 2); err != nil {
		l.log.Debug().Err(err).Msg("leaving flag not confirmed; peers may report a failure")
	}
	if err := l.ml.Leave(max(time.Until(deadline), time.Millisecond)); err != nil {
		return fmt.Errorf("%w: leave: %w", ErrBroadcast, err)
	}
	l.log.Info().Msg("left the cluster")
	return nil
}

// Close stops gossip and waits for this package's goroutines; the channel
// of Events is closed. It does not announce a departure: peers see a
// failure unless Leave came first. Close is idempotent.
func (l *List) Close() error {
	l.lifeMu.Lock()
	defer l.lifeMu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	err := l.ml.Shutdown()
	close(l.stop)
	l.wg.Wait()
	close(l.ev.out)
	if err != nil {
		return fmt.Errorf("member: shutdown: %w", err)
	}
	return nil
}

// InstallKey adds key to the keyring: it decrypts from now on. Rotation:
// InstallKey on every node, then UseKey on every node, then RemoveKey of
// the old key on every node.
func (l *List) InstallKey(key []byte) error {
	return l.keyOp(key, func(k []byte) error { return l.keys.AddKey(k) })
}

// UseKey makes an installed key the one this node encrypts with.
func (l *List) UseKey(key []byte) error {
	return l.keyOp(key, func(k []byte) error { return l.keys.UseKey(k) })
}

// RemoveKey drops key from the keyring; the key in use cannot be removed.
func (l *List) RemoveKey(key []byte) error {
	return l.keyOp(key, func(k []byte) error { return l.keys.RemoveKey(k) })
}

func (l *List) keyOp(key []byte, op func([]byte) error) error {
	if l.keys == nil {
		return ErrNoEncryption
	}
	if err := validKey(key); err != nil {
		return err
	}
	if err := op(bytes.Clone(key)); err != nil {
		return fmt.Errorf("%w: %w", ErrKey, err)
	}
	return nil
}

// reclaimer lets a node restarted under a known name on a new address
// back in. memberlist refuses the new address while the old one is alive
// or suspect ("conflicting address") and accepts it only once the old one
// has been dead for DeadNodeReclaimTime, but nothing makes the new node
// announce itself again at that moment. So a node that saw the conflict
// pulls the new node's state itself (a push/pull join to its address) once
// the old one is reclaimable.
func (l *List) reclaimer() {
	defer l.wg.Done()
	tick := time.NewTicker(l.prof.probeInterval)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		case <-l.wake:
		}
		for _, addr := range l.due() {
			if _, err := l.ml.Join([]string{addr}); err != nil {
				l.log.Debug().Err(err).Str("addr", addr).Msg("reclaim: new address did not answer")
			}
		}
	}
}

// reconnector re-joins, every profile.reconnect, the seeds that are not
// alive members and the members declared dead in the last ten minutes.
// memberlist gossips to dead members only briefly, so without this the
// two sides of a healed partition may stay apart; a join merges their
// views with one push-pull. Joins run in this goroutine, one at a time.
func (l *List) reconnector() {
	defer l.wg.Done()
	tick := time.NewTicker(l.prof.reconnect)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		if addrs := l.reconnectTargets(); len(addrs) > 0 {
			if n, err := l.ml.Join(addrs); n > 0 {
				l.log.Info().Int("answered", n).Msg("reconnected to peers outside the view")
			} else if err != nil {
				l.log.Debug().Err(err).Strs("addrs", addrs).Msg("reconnect attempt failed")
			}
		}
	}
}

func (l *List) reconnectTargets() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	alive := make(map[string]bool)
	var dead []string
	for _, e := range l.members {
		switch {
		case e.m.State == Alive:
			alive[e.m.Addr] = true
		case e.m.State == Dead && time.Since(e.since) < 10*time.Minute:
			dead = append(dead, e.m.Addr)
		}
	}
	var out []string
	for _, a := range append(slices.Clone(l.seeds), dead...) {
		if a != l.addr && !alive[a] && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// due returns the addresses to pull now and drops settled entries.
func (l *List) due() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for name, r := range l.pending {
		e, known := l.members[name]
		switch {
		case time.Since(r.seen) > l.prof.deadKeep:
			delete(l.pending, name) // the new node went quiet
		case known && e.m.State == Alive && e.m.Addr == r.addr:
			delete(l.pending, name) // settled
		case !known || (e.m.State != Alive && time.Since(e.since) > l.prof.reclaim+l.prof.probeInterval):
			out = append(out, r.addr)
		}
	}
	return out
}

func cloneMember(m Member) Member {
	m.Meta.Datasets = slices.Clone(m.Meta.Datasets)
	return m
}

func sortMembers(ms []Member) []Member {
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return ms
}

// logWriter sends memberlist's log lines to zerolog at debug level.
type logWriter struct{ log zerolog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Debug().Str("component", "memberlist").Msg(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// adapter implements memberlist's delegates for a List. memberlist calls
// the event, conflict and alive callbacks with its node lock held, so they
// must not block or call back into memberlist; they only update l's view
// and queue events.
type adapter struct{ l *List }

var (
	_ memberlist.Delegate         = (*adapter)(nil)
	_ memberlist.EventDelegate    = (*adapter)(nil)
	_ memberlist.ConflictDelegate = (*adapter)(nil)
	_ memberlist.AliveDelegate    = (*adapter)(nil)
)

// NodeMeta returns the encoded local meta; it never exceeds MaxMetaSize,
// which is memberlist's limit.
func (a *adapter) NodeMeta(limit int) []byte {
	a.l.metaMu.Lock()
	defer a.l.metaMu.Unlock()
	if len(a.l.metaEnc) > limit {
		return nil
	}
	return bytes.Clone(a.l.metaEnc)
}

func (a *adapter) NotifyMsg([]byte)                           {}
func (a *adapter) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (a *adapter) LocalState(join bool) []byte                { return nil }
func (a *adapter) MergeRemoteState(buf []byte, join bool)     {}

// NotifyAlive refuses peers whose meta this build cannot decode (another
// encoding version, garbage): they stay out of this node's view.
func (a *adapter) NotifyAlive(n *memberlist.Node) error {
	if _, _, err := decodeMeta(n.Meta); err != nil {
		l := a.l
		l.mu.Lock()
		first := !l.refused[n.Name]
		l.refused[n.Name] = true
		l.mu.Unlock()
		if first {
			l.log.Warn().Err(err).Str("peer", n.Name).Str("addr", n.Address()).Msg("refusing peer: unreadable meta")
		}
		return err
	}
	return nil
}

func (a *adapter) NotifyJoin(n *memberlist.Node) {
	meta, flags, _ := decodeMeta(n.Meta) // NotifyAlive has vetted it
	l := a.l
	l.mu.Lock()
	defer l.mu.Unlock()
	m := Member{Name: n.Name, Addr: n.Address(), Meta: meta, State: Alive}
	l.members[n.Name] = &entry{m: m, leaving: flags&flagLeaving != 0}
	delete(l.refused, n.Name)
	l.ev.push(Event{Kind: EventJoin, Member: cloneMember(m)})
}

func (a *adapter) NotifyUpdate(n *memberlist.Node) {
	meta, flags, _ := decodeMeta(n.Meta)
	l := a.l
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.members[n.Name]
	if !ok {
		e = &entry{}
		l.members[n.Name] = e
	}
	changed := !ok || !metaEqual(e.m.Meta, meta) || e.m.Addr != n.Address()
	e.m = Member{Name: n.Name, Addr: n.Address(), Meta: meta, State: Alive}
	e.leaving = flags&flagLeaving != 0
	if changed { // a change of the leaving flag alone is not news
		l.ev.push(Event{Kind: EventUpdate, Member: cloneMember(e.m)})
	}
}

func (a *adapter) NotifyLeave(n *memberlist.Node) {
	l := a.l
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.members[n.Name]
	if !ok {
		meta, _, _ := decodeMeta(n.Meta)
		e = &entry{m: Member{Name: n.Name, Addr: n.Address(), Meta: meta}}
		l.members[n.Name] = e
	}
	kind := EventFail
	e.m.State = Dead
	if e.leaving {
		kind, e.m.State = EventLeave, Left
	}
	e.since = time.Now()
	l.ev.push(Event{Kind: kind, Member: cloneMember(e.m)})
	if _, ok := l.pending[n.Name]; ok {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// NotifyConflict is called when existing's name is claimed from another
// address. It logs each claimed address once.
func (a *adapter) NotifyConflict(existing, other *memberlist.Node) {
	l := a.l
	claimed := other.Address()
	l.mu.Lock()
	defer l.mu.Unlock()
	if existing.Name == l.name {
		if l.selfClaim != claimed {
			l.selfClaim = claimed
			l.log.Warn().Str("claimed_addr", claimed).
				Msg("another node claims this node's name (a previous run not yet declared dead?)")
		}
		return
	}
	if r, ok := l.pending[existing.Name]; !ok || r.addr != claimed {
		l.log.Warn().Str("peer", existing.Name).Str("known_addr", existing.Address()).Str("claimed_addr", claimed).
			Msg("name claimed from a new address; admitting it once the old one is dead")
	}
	l.pending[existing.Name] = reclaim{addr: claimed, seen: time.Now()}
}

func metaEqual(a, b Meta) bool {
	return a.Version == b.Version && a.PeerAddr == b.PeerAddr && a.Capacity == b.Capacity &&
		a.Build == b.Build && slices.Equal(a.Datasets, b.Datasets)
}

// maxQueuedEvents bounds the event queue.
const maxQueuedEvents = 1 << 16

// eventQueue decouples memberlist's callbacks from the consumer of Events.
type eventQueue struct {
	mu      sync.Mutex
	q       []Event
	head    int
	max     int
	dropped uint64
	ready   chan struct{} // one token: the queue may be non-empty
	out     chan Event
}

func newEventQueue(max int) *eventQueue {
	return &eventQueue{max: max, ready: make(chan struct{}, 1), out: make(chan Event, 64)}
}

// push never blocks.
func (q *eventQueue) push(e Event) {
	q.mu.Lock()
	if len(q.q)-q.head >= q.max {
		q.q[q.head] = Event{}
		q.head++
		q.dropped++
	}
	q.q = append(q.q, e)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *eventQueue) pop() (Event, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.q) {
		q.q, q.head = q.q[:0], 0
		return Event{}, false
	}
	e := q.q[q.head]
	q.q[q.head] = Event{}
	q.head++
	if q.head > 1024 && q.head*2 > len(q.q) { // reclaim the consumed prefix
		q.q = q.q[:copy(q.q, q.q[q.head:])]
		q.head = 0
	}
	return e, true
}

// queued counts the events in the queue and in out; not one that pump
// holds between the two. An event counted stays readable: one dropped
// for room is replaced by the one pushed.
func (q *eventQueue) queued() int {
	q.mu.Lock()
	n := len(q.q) - q.head
	q.mu.Unlock()
	return n + len(q.out)
}

func (q *eventQueue) droppedCount() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}

// pump moves events to out until stop is closed.
func (q *eventQueue) pump(stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case <-stop:
			return
		case <-q.ready:
		}
		for {
			e, ok := q.pop()
			if !ok {
				break
			}
			select {
			case q.out <- e:
			case <-stop:
				return
			}
		}
	}
}
