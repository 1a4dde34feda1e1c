package prefetch

import (
	"slices"
	"testing"
)

// TestAheadHintsEachItemOnceEachStep: over a loop, Ahead gives every item
// its far hint before its near one, each once, the far one about 2*d
// items ahead and the near one about d, and none to items past the end.
func TestAheadHintsEachItemOnceEachStep(t *testing.T) {
	if !Enabled {
		t.Skip("no prefetch instruction wired up here: Ahead calls nothing")
	}
	for _, count := range []int{0, 1, 5, 8, 16, 17, 100} {
		const d = 4
		var far, near []int
		farAt, nearAt := map[int]int{}, map[int]int{}
		for i := range count {
			Ahead(count, i, d,
				func(j int) { far = append(far, j); farAt[j] = i },
				func(j int) { near = append(near, j); nearAt[j] = i })
		}
		all := make([]int, count)
		for j := range all {
			all[j] = j
		}
		if !slices.Equal(far, all) || !slices.Equal(near, all) {
			t.Fatalf("count %d: far hints %v, near %v; want each item once, in order", count, far, near)
		}
		for j := range count {
			if farAt[j] != max(0, j-2*d) || nearAt[j] != max(0, j-d) {
				t.Fatalf("count %d: item %d hinted far at %d, near at %d; want %d and %d", count, j, farAt[j], nearAt[j], max(0, j-2*d), max(0, j-d))
			}
		}
	}
}
