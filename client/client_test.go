package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/protocol/samplekey"
)

// bins holds the shade-peer built once for every test.
var bins *testsupport.Binaries

func TestMain(m *testing.M) {
	testsupport.Main(m, testsupport.BuildOptions{Commands: []string{"shade-peer"}}, &bins)
}

// writeDataset writes a small ImageFolder tree whose classes are named out
// of order (the manifest's order is the sorted one): ant 5 files, bee 9,
// cat 4, of 1 to 4,000 bytes.
func writeDataset(t *testing.T) *testsupport.Dataset {
	t.Helper()
	return testsupport.WriteDataset(t, testsupport.DatasetSpec{
		Classes: []string{"cat", "ant", "bee"}, PerClass: []int{4, 5, 9}, MinSize: 1, MaxSize: 4000, Seed: 1,
	})
}

// startPeer runs shade-peer on socket with args and returns once it
// answers there.
func startPeer(t *testing.T, socket string, args ...string) *testsupport.Peer {
	t.Helper()
	return testsupport.StartPeer(t, testsupport.PeerOptions{
		Bin: bins.Path("shade-peer"), Socket: socket,
		Args: append([]string{"--name", "client-test", "--log-format", "json", "--cache-size", "16MiB"}, args...),
	})
}

// startToy serves writeDataset's dataset as "toy" from a peer started
// with args on a new socket, and returns the dataset and the socket.
func startToy(t *testing.T, args ...string) (*testsupport.Dataset, string) {
	t.Helper()
	d, sock := writeDataset(t), socketPath(t)
	startPeer(t, sock, append([]string{"--dataset", "toy=" + d.Dir}, args...)...)
	return d, sock
}

func newClient(t *testing.T, o Options) *Client {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func socketPath(tb testing.TB) string { return filepath.Join(tb.TempDir(), "shade.sock") }

func TestSamplesManifestLabels(t *testing.T) {
	d, sock := startToy(t)
	c := newClient(t, Options{Socket: sock})
	ctx := t.Context()

	for pass := range 2 { // read through, then from the cache
		for id, want := range d.Files {
			got, err := c.Get(ctx, "toy", id)
			if err != nil {
				t.Fatalf("pass %d: Get(toy, %d): %v", pass, id, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("pass %d: Get(toy, %d) = %d bytes, want the file %s (%d bytes)",
					pass, id, len(got), d.Names[id], len(want))
			}
		}
	}

	ids := []int{17, 3, 3, 0, 9, 12, 1}
	got, err := c.MGet(ctx, "toy", ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ids) {
		t.Fatalf("MGet returned %d samples for %d ids", len(got), len(ids))
	}
	for i, id := range ids {
		if !bytes.Equal(got[i], d.Files[id]) {
			t.Errorf("MGet position %d is not sample %d", i, id)
		}
	}
	got[1][0]++ // the caller owns each slice: a repeated id is not shared
	if !bytes.Equal(got[2], d.Files[3]) {
		t.Error("MGet returned one slice for a repeated id")
	}
	if got, err := c.MGet(ctx, "toy", nil); err != nil || len(got) != 0 {
		t.Errorf("MGet of no ids = %v, %v", got, err)
	}

	n := len(d.Files)
	for _, tc := range []struct {
		dataset string
		id      int
	}{{"toy", n}, {"toy", 1 << 30}, {"nosuch", 0}} {
		_, err := c.Get(ctx, tc.dataset, tc.id)
		var se *SampleError
		key := samplekey.Format(tc.dataset, tc.id)
		if !errors.Is(err, ErrNotFound) || !errors.As(err, &se) || se.Key != key {
			t.Errorf("Get(%s, %d) = %v, want a SampleError for %s wrapping ErrNotFound", tc.dataset, tc.id, err, key)
		}
	}
	_, err = c.MGet(ctx, "toy", []int{0, 1, n, 2})
	var se *SampleError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &se) || se.Key != fmt.Sprintf("toy/%d", n) {
		t.Errorf("MGet with id %d out of range = %v, want a SampleError naming toy/%d", n, err, n)
	}
	_, err = c.Get(ctx, "toy", -1) // a malformed index: an error reply for that key
	var srv *ServerError
	if !errors.As(err, &se) || se.Key != "toy/-1" || !errors.As(err, &srv) {
		t.Errorf("Get(toy, -1) = %v, want a SampleError wrapping a ServerError", err)
	}

	paths, err := c.Manifest(ctx, "toy")
	if err != nil || !slices.Equal(paths, d.Names) {
		t.Errorf("Manifest = %q, %v; want %q", paths, err, d.Names)
	}
	labels, err := c.Labels(ctx, "toy")
	if err != nil || !slices.Equal(labels, d.Labels) {
		t.Errorf("Labels = %v, %v; want %v", labels, err, d.Labels)
	}

	st, err := c.Stats(ctx, "toy")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Datasets) != 1 || st.Datasets[0].Dataset != "toy" || st.Datasets[0].Samples != n ||
		st.Datasets[0].Total.Hits == 0 || st.CacheCapacity != 16<<20 {
		t.Errorf("Stats(toy) = %+v", st)
	}
}

