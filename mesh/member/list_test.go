package member

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// recorder collects a List's events with the time each arrived.
type recorder struct {
	mu   sync.Mutex
	evs  []timedEvent
	done chan struct{}
}

type timedEvent struct {
	Event
	at time.Time
}

func record(l *List) *recorder {
	r := &recorder{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for e := range l.Events() {
			r.mu.Lock()
			r.evs = append(r.evs, timedEvent{e, time.Now()})
			r.mu.Unlock()
		}
	}()
	return r
}

// first returns the first event of kind about name.
func (r *recorder) first(kind EventKind, name string) (timedEvent, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.evs {
		if e.Kind == kind && e.Member.Name == name {
			return e, true
		}
	}
	return timedEvent{}, false
}

func (r *recorder) about(name string) []EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []EventKind
	for _, e := range r.evs {
		if e.Member.Name == name {
			out = append(out, e.Kind)
		}
	}
	return out
}

type node struct {
	*List
	rec *recorder
}

type opts struct {
	seeds []string
	key   []byte
	meta  Meta
}

func testMeta(name string, gen int) Meta {
	return Meta{PeerAddr: fmt.Sprintf("127.0.0.1:%d", 9000+gen), Capacity: int64(gen) << 30,
		Build: fmt.Sprintf("%s-build-%d", name, gen), Datasets: []string{"fashion-mnist=abc"}}
}

func start(t *testing.T, name string, o opts) *node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if o.meta.PeerAddr == "" {
		o.meta = testMeta(name, 1)
	}
	l, err := Join(ctx, Config{
		Name: name, BindAddr: "127.0.0.1:0", Seeds: o.seeds, Key: o.key, Meta: o.meta,
		Profile: "local", Logger: testLogger(t),
	})
	if err != nil {
		t.Fatalf("Join %s: %v", name, err)
	}
	n := &node{List: l, rec: record(l)}
	t.Cleanup(func() { n.Close() })
	return n
}

func testLogger(t *testing.T) zerolog.Logger {
	if testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	}
	return zerolog.Nop()
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testsupport.WaitFor(t, d, what, cond)
}

