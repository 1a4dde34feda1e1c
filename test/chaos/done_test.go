package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// TestChaosLeaderKilledAfterRankDone is the deterministic form of a
// schedule TestChaos can hit by chance: a rank trains on the leader's own
// node, its SHADE.DONE for the epoch is acknowledged, and the leader is
// killed before the other ranks finish. The rank has been told OK and
// will not say it again; the job must still reach the next epoch once the
// others are done (within 5 s of the kill, DESIGN.md §8, plus the restart).
func TestChaosLeaderKilledAfterRankDone(t *testing.T) {
	ctx, m := startFailoverMesh(t, 3000, 7)
	leader := m.leaderName(ctx)
	if leader != "n0" {
		t.Fatalf("leader %q, want n0 (the lowest name)", leader)
	}
	ranks := []*peerProc{m.peers[0], m.peers[2], m.peers[3]} // rank 0 on the leader
	call := func(p *peerProc, d time.Duration, args ...any) ([]int64, error) {
		c := newClient(p.socket)
		defer c.Close()
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		cmd := c.Do(cctx, args...)
		if args[0] == "SHADE.ORDER" {
			return cmd.Int64Slice()
		}
		return nil, cmd.Err()
	}
	// Epoch 0 for every rank.
	var wg sync.WaitGroup
	errs := make([]error, world)
	for r, p := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = call(p, 15*time.Second, "SHADE.ORDER", "ds", 0, r, world, 10000)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d epoch 0: %v", r, err)
		}
	}
	// Rank 0 finishes first, on the leader's node, which dies at once.
	if _, err := call(ranks[0], 5*time.Second, "SHADE.DONE", "ds", 0, 0); err != nil {
		t.Fatalf("rank 0 DONE 0 on n0: %v", err)
	}
	m.peers[0].kill()
	killed := time.Now()
	// n0 comes back once the survivors have marked it dead.
	if _, err := m.waitConverged(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.peers[0].start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("n0 (leader, rank 0's node) SIGKILLed right after acknowledging rank 0's SHADE.DONE 0; serving again %v later",
		time.Since(killed).Round(time.Millisecond))
	// The others finish (a refusal while the mesh settles is retried).
	for r := 1; r < world; r++ {
		var err error
		if _, werr := testsupport.Poll(ctx, 10*time.Second, func() bool {
			_, err = call(ranks[r], 5*time.Second, "SHADE.DONE", "ds", 0, r)
			return err == nil
		}); werr != nil {
			t.Fatalf("rank %d DONE 0: %v (last: %v)", r, werr, err)
		}
	}
	// Every rank asks for epoch 1 on its own node.
	var mu sync.Mutex
	var problems []string
	for r, p := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := call(p, 20*time.Second, "SHADE.ORDER", "ds", 1, r, world, 15000)
			if err != nil {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("rank %d (on %s): %v", r, p.name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	took := time.Since(killed)
	if len(problems) > 0 {
		t.Errorf("epoch 1 never published after the leader died holding rank 0's SHADE.DONE 0 "+
			"(the DONE was acknowledged, so the rank does not repeat it):\n  %s", strings.Join(problems, "\n  "))
		for _, p := range m.peers {
			t.Logf("--- %s:\n%s", p.name, p.logTail(15))
		}
		return
	}
	t.Logf("every rank had epoch 1's order %v after the kill", took.Round(time.Millisecond))
}

// TestChaosResetDuringFailover: a trainer's SHADE.RESET (train_fmnist.py's
// rank 0 sends one to every rank's peer at start) through a live peer while
// the leader has just been killed. The peer answers for a mesh that is
// choosing its next leader; the command must succeed once one is chosen
// (as SHADE.ORDER waits for one), not fail the job with an error reply
// that no client retries.
func TestChaosResetDuringFailover(t *testing.T) {
	ctx, m := startFailoverMesh(t, 500, 8)
	if leader := m.leaderName(ctx); leader != "n0" {
		t.Fatalf("leader %q, want n0", leader)
	}
	m.peers[0].kill()
	killed := time.Now()
	c := newClient(m.peers[2].socket)
	defer c.Close()
	cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
	err := c.Do(cctx, "SHADE.RESET", "ds").Err()
	ccancel()
	took := time.Since(killed)
	if err != nil {
		t.Fatalf("SHADE.RESET through live n2 %v after the leader n0 was killed: %v (want OK once n1 leads)",
			took.Round(time.Millisecond), err)
	}
	t.Logf("SHADE.RESET through n2 right after the leader's SIGKILL: OK after %v", took.Round(time.Millisecond))
}

// startFailoverMesh starts numPeers peers serving a dataset of n samples
// (seeded by seed), with the shade-peer flags extra, within a context
// that ends after 2 minutes. Like the chaos test it skips under -short
// unless CHAOS_DURATION is set.
func startFailoverMesh(t *testing.T, n int, seed uint64, extra ...string) (context.Context, *mesh) {
	t.Helper()
	if _, set := os.LookupEnv("CHAOS_DURATION"); !set && testing.Short() {
		t.Skip("chaos test skipped with -short (set CHAOS_DURATION to run it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	ds := testsupport.WriteDataset(t, testsupport.DatasetSpec{Samples: n, MinSize: 100, MaxSize: 1099, Seed: seed})
	m := startMesh(t, ctx, numPeers, "ds", ds.Dir, t.TempDir(), 8<<20, extra...)
	m.files = ds.Files
	return ctx, m
}