func TestOrderReportDoneTwoRanksTwoEpochs(t *testing.T) {
	d, sock := startToy(t)
	c := newClient(t, Options{Socket: sock})
	ctx := t.Context()
	n := len(d.Files)

	const world, epochs = 2, 2
	var orders [epochs][world][]int
	if err := testsupport.Parallel(world, func(rank int) error {
		for epoch := range epochs {
			ids, err := c.Order(ctx, "toy", epoch, rank, world, 20*time.Second)
			if err != nil {
				return fmt.Errorf("rank %d: Order(epoch %d): %w", rank, epoch, err)
			}
			orders[epoch][rank] = ids
			samples, err := c.MGet(ctx, "toy", ids)
			if err != nil {
				return fmt.Errorf("rank %d: MGet: %w", rank, err)
			}
			losses := make([]float64, len(ids))
			for i := range samples {
				losses[i] = float64(len(samples[i])) / 1000
			}
			if err := c.Report(ctx, "toy", epoch, ids, losses); err != nil {
				return fmt.Errorf("rank %d: Report(epoch %d): %w", rank, epoch, err)
			}
			if err := c.Done(ctx, "toy", epoch, rank); err != nil {
				return fmt.Errorf("rank %d: Done(epoch %d): %w", rank, epoch, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Epoch 0 is a permutation cut into equal slices; later epochs draw
	// with replacement, still n in all.
	all := slices.Concat(orders[0][0], orders[0][1])
	slices.Sort(all)
	for i, id := range all {
		if id != i {
			t.Fatalf("epoch 0's slices together are not a permutation of 0..%d: %v", n-1, orders[0])
		}
	}
	for epoch := range epochs {
		for rank := range world {
			ids := orders[epoch][rank]
			if len(ids) != n/world {
				t.Errorf("epoch %d rank %d: %d ids, want %d", epoch, rank, len(ids), n/world)
			}
			for _, id := range ids {
				if id < 0 || id >= n {
					t.Errorf("epoch %d rank %d: id %d out of range", epoch, rank, id)
				}
			}
		}
	}

	st, err := c.Stats(ctx, "toy")
	if err != nil {
		t.Fatal(err)
	}
	job := st.Datasets[0].Job
	if job.World != world || job.LatestEpoch != epochs || job.Reports != world*epochs || job.ReportedIDs != int64(epochs*n) {
		t.Errorf("job after 2 ranks x 2 epochs: %+v (want world 2, latest epoch 2, 4 reports of %d samples)",
			job, epochs*n)
	}

	// A report above ReportChunk pairs goes out in parts.
	big := 2*ReportChunk + 5
	ids, losses := make([]int, big), make([]float64, big)
	for i := range ids {
		ids[i], losses[i] = i%n, float64(i%7)
	}
	if err := c.Report(ctx, "toy", epochs, ids, losses); err != nil {
		t.Fatal(err)
	}
	st, err = c.Stats(ctx, "toy")
	if err != nil {
		t.Fatal(err)
	}
	if job2 := st.Datasets[0].Job; job2.Reports != job.Reports+3 || job2.ReportedIDs != job.ReportedIDs+int64(big) {
		t.Errorf("a report of %d pairs: reports %d -> %d, samples %d -> %d; want 3 parts",
			big, job.Reports, job2.Reports, job.ReportedIDs, job2.ReportedIDs)
	}

	// Reset: a new job, any world.
	if err := c.Reset(ctx, "toy"); err != nil {
		t.Fatal(err)
	}
	if ids, err := c.Order(ctx, "toy", 0, 0, 1, 20*time.Second); err != nil || len(ids) != n {
		t.Errorf("after Reset, Order(epoch 0, world 1) = %d ids, %v; want %d", len(ids), err, n)
	}
}

func TestOrderTimeoutWhileARankTrains(t *testing.T) {
	// Orders not published ahead: epoch 1 waits for epoch 0's dones.
	_, sock := startToy(t, "--order-ahead", "0")
	c := newClient(t, Options{Socket: sock})
	ctx := t.Context()

	var wg sync.WaitGroup
	var errs [2]error
	for rank := range 2 {
		wg.Go(func() { _, errs[rank] = c.Order(ctx, "toy", 0, rank, 2, 20*time.Second) })
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatal(err)
	}
	if err := c.Done(ctx, "toy", 0, 0); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	_, err := c.Order(ctx, "toy", 1, 0, 2, 200*time.Millisecond)
	took := time.Since(start)
	var se *ServerError
	if !errors.Is(err, ErrOrderTimeout) || !errors.As(err, &se) || se.Code != "TIMEOUT" {
		t.Fatalf("Order(epoch 1) with rank 1 still training = %v, want ErrOrderTimeout", err)
	}
	t.Logf("Order with a 200ms wait returned after %v", took)
	if took < 200*time.Millisecond {
		t.Errorf("Order with a 200ms wait returned after %v, before its wait", took)
	}
	if errors.Is(err, ErrUnavailable) {
		t.Errorf("a TIMEOUT reply is not unavailability: %v", err)
	}

	if err := c.Done(ctx, "toy", 0, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Order(ctx, "toy", 1, 0, 2, 20*time.Second); err != nil {
		t.Errorf("Order(epoch 1) after both ranks are done: %v", err)
	}
}

func TestMGetSurvivesPeerRestart(t *testing.T) {
	d := writeDataset(t)
	sock := socketPath(t)
	args := []string{"--dataset", "toy=" + d.Dir}
	p := startPeer(t, sock, args...)
	c := newClient(t, Options{Socket: sock})
	ctx := t.Context()

	ids := make([]int, len(d.Files))
	for i := range ids {
		ids[i] = len(ids) - 1 - i
	}
	var (
		loops atomic.Int64
		stop  = make(chan struct{})
		done  = make(chan error, 1)
	)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			got, err := c.MGet(ctx, "toy", ids)
			if err != nil {
				done <- fmt.Errorf("MGet in loop %d: %w", loops.Load(), err)
				return
			}
			for i, id := range ids {
				if !bytes.Equal(got[i], d.Files[id]) {
					done <- fmt.Errorf("MGet in loop %d: position %d is not sample %d", loops.Load(), i, id)
					return
				}
			}
			loops.Add(1)
		}
	}()
	// waitLoops waits until the loop has gone round n more times.
	waitLoops := func(n int64, what string) {
		t.Helper()
		target := loops.Load() + n
		testsupport.WaitFor(t, 30*time.Second, fmt.Sprintf("the MGet loop goes round %d more times (%s)", n, what), func() bool {
			select {
			case err := <-done:
				t.Fatalf("%s: %v", what, err)
			default:
			}
			return loops.Load() >= target
		})
	}

	waitLoops(20, "before the kill")
	p.Kill()
	startPeer(t, sock, args...)
	waitLoops(20, "after the restart")
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestUnavailableWhenNothingListens(t *testing.T) {
	sock := socketPath(t)
	c := newClient(t, Options{Socket: sock, RetryFor: 300 * time.Millisecond})
	start := time.Now()
	_, err := c.Get(t.Context(), "toy", 0)
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), sock) {
		t.Fatalf("Get with no peer = %v, want ErrUnavailable naming %s", err, sock)
	}
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("ErrUnavailable does not wrap the cause (no socket file): %v", err)
	}
	t.Logf("gave up after %v (RetryFor 300ms)", took)
	if took < 300*time.Millisecond {
		t.Errorf("gave up after %v, before RetryFor (300ms)", took)
	}

	// A caller's deadline ends the retries first.
	c = newClient(t, Options{Socket: sock})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := c.Ping(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Ping past the caller's deadline = %v, want context.DeadlineExceeded", err)
	}
}

func TestBadRequestIsAServerErrorNotRetried(t *testing.T) {
	d, sock := startToy(t)
	c := newClient(t, Options{Socket: sock}) // RetryFor 30s: a retry would show
	ctx := t.Context()

	for _, tc := range []struct {
		name   string
		ids    []int
		losses []float64
	}{
		{"NaN loss", []int{0, 1}, []float64{0.5, math.NaN()}},
		{"infinite loss", []int{0}, []float64{math.Inf(1)}},
		{"id out of range", []int{len(d.Files)}, []float64{1}},
	} {
		start := time.Now()
		err := c.Report(ctx, "toy", 0, tc.ids, tc.losses)
		var se *ServerError
		if !errors.As(err, &se) || se.Code != "ERR" || errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: Report = %v, want a *ServerError (never retried)", tc.name, err)
		}
		t.Logf("%s: the error reply took %v", tc.name, time.Since(start))
	}
	if err := c.Report(ctx, "toy", 0, []int{0, 1}, []float64{1}); err == nil {
		t.Error("Report with 2 ids and 1 loss succeeded")
	}
	st, err := c.Stats(ctx, "toy")
	if err != nil {
		t.Fatal(err)
	}
	if r := st.Datasets[0].Job.Reports; r != 0 {
		t.Errorf("%d refused reports were counted", r)
	}
	if err := c.Ping(ctx); err != nil {
		t.Errorf("Ping after error replies: %v", err)
	}
}

func TestPassword(t *testing.T) {
	d, sock := startToy(t, "--requirepass", "s3cret")
	ctx := t.Context()

	c := newClient(t, Options{Socket: sock, Password: "s3cret"})
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "toy", 4); err != nil || !bytes.Equal(got, d.Files[4]) {
		t.Errorf("Get with the password = %d bytes, %v", len(got), err)
	}

	for _, tc := range []struct{ password, code string }{{"", "NOAUTH"}, {"wrong", "WRONGPASS"}} {
		c := newClient(t, Options{Socket: sock, Password: tc.password})
		start := time.Now()
		_, err := c.Manifest(ctx, "toy")
		var se *ServerError
		if !errors.As(err, &se) || se.Code != tc.code {
			t.Errorf("password %q: Manifest = %v, want a %s reply", tc.password, err, tc.code)
		}
		t.Logf("password %q: the refusal took %v", tc.password, time.Since(start))
		_, err = c.Get(ctx, "toy", 0)
		var sample *SampleError
		if !errors.As(err, &se) || se.Code != tc.code || errors.As(err, &sample) {
			t.Errorf("password %q: Get = %v, want a bare %s reply", tc.password, err, tc.code)
		}
	}
}