func names(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

func sees(n *node, want ...string) func() bool {
	return func() bool { return slices.Equal(names(n.Members()), want) }
}

// cluster starts nodes joined through the first one and waits until every
// node sees all of them.
func cluster(t *testing.T, key []byte, ns ...string) []*node {
	t.Helper()
	out := []*node{start(t, ns[0], opts{key: key})}
	for _, name := range ns[1:] {
		out = append(out, start(t, name, opts{seeds: []string{out[0].Addr()}, key: key}))
	}
	want := slices.Sorted(slices.Values(ns))
	for _, n := range out {
		waitFor(t, 5*time.Second, n.Local().Name+" sees everyone", sees(n, want...))
	}
	return out
}

func TestJoinSeesMembersAndMeta(t *testing.T) {
	t.Parallel()
	// The seed list of b includes itself and a dead address.
	a := start(t, "a", opts{})
	b := start(t, "b", opts{seeds: []string{"127.0.0.1:1", a.Addr()}})
	c := start(t, "c", opts{seeds: []string{a.Addr()}})
	all := []*node{a, b, c}
	for _, n := range all {
		waitFor(t, 5*time.Second, n.Local().Name+" sees a, b, c", sees(n, "a", "b", "c"))
	}
	for _, n := range all {
		for _, m := range n.Members() {
			want := testMeta(m.Name, 1)
			want.Version = MetaVersion
			if !metaEqual(m.Meta, want) || m.State != Alive {
				t.Errorf("%s sees %s as %+v, want meta %+v alive", n.Local().Name, m.Name, m, want)
			}
		}
		for _, o := range all {
			// The view can show a member before its event has been
			// delivered through the queue: wait for the event.
			waitFor(t, 3*time.Second, n.Local().Name+" gets a join event for "+o.Local().Name, func() bool {
				_, ok := n.rec.first(EventJoin, o.Local().Name)
				return ok
			})
		}
	}
	if l := a.Local(); l.Name != "a" || l.Addr != a.Addr() || l.State != Alive {
		t.Errorf("Local = %+v", l)
	}

	// A meta update reaches everyone as an Update event.
	m2 := testMeta("a", 2)
	if err := a.UpdateMeta(m2); err != nil {
		t.Fatal(err)
	}
	for _, n := range all {
		waitFor(t, 3*time.Second, n.Local().Name+" gets a's update", func() bool {
			e, ok := n.rec.first(EventUpdate, "a")
			return ok && e.Member.Meta.Build == m2.Build
		})
	}
	if got := a.Local().Meta.Build; got != m2.Build {
		t.Errorf("Local meta build = %q after update", got)
	}
}

// TestCrashDetected closes a node without Leave, as a crash would, and
// measures when each survivor declares it dead. It runs alone (not
// parallel) because it times failure detection.
func TestCrashDetected(t *testing.T) {
	ns := cluster(t, nil, "a", "b", "c", "d")
	victim := ns[3]
	t0 := time.Now()
	victim.Close()
	var worst time.Duration
	for _, n := range ns[:3] {
		waitFor(t, 10*time.Second, n.Local().Name+" reports d failed", func() bool {
			_, ok := n.rec.first(EventFail, "d")
			return ok
		})
		e, _ := n.rec.first(EventFail, "d")
		took := e.at.Sub(t0)
		worst = max(worst, took)
		t.Logf("%s: d failed after %v", n.Local().Name, took.Round(time.Millisecond))
		if _, ok := n.rec.first(EventLeave, "d"); ok {
			t.Errorf("%s reports a crash as a leave", n.Local().Name)
		}
		if slices.Contains(names(n.Members()), "d") {
			t.Errorf("%s still lists d alive", n.Local().Name)
		}
		if i := slices.IndexFunc(n.All(), func(m Member) bool { return m.Name == "d" }); i < 0 || n.All()[i].State != Dead {
			t.Errorf("%s: All() = %+v, want d dead", n.Local().Name, n.All())
		}
	}
	t.Logf("all survivors noticed the crash within %v (a figure, not asserted: DESIGN.md §8 aims at 2s)", worst.Round(time.Millisecond))
}

func TestLeaveIsNotFailure(t *testing.T) {
	t.Parallel()
	ns := cluster(t, nil, "a", "b", "c")
	c := ns[2]
	if err := c.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Leave(time.Second); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
	if err := c.UpdateMeta(testMeta("c", 2)); !errors.Is(err, ErrClosed) {
		t.Errorf("UpdateMeta after Leave = %v, want ErrClosed", err)
	}
	for _, n := range ns[:2] {
		waitFor(t, 3*time.Second, n.Local().Name+" reports c left", func() bool {
			_, ok := n.rec.first(EventLeave, "c")
			return ok
		})
		if _, ok := n.rec.first(EventFail, "c"); ok {
			t.Errorf("%s reports a leave as a failure", n.Local().Name)
		}
		if _, ok := n.rec.first(EventUpdate, "c"); ok {
			t.Errorf("%s reports the leaving flag as an update", n.Local().Name)
		}
		waitFor(t, time.Second, n.Local().Name+" drops c", sees(n, "a", "b"))
		i := slices.IndexFunc(n.All(), func(m Member) bool { return m.Name == "c" })
		if i < 0 || n.All()[i].State != Left {
			t.Errorf("%s: All() = %+v, want c left", n.Local().Name, n.All())
		}
	}
	if _, ok := c.rec.first(EventLeave, "c"); !ok {
		t.Error("the leaving node had no leave event for itself")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, open := <-c.Events(); open {
		// drained by the recorder; a receive on a closed channel reports !open
		t.Error("Events not closed by Close")
	}
	if err := c.Leave(time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("Leave after Close = %v", err)
	}
}

// TestRestartSameName restarts a crashed node under its name on a new port
// with new meta, both before and after the others declared it dead.
func TestRestartSameName(t *testing.T) {
	t.Parallel()
	for _, afterDetection := range []bool{false, true} {
		t.Run(fmt.Sprintf("after_detection=%v", afterDetection), func(t *testing.T) {
			ns := cluster(t, nil, "a", "b", "c")
			old := ns[2]
			oldAddr := old.Addr()
			old.Close()
			if afterDetection {
				for _, n := range ns[:2] {
					waitFor(t, 5*time.Second, n.Local().Name+" reports c failed", func() bool {
						_, ok := n.rec.first(EventFail, "c")
						return ok
					})
				}
			}
			t0 := time.Now()
			meta := testMeta("c", 2)
			c := start(t, "c", opts{seeds: []string{ns[0].Addr()}, meta: meta})
			if c.Addr() == oldAddr {
				t.Fatalf("restart reused %s", oldAddr)
			}
			for _, n := range append(ns[:2], c) {
				waitFor(t, 8*time.Second, n.Local().Name+" sees the new c", func() bool {
					i := slices.IndexFunc(n.Members(), func(m Member) bool { return m.Name == "c" })
					if i < 0 {
						return false
					}
					m := n.Members()[i]
					return m.Addr == c.Addr() && m.Meta.Build == meta.Build && sees(n, "a", "b", "c")()
				})
			}
			t.Logf("restarted c on %s (was %s) seen by all after %v", c.Addr(), oldAddr,
				time.Since(t0).Round(time.Millisecond))
		})
	}
}

func TestWrongKeyRefused(t *testing.T) {
	t.Parallel()
	k1 := []byte("0123456789abcdef")
	k2 := []byte("fedcba9876543210")
	ns := cluster(t, k1, "a", "b")
	for _, key := range [][]byte{k2, nil} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l, err := Join(ctx, Config{Name: "intruder", BindAddr: "127.0.0.1:0", Seeds: []string{ns[0].Addr()},
			Key: key, Meta: testMeta("intruder", 1), Profile: "local", Logger: testLogger(t)})
		cancel()
		if err == nil {
			l.Close()
			t.Fatalf("a node with key %q joined", key)
		}
		if !errors.Is(err, ErrJoin) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Join error = %v, want ErrJoin and the deadline", err)
		}
	}
	for _, n := range ns {
		if got := names(n.All()); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("%s knows %v", n.Local().Name, got)
		}
		if evs := n.rec.about("intruder"); len(evs) != 0 {
			t.Errorf("%s had events %v about the intruder", n.Local().Name, evs)
		}
	}
}

