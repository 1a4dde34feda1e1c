package shards

import (
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/shade-mesh/shade/dataset"
)

// A keySet finds each name added and no other, from its zero value
// through its growth, and sized.
func TestKeySet(t *testing.T) {
	for _, presize := range []int{0, 5000} {
		var (
			names dataset.NamesBuilder
			set   keySet
		)
		set.sized(presize)
		const n = 5000
		for i := range n {
			key := []byte(fmt.Sprintf("k/%d", i))
			if set.has(key, &names) {
				t.Fatalf("sized %d: %s found before it was added", presize, key)
			}
			if err := names.AddBytes(key); err != nil {
				t.Fatal(err)
			}
			set.insert(i, &names)
		}
		if set.n != n || len(set.slots) < 2*n {
			t.Fatalf("sized %d: %d names in %d slots, want %d in at least %d", presize, set.n, len(set.slots), n, 2*n)
		}
		for i := range n {
			if !set.has([]byte(fmt.Sprintf("k/%d", i)), &names) {
				t.Fatalf("sized %d: k/%d not found", presize, i)
			}
			if set.has([]byte(fmt.Sprintf("k/%d/", i)), &names) || set.has([]byte(fmt.Sprintf("k/%d", i+n)), &names) {
				t.Fatalf("sized %d: a name not added found", presize)
			}
		}
		if set.has(nil, &names) {
			t.Fatal("the empty name found")
		}
	}
}

// A shard's samples read into shardSamples come back as they were
// given, and an extension twice in a sample or a key apart from its run
// is refused.
func TestShardSamples(t *testing.T) {
	samples := samplesOf(3000, 1000)
	read := shardsRead(t, samples)
	if len(read) != 3 {
		t.Fatalf("%d shards, want 3", len(read))
	}
	var got []sample
	for si, ss := range read {
		for i := range ss.len() {
			ms := ss.appendMembers(nil, i)
			got = append(got, sample{Key: string(ss.keys.Bytes(i)), Shard: si, Start: ss.start[i], End: spanEnd(ss.start[i], ms), Members: ms})
		}
		if len(ss.exts.names) != 3 {
			t.Fatalf("shard %d keeps %d extensions, want 3", si, len(ss.exts.names))
		}
	}
	sameSamples(t, got, samples)

	ss := read[0]
	last := ss.len() - 1
	key, start := ss.keys.Bytes(last), ss.start[last]
	if err := ss.add(key, []byte("cls"), start+1<<20, 1); err == nil || err.Error() != fmt.Sprintf("%v: 0 holds %s.cls twice", ErrLayout, key) {
		t.Fatalf("an extension twice: %v", err)
	}
	if err := ss.add([]byte("dir/00000005"), []byte("jpg"), start+1<<20, 1); err == nil || err.Error() != fmt.Sprintf("%v: sample dir/00000005 appears twice (again in 0); a sample's members must be adjacent", ErrLayout) {
		t.Fatalf("a key apart from its run: %v", err)
	}
	if ss.len() != last+1 {
		t.Fatalf("%d samples after two refused members, want %d", ss.len(), last+1)
	}
}

// isClean is true only where path.Clean leaves a name as it is and it
// does not begin with "./" (a name it says no of goes through path.Clean:
// "." and ".." elements, which Clean keeps leading a relative path, are
// left to it), and true of names as tar writers make them.
func TestIsClean(t *testing.T) {
	for _, name := range []string{"", "/", "//", "a", "/a", "a/b", "a/b.c.d", "a/", "a//b", "./a", "a/.", "a/./b", "a/..", "../a", ".", "..", ".a", "a/.b", "a/..b", "...", "/a/b/", "x/y/z.jpg"} {
		clean := name != "" && path.Clean(name) == name && !strings.HasPrefix(name, "./")
		if isClean([]byte(name)) && !clean {
			t.Errorf("isClean(%q) is true; path.Clean makes %q", name, path.Clean(name))
		}
	}
	for _, name := range []string{"/", "a", "/a", "a/b", "a/b.c.d", ".a", "a/.b", "a/..b", "...", "train/000/00000001.jpg"} {
		if !isClean([]byte(name)) {
			t.Errorf("isClean(%q) is false", name)
		}
	}
}
