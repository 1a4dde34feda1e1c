package mesh

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh/member"
	"github.com/shade-mesh/shade/mesh/ring"
)

// TestPeerOfAnotherRingShapeIsNotShared: a peer whose ring has another
// partition count computes other owners for the dataset; the peers of
// 271 partitions (what peers of earlier builds advertise with the version
// alone) leave it out of their ring and it leaves them out of its own
// (each logging why), every node still serves every sample intact, and
// the membership and the leader stay one.
func TestPeerOfAnotherRingShapeIsNotShared(t *testing.T) {
	var logs testsupport.Buffer
	m := startMesh(t, 3, meshOpts{samples: 300, configure: func(i int, c *Config) {
		c.Cluster.Partitions = 271
		if i == 2 {
			c.Cluster.Partitions = 1031
			c.Logger = zerolog.New(&logs).Level(zerolog.ErrorLevel)
		}
	}})
	ringOf := func(p *testPeer) []string { return p.node.ordered[0].ring.Load().Members() }
	a, b, other := m.peers[0], m.peers[1], m.peers[2]
	if got := ringOf(other); !slices.Equal(got, []string{other.node.Name()}) {
		t.Errorf("the peer of 1031 partitions shares the dataset with %v, want itself alone", got)
	}
	for _, p := range []*testPeer{a, b} {
		if got, want := ringOf(p), []string{a.node.Name(), b.node.Name()}; !slices.Equal(got, want) {
			t.Errorf("%s shares the dataset with %v, want %v", p.node.Name(), got, want)
		}
	}
	if got := other.node.ordered[0].ring.Load().Config().Partitions; got != 1031 {
		t.Errorf("its ring has %d partitions", got)
	}
	for _, p := range m.peers {
		m.readAll(t, p.client(t)) // every byte checked against the files
	}
	if !strings.Contains(logs.String(), `"theirs":"271x2","ours":"1031x2"`) || !strings.Contains(logs.String(), "ring differs") {
		t.Errorf("no line says why the peers are not shared:\n%s", logs.String())
	}
	for _, v := range []struct {
		partitions, replicas int
		want                 string
	}{
		{271, 2, "v1"},
		{1031, 2, "v1@1031x2"},
		{271, 1, "v1@271x1"},
	} {
		if got := sharedVersion("v1", v.partitions, v.replicas); got != v.want {
			t.Errorf("sharedVersion(%d x %d) = %q, want %q", v.partitions, v.replicas, got, v.want)
		}
		if p, r, ok := parseShape(v.want); !ok || p != v.partitions || r != v.replicas {
			t.Errorf("parseShape(%q) = %d x %d, %v", v.want, p, r, ok)
		}
	}
}

// TestRingShapeOfTheMesh: a node configured with no partition count takes
// the one most of the peers it joins advertise: a mesh of 1031 and a peer
// of 271 (advertising the version alone, as earlier builds do), the two
// nodes without a count join the 1031s and share the dataset with them,
// the second saying that the peers disagree; every node serves every
// sample intact, and the node's STATS tell the shape.
func TestRingShapeOfTheMesh(t *testing.T) {
	var logs testsupport.Buffer
	m := startMesh(t, 4, meshOpts{samples: 300, configure: func(i int, c *Config) {
		switch i {
		case 0:
			c.Cluster.Partitions = 1031
		case 2:
			c.Cluster.Partitions = 271
		case 3:
			c.Logger = zerolog.New(&logs).Level(zerolog.InfoLevel)
		}
	}})
	p := m.peers
	ringOf := func(tp *testPeer) *ring.Ring { return tp.node.ordered[0].ring.Load() }
	names := func(tps ...*testPeer) []string {
		var out []string
		for _, tp := range tps {
			out = append(out, tp.node.Name())
		}
		return out
	}
	for _, tp := range []*testPeer{p[0], p[1], p[3]} {
		r := ringOf(tp)
		if r.Config().Partitions != 1031 || !slices.Equal(r.Members(), names(p[0], p[1], p[3])) {
			t.Errorf("%s: ring of %d partitions over %v, want 1031 over %v", tp.node.Name(), r.Config().Partitions, r.Members(), names(p[0], p[1], p[3]))
		}
	}
	if r := ringOf(p[2]); r.Config().Partitions != 271 || !slices.Equal(r.Members(), names(p[2])) {
		t.Errorf("the peer of 271: ring of %d over %v, want itself alone", r.Config().Partitions, r.Members())
	}
	line := logs.String()
	// n1's datasets reach n0 before n1's start returns (UpdateMeta waits
	// for their gossip), so n3 counts two peers of 1031 at its join: one
	// where gossip was slower, and 1031 still wins the tie.
	if !strings.Contains(line, `"advertised":[{"partitions":1031,"peers":`) || !strings.Contains(line, `{"partitions":271,"peers":1}]`) ||
		!strings.Contains(line, `"level":"warn"`) || !strings.Contains(line, "ring partitions: the count the mesh's peers advertise") {
		t.Errorf("the node that found two counts did not say so:\n%s", line)
	}
	for _, tp := range p {
		m.readAll(t, tp.client(t)) // every byte checked against the files
	}
	st, err := p[1].node.snapshot("")
	if err != nil || st.RingPartitions != 1031 || st.RingReplicas != 2 {
		t.Errorf("STATS ring %d x %d (%v), want 1031 x 2", st.RingPartitions, st.RingReplicas, err)
	}
}

