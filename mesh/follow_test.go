package mesh

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh/member"
	"github.com/shade-mesh/shade/transport/peer"
)

// crowd is k gossip members that serve one dataset as far as the mesh can
// tell: they gossip its version in their meta, as a node does. They answer
// no peer calls, so a node among them learns of them and ranks them, and
// nothing more; the tests of membership need no more, and a crowd of a
// hundred costs a fraction of a hundred nodes.
type crowd struct {
	data  *testsupport.Dataset
	seed  string // the first member's gossip address
	meta  member.Meta
	lists []*member.List
}

// startCrowd starts k members named c0000... seeded from the first and
// waits until the first sees them all.
func startCrowd(tb testing.TB, k int) *crowd {
	tb.Helper()
	data := testsupport.WriteDataset(tb, testsupport.DatasetSpec{})
	m, err := dataset.Scan(data.Dir, nil)
	if err != nil {
		tb.Fatal(err)
	}
	// Port 9 of loopback (discard) is closed: a call to a member of the
	// crowd fails at once.
	c := &crowd{data: data, meta: member.Meta{PeerAddr: "127.0.0.1:9", Capacity: 1 << 20, Datasets: []string{"ds=" + m.Version}}}
	tb.Cleanup(c.close)
	for i := range k {
		c.add(tb, fmt.Sprintf("c%04d", i))
	}
	testsupport.WaitFor(tb, time.Minute, "the crowd's first member sees them all", func() bool { return len(c.lists[0].Members()) == k })
	return c
}

// close stops every member of the crowd; again, nothing.
func (c *crowd) close() {
	for _, l := range c.lists {
		l.Close()
	}
}

