package mesh

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/shade-mesh/shade/mesh/outbox"
)

func TestGracefulStopHandsSamplesAndScoresOver(t *testing.T) {
	m := startMesh(t, 3, meshOpts{samples: 300, replicas: 1, configure: func(i int, c *Config) {
		c.Cluster.ReplicateEvery = time.Hour // only the hand-over replicates
	}})
	leader := m.byName(m.peers[0].node.Leader())
	var other *testPeer
	for _, p := range m.peers {
		if p != leader {
			other = p
			break
		}
	}
	m.readAll(t, other.client(t))
	// Scores reach the leader, which has not replicated them.
	args := []any{"SHADE.REPORT", "ds", 0}
	for i := 0; i < 300; i++ {
		args = append(args, i, float64(i%17))
	}
	if err := other.client(t).Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the leader merged the report", func() bool {
		return leader.node.ordered[0].def.tableInfo().Scored == 300
	})
	var survivors []*testPeer
	for _, p := range m.peers {
		if p != leader {
			survivors = append(survivors, p)
		}
	}
	held := 0
	for i := 0; i < 300; i++ {
		if leader.node.store.Has([]byte("ds/" + strconv.Itoa(i))) {
			held++
		}
	}
	leader.sock.Close()
	if err := leader.node.Close(); err != nil { // SIGTERM's path: hand over, leave
		t.Fatal(err)
	}
	// Every sample the leader cached is now on a survivor, without a read.
	missing := 0
	for i := 0; i < 300; i++ {
		key := []byte("ds/" + strconv.Itoa(i))
		on := false
		for _, p := range survivors {
			on = on || p.node.store.Has(key)
		}
		if !on {
			missing++
		}
	}
	t.Logf("the leaving leader held %d samples; %d of 300 are on no survivor", held, missing)
	if held == 0 || missing > 0 {
		t.Errorf("%d samples lost with the graceful stop (it held %d)", missing, held)
	}
	waitFor(t, 10*time.Second, "the survivors elect a new leader", func() bool { return m.converged(survivors) })
	for _, p := range survivors {
		if got := p.node.ordered[0].def.tableInfo().Scored; got != 300 {
			t.Errorf("%s holds %d scored samples after the leader's graceful stop, want 300", p.node.Name(), got)
		}
	}
}

// A peer that caches more than half of outbox.MaxOfferBytes hands it over
// in steps, each co-owner's next request sent as its last ends: nothing is
// dropped on the way. The leaving peer's hand-over deadline is a minute,
// so that a slow machine (or the race detector) only makes it take longer.
func TestGracefulStopHandsOverMoreThanTheOfferBound(t *testing.T) {
	const samples, size = 1024, 160 << 10 // about a third of 160 MiB on each peer
	m := startMesh(t, 3, meshOpts{samples: samples, minSize: size, maxSize: size, replicas: 1, cacheSize: 256 << 20,
		configure: func(i int, c *Config) {
			if i == 1 { // the peer that leaves
				c.Cluster.DrainTimeout = time.Minute
			}
		}})
	m.readAll(t, m.peers[0].client(t))
	leaving := m.peers[1]
	held := 0
	for i := range samples {
		if leaving.node.store.Has([]byte("ds/" + strconv.Itoa(i))) {
			held++
		}
	}
	if held*size <= outbox.MaxOfferBytes/2 {
		t.Fatalf("the leaving peer holds %d samples: the hand-over does not wait for room", held)
	}
	leaving.sock.Close()
	if err := leaving.node.Close(); err != nil {
		t.Fatal(err)
	}
	missing := 0
	for i := range samples {
		key := []byte("ds/" + strconv.Itoa(i))
		if !m.peers[0].node.store.Has(key) && !m.peers[2].node.store.Has(key) {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of the %d samples the leaving peer held are on no survivor", missing, held)
	}
	if d := leaving.node.out.OffersDropped(); d > 0 {
		t.Errorf("%d offers dropped", d)
	}
}