// TestRingShapeFollowsTheLargerGroup: two nodes without a count start a
// mesh (16,381 partitions), and three given 271 join them, as peers
// restarted together beside running ones would; the two move to 271,
// each saying so and never leaving itself out of its own ring, and all
// five share the dataset, every byte read from every node intact.
func TestRingShapeFollowsTheLargerGroup(t *testing.T) {
	var logs [2]testsupport.Buffer
	m := startMesh(t, 5, meshOpts{samples: 300, configure: func(i int, c *Config) {
		if i < 2 {
			c.Logger = zerolog.New(&logs[i]).Level(zerolog.InfoLevel)
			return
		}
		c.Cluster.Partitions = 271
	}})
	for _, tp := range m.peers {
		if r := tp.node.ordered[0].ring.Load(); r.Config().Partitions != 271 || len(r.Members()) != 5 {
			t.Errorf("%s: ring of %d partitions over %v, want 271 over all five", tp.node.Name(), r.Config().Partitions, r.Members())
		}
	}
	for i := range logs {
		line := logs[i].String()
		if !strings.Contains(line, "a larger group of the mesh's peers uses another count") ||
			!strings.Contains(line, `"partitions":271,`) || !strings.Contains(line, `"was":16381`) {
			t.Errorf("n%d did not say it moved:\n%s", i, line)
		}
		if strings.Contains(line, fmt.Sprintf(`"peer":"n%d"`, i)) {
			t.Errorf("n%d left itself out of its ring while its gossip still named the count it left:\n%s", i, line)
		}
	}
	for _, tp := range m.peers {
		m.readAll(t, tp.client(t)) // every byte checked against the files
	}
	st, err := m.peers[0].node.snapshot("")
	if err != nil || st.RingPartitions != 271 {
		t.Errorf("STATS ring of %d partitions (%v), want 271", st.RingPartitions, err)
	}
	if s := m.peers[0].node.ordered[0].samples.Load(); s == nil || s.Partitions() != 271 {
		t.Errorf("samples hashed into %v, want 271 partitions", s)
	}
}