func TestNewValidates(t *testing.T) {
	for _, o := range []Options{
		{},
		{Socket: "s", ReadTimeout: -1},
		{Socket: "s", DialTimeout: -time.Second},
		{Socket: "s", RetryFor: -1},
		{Socket: "s", PoolSize: -1},
	} {
		if c, err := New(o); err == nil {
			c.Close()
			t.Errorf("New(%+v) succeeded", o)
		}
	}
	o := Options{Socket: "/nonexistent/shade.sock"}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if o != (Options{Socket: "/nonexistent/shade.sock"}) {
		t.Errorf("New changed the caller's Options: %+v", o)
	}
}

func TestParseServerError(t *testing.T) {
	for _, tc := range []struct{ reply, code, msg string }{
		{"ERR mesh: bad report", "ERR", "mesh: bad report"},
		{"TIMEOUT mesh: order not published in time: epoch 1", "TIMEOUT", "mesh: order not published in time: epoch 1"},
		{"WRONGPASS invalid username-password pair", "WRONGPASS", "invalid username-password pair"},
		{"READONLY", "READONLY", ""},
		{"unknown command 'X'", "ERR", "unknown command 'X'"},
		{"", "ERR", ""},
	} {
		e := parseServerError(tc.reply)
		if e.Code != tc.code || e.Msg != tc.msg {
			t.Errorf("parseServerError(%q) = %q %q, want %q %q", tc.reply, e.Code, e.Msg, tc.code, tc.msg)
		}
		if got := errors.Is(e, ErrOrderTimeout); got != (tc.code == "TIMEOUT") {
			t.Errorf("errors.Is(%q, ErrOrderTimeout) = %v", tc.reply, got)
		}
	}
}

