package testsupport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// PollInterval is how often the waits below test their condition.
const PollInterval = 20 * time.Millisecond

// WaitFor tests cond every PollInterval until it holds and returns how
// long that took; after d it fails the test with "timed out after d
// waiting until <what>". d is a generous bound, not a figure under test:
// log the returned duration where it is of interest.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	tb.Helper()
	took, err := Poll(context.Background(), d, cond)
	if err != nil {
		tb.Fatalf("timed out after %v waiting until %s", d, what)
	}
	return took
}

// Poll tests cond every PollInterval until it holds, ctx ends or d has
// passed, and returns how long it waited. It is WaitFor for goroutines
// that must not call tb.Fatal: the error says which of ctx or d ended it.
func Poll(ctx context.Context, d time.Duration, cond func() bool) (time.Duration, error) {
	start := time.Now()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-deadline.C:
			return time.Since(start), fmt.Errorf("testsupport: condition not met within %v", d)
		case <-tick.C:
		}
	}
	return time.Since(start), nil
}

// Member is what SameView needs of an in-process node.
type Member interface {
	Name() string
	Members() []string // sorted names of the members it sees alive
	Leader() string    // "" while it follows none
}

// SameView reports whether the nodes all see exactly each other and name
// one leader.
func SameView[M Member](nodes []M) bool {
	if len(nodes) == 0 {
		return true
	}
	want := make([]string, 0, len(nodes))
	for _, n := range nodes {
		want = append(want, n.Name())
	}
	slices.Sort(want)
	leader := nodes[0].Leader()
	for _, n := range nodes {
		if leader == "" || n.Leader() != leader || !slices.Equal(n.Members(), want) {
			return false
		}
	}
	return true
}

// Sharer is what SameSharing needs of an in-process node.
type Sharer interface {
	Name() string
	Sharing(dataset string) []string // sorted names it shares dataset with, itself included
}

// SameSharing reports whether the nodes agree on who shares dataset with
// whom: each shares it with itself, and A with B exactly where B with A.
// A node that has heard of a member but not yet of the datasets it
// serves leaves it out where the member does not, so a mesh whose nodes
// see each other (SameView) may not agree here yet; nodes that do not
// share a dataset (another version, another ring) leave each other out
// both ways.
func SameSharing[S Sharer](nodes []S, dataset string) bool {
	sharing := make(map[string][]string, len(nodes))
	for _, n := range nodes {
		sharing[n.Name()] = n.Sharing(dataset)
		if !slices.Contains(sharing[n.Name()], n.Name()) {
			return false
		}
	}
	for a, with := range sharing {
		for b, other := range sharing {
			if slices.Contains(with, b) != slices.Contains(other, a) {
				return false
			}
		}
	}
	return true
}

// Parallel runs f(0) .. f(n-1), each in its own goroutine, waits for them
// all and returns their errors joined (nil if none failed). f must not
// call the testing.TB's Fatal methods.
func Parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