// TestTrainingAcrossARingMove: a job trains with a rank on each of two
// nodes of a new mesh (16,381 partitions) while three nodes given 271 join
// one after another; once they outnumber the two, the two move to 271
// under the job. The job trains on through the move, every byte it reads
// checked; after it all five nodes hold the same orders of the job's last
// epochs, every node holds the merged scores of the samples it owns under
// the new ring and of no other, and every node serves every sample intact.
func TestTrainingAcrossARingMove(t *testing.T) {
	var logs [2]testsupport.Buffer
	m := startMesh(t, 2, meshOpts{samples: 600, replicas: 2, configure: func(i int, c *Config) {
		if i < 2 {
			c.Logger = zerolog.New(&logs[i]).Level(zerolog.InfoLevel)
		}
	}})
	clients := []*redis.Client{m.peers[0].client(t), m.peers[1].client(t)}
	epoch := func() int {
		_, e, _ := m.peers[0].node.ordered[0].def.book.Head()
		return e
	}
	var (
		digests []string
		err     error
	)
	stop, trained := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(trained)
		digests, err = trainJobUntil(context.Background(), m.files, "", 2, func(r int) *redis.Client { return clients[r] },
			func(id int64) float64 { return 0.5 + float64(id%7) }, 1, stop)
	}()
	// Each wait ends early where training failed: the failure is the news.
	training := func(cond func() bool) func() bool {
		return func() bool {
			select {
			case <-trained:
				return true
			default:
				return cond()
			}
		}
	}
	waitFor(t, 30*time.Second, "the job's second epoch", training(func() bool { return epoch() >= 1 }))
	if m.peers[0].node.ordered[0].ring.Load().Config().Partitions != NewMeshPartitions {
		t.Fatalf("the two nodes did not start a new mesh's ring")
	}
	for range 3 {
		m.addPeer(t, func(c *Config) { c.Cluster.Partitions = 271 })
	}
	waitFor(t, 30*time.Second, "all five sharing the dataset at 271 partitions", training(func() bool {
		for _, p := range m.peers {
			if r := p.node.ordered[0].ring.Load(); r.Config().Partitions != 271 || len(r.Members()) != 5 {
				return false
			}
		}
		return m.converged(m.peers)
	}))
	moved := epoch()
	waitFor(t, 30*time.Second, "two epochs after the move", training(func() bool { return epoch() >= moved+2 }))
	close(stop)
	<-trained
	if err != nil {
		t.Fatalf("training across the move: %v (after %d epochs)", err, len(digests))
	}
	for i := range logs {
		if !strings.Contains(logs[i].String(), "a larger group of the mesh's peers uses another count") {
			t.Errorf("n%d did not say it moved:\n%s", i, logs[i].String())
		}
	}
	jobOrdersAgree(t, m.peers, "", len(digests)-2, len(digests), 2)
	waitScoresOwned(t, m, ownedCheck{leftovers: true, anyScore: true})
	for _, tp := range m.peers {
		m.readAll(t, tp.client(t)) // every byte checked against the files
	}
}

// TestNewMeshPartitions: nodes configured with no count that find no peer
// advertising one take NewMeshPartitions, the advice for up to 256 peers,
// and share the dataset.
func TestNewMeshPartitions(t *testing.T) {
	if NewMeshPartitions != ring.Advised(256) {
		t.Fatalf("NewMeshPartitions %d, advised %d", NewMeshPartitions, ring.Advised(256))
	}
	m := startMesh(t, 2, meshOpts{samples: 100})
	for _, tp := range m.peers {
		if r := tp.node.ordered[0].ring.Load(); r.Config().Partitions != NewMeshPartitions || len(r.Members()) != 2 {
			t.Errorf("%s: ring of %d partitions over %v", tp.node.Name(), r.Config().Partitions, r.Members())
		}
	}
}

func TestMeshShape(t *testing.T) {
	mem := func(name string, state member.State, sets ...string) member.Member {
		return member.Member{Name: name, State: state, Meta: member.Meta{Datasets: sets}}
	}
	all := []member.Member{
		mem("self", member.Alive, "ds=v@99x2"),
		mem("a", member.Alive, "ds=v@1031x2", "other=w@1031x2"),
		mem("b", member.Alive, "ds=v"), // an earlier build: 271 x 2
		mem("c", member.Alive, "ds=v@4099x2"),
		mem("d", member.Alive, "ds=v@4099x2"),
		mem("e", member.Alive, "ds=v@1031x2"),
		mem("f", member.Alive),                      // choosing its own
		mem("g", member.Dead, "ds=v@8191x2"),        // gone
		mem("h", member.Alive, "ds=v@8191x3"),       // other replicas
		mem("i", member.Alive, "ds=v@junk", "ds=v"), // unreadable: tells nothing
		mem("j", member.Alive, "ds=v@0x2"),
	}
	got := meshShape(all, "self", 2)
	want := []shapeCount{{4099, 2}, {1031, 2}, {271, 1}} // a tie goes to the larger count
	if !slices.Equal(got, want) {
		t.Errorf("meshShape = %v, want %v", got, want)
	}
	if got := meshShape(all, "self", 3); !slices.Equal(got, []shapeCount{{8191, 1}}) {
		t.Errorf("meshShape of 3 replicas = %v", got)
	}
	if got := meshShape(all[:1], "self", 2); len(got) != 0 {
		t.Errorf("meshShape of itself alone = %v, want none", got)
	}
}