func TestLabelsFromManifest(t *testing.T) {
	got, err := LabelsFromManifest([]string{"b/1", "b/2", "a/x/3", "c/4", "a/5"})
	if want := []int{1, 1, 0, 2, 0}; err != nil || !slices.Equal(got, want) {
		t.Errorf("LabelsFromManifest = %v, %v; want %v", got, err, want)
	}
	if got, err := LabelsFromManifest(nil); err != nil || len(got) != 0 {
		t.Errorf("LabelsFromManifest(nil) = %v, %v", got, err)
	}
	if _, err := LabelsFromManifest([]string{"a/1", "top.bin"}); err == nil {
		t.Error("a path outside any class folder was accepted")
	}
}

func TestFormatLoss(t *testing.T) {
	for x, want := range map[float64]string{0.25: "0.25", 1e-300: "1e-300", -3: "-3", math.Inf(1): "+Inf"} {
		if got := formatLoss(x); got != want {
			t.Errorf("formatLoss(%v) = %q, want %q", x, got, want)
		}
	}
}

// TestOrderWeights: a peer drawing with loss-magnitude scores, a weight
// cap and cache-aware draws hands out, beside each id, its importance
// weight: all 1 in the epoch-0 permutation, then positive, within the cap,
// not all equal, and the ids are those the plain Order returns.
func TestOrderWeights(t *testing.T) {
	d, sock := startToy(t, "--score", "magnitude", "--max-weight", "4", "--boost", "3", "--uniform-floor", "0.2", "--order-ahead", "0")
	c := newClient(t, Options{Socket: sock})
	ctx := t.Context()
	n := len(d.Files)

	ids, weights, err := c.OrderWeights(ctx, "toy", 0, 0, 1, 20*time.Second)
	if err != nil || len(ids) != n || len(weights) != n {
		t.Fatalf("OrderWeights(epoch 0) = %d ids, %d weights, %v; want %d", len(ids), len(weights), err, n)
	}
	for i, w := range weights {
		if w != 1 {
			t.Fatalf("epoch 0 is a permutation, but id %d has weight %v", ids[i], w)
		}
	}
	// Epoch 0 trained: the first half of the ids had a high loss.
	losses := make([]float64, n)
	for i := range ids {
		losses[i] = 0.01
		if i < n/2 {
			losses[i] = 3
		}
	}
	if err := c.Report(ctx, "toy", 0, ids, losses); err != nil {
		t.Fatal(err)
	}
	if err := c.Done(ctx, "toy", 0, 0); err != nil {
		t.Fatal(err)
	}
	ids1, weights1, err := c.OrderWeights(ctx, "toy", 1, 0, 1, 20*time.Second)
	if err != nil || len(weights1) != len(ids1) {
		t.Fatalf("OrderWeights(epoch 1) = %d ids, %d weights, %v", len(ids1), len(weights1), err)
	}
	plain, err := c.Order(ctx, "toy", 1, 0, 1, 20*time.Second)
	if err != nil || !slices.Equal(plain, ids1) {
		t.Fatalf("Order(epoch 1) = %v, %v; OrderWeights gave %v", plain, err, ids1)
	}
	hard := make(map[int]bool)
	for _, id := range ids[:n/2] {
		hard[id] = true
	}
	var lo, hi float64 = math.Inf(1), 0
	for i, w := range weights1 {
		if !(w > 0) || w > 4+1e-6 {
			t.Errorf("id %d: weight %v outside (0, 4]", ids1[i], w)
		}
		lo, hi = min(lo, w), max(hi, w)
		if hard[ids1[i]] && w >= 1 {
			t.Errorf("id %d had a high loss yet weight %v: it was not drawn more often than uniform", ids1[i], w)
		}
	}
	if lo == hi {
		t.Errorf("every weight of epoch 1 is %v: the scores did not shape the draw", lo)
	}
}

