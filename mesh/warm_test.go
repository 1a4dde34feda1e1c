package mesh

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/shade-mesh/shade/mesh/scores"
	"github.com/shade-mesh/shade/transport"
)

// TestWarmStartLoadsScoresAndPreloadsTheImportant reports importance in
// one run, stops the node, starts another on the same state directory and
// checks that it knows the scores and, when the next job starts, caches
// the most important samples first.
func TestWarmStartLoadsScoresAndPreloadsTheImportant(t *testing.T) {
	dir, _ := makeDataset(t, 400, 100, 100)
	state := t.TempDir()
	cfg := Config{CacheSize: 8 << 10, StateDir: state, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}
	first := startPeer(t, cfg, transport.SocketConfig{})
	c := first.client(t)
	ctx := context.Background()
	// Samples 0..39 are the most important: in every minibatch they have
	// the highest losses (importance is a rank within the batch).
	for b := 0; b < 12; b++ {
		args := []any{"SHADE.REPORT", "ds", 0}
		for k := 0; k < 10; k++ {
			args = append(args, (b*10+k)%40, 9.0)
		}
		for k := 0; k < 30; k++ {
			args = append(args, 40+b*30+k, 0.1+float64(k)/1000)
		}
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	first.sock.Close()
	first.node.Close()
	if _, err := os.Stat(filepath.Join(state, "ds.scores")); err != nil {
		t.Fatalf("no saved scores after a stop: %v", err)
	}
	want := first.node.ordered[0]
	second := startPeer(t, cfg, transport.SocketConfig{})
	got := second.node.ordered[0]
	if got.def.scores.Sampling().NumScored() != want.def.scores.Sampling().NumScored() || got.def.scores.Sampling().Score(3) != want.def.scores.Sampling().Score(3) {
		t.Fatalf("restarted node has %d scored (score[3] %v); the first had %d (%v)",
			got.def.scores.Sampling().NumScored(), got.def.scores.Sampling().Score(3), want.def.scores.Sampling().NumScored(), want.def.scores.Sampling().Score(3))
	}
	// A new job starts: the cache fills with the important samples first.
	if err := second.client(t).Do(ctx, "SHADE.ORDER", "ds", 0, 0, 1).Err(); err != nil {
		t.Fatal(err)
	}
	important := func() int {
		k := 0
		for i := 0; i < 40; i++ {
			if second.node.store.Has([]byte("ds/" + strconv.Itoa(i))) {
				k++
			}
		}
		return k
	}
	waitFor(t, 10*time.Second, "the 40 most important samples are cached", func() bool { return important() == 40 })
	t.Logf("warmed %d entries, the 40 most important among them", second.node.store.Len())
	// SHADE.WARM does the same on request; what is cached stays.
	if n, err := second.client(t).Do(ctx, "SHADE.WARM", "ds").Int(); err != nil || n != 0 && important() != 40 {
		t.Errorf("SHADE.WARM: %d, %v", n, err)
	}
}

func TestUnusableSavedScoresStartCold(t *testing.T) {
	dir, _ := makeDataset(t, 50, 10, 20)
	for name, content := range map[string]string{
		"garbage":       "not a score file",
		"other version": scores.Magic + "0123456789abcdef\nxxxx",
		"torn table":    "", // filled below with the right version
	} {
		t.Run(name, func(t *testing.T) {
			state := t.TempDir()
			if name == "torn table" {
				n, err := New(Config{Name: "v", CacheSize: 1 << 20, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}})
				if err != nil {
					t.Fatal(err)
				}
				content = scores.Magic + n.ordered[0].manifest.Version + "\n\x01\x02"
				n.Close()
			}
			os.WriteFile(filepath.Join(state, "ds.scores"), []byte(content), 0o640)
			p := startPeer(t, Config{CacheSize: 1 << 20, StateDir: state, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
			if n := p.node.ordered[0].def.scores.Sampling().NumScored(); n != 0 {
				t.Errorf("%d scores loaded from an unusable file", n)
			}
			if err := p.client(t).Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
