package mesh

import (
	"testing"
	"time"
)

// TestTablesReachStandbysEveryRoundOthersWithinBudget: the leader sends
// every change of a score table to the two members next in line to lead,
// and to the rest only as often as ReplicateBudget allows.
func TestTablesReachStandbysEveryRoundOthersWithinBudget(t *testing.T) {
	var budget int64 = 1 // byte per second: after the first, no full round for ages
	m := startMesh(t, 4, meshOpts{configure: func(_ int, c *Config) {
		c.Cluster.ReplicateBudget = budget
		c.Cluster.DrainTimeout = time.Minute // the hand-over below, on a loaded machine
	}})
	leader := m.byName(m.peers[0].node.Leader())
	if leader.node.Name() != "n0" {
		t.Fatalf("leader %s, want n0", leader.node.Name())
	}
	scored, report := tableProbes(t, m, leader)

	// The first change goes to everyone (no full round has been sent yet).
	report(0, 100)
	waitFor(t, 5*time.Second, "the first table on every member", func() bool {
		return scored("n1") == 100 && scored("n2") == 100 && scored("n3") == 100
	})
	// Later changes reach the standbys n1 and n2 within a few rounds; n3
	// waits for the budget.
	report(100, 300)
	waitFor(t, 5*time.Second, "the change on the standbys", func() bool {
		return scored("n1") == 300 && scored("n2") == 300
	})
	// Four more changes, each on the standbys (a round each): n3 still
	// waits for the budget.
	for round := range 4 {
		to := 310 + 10*round
		report(to-10, to)
		waitFor(t, 5*time.Second, "the next change on the standbys", func() bool {
			return scored("n1") == to && scored("n2") == to
		})
	}
	if got := scored("n3"); got != 100 {
		t.Fatalf("n3 holds %d scored samples: the budget did not hold back the full round", got)
	}

	// A graceful stop of the leader hands its table to everyone.
	leader.node.Close()
	waitFor(t, 5*time.Second, "the leader's table on n3 after its hand-over", func() bool { return scored("n3") == 340 })
}

// TestScoreTablesLargerThanAFrame: a score table that does not fit a
// frame (MaxFrame, here 16 KiB; 12,000 scored samples take about 49 KB)
// reaches the members in pieces, as an order does: the first change every
// member, later ones the standbys, and the leader's graceful stop the
// rest.
func TestScoreTablesLargerThanAFrame(t *testing.T) {
	const samples, frame = 12000, 16 << 10
	m := startMesh(t, 4, meshOpts{samples: samples, minSize: 1, maxSize: 8, configure: func(_ int, c *Config) {
		c.Cluster.ReplicateBudget = 1 // byte per second: no second full round
		c.Cluster.MaxFrame = frame
		c.Cluster.DrainTimeout = time.Minute // the hand-over below, on a loaded machine
	}})
	leader := m.byName(m.peers[0].node.Leader())
	if leader.node.Name() != "n0" {
		t.Fatalf("leader %s, want n0", leader.node.Name())
	}
	scored, report := tableProbes(t, m, leader)
	report(0, 11000)
	if b, _, err := leader.node.ordered[0].def.scores.Marshal(); err != nil || len(b) <= frame {
		t.Fatalf("a table of %d bytes (%v): want more than a frame of %d", len(b), err, frame)
	}
	waitFor(t, 10*time.Second, "the first table on every member", func() bool {
		return scored("n1") == 11000 && scored("n2") == 11000 && scored("n3") == 11000
	})
	report(11000, samples)
	waitFor(t, 10*time.Second, "the change on the standbys", func() bool {
		return scored("n1") == samples && scored("n2") == samples
	})
	if got := scored("n3"); got != 11000 {
		t.Fatalf("n3 holds %d scored samples: the budget did not hold back the full round", got)
	}
	leader.node.Close()
	waitFor(t, 10*time.Second, "the leader's table on n3 after its hand-over", func() bool { return scored("n3") == samples })
}

// tableProbes returns, for tests of the replication of the default job's
// score table: how many samples a member's table has scored, and a report
// to the leader of losses for samples [from, to).
func tableProbes(t *testing.T, m *testMesh, leader *testPeer) (scored func(name string) int, report func(from, to int)) {
	scored = func(name string) int { return m.byName(name).node.ordered[0].def.tableInfo().Scored }
	report = func(from, to int) {
		ids := make([]uint32, 0, to-from)
		losses := make([]float64, 0, to-from)
		for i := from; i < to; i++ {
			ids, losses = append(ids, uint32(i)), append(losses, float64(i%7)+0.5)
		}
		if err := leader.node.Report("ds", "", 0, ids, losses); err != nil {
			t.Fatal(err)
		}
	}
	return scored, report
}