// TestOrderPackedMatchesText: the orders Order and OrderWeights read from
// SHADE.ORDER ... PACKED are those of the reply with an element per id, id
// for id and weight for weight, in a permutation and in a weighted epoch;
// and packedOrder refuses replies of the wrong shape. The peer's weights
// are float32: packed, each is that float32 exactly; as text, the
// shortest decimal that reads back as it, which as a float64 differs in
// the digits past float32's, so the two are compared as float32.
func TestOrderPackedMatchesText(t *testing.T) {
	d, sock := startToy(t, "--score", "magnitude", "--max-weight", "4", "--order-ahead", "0")
	c := newClient(t, Options{Socket: sock})
	ctx := t.Context()
	n := len(d.Files)
	for epoch := range 2 {
		ids, weights, err := c.OrderWeights(ctx, "toy", epoch, 0, 1, 20*time.Second)
		if err != nil || len(ids) != n {
			t.Fatalf("epoch %d: OrderWeights = %d ids, %v", epoch, len(ids), err)
		}
		args := []any{"SHADE.ORDER", "toy", epoch, 0, 1}
		textIDs, textWeights, err := c.textOrder(ctx, serverOrderLimit, append(args, "WITHWEIGHTS"), true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, textIDs) || len(weights) != len(textWeights) {
			t.Fatalf("epoch %d: the packed order differs from the text one", epoch)
		}
		for i := range weights {
			if float64(float32(weights[i])) != weights[i] || float32(weights[i]) != float32(textWeights[i]) {
				t.Fatalf("epoch %d, id %d: packed weight %v, text weight %v", epoch, ids[i], weights[i], textWeights[i])
			}
		}
		plain, err := c.Order(ctx, "toy", epoch, 0, 1, 20*time.Second)
		if err != nil || !slices.Equal(plain, ids) {
			t.Fatalf("epoch %d: Order = %v, %v; want %v", epoch, plain, err, ids)
		}
		if c.packedRefused.Load() {
			t.Fatal("the peer refused PACKED")
		}
		if epoch == 0 {
			losses := make([]float64, n)
			for i := range losses {
				losses[i] = 0.01 + 0.1*float64(i%7)
			}
			if err := c.Report(ctx, "toy", 0, ids, losses); err != nil {
				t.Fatal(err)
			}
			if err := c.Done(ctx, "toy", 0, 0); err != nil {
				t.Fatal(err)
			}
		} else if slices.Min(weights) == slices.Max(weights) {
			t.Errorf("epoch 1 weighs every draw %v: the test checks no weighted order", weights[0])
		}
	}
	for _, bad := range []struct {
		v        any
		weighted bool
	}{
		{"abc", false},
		{[]any{int64(1)}, false},
		{[]any{"\x01\x00\x00\x00"}, true},
		{[]any{"\x01\x00\x00\x00", "\x00\x00"}, true},
		{[]any{"\x01\x00\x00\x00", "\x00\x00\xc0\x7f"}, true}, // NaN
		{[]any{"\x01\x00\x00\x00", "\x00\x00\x80\xbf"}, true}, // -1
	} {
		if _, _, err := packedOrder(bad.v, bad.weighted); err == nil {
			t.Errorf("packedOrder(%q, %v) took a malformed reply", bad.v, bad.weighted)
		}
	}
}

