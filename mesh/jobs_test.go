package mesh

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/protocol/stats"
	"github.com/shade-mesh/shade/sampling"
	"github.com/shade-mesh/shade/transport"
)

// trainJob trains epochs [from, to) of a job with world ranks, rank r
// through clientOf(r), each epoch trainEpoch then DONE; it returns each
// epoch's slices, printed.
func trainJob(ctx context.Context, files [][]byte, job string, from, to, world int, clientOf func(r int) *redis.Client, loss func(int64) float64) ([]string, error) {
	var digests []string
	for e := from; e < to; e++ {
		got := make([][]int64, world)
		errs := make([]error, world)
		var wg sync.WaitGroup
		for r := range world {
			wg.Go(func() {
				c := clientOf(r)
				if got[r], errs[r] = trainEpoch(ctx, c, files, job, e, r, world, loss); errs[r] != nil {
					return
				}
				errs[r] = c.Do(ctx, append([]any{"SHADE.DONE", "ds", e, r}, testsupport.JobArgs(job)...)...).Err()
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return digests, err
		}
		digests = append(digests, fmt.Sprint(got))
	}
	return digests, nil
}

// trainJobUntil trains epochs of a job from 0 until stop is closed, and
// at least epochs of them (see trainJob).
func trainJobUntil(ctx context.Context, files [][]byte, job string, world int, clientOf func(r int) *redis.Client, loss func(int64) float64, epochs int, stop <-chan struct{}) ([]string, error) {
	var digests []string
	for e := 0; ; e++ {
		d, err := trainJob(ctx, files, job, e, e+1, world, clientOf, loss)
		digests = append(digests, d...)
		if err != nil {
			return digests, err
		}
		select {
		case <-stop:
			if e+1 >= epochs {
				return digests, nil
			}
		default:
		}
	}
}

// jobOrdersAgree reports whether every peer holds the same order of each
// epoch in [from, to) of a job.
func jobOrdersAgree(t *testing.T, peers []*testPeer, job string, from, to, world int) {
	t.Helper()
	for e := from; e < to; e++ {
		var want string
		for _, p := range peers {
			js := p.node.ordered[0].lookupJob(job)
			if js == nil {
				t.Fatalf("%s does not know job %q", p.node.Name(), job)
			}
			a := js.book.Ask(e, 0, world)
			if a.Order == nil {
				t.Fatalf("%s lacks epoch %d of job %q (%+v)", p.node.Name(), e, job, a)
			}
			if a.Order.World != world || a.Order.Job != job {
				t.Fatalf("%s: epoch %d of job %q has world %d, job %q", p.node.Name(), e, job, a.Order.World, a.Order.Job)
			}
			got := orderDigest(a.Order)
			if want == "" {
				want = got
			} else if got != want {
				t.Errorf("epoch %d of job %q differs on %s", e, job, p.node.Name())
			}
		}
	}
}

// TestManyJobsOnOneMesh runs three jobs at once on a 3-peer mesh, with
// different world sizes and losses: the default job (world 3), job a
// (world 1) and job b (world 2). Midway b stops and is retired on every
// peer, and job c (world 2) starts. Each job's orders are the same on
// every peer and are its own: with IsolateJobs, job a's orders are
// exactly those of the same job trained alone on another mesh, so nothing
// of the other jobs (their orders, reports, worlds or retirements)
// reached them. (Without it, the jobs' orders line up with each other on
// purpose: see TestAJobJoiningAnEpochStartsWhereTheOthersAre.)
func TestManyJobsOnOneMesh(t *testing.T) {
	opts := meshOpts{samples: 400, minSize: 20, maxSize: 60, replicas: 2, configure: func(i int, c *Config) {
		c.JobIdle = 2 * time.Second
		c.IsolateJobs = true
		c.Cluster.Prefetch = -1
	}}
	m := startMesh(t, 3, opts)
	ctx := context.Background()
	clients := make([]*redis.Client, len(m.peers))
	for i, p := range m.peers {
		clients[i] = p.client(t)
	}
	// Different losses per job: each job's importance is its own.
	lossA := func(id int64) float64 { return float64(id%13) / 3 }
	lossB := func(id int64) float64 { return float64((id*7)%5) + 0.1 }
	lossD := func(id int64) float64 { return float64(id%3) + 0.5 }
	lossC := func(id int64) float64 { return float64(id%11) / 2 }

	// Jobs a and default train until job c is done: a job idle for
	// JobIdle would be retired.
	cDone := make(chan struct{})
	var (
		wg                     sync.WaitGroup
		digestsA, digestsD     []string
		errA, errD, errB, errC error
	)
	wg.Go(func() {
		digestsA, errA = trainJobUntil(ctx, m.files, "a", 1, func(int) *redis.Client { return clients[0] }, lossA, 4, cDone)
	})
	wg.Go(func() {
		digestsD, errD = trainJobUntil(ctx, m.files, "", 3, func(r int) *redis.Client { return clients[r] }, lossD, 4, cDone)
	})
	wg.Go(func() {
		defer close(cDone)
		if _, errB = trainJob(ctx, m.files, "b", 0, 2, 2, func(r int) *redis.Client { return clients[1+r] }, lossB); errB != nil {
			return
		}
		// Job b stopped: it is retired on every peer. Job c starts while
		// the default job and job a go on.
		var holding []string // the peers that still hold job b, and what of it
		retired := func() bool {
			holding = holding[:0]
			for _, p := range m.peers {
				if js := p.node.ordered[0].lookupJob("b"); js != nil {
					gen, epoch, term := js.book.Head()
					holding = append(holding, fmt.Sprintf("%s (leader %q, idle %s, newest order gen %d epoch %d term %d)",
						p.node.cfg.Name, p.node.Leader(), js.idle(time.Now()).Round(time.Millisecond), gen, epoch, term))
				}
			}
			return len(holding) == 0
		}
		if _, err := testsupport.Poll(ctx, 20*time.Second, retired); err != nil {
			errB = fmt.Errorf("job b not retired on every peer: %w; held by %s", err, strings.Join(holding, ", "))
			return
		}
		_, errC = trainJob(ctx, m.files, "c", 0, 3, 2, func(r int) *redis.Client { return clients[2-r] }, lossC)
	})
	wg.Wait()
	if err := errors.Join(errA, errD, errB, errC); err != nil {
		t.Fatal(err)
	}
	epochsA := len(digestsA)
	jobOrdersAgree(t, m.peers, "a", epochsA-3, epochsA, 1)
	jobOrdersAgree(t, m.peers, "c", 0, 3, 2)
	jobOrdersAgree(t, m.peers, "", len(digestsD)-3, len(digestsD), 3)
	if js := m.peers[0].node.ordered[0].def; js.book.Newest().World != 3 {
		t.Errorf("default job's world is %d, want 3", js.book.Newest().World)
	}

	// Each job's reports were counted for it alone.
	for job, want := range map[string]int64{"a": int64(epochsA) * 400, "c": 3 * 400} {
		var reported int64
		for _, p := range m.peers {
			if js := p.node.ordered[0].lookupJob(job); js != nil {
				reported += js.reported.Load()
			}
		}
		if reported != want {
			t.Errorf("job %s: %d samples reported on the peers, want %d", job, reported, want)
		}
	}

	// Job a alone on a fresh mesh: the same orders, epoch by epoch.
	alone := startMesh(t, 3, opts)
	c := alone.peers[0].client(t)
	want, err := trainJob(ctx, alone.files, "a", 0, epochsA, 1, func(int) *redis.Client { return c }, lossA)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(digestsA, want) {
		for e := range want {
			if e >= len(digestsA) || digestsA[e] != want[e] {
				t.Errorf("job a's epoch %d differs from the same job run alone", e)
			}
		}
	}
}

// TestJobsAreBoundedAndRetiredWithTheirScores: a dataset takes at most
// MaxJobs jobs; a job idle for JobIdle is retired, its scores saved in
// the state directory, and a job of the same name later starts from them.
func TestJobsAreBoundedAndRetiredWithTheirScores(t *testing.T) {
	dir, _ := makeDataset(t, 100, 10, 20)
	state := t.TempDir()
	p := startPeer(t, Config{StateDir: state, MaxJobs: 2, JobIdle: 500 * time.Millisecond,
		Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	c := p.client(t)
	ctx := context.Background()
	if err := c.Do(ctx, "SHADE.REPORT", "ds", 0, 1, 2.5, 2, 0.5, "JOB", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "SHADE.ORDER", "ds", 0, 0, 1, "JOB", "y").Err(); err == nil || !strings.Contains(err.Error(), "too many jobs") {
		t.Fatalf("a third job: %v, want too many jobs", err)
	}
	if err := c.Do(ctx, "SHADE.ORDER", "ds", 0, 0, 1, "JOB", "bad/name").Err(); err == nil || !strings.Contains(err.Error(), "job name") {
		t.Fatalf("a bad job name: %v", err)
	}
	if err := c.Do(ctx, "SHADE.RESET", "ds", "JOB", "never").Err(); err != nil {
		t.Fatalf("reset of a job never started (nothing to reset): %v", err)
	}
	if p.node.ordered[0].lookupJob("never") != nil {
		t.Fatal("a reset started a job")
	}
	waitFor(t, 10*time.Second, "job x retired", func() bool { return p.node.ordered[0].lookupJob("x") == nil })
	if _, err := os.Stat(filepath.Join(state, "ds@x.scores")); err != nil {
		t.Fatalf("retired job's scores not saved: %v", err)
	}
	// Room again, and x comes back with its importance.
	if err := c.Do(ctx, "SHADE.ORDER", "ds", 0, 0, 1, "JOB", "x").Err(); err != nil {
		t.Fatal(err)
	}
	js := p.node.ordered[0].lookupJob("x")
	if js == nil {
		t.Fatal("job x not started again")
	}
	if scored, _ := js.scores.Summary(); scored != 2 {
		t.Errorf("job x starts again with %d samples scored, want 2", scored)
	}
	if scored, _ := p.node.ordered[0].def.scores.Summary(); scored != 0 {
		t.Errorf("job x's reports reached the default job: %d scored", scored)
	}
}

// TestReadsAreCountedPerJob: the reads of a connection that named a job
// (SHADE.JOB) count for that job, hits and source reads apart.
func TestReadsAreCountedPerJob(t *testing.T) {
	dir, _ := makeDataset(t, 50, 10, 20)
	p := startPeer(t, Config{Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	ctx := context.Background()
	a, b := p.client(t), p.client(t)
	if err := a.Do(ctx, "SHADE.ORDER", "ds", 0, 0, 1, "JOB", "a").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Do(ctx, "SHADE.JOB", "b").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Do(ctx, "SHADE.ORDER", "ds", 0, 0, 1, "JOB", "b").Err(); err != nil {
		t.Fatal(err)
	}
	keys := testsupport.Keys("ds", []int64{1, 2, 3})
	if err := a.MGet(ctx, keys...).Err(); err != nil { // 3 source reads for a
		t.Fatal(err)
	}
	for _, k := range keys { // 3 hits for b
		if err := b.Get(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string][3]int64{}
	for _, j := range p.node.Snapshot().Datasets[0].Jobs {
		got[j.Name] = [3]int64{j.Reads, j.Hits, j.SourceReads}
	}
	if got["a"] != [3]int64{3, 0, 3} || got["b"] != [3]int64{3, 3, 0} || got["default"] != [3]int64{} {
		t.Errorf("reads, hits, source reads per job: %v", got)
	}
}

// TestAJobJoiningAnEpochStartsWhereTheOthersAre: the orders of an epoch
// are aligned, and a job that begins an epoch another job is halfway
// through starts its order where the other is, so that both read each
// sample they share at about the same time.
func TestAJobJoiningAnEpochStartsWhereTheOthersAre(t *testing.T) {
	dir, _ := makeDataset(t, 200, 10, 20)
	p := startPeer(t, Config{Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	c := p.client(t)
	ctx := context.Background()
	a, err := c.Do(ctx, "SHADE.ORDER", "ds", 0, 0, 1, "JOB", "a").Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 200 {
		t.Fatalf("epoch 0 of job a: %d samples", len(a))
	}
	reportJob(t, c, "a", a[:100], unitLoss)
	b, err := c.Do(ctx, "SHADE.ORDER", "ds", 0, 0, 1, "JOB", "b").Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	// Epoch 0 is a permutation for both: aligned alike, b starts at a's
	// sample 100.
	if want := append(slices.Clone(a[100:]), a[:100]...); !slices.Equal(b, want) {
		t.Errorf("job b's epoch 0 does not start where job a is:\n a %v\n b %v", a, b)
	}
}

// TestAJobThatReadAnEpochSetsNoPhase: a job that has read all of an
// epoch (its ranks have yet to say they are done) is no longer where the
// epoch is read: a job beginning that epoch starts where the others still
// reading it are.
func TestAJobThatReadAnEpochSetsNoPhase(t *testing.T) {
	dir, _ := makeDataset(t, 200, 10, 20)
	p := startPeer(t, Config{Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	c := p.client(t)
	ctx := context.Background()
	order := func(job string) []int64 {
		t.Helper()
		ids, err := c.Do(ctx, "SHADE.ORDER", "ds", 0, 0, 1, "JOB", job).Int64Slice()
		if err != nil || len(ids) != 200 {
			t.Fatalf("epoch 0 of job %s: %d samples, %v", job, len(ids), err)
		}
		return ids
	}
	a := order("a")
	reportJob(t, c, "a", a[:60], unitLoss)
	done := order("done") // starts where a is, at 60, and reads it all
	reportJob(t, c, "done", done, unitLoss)
	reportJob(t, c, "a", a[60:100], unitLoss)
	b := order("b")
	if want := append(slices.Clone(a[100:]), a[:100]...); !slices.Equal(b, want) {
		t.Errorf("job b's epoch 0 does not start where job a is (100):\n a %v\n b %v", a, b)
	}
}

// TestJobsOfADatasetDrawTogether: the jobs of a dataset draw their
// importance-sampled epochs from one set of random numbers
// (sampling.Config.DrawSeed), so two jobs whose scores agree draw the same
// samples, each with its own seed for the rest; jobs kept apart
// (IsolateJobs) draw on their own.
func TestJobsOfADatasetDrawTogether(t *testing.T) {
	for _, isolate := range []bool{false, true} {
		t.Run(fmt.Sprintf("isolate=%v", isolate), func(t *testing.T) {
			dir, files := makeDataset(t, 200, 10, 20)
			p := startPeer(t, Config{Score: sampling.ScoreMagnitude, IsolateJobs: isolate,
				Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
			c := p.client(t)
			ctx := context.Background()
			loss := func(id int64) float64 { return 0.1 + float64(id*id%97) } // the same for both jobs
			counts := map[string][]int{}
			for _, job := range []string{"a", "b"} {
				if _, err := trainEpoch(ctx, c, files, job, 0, 0, 1, loss); err != nil {
					t.Fatal(err)
				}
				if err := c.Do(ctx, "SHADE.DONE", "ds", 0, 0, "JOB", job).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for _, job := range []string{"a", "b"} {
				ids, err := c.Do(ctx, "SHADE.ORDER", "ds", 1, 0, 1, "JOB", job).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				counts[job] = make([]int, len(files))
				for _, id := range ids {
					counts[job][id]++
				}
			}
			if same := slices.Equal(counts["a"], counts["b"]); same == isolate {
				t.Errorf("jobs a and b drew the same samples: %v, want %v", same, !isolate)
			}
		})
	}
}

// reportJob reports the losses loss gives samples ids of epoch 0 of
// dataset "ds" for job.
func reportJob(t *testing.T, c *redis.Client, job string, ids []int64, loss func(id int64) float64) {
	t.Helper()
	args := []any{"SHADE.REPORT", "ds", 0}
	for _, id := range ids {
		args = append(args, id, loss(id))
	}
	if err := c.Do(context.Background(), append(args, "JOB", job)...).Err(); err != nil {
		t.Fatal(err)
	}
}

// unitLoss gives every sample a loss of 1.
func unitLoss(int64) float64 { return 1 }

// aFinishesWhileBTrains has job b of dataset "ds" train half of epoch 0
// and job a all of it, and a say it is done. It returns b's order and a
// function that reports samples of it, with the losses a's were given.
func aFinishesWhileBTrains(t *testing.T, c *redis.Client, files [][]byte) (b []int64, report func(ids []int64)) {
	t.Helper()
	ctx := context.Background()
	loss := func(id int64) float64 { return 0.1 + float64(id%7) }
	report = func(ids []int64) {
		t.Helper()
		reportJob(t, c, "b", ids, loss)
	}
	b, err := c.Do(ctx, "SHADE.ORDER", "ds", 0, 0, 1, "JOB", "b").Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	report(b[:len(b)/2])
	if _, err := trainEpoch(ctx, c, files, "a", 0, 0, 1, loss); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "SHADE.DONE", "ds", 0, 0, "JOB", "a").Err(); err != nil {
		t.Fatal(err)
	}
	return b, report
}

// TestJobsBeginEpochsTogether: with JobSync, a job that finished an
// epoch another job of the dataset is still training waits for it: its
// next order is published when the other job publishes its own. A job
// kept apart (IsolateJobs) does not wait.
func TestJobsBeginEpochsTogether(t *testing.T) {
	for _, isolate := range []bool{false, true} {
		t.Run(fmt.Sprintf("isolate=%v", isolate), func(t *testing.T) {
			dir, files := makeDataset(t, 200, 10, 20)
			// A wait of a million epochs: only the other job releases it.
			p := startPeer(t, Config{JobSync: 1e6, IsolateJobs: isolate, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}},
				transport.SocketConfig{})
			c := p.client(t)
			ctx := context.Background()
			b, report := aFinishesWhileBTrains(t, c, files)
			a := p.node.ordered[0].lookupJob("a")
			if got, want := a.book.Newest().Epoch, map[bool]int{false: 0, true: 1}[isolate]; got != want {
				t.Fatalf("job a's newest epoch while b trains epoch 0: %d, want %d", got, want)
			}
			// b finishes: both begin epoch 1.
			report(b[len(b)/2:])
			if err := c.Do(ctx, "SHADE.DONE", "ds", 0, 0, "JOB", "b").Err(); err != nil {
				t.Fatal(err)
			}
			for _, job := range []string{"a", "b"} {
				if err := c.Do(ctx, "SHADE.ORDER", "ds", 1, 0, 1, 30000, "JOB", job).Err(); err != nil {
					t.Fatalf("job %s epoch 1: %v", job, err)
				}
			}
			// The leader counts a's held epoch, with its wait.
			wantHeld := map[string]int{"a": 1, "b": 0}
			if isolate {
				wantHeld["a"] = 0
			}
			for job, want := range wantHeld {
				st := jobStatsOf(t, p.node, job)
				if st.HeldEpochs != want || (st.HeldEpochSeconds > 0) != (want > 0) || st.HeldStarts != 0 {
					t.Errorf("job %s: held epochs %d (%gs), held starts %d; want %d held epochs",
						job, st.HeldEpochs, st.HeldEpochSeconds, st.HeldStarts, want)
				}
			}
		})
	}
}

// jobStatsOf returns what SHADE.STATS says of job on n.
func jobStatsOf(t *testing.T, n *Node, job string) stats.Job {
	t.Helper()
	for _, j := range n.Snapshot().Datasets[0].Jobs {
		if j.Name == job {
			return j
		}
	}
	t.Fatalf("no job %s in %s's stats", job, n.cfg.Name)
	return stats.Job{}
}

// TestJobsAheadBeginEpochsTogether: where orders run ahead, a job that
// finished an epoch another job of the dataset is still training holds
// the next epoch's order already, and the epoch after it is drawn at
// once; its ranks begin the next epoch when the other job begins it too.
// A job kept apart (IsolateJobs) does not wait.
func TestJobsAheadBeginEpochsTogether(t *testing.T) {
	for _, isolate := range []bool{false, true} {
		t.Run(fmt.Sprintf("isolate=%v", isolate), func(t *testing.T) {
			// A wait of a million epochs: only the other job ends it.
			m := startMesh(t, 2, meshOpts{samples: 200, minSize: 10, maxSize: 20, configure: func(_ int, c *Config) {
				c.JobSync, c.OrderAhead, c.IsolateJobs = 1e6, 1, isolate
			}})
			files, lead := m.files, m.leader(t)
			// Both jobs train on the node that does not lead: the leader's
			// answers to their dones come over the mesh.
			p := m.peers[0]
			if p == lead {
				p = m.peers[1]
			}
			c := p.client(t)
			ctx := context.Background()
			b, report := aFinishesWhileBTrains(t, c, files)
			// Epoch 2 is drawn ahead off the done's path.
			waitFor(t, 10*time.Second, "job a's epoch 2 after it finished epoch 0", func() bool {
				return lead.node.ordered[0].lookupJob("a").leaderJob().Status().Latest == 2
			})
			// Asked without waiting, a's order of epoch 1 is held while b
			// trains epoch 0; kept apart, it is not.
			err := c.Do(ctx, "SHADE.ORDER", "ds", 1, 0, 1, 1, "JOB", "a").Err()
			if held := err != nil; held != !isolate {
				t.Fatalf("job a's order of epoch 1 while b trains epoch 0: %v; want it held: %v", err, !isolate)
			}
			if !isolate && !strings.Contains(err.Error(), "waiting for job b") {
				t.Fatalf("job a's held order: %v", err)
			}
			// b finishes epoch 0 and does not wait for a: both begin epoch 1.
			report(b[len(b)/2:])
			if err := c.Do(ctx, "SHADE.DONE", "ds", 0, 0, "JOB", "b").Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Do(ctx, "SHADE.ORDER", "ds", 1, 0, 1, 1, "JOB", "b").Err(); err != nil {
				t.Fatalf("job b's order of epoch 1: %v", err)
			}
			// That b began epoch 1 reaches a's node with the leader's
			// order of b's epoch 2, drawn ahead: a's rank asking before it
			// arrives would be held again until it does.
			if !isolate {
				waitBegun(t, p.node.ordered[0].lookupJob("b"), 1)
			}
			if err := c.Do(ctx, "SHADE.ORDER", "ds", 1, 0, 1, 30000, "JOB", "a").Err(); err != nil {
				t.Fatalf("job a's order of epoch 1: %v", err)
			}
			// a's peer counts its rank's held start, with its wait; the
			// leader held no epoch.
			wantHeld := map[string]int64{"a": 1, "b": 0}
			if isolate {
				wantHeld["a"] = 0
			}
			for job, want := range wantHeld {
				st, lst := jobStatsOf(t, p.node, job), jobStatsOf(t, lead.node, job)
				if st.HeldStarts != want || (st.HeldStartSeconds > 0) != (want > 0) || lst.HeldEpochs != 0 {
					t.Errorf("job %s: held starts %d (%gs), the leader's held epochs %d; want %d held starts",
						job, st.HeldStarts, st.HeldStartSeconds, lst.HeldEpochs, want)
				}
			}
		})
	}
}

// waitBegun waits until the orders js's node holds say it began epoch
// (datasetState.Head), or the test's deadline.
func waitBegun(t *testing.T, js *jobState, epoch int) {
	t.Helper()
	for {
		changed := js.book.Changes()
		if _, training := js.ds.Head(js.name); training >= epoch {
			return
		}
		select {
		case <-changed:
		case <-t.Context().Done():
			t.Fatalf("job %s never began epoch %d here", js.name, epoch)
		}
	}
}

// TestRetiredJobStaysRetired checks that an order of a job published
// before its retirement and delivered after it (a delayed or retried
// publication: each goes out on its own) does not start the job again on
// a peer, where nothing would retire it; and that a job of the same name
// started after the retirement trains, its orders one generation past
// the retirement's so that the peers take them.
func TestRetiredJobStaysRetired(t *testing.T) {
	m := startMesh(t, 2, meshOpts{samples: 60, minSize: 10, maxSize: 30, configure: func(i int, c *Config) {
		c.JobIdle = time.Second
	}})
	ctx := context.Background()
	clients := []*redis.Client{m.peers[0].client(t), m.peers[1].client(t)}
	loss := func(id int64) float64 { return float64(id%7) + 0.5 }
	train := func() {
		t.Helper()
		if _, err := trainJob(ctx, m.files, "b", 0, 2, 2, func(r int) *redis.Client { return clients[r] }, loss); err != nil {
			t.Fatal(err)
		}
	}
	// held lists the peers that know job b, with the generation and epoch
	// of its newest order.
	held := func() []string {
		var out []string
		for _, p := range m.peers {
			if js := p.node.ordered[0].lookupJob("b"); js != nil {
				gen, epoch, _ := js.book.Head()
				out = append(out, fmt.Sprintf("%s: gen %d epoch %d", p.node.cfg.Name, gen, epoch))
			}
		}
		return out
	}
	waitRetired := func() {
		t.Helper()
		if _, err := testsupport.Poll(ctx, 20*time.Second, func() bool { return len(held()) == 0 }); err != nil {
			t.Fatalf("job b not retired: %v; held by %v", err, held())
		}
	}

	train()
	var stale *wire.PublishMsg // job b's newest order, as every peer got it
	if js := m.peers[0].node.ordered[0].lookupJob("b"); js != nil {
		stale = js.book.Newest()
	}
	if stale == nil || stale.Gen != 0 {
		t.Fatalf("job b's newest order after training: %+v", stale)
	}
	waitRetired()

	// The order arrives again at every peer after the retirement.
	for _, p := range m.peers {
		if _, err := p.node.servePublish(ctx, "late", stale); err != nil {
			t.Fatalf("%s: %v", p.node.cfg.Name, err)
		}
	}
	if h := held(); len(h) != 0 {
		t.Fatalf("an order of job b from before its retirement started it again: %v", h)
	}

	// Job b again: it trains, and its orders are of the next generation.
	train()
	for _, p := range m.peers {
		js := p.node.ordered[0].lookupJob("b")
		if js == nil {
			t.Fatalf("%s does not know the new job b", p.node.cfg.Name)
		}
		if gen, epoch, _ := js.book.Head(); gen != 1 || epoch < 1 {
			t.Fatalf("%s: the new job b's newest order is of gen %d epoch %d, want gen 1, epoch 1 or later", p.node.cfg.Name, gen, epoch)
		}
	}
	waitRetired()
	// The second job's retirement, then the first job's order again.
	for _, p := range m.peers {
		if g := p.node.ordered[0].retiredGen("b"); g != 2 {
			t.Fatalf("%s remembers job b retired at gen %d, want 2", p.node.cfg.Name, g)
		}
		if _, err := p.node.servePublish(ctx, "late", stale); err != nil {
			t.Fatal(err)
		}
	}
	if h := held(); len(h) != 0 {
		t.Fatalf("an order of the first job b started it again: %v", h)
	}
}

// TestEveryJoinOfANewJobCounts: the ranks of a job the leader does not
// know yet join it all at once (as a job's ranks start together). The
// first join starts the job; a join that arrives while the job is being
// started must count toward it, not go to a leader state that the start
// then replaces: every job's epoch 0 is published once all its ranks
// joined, long before the join wait.
func TestEveryJoinOfANewJobCounts(t *testing.T) {
	const jobs, world = 200, 8
	m := startMesh(t, 1, meshOpts{samples: 300, configure: func(i int, c *Config) {
		c.Cluster.JoinWait = 10 * time.Minute
		c.MaxJobs = jobs + 1
	}})
	n := m.peers[0].node
	waitFor(t, 10*time.Second, "the node leads", n.lead.leading)
	var wg sync.WaitGroup
	for j := range jobs {
		for r := range world {
			wg.Go(func() {
				req := &wire.JoinReq{Dataset: "ds", Job: fmt.Sprint("j", j), Rank: r, World: world, Node: n.Name(), Have: -1}
				if err := n.leaderJoin(req); err != nil {
					t.Errorf("job %d rank %d: %v", j, r, err)
				}
			})
		}
	}
	wg.Wait()
	waitFor(t, 30*time.Second, "epoch 0 of every job published", func() bool {
		for j := range jobs {
			js := n.ordered[0].lookupJob(fmt.Sprint("j", j))
			if js == nil || js.book.Kept(0) == nil {
				return false
			}
		}
		return true
	})
}