// add starts one more member of the crowd.
func (c *crowd) add(tb testing.TB, name string) {
	tb.Helper()
	cfg := member.Config{Name: name, BindAddr: "127.0.0.1:0", Meta: c.meta, Profile: "lan"}
	if c.seed != "" {
		cfg.Seeds = []string{c.seed}
	}
	l, err := member.Join(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	go func() { // nobody else reads its events
		for range l.Events() {
		}
	}()
	if c.seed == "" {
		c.seed = l.Addr()
	}
	c.lists = append(c.lists, l)
}

// join starts a node that joins the crowd and serves its dataset.
func (c *crowd) join(tb testing.TB, name string) *Node {
	tb.Helper()
	tlsCfg, err := peer.DevTLS(tb.TempDir(), name)
	if err != nil {
		tb.Fatal(err)
	}
	n, err := New(Config{Name: name, CacheSize: 16 << 20, Datasets: []DatasetConfig{{Name: "ds", Dir: c.data.Dir}},
		Cluster: ClusterConfig{GossipAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", TLS: tlsCfg, Profile: "local",
			Seeds: []string{c.seed}, Expect: len(c.lists) + 1}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { n.Close() })
	return n
}

// names returns the crowd's members' names.
func (c *crowd) names() []string {
	out := make([]string, len(c.lists))
	for i, l := range c.lists {
		out[i] = l.Local().Name
	}
	return out
}

// readEvents reads an event and those queued behind it, up to its bound,
// returns at a wake without one, and stops at a closed channel or an
// ended context.
func TestReadEventsTakesTheQueued(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan member.Event, maxEventsARefresh+100)
	queued := func() int { return len(events) }
	var seen []string
	see := func(ev member.Event) { seen = append(seen, ev.Member.Name) }
	push := func(k int) {
		for range k {
			events <- member.Event{Kind: member.EventJoin, Member: member.Member{Name: fmt.Sprint(len(seen) + len(events))}}
		}
	}
	push(40)
	if !readEvents(ctx, events, nil, queued, see) || len(seen) != 40 || len(events) != 0 {
		t.Fatalf("one read took %d of 40 events, left %d", len(seen), len(events))
	}
	push(maxEventsARefresh + 100)
	if !readEvents(ctx, events, nil, queued, see) || len(seen) != 40+maxEventsARefresh {
		t.Fatalf("one read took %d events, want at most %d", len(seen)-40, maxEventsARefresh)
	}
	if !readEvents(ctx, events, nil, queued, see) || len(seen) != 40+maxEventsARefresh+100 {
		t.Fatalf("the next read took %d, want the 100 left", len(seen)-40-maxEventsARefresh)
	}
	for i, name := range seen {
		if name != fmt.Sprint(i) {
			t.Fatalf("event %d read as %s: out of order", i, name)
		}
	}
	push(3)
	close(events)
	if readEvents(ctx, events, nil, func() int { return 10 }, see) {
		t.Fatal("a closed channel read on")
	}
	if len(seen) != 40+maxEventsARefresh+103 {
		t.Fatalf("%d events of the closed channel seen, want 3", len(seen)-40-maxEventsARefresh-100)
	}
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	if !readEvents(ctx, make(chan member.Event), wake, queued, see) || len(seen) != 40+maxEventsARefresh+103 {
		t.Fatal("a wake did not end the read, or read an event")
	}
	cancel()
	if readEvents(ctx, make(chan member.Event), nil, queued, see) {
		t.Fatal("an ended context read on")
	}
}

// A node that joins a crowd hears of every member at once: its ring holds
// them all, and a member that joins after it, and it answered the events
// with fewer refreshes than there were events.
func TestJoinSeesEveryMemberOfACrowd(t *testing.T) {
	const k = 20
	c := startCrowd(t, k)
	n := c.join(t, "n")
	c.add(t, "last")
	want := slices.Sorted(slices.Values(append(c.names(), "n")))
	testsupport.WaitFor(t, time.Minute, "the ring holds the crowd, the node and the last member", func() bool {
		return slices.Equal(n.datasets["ds"].ring.Load().Members(), want)
	})
	// Each event may cost a refresh, but the k+1 of the join (the crowd's
	// and its own) came at once and cost one or two.
	if refreshes, events := n.cluster.refreshes.Load(), n.cluster.events.Load(); refreshes >= events {
		t.Fatalf("%d refreshes for %d events", refreshes, events)
	}
}

// BenchmarkRefreshMembers is one refresh of a node's view of a crowd of
// members that did not change: what every membership event cost a node
// before the events queued together were answered at once.
func BenchmarkRefreshMembers(b *testing.B) {
	for _, k := range []int{25, 50, 100} {
		b.Run(fmt.Sprint(k), func(b *testing.B) {
			c := startCrowd(b, k)
			n := c.join(b, "n")
			b.ResetTimer()
			for b.Loop() {
				n.refreshMembers()
			}
		})
	}
}

// BenchmarkCrowd counts the refreshes of a node's view as a crowd of 100
// forms around it (members joining one after another through the first)
// and as it joins a crowd of 100: refreshes and events a member.
func BenchmarkCrowd(b *testing.B) {
	const k = 100
	b.Run("forms", func(b *testing.B) {
		var refreshes, events int64
		for b.Loop() {
			c := startCrowd(b, 1)
			n := c.join(b, "n")
			for i := 1; i < k; i++ {
				c.add(b, fmt.Sprintf("c%04d", i))
			}
			waitRing(b, n, k+1)
			refreshes += n.cluster.refreshes.Load()
			events += n.cluster.events.Load()
			n.Close()
			c.close() // the next round's crowd gossips alone
		}
		b.ReportMetric(float64(refreshes)/float64(b.N*k), "refreshes/member")
		b.ReportMetric(float64(events)/float64(b.N*k), "events/member")
	})
	b.Run("join", func(b *testing.B) {
		c := startCrowd(b, k)
		var refreshes, events int64
		for i := 0; b.Loop(); i++ {
			n := c.join(b, fmt.Sprint("n", i))
			c.add(b, fmt.Sprint("last", i)) // its event queues behind the join's
			waitRing(b, n, k+2+i)
			refreshes += n.cluster.refreshes.Load()
			events += n.cluster.events.Load()
			n.Close()
		}
		b.ReportMetric(float64(refreshes)/float64(b.N*k), "refreshes/member")
		b.ReportMetric(float64(events)/float64(b.N*k), "events/member")
	})
}

// waitRing waits until the node's ring holds k members.
func waitRing(tb testing.TB, n *Node, k int) {
	tb.Helper()
	testsupport.WaitFor(tb, time.Minute, fmt.Sprintf("the ring holds %d members", k), func() bool {
		return len(n.datasets["ds"].ring.Load().Members()) == k
	})
}