// TestOrderFromPeerBeforePacked runs against a real shade-peer built
// before SHADE.ORDER PACKED (its directory in SHADE_UNPACKED_BIN_DIR): the
// client asks again without PACKED, gets the order, and asks without it
// from then on; an error about the request itself is still returned.
func TestOrderFromPeerBeforePacked(t *testing.T) {
	dir := os.Getenv("SHADE_UNPACKED_BIN_DIR")
	if dir == "" {
		t.Skip("SHADE_UNPACKED_BIN_DIR (a shade-peer built before SHADE.ORDER PACKED) is not set")
	}
	d, sock := writeDataset(t), socketPath(t)
	testsupport.StartPeer(t, testsupport.PeerOptions{
		Bin: filepath.Join(dir, "shade-peer"), Socket: sock,
		Args: []string{"--name", "client-test", "--log-format", "json", "--cache-size", "16MiB", "--dataset", "toy=" + d.Dir},
	})
	c := newClient(t, Options{Socket: sock})
	ctx := t.Context()
	var se *ServerError
	if _, err := c.Order(ctx, "toy", 0, 3, 2, time.Second); !errors.As(err, &se) || !strings.Contains(se.Msg, "rank") {
		t.Fatalf("Order(rank 3 of 2) = %v, want the peer's error about the rank", err)
	}
	if c.packedRefused.Load() {
		t.Fatal("an error about the request was taken for a refusal of PACKED")
	}
	ids, weights, err := c.OrderWeights(ctx, "toy", 0, 0, 1, 20*time.Second)
	if err != nil || len(ids) != len(d.Files) || len(weights) != len(ids) {
		t.Fatalf("OrderWeights = %d ids, %d weights, %v", len(ids), len(weights), err)
	}
	if !c.packedRefused.Load() {
		t.Fatal("the old peer answered PACKED")
	}
	if plain, err := c.Order(ctx, "toy", 0, 0, 1, 20*time.Second); err != nil || !slices.Equal(plain, ids) {
		t.Fatalf("Order = %v, %v; want %v", plain, err, ids)
	}
	// A report, from a client that has not yet learned the peer's age.
	r := newClient(t, Options{Socket: sock})
	if err := r.Report(ctx, "toy", 0, ids[:3], []float64{0.5, 1, 2}); err != nil {
		t.Fatalf("Report to the old peer: %v", err)
	}
	if !r.packedRefused.Load() {
		t.Fatal("the old peer took a PACKED report")
	}
}

