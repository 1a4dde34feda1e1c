package trace

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shade-mesh/shade/policy"
)

func TestWriterLines(t *testing.T) {
	var none *Writer
	none.Read(1, 2) // a nil Writer records nothing
	if err := none.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "trace")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	w.Epoch(-1)
	w.Epoch(0)
	w.Read(policy.ID(7), 100)
	w.Score(policy.ID(7), 2.5)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "# shade access trace: e <epoch> | r <id> <size> | s <id> <score>\ne 0\nr 7 100\ns 7 2.5\n"
	if string(b) != want {
		t.Fatalf("trace:\n%s\nwant:\n%s", b, want)
	}
}