func TestKeyRotation(t *testing.T) {
	t.Parallel()
	k1 := []byte("0123456789abcdef0123456789abcdef")
	k2 := []byte("another key of 24 bytes!")
	ns := cluster(t, k1, "a", "b", "c")
	steps := []struct {
		name string
		op   func(*List, []byte) error
		key  []byte
	}{
		{"install", (*List).InstallKey, k2},
		{"use", (*List).UseKey, k2},
		{"remove", (*List).RemoveKey, k1},
	}
	for _, s := range steps {
		for _, n := range ns {
			if err := s.op(n.List, s.key); err != nil {
				t.Fatalf("%s on %s: %v", s.name, n.Local().Name, err)
			}
		}
	}
	if err := ns[0].RemoveKey(k2); !errors.Is(err, ErrKey) {
		t.Errorf("removing the key in use = %v, want ErrKey", err)
	}
	if err := ns[0].InstallKey([]byte("short")); !errors.Is(err, ErrKey) {
		t.Errorf("installing a short key = %v, want ErrKey", err)
	}
	d := start(t, "d", opts{seeds: []string{ns[1].Addr()}, key: k2})
	for _, n := range append(ns, d) {
		waitFor(t, 5*time.Second, n.Local().Name+" sees d", sees(n, "a", "b", "c", "d"))
	}
	for _, n := range ns {
		for _, o := range []string{"a", "b", "c"} {
			if _, ok := n.rec.first(EventFail, o); ok {
				t.Errorf("%s saw %s fail during rotation", n.Local().Name, o)
			}
		}
	}
	// The old key no longer gets in.
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	if l, err := Join(ctx, Config{Name: "old", BindAddr: "127.0.0.1:0", Seeds: []string{ns[0].Addr()},
		Key: k1, Profile: "local"}); err == nil {
		l.Close()
		t.Error("a node with the removed key joined")
	}
}

func TestNoEncryptionKeyOps(t *testing.T) {
	t.Parallel()
	n := start(t, "plain", opts{})
	if err := n.InstallKey([]byte("0123456789abcdef")); !errors.Is(err, ErrNoEncryption) {
		t.Errorf("InstallKey without encryption = %v", err)
	}
}

// Two clusters with the same node names in one process stay apart.
func TestTwoClustersIndependent(t *testing.T) {
	t.Parallel()
	x := cluster(t, nil, "a", "b")
	y := cluster(t, nil, "a", "b")
	if err := x[0].UpdateMeta(testMeta("x-a", 2)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "x/b sees x/a's update", func() bool {
		_, ok := x[1].rec.first(EventUpdate, "a")
		return ok
	})
	for _, n := range y {
		for _, m := range n.All() {
			if m.Meta.Build == testMeta("x-a", 2).Build {
				t.Errorf("cluster y sees cluster x's meta: %+v", m)
			}
		}
		if _, ok := n.rec.first(EventUpdate, "a"); ok {
			t.Error("cluster y got cluster x's update")
		}
	}
	for i := range x {
		if x[i].Addr() == y[i].Addr() {
			t.Fatal("clusters share an address")
		}
		for _, m := range y[i].All() {
			if m.Addr == x[0].Addr() || m.Addr == x[1].Addr() {
				t.Errorf("cluster y knows cluster x's %s", m.Addr)
			}
		}
	}
}