// TestReportPackedMergesAsText: two peers started alike, one sent every
// report PACKED and the other an argument per id and loss (as to an older
// peer), draw the same weighted order of the next epoch: the packed
// losses merge as the text ones do. (Checked: it fails with the packed
// losses sent in the wrong order. Rounding them to float32 changes no
// draw here, so it does not tell float64 from float32.) A report with an id out of range is
// refused either way, and one with an id that does not fit a uint32 goes
// as text and is refused by the peer.
func TestReportPackedMergesAsText(t *testing.T) {
	flags := []string{"--score", "magnitude", "--max-weight", "4", "--order-ahead", "0", "--seed", "7"}
	_, sockA := startToy(t, flags...)
	d, sockB := startToy(t, flags...)
	packed, text := newClient(t, Options{Socket: sockA}), newClient(t, Options{Socket: sockB})
	text.packedRefused.Store(true)
	ctx := t.Context()
	n := len(d.Files)
	var orders [2][]int
	var weights [2][]float64
	for k, c := range []*Client{packed, text} {
		ids, err := c.Order(ctx, "toy", 0, 0, 1, 20*time.Second)
		if err != nil || len(ids) != n {
			t.Fatalf("epoch 0: %d ids, %v", len(ids), err)
		}
		slices.Sort(ids) // both permutations differ; report in id order
		losses := make([]float64, n)
		for i, id := range ids {
			losses[i] = 0.1 + math.Pi*float64(id%5)/3 // not exact in decimal
		}
		if err := c.Report(ctx, "toy", 0, ids, losses); err != nil {
			t.Fatal(err)
		}
		if err := c.Report(ctx, "toy", 0, []int{n + 5}, []float64{1}); err == nil {
			t.Errorf("client %d: a report of id %d of %d was merged", k, n+5, n)
		}
		if err := c.Report(ctx, "toy", 0, []int{-1}, []float64{1}); err == nil {
			t.Errorf("client %d: a report of id -1 was merged", k)
		}
		if err := c.Done(ctx, "toy", 0, 0); err != nil {
			t.Fatal(err)
		}
		if orders[k], weights[k], err = c.OrderWeights(ctx, "toy", 1, 0, 1, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if packed.packedRefused.Load() {
		t.Fatal("the peer refused a PACKED report")
	}
	// The text client reads its order as text too: its weights are the
	// float32 values' shortest decimals, compared as float32.
	same := slices.Equal(orders[0], orders[1]) && slices.EqualFunc(weights[0], weights[1], func(a, b float64) bool { return float32(a) == float32(b) })
	if !same {
		t.Fatal("the peer sent packed reports draws another order than the one sent them as text")
	}
	if slices.Min(weights[0]) == slices.Max(weights[0]) {
		t.Fatal("epoch 1 weighs every draw alike: the reports did not shape it")
	}
}
