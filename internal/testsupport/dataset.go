package testsupport

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/shade-mesh/shade/protocol/samplekey"
)

// DatasetSpec describes a dataset of pseudo-random bytes in torchvision's
// ImageFolder layout. The zero value of every field means its default.
type DatasetSpec struct {
	// Classes are the first-level folders, in any order; nil means ten
	// folders class0 .. class9.
	Classes []string
	// Samples is the number of files, dealt to the classes in turn (file
	// i goes to Classes[i%len(Classes)]); ignored when PerClass is set;
	// 0 means 100.
	Samples int
	// PerClass, when set, is the number of files of each class, by
	// position in Classes.
	PerClass []int
	// MinSize and MaxSize bound each file's size in bytes (both
	// included); 0 means 30 and 230.
	MinSize, MaxSize int
	// Seed seeds the sizes and bytes: one spec writes the same dataset.
	Seed uint64
}

// Dataset is a dataset written by WriteDataset. Its slices are in manifest
// order (the sorted relative paths, as Shade orders a directory source).
type Dataset struct {
	Dir    string   // the dataset's root folder
	Names  []string // relative paths (slash-separated)
	Labels []int    // the class of each sample: its folder's index among the sorted class names
	Files  [][]byte // the bytes of each sample
}

// WriteDataset writes the dataset into a new folder under tb.TempDir().
func WriteDataset(tb testing.TB, spec DatasetSpec) *Dataset {
	tb.Helper()
	if spec.Classes == nil {
		for c := range 10 {
			spec.Classes = append(spec.Classes, "class"+strconv.Itoa(c))
		}
	}
	if spec.MinSize == 0 && spec.MaxSize == 0 {
		spec.MinSize, spec.MaxSize = 30, 230
	}
	if spec.MaxSize < spec.MinSize {
		tb.Fatalf("testsupport: MaxSize %d < MinSize %d", spec.MaxSize, spec.MinSize)
	}
	counts := spec.PerClass
	if counts == nil {
		n := spec.Samples
		if n == 0 {
			n = 100
		}
		counts = make([]int, len(spec.Classes))
		for i := range n {
			counts[i%len(spec.Classes)]++
		}
	}
	if len(counts) != len(spec.Classes) {
		tb.Fatalf("testsupport: %d PerClass counts for %d classes", len(counts), len(spec.Classes))
	}
	d := &Dataset{Dir: filepath.Join(tb.TempDir(), "ds")}
	sorted := slices.Sorted(slices.Values(spec.Classes))
	rng := rand.New(rand.NewPCG(spec.Seed, 0x5eed))
	type sample struct {
		name  string
		label int
		data  []byte
	}
	var all []sample
	for c, class := range spec.Classes {
		if err := os.MkdirAll(filepath.Join(d.Dir, class), 0o755); err != nil {
			tb.Fatal(err)
		}
		for j := range counts[c] {
			data := make([]byte, spec.MinSize+rng.IntN(spec.MaxSize-spec.MinSize+1))
			for k := range data {
				data[k] = byte(rng.Uint32())
			}
			name := fmt.Sprintf("%s/%05d.bin", class, j)
			if err := os.WriteFile(filepath.Join(d.Dir, name), data, 0o644); err != nil {
				tb.Fatal(err)
			}
			all = append(all, sample{name, slices.Index(sorted, class), data})
		}
	}
	slices.SortFunc(all, func(a, b sample) int { return strings.Compare(a.name, b.name) })
	for _, s := range all {
		d.Names = append(d.Names, s.name)
		d.Labels = append(d.Labels, s.label)
		d.Files = append(d.Files, s.data)
	}
	return d
}

// Len returns the number of samples.
func (d *Dataset) Len() int { return len(d.Files) }

// Key returns the key of sample i in a dataset served as name: "name/i".
func Key(name string, i int) string { return samplekey.Format(name, i) }

// Keys returns the keys of samples ids of the dataset served as name.
func Keys[I int | int64 | uint32](name string, ids []I) []string {
	out := make([]string, len(ids))
	for j, id := range ids {
		out[j] = Key(name, int(id))
	}
	return out
}

// Check returns nil if got is sample i's bytes, else an error that says
// how it differs. A nil got (a miss) is never sample i's bytes.
func (d *Dataset) Check(i int, got []byte) error {
	if i < 0 || i >= len(d.Files) {
		return fmt.Errorf("sample %d: out of range (%d samples)", i, len(d.Files))
	}
	want := d.Files[i]
	if got == nil {
		return fmt.Errorf("sample %d (%s): nothing served, want %d bytes", i, d.Names[i], len(want))
	}
	if bytes.Equal(got, want) {
		return nil
	}
	at := 0
	for at < min(len(got), len(want)) && got[at] == want[at] {
		at++
	}
	return fmt.Errorf("sample %d (%s): served %d bytes, want %d; first difference at byte %d", i, d.Names[i], len(got), len(want), at)
}

// CheckValue is Check for a value as a Redis client returns it (a string,
// or nil for a nil reply).
func (d *Dataset) CheckValue(i int, v any) error {
	switch v := v.(type) {
	case string:
		return d.Check(i, []byte(v))
	case []byte:
		return d.Check(i, v)
	case nil:
		return d.Check(i, nil)
	default:
		return fmt.Errorf("sample %d: served a %T, want bytes", i, v)
	}
}

// CheckValues checks the values of an MGET of the samples ids, in order,
// and returns the first difference.
func CheckValues[I int | int64 | uint32](d *Dataset, ids []I, vals []any) error {
	if len(vals) != len(ids) {
		return fmt.Errorf("%d values for %d samples", len(vals), len(ids))
	}
	for j, id := range ids {
		if err := d.CheckValue(int(id), vals[j]); err != nil {
			return fmt.Errorf("position %d: %w", j, err)
		}
	}
	return nil
}

// JobArgs is the JOB <name> tail of a trainer command of a job: none for
// "", the dataset's default job.
func JobArgs(job string) []any {
	if job == "" {
		return nil
	}
	return []any{"JOB", job}
}