// Nobody reads Events: the callbacks memberlist makes under its node lock
// must not block, and gossip goes on.
func TestUnreadEventsDoNotBlock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := Join(ctx, Config{Name: "a", BindAddr: "127.0.0.1:0", Profile: "local", Meta: testMeta("a", 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Join(ctx, Config{Name: "b", BindAddr: "127.0.0.1:0", Profile: "local", Seeds: []string{a.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Far more events than the channel buffers, straight into the delegate.
	enc, _ := testMeta("ghost", 1).MarshalBinary()
	ad := &adapter{l: b}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 5000 {
			ad.NotifyUpdate(&memberlist.Node{Name: fmt.Sprint("ghost-", i%10), Addr: net.IPv4(127, 0, 0, 9), Port: uint16(i), Meta: enc})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("delegate blocked with nobody reading events")
	}
	for i := range 3 {
		if err := a.UpdateMeta(testMeta("a", i+2)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 3*time.Second, "b sees a's last meta", func() bool {
		i := slices.IndexFunc(b.Members(), func(m Member) bool { return m.Name == "a" })
		return i >= 0 && b.Members()[i].Meta.Build == testMeta("a", 4).Build
	})
	if b.Dropped() != 0 {
		t.Errorf("dropped %d events below the queue bound", b.Dropped())
	}
	// The backlog is delivered in order once someone reads.
	var got []Event
	for e := range b.Events() {
		if e.Kind == EventUpdate && e.Member.Name == "a" && e.Member.Meta.Build == testMeta("a", 4).Build {
			break
		}
		got = append(got, e)
	}
	if len(got) < 5000 || got[0].Kind != EventJoin || got[0].Member.Name != "b" {
		t.Errorf("backlog of %d events, first %+v", len(got), got[0])
	}
}

// A node whose seeds are only itself starts alone.
func TestSeedsOnlySelf(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, err := Join(ctx, Config{Name: "solo", BindAddr: addr, Seeds: []string{addr}, Meta: testMeta("solo", 1)})
	if err != nil {
		t.Fatal(err) // default profile, no key
	}
	defer l.Close()
	if l.Addr() != addr || !slices.Equal(names(l.Members()), []string{"solo"}) {
		t.Fatalf("Addr %s, members %v", l.Addr(), l.Members())
	}
}

func TestEventQueueDropsOldest(t *testing.T) {
	q := newEventQueue(3)
	for i := range 5 {
		q.push(Event{Member: Member{Name: fmt.Sprint(i)}})
	}
	if q.droppedCount() != 2 {
		t.Fatalf("dropped %d, want 2", q.droppedCount())
	}
	var got []string
	for {
		e, ok := q.pop()
		if !ok {
			break
		}
		got = append(got, e.Member.Name)
	}
	if !slices.Equal(got, []string{"2", "3", "4"}) {
		t.Fatalf("queue kept %v", got)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		cfg  Config
		want error
	}{
		{Config{BindAddr: "127.0.0.1:0"}, ErrConfig},
		{Config{Name: "n", BindAddr: "127.0.0.1:0", Profile: "wan"}, ErrConfig},
		{Config{Name: "n", BindAddr: "127.0.0.1"}, ErrConfig},
		{Config{Name: "n", BindAddr: "127.0.0.1:0", Key: []byte("short")}, ErrKey},
		{Config{Name: "n", BindAddr: "127.0.0.1:0", Meta: Meta{Version: 9}}, ErrMetaVersion},
		{Config{Name: "n", BindAddr: "127.0.0.1:0", Meta: Meta{Build: string(make([]byte, 600))}}, ErrMeta},
	} {
		if l, err := Join(ctx, tc.cfg); !errors.Is(err, tc.want) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Join(%+v) = %v, want %v", tc.cfg, err, tc.want)
		}
	}
}

// Queued counts the events waiting to be read, all but one the pump may
// hold between its queue and the channel, and every one it counts can be
// read.
func TestQueuedCountsWaitingEvents(t *testing.T) {
	q := newEventQueue(1000)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go q.pump(stop, &wg)
	defer func() { close(stop); wg.Wait() }()
	const n = 200 // more than the channel holds
	for i := range n {
		q.push(Event{Member: Member{Name: fmt.Sprint(i)}})
	}
	read := func(want int) {
		t.Helper()
		select {
		case e := <-q.out:
			if e.Member.Name != fmt.Sprint(want) {
				t.Fatalf("read %s, want %d", e.Member.Name, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d counted but never delivered", want)
		}
	}
	read(0)
	k := q.queued()
	if k < n-2 || k > n-1 {
		t.Fatalf("queued %d after reading one of %d", k, n)
	}
	for i := range k {
		read(1 + i)
	}
	if k == n-2 {
		read(n - 1)
	}
	if got := q.queued(); got != 0 {
		t.Fatalf("queued %d with every event read", got)
	}
}
