package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
)

const python = "/usr/bin/python3"

// TestChaosTraining runs the real PyTorch job (test/train/train_fmnist.py:
// 3 ranks with gloo, each reading through its own peer's socket) on a
// 3,000-image Fashion-MNIST subset while the driver kills and restarts
// peers, the leader and the ranks' own peers included. The Python client
// retries an unreachable peer for 30 s, so the job must finish every epoch
// with exit status 0 (a failed MGET raises in the training loop), and
// every epoch's order must come from the mesh: a rank that falls back to
// the uniform order (its peer "lost the job") or whose SHADE.DONE is
// refused trains a slice that is not part of the published order.
//
// It takes a minute or two, so it runs under `make chaos` (CHAOS_DURATION
// set) or with CHAOS_TRAINING=1, and skips otherwise. CHAOS_TRAIN_EPOCHS
// sets the epochs (default 5). Peers are killed every CHAOS_INTERVAL / 2
// (5 s by default; the job lasts about half a minute).
func TestChaosTraining(t *testing.T) {
	if os.Getenv("CHAOS_DURATION") == "" && os.Getenv("CHAOS_TRAINING") == "" {
		t.Skip("the PyTorch chaos run takes a minute or two: it runs under `make chaos` (CHAOS_DURATION set) or with CHAOS_TRAINING=1")
	}
	if err := exec.Command(python, "-c", "import torch, redis, PIL").Run(); err != nil {
		t.Skipf("PyTorch stack missing (Debian python3-torch, python3-redis, python3-pil): %v", err)
	}
	const fmnist = "/usr/share/datasets/fashion-mnist"
	if _, err := os.Stat(fmnist); err != nil {
		t.Skipf("Fashion-MNIST not installed (Debian package dataset-fashion-mnist): %v", err)
	}
	cfg := loadSettings(t)
	epochs := 5
	if v := os.Getenv("CHAOS_TRAIN_EPOCHS"); v != "" {
		var err error
		if epochs, err = strconv.Atoi(v); err != nil || epochs < 1 {
			t.Fatalf("CHAOS_TRAIN_EPOCHS=%q: want a positive count", v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	root := filepath.Join(t.TempDir(), "fmnist")
	if out, err := exec.CommandContext(ctx, bins.Path("shadectl"), "dataset", "import-idx",
		"--src", fmnist, "--dst", root, "--limit", "3000").CombinedOutput(); err != nil {
		t.Fatalf("shadectl dataset import-idx: %v\n%s", err, out)
	}
	logDir := filepath.Join(cfg.logDir, "training")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, ctx, numPeers, "fmnist-train", filepath.Join(root, "train"), logDir, 8<<20)
	var sockets []string
	for _, i := range rankPeers {
		sockets = append(sockets, m.peers[i].socket)
	}
	start := time.Now()
	var timeline []string
	event := func(format string, args ...any) {
		line := fmt.Sprintf("t=%5.1fs ", time.Since(start).Seconds()) + fmt.Sprintf(format, args...)
		timeline = append(timeline, line)
		t.Log(line)
	}
	out := new(testsupport.Buffer)
	cmd := exec.CommandContext(ctx, python, "../train/train_fmnist.py", "--sockets", strings.Join(sockets, ","),
		"--world", strconv.Itoa(world), "--epochs", strconv.Itoa(epochs), "--batch-size", "64",
		"--test-dir", filepath.Join(root, "test"))
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var runErr error
	go func() {
		runErr = cmd.Wait()
		close(exited)
	}()
	event("training started: %d epochs, ranks on %s", epochs, strings.Join(sockets, ", "))
	// The chaos starts with the job's first epoch (Python and torch take
	// several seconds to start; a kill during SHADE.RESET is its own test,
	// TestChaosResetDuringFailover).
	if !waitEpoch0(ctx, m, exited) {
		<-exited
		t.Fatalf("the job never published epoch 0: %v\n%s", runErr, out.String())
	}
	event("epoch 0 published: the chaos begins")

	dr := &driver{m: m, rng: rand.New(rand.NewPCG(cfg.seed, 2)), interval: max(cfg.interval/2, 3*time.Second), start: time.Now(), event: event}
	dr.run(ctx, t, 8*time.Minute, exited)
	<-exited
	took := time.Since(start)
	event("training exited: %v", runErr)

	text := out.String()
	// Rank 0 prints one line an epoch, ending with the sampler the peer
	// ran (train_fmnist.py).
	epochLine := regexp.MustCompile(`(?m)^epoch +(\d+) .*  sampler (.+?)(  job .*)?$`)
	lines := epochLine.FindAllStringSubmatch(text, -1)
	samplers := map[string]int{}
	for _, l := range lines {
		samplers[l[2]]++
	}
	fallbacks := strings.Count(text, "using the uniform order")
	// The client logs "SHADE.DONE ... refused (...)" and "report ... refused
	// by the peer"; "Connection refused" is a killed peer, retried.
	refusals := len(regexp.MustCompile(`SHADE\.DONE .* refused \(|refused by the peer`).FindAllString(text, -1))
	t.Logf("chaos training: kills %d, restarts %d, epochs %d of %d (samplers: %v), fallbacks to the uniform order %d, "+
		"refusals %d, membership convergence after restarts %v, %v, exit %v",
		dr.kills, dr.restarts, len(lines), epochs, samplers, fallbacks, refusals, roundAll(dr.convergence), took.Round(time.Second), runErr)
	failed := false
	fail := func(format string, args ...any) {
		failed = true
		t.Errorf(format, args...)
	}
	if runErr != nil {
		fail("the training job failed: %v", runErr)
	}
	if len(lines) != epochs {
		fail("%d epoch lines, want %d", len(lines), epochs)
	}
	if fallbacks > 0 {
		fail("%d times a rank fell back to the uniform order: its peer had lost the job after a restart", fallbacks)
	}
	if refusals > 0 {
		fail("%d refusals (SHADE.DONE or SHADE.REPORT) by live peers", refusals)
	}
	if strings.Contains(text, "Traceback") {
		fail("a Python traceback in the output")
	}
	if dr.kills == 0 {
		fail("no peer was killed: the training took %v, less than a quarter of CHAOS_INTERVAL %v", took, cfg.interval)
	}
	if p := m.panics(); len(p) > 0 {
		fail("panics or races in the peer logs:\n  %s", strings.Join(p, "\n  "))
	}
	for _, msg := range m.unexpectedExits() {
		fail("%s", msg)
	}
	if failed || testing.Verbose() {
		t.Logf("training output:\n%s", text)
	}
	if failed {
		t.Logf("timeline:\n  %s", strings.Join(timeline, "\n  "))
		for _, p := range m.peers {
			t.Logf("--- last lines of %s (%s):\n%s", p.name, p.logPath, p.logTail(30))
		}
	}
}

// waitEpoch0 waits until a peer reports the job's epoch 0 published;
// false if the job exited first.
func waitEpoch0(ctx context.Context, m *mesh, exited <-chan struct{}) bool {
	c := newClient(m.peers[1].socket)
	defer c.Close()
	for {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := statsOf(sctx, c)
		cancel()
		if err == nil && len(st.Datasets) > 0 && st.Datasets[0].Job.LatestEpoch >= 0 {
			return true
		}
		select {
		case <-exited:
			return false
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}
