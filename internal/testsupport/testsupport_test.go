package testsupport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWriteDatasetIsInManifestOrder(t *testing.T) {
	d := WriteDataset(t, DatasetSpec{Classes: []string{"cat", "ant", "bee"}, PerClass: []int{2, 3, 1}, Seed: 1})
	if d.Len() != 6 || !slices.IsSorted(d.Names) {
		t.Fatalf("names %v: want 6, sorted", d.Names)
	}
	if want := []int{0, 0, 0, 1, 2, 2}; !slices.Equal(d.Labels, want) {
		t.Errorf("labels %v, want %v", d.Labels, want)
	}
	for i, name := range d.Names {
		b, err := os.ReadFile(filepath.Join(d.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Check(i, b); err != nil {
			t.Error(err)
		}
	}
	if d.Check(0, d.Files[1]) == nil || d.CheckValue(0, nil) == nil {
		t.Error("Check accepted the wrong bytes or a miss")
	}
	again := WriteDataset(t, DatasetSpec{Classes: []string{"cat", "ant", "bee"}, PerClass: []int{2, 3, 1}, Seed: 1})
	if err := CheckValues(again, []int{5, 0}, []any{string(d.Files[5]), d.Files[0]}); err != nil {
		t.Errorf("one spec wrote two datasets: %v", err)
	}
}

// TestFreePortIsBelowTheEphemeralRange: the ports drawn are below the
// range the kernel hands to sockets bound to port 0 (where there is room
// below it), and free for TCP and UDP.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	for range 20 {
		p := FreePort(t)
		if p <= 0 || (ephemeralStart() > 11000 && p >= ephemeralStart()) {
			t.Fatalf("port %d, ephemeral range from %d", p, ephemeralStart())
		}
		if !freeBoth(p) {
			t.Fatalf("port %d is not free for TCP and UDP", p)
		}
	}
	if got := LoopbackAddr(t); got[:10] != "127.0.0.1:" {
		t.Errorf("LoopbackAddr = %q", got)
	}
}

// TestFreePortIsHeldUntilTheTestEnds: a port handed to a test is handed to
// no other draw, in this process or another, until that test ends.
func TestFreePortIsHeldUntilTheTestEnds(t *testing.T) {
	var p int
	t.Run("holder", func(t *testing.T) {
		p = FreePort(t)
		if reservePort(t, p) {
			t.Fatalf("port %d was reserved twice in one process", p)
		}
		if path, err := exec.LookPath("flock"); err == nil {
			if err := exec.Command(path, "-n", portFile(p), "true").Run(); err == nil {
				t.Fatalf("another process took the lock of port %d", p)
			}
		}
	})
	if !reservePort(t, p) {
		t.Fatalf("port %d is still held after its test ended", p)
	}
}

func TestPollEndsOnConditionOrDeadline(t *testing.T) {
	n := 0
	if _, err := Poll(context.Background(), time.Minute, func() bool { n++; return n == 3 }); err != nil || n != 3 {
		t.Errorf("Poll: %v after %d tests", err, n)
	}
	if _, err := Poll(context.Background(), 50*time.Millisecond, func() bool { return false }); err == nil {
		t.Error("Poll of a false condition returned no error")
	}
}

func TestWaitSocketSeesAnEarlyExit(t *testing.T) {
	exited := make(chan struct{})
	close(exited)
	err := WaitSocket(context.Background(), filepath.Join(t.TempDir(), "none.sock"), exited)
	if err != ErrExited {
		t.Errorf("WaitSocket = %v, want ErrExited", err)
	}
}

func TestParallelJoinsErrors(t *testing.T) {
	seen := make([]bool, 5)
	err := Parallel(5, func(i int) error {
		seen[i] = true
		if i%2 == 1 {
			return errors.New("odd")
		}
		return nil
	})
	if !slices.Equal(seen, []bool{true, true, true, true, true}) || err == nil || strings.Count(err.Error(), "odd") != 2 {
		t.Errorf("Parallel: ran %v, error %v", seen, err)
	}
	if err := Parallel(3, func(int) error { return nil }); err != nil {
		t.Errorf("Parallel of successes = %v", err)
	}
}

func TestAppendVersionNamesItsVersion(t *testing.T) {
	a := AppendVersion([]byte("x"), 7, 3, 100)
	if len(a) != 101 || a[0] != 'x' {
		t.Fatalf("appended %d bytes after %q, want 100 after x", len(a)-1, a[:1])
	}
	if k, v := binary.LittleEndian.Uint64(a[1:]), binary.LittleEndian.Uint64(a[9:]); k != 7 || v != 3 {
		t.Fatalf("value names key %d version %d, want 7 and 3", k, v)
	}
	if b := AppendVersion(nil, 7, 3, 100); !bytes.Equal(a[1:], b) {
		t.Fatal("the same version came out different")
	}
	if b := AppendVersion(nil, 7, 4, 100); bytes.Equal(a[17:], b[16:]) {
		t.Fatal("two versions of a key have the same bytes after their header")
	}
}
