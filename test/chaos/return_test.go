package chaos

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// TestChaosLeaderReturnsWhileSuccessorPublishes: the leader n0 is killed
// while a job trains epoch after epoch, n1 leads in its place and
// publishes, and n0 comes back seeded by n4 alone, so that n1 hears of it
// by gossip, after n0, which sees a majority at once, has asked n1 for
// its state to take over. Three times. No epoch may be published twice
// where the order published first reached a peer: n1 must stop
// publishing, and n0 adopt n1's newest order, not draw its own of the
// same epoch (the ranks may have read n1's). An order its leader took
// with it, killed as it sent it, is drawn again by the next, as it must.
func TestChaosLeaderReturnsWhileSuccessorPublishes(t *testing.T) {
	// At debug level the peers log each order they install, which tells
	// an order published twice from one that died with its leader.
	ctx, m := startFailoverMesh(t, 400, 9, "--log-level", "debug")
	if leader := m.leaderName(ctx); leader != "n0" {
		t.Fatalf("leader %q, want n0", leader)
	}
	const ranks = 2
	nodes := []*peerProc{m.peers[2], m.peers[3]}
	call := func(ctx context.Context, p *peerProc, args ...any) error {
		c := newClient(p.socket)
		defer c.Close()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return c.Do(cctx, args...).Err()
	}
	// The ranks train empty epochs (an order, then a done) until stopped;
	// a refusal while the mesh changes leaders is tried again.
	var epoch atomic.Int64
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	trained := make(chan error, 1)
	go func() {
		var err error
		for e := 0; tctx.Err() == nil && err == nil; e++ {
			err = testsupport.Parallel(ranks, func(r int) error {
				for _, args := range [][]any{{"SHADE.ORDER", "ds", e, r, ranks, 10000}, {"SHADE.DONE", "ds", e, r}} {
					var last error
					if _, werr := testsupport.Poll(tctx, 20*time.Second, func() bool {
						last = call(tctx, nodes[r], args...)
						return last == nil
					}); werr != nil {
						if tctx.Err() != nil {
							return nil
						}
						return fmt.Errorf("rank %d %v: %v (last: %v)", r, args[0], werr, last)
					}
				}
				return nil
			})
			epoch.Store(int64(e + 1))
		}
		trained <- err
	}()
	// waitEpochs waits until the ranks have finished k more epochs.
	waitEpochs := func(k int64, what string) bool {
		t.Helper()
		from := epoch.Load()
		if _, err := testsupport.Poll(ctx, 30*time.Second, func() bool { return epoch.Load() >= from+k }); err != nil {
			t.Errorf("%s: the ranks finished %d epochs in 30 s, want %d", what, epoch.Load()-from, k)
			return false
		}
		return true
	}
	cs := newClients()
	defer cs.close()
	waitLeader := func(name string) {
		t.Helper()
		if _, err := testsupport.Poll(ctx, 20*time.Second, func() bool {
			for _, p := range m.alivePeers() {
				if followed(ctx, cs, p) != name {
					return false
				}
			}
			return true
		}); err != nil {
			t.Fatalf("the peers do not all follow %s", name)
		}
	}

	n0 := m.peers[0]
	seeds := slices.Index(n0.args, "--seeds") + 1
	allSeeds := n0.args[seeds]
	ok := waitEpochs(2, "before the first kill")
	for round := 0; round < 3 && ok; round++ {
		n0.kill()
		waitLeader("n1")
		if !waitEpochs(2, "under n1") {
			break
		}
		n0.args[seeds] = m.peers[4].gossip
		if err := n0.start(ctx); err != nil {
			t.Fatal(err)
		}
		n0.args[seeds] = allSeeds
		waitLeader("n0")
		ok = waitEpochs(2, "under n0 again")
		t.Logf("round %d: n0 killed, n1 led, n0 back and leading; the ranks at epoch %d", round, epoch.Load())
	}
	stop()
	if err := <-trained; err != nil {
		t.Error(err)
	}

	published, err := m.publishedOrders("")
	if err != nil {
		t.Fatal(err)
	}
	installed, err := m.installedOrders("")
	if err != nil {
		t.Fatal(err)
	}
	if len(installed) < len(published)/2 {
		t.Fatalf("peers logged %d orders installed of %d epochs published: the check below needs them", len(installed), len(published))
	}
	// An epoch published again by a later term is one published twice
	// where the earlier order reached a peer: the ranks may have read
	// both. A leader killed as it published may take its order with it,
	// unsent; a takeover then draws that epoch afresh, as it must.
	var twice, lost []string
	for e, by := range published {
		if len(by) < 2 {
			continue
		}
		slices.SortFunc(by, func(a, b publication) int { return cmp.Compare(a.term, b.term) })
		line := fmt.Sprintf("epoch %d: %v", e, by)
		reached := false
		for _, p := range by[:len(by)-1] {
			for _, at := range installed[orderKey{e, p.term}] {
				reached = reached || at != p.peer
			}
		}
		if reached {
			twice = append(twice, line)
		} else {
			lost = append(lost, line)
		}
	}
	slices.Sort(twice)
	slices.Sort(lost)
	if len(lost) > 0 {
		t.Logf("epochs published again after the order published before reached no peer (its leader killed as it sent it):\n  %s", strings.Join(lost, "\n  "))
	}
	gaveWay := 0
	if b, err := os.ReadFile(m.peers[1].logPath); err == nil {
		gaveWay = strings.Count(string(b), "giving way to a member taking over")
	}
	t.Logf("%d epochs published; n1 gave way to n0's takeover %d times of 3", len(published), gaveWay)
	if len(twice) > 0 {
		t.Fatalf("epochs published by two leaders:\n  %s", strings.Join(twice, "\n  "))
	}
}
