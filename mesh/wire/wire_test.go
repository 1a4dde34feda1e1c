package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/transport/peer"
)

// TestScoreQueue: samples queue by group, each with its score; each
// owner gets the ids of its groups and their scores, as the placement
// stands when the queue is taken, in the order the groups were first
// queued, repeats included (each with the score of its merge); self's
// share is returned at once and never queued for self.
func TestScoreQueue(t *testing.T) {
	// Groups: 0 = {a, me}, 1 = {b}, 2 = {a, b}; sample id is in group
	// id % 3. A sample's score is 10 times its id, plus the merge's
	// count for a sample merged twice.
	owners := [][]string{{"a", "me"}, {"b"}, {"a", "b"}}
	asked := 0
	where := Placement{Groups: 3, Group: func(id uint32) int { return int(id % 3) }, Owners: func(g int) []string { asked++; return owners[g] }}
	var q ScoreQueue
	ds := JobKey{Dataset: "ds"}
	local := q.Add(where, "me", ds, Merged{IDs: []uint32{3, 4, 5, 3}, Scores: []float32{30, 40, 50, 31}}, nil)
	local = q.Add(where, "me", ds, Merged{IDs: []uint32{6, 8, 5}, Scores: []float32{60, 80, 51}}, local)
	if !slices.Equal(local, []uint32{3, 3, 6}) {
		t.Fatalf("local share %v, want [3 3 6]", local)
	}
	if asked != 3 {
		t.Fatalf("owners asked %d times while queueing, want once a group: 3", asked)
	}
	if q.Queued() != 7 {
		t.Fatalf("%d samples queued, want 7", q.Queued())
	}
	// The placement changes before the queue is taken: group 1 moves to c.
	owners[1] = []string{"c"}
	check := func(got map[JobKey]map[string]*ScoresReq, want map[string][]float32) {
		t.Helper()
		if len(got) != 1 || len(got[ds]) != len(want) {
			t.Fatalf("queued %v, want %v", got, want)
		}
		for owner, scores := range want {
			req := got[ds][owner]
			ids := make([]uint32, len(scores))
			for i, s := range scores {
				ids[i] = uint32(s) / 10
			}
			if req == nil || req.Dataset != "ds" || req.Job != "" || !slices.Equal(req.IDs, ids) || !slices.Equal(req.Scores, scores) {
				t.Fatalf("queued for %s: %+v, want ids %v with scores %v", owner, req, ids, scores)
			}
		}
	}
	got := q.Take(false)
	// Each owner's samples in the order merged, from all its groups.
	check(got, map[string][]float32{"a": {30, 50, 31, 60, 80, 51}, "b": {50, 80, 51}, "c": {40}})
	if q.Queued() != 0 || q.Take(false) != nil {
		t.Fatal("Take left the queue non-empty")
	}
	// The messages share their arrays, each capped to its own part: an
	// append to one leaves the others as they are.
	for owner, req := range got[ds] {
		req.IDs, req.Scores = append(req.IDs, 990), append(req.Scores, 9900)
		check(got, map[string][]float32{"a": {30, 50, 31, 60, 80, 51}, "b": {50, 80, 51}, "c": {40}, owner: append([]float32{}, req.Scores...)})
		req.IDs, req.Scores = req.IDs[:len(req.IDs)-1], req.Scores[:len(req.Scores)-1]
	}
	// The queue's lists are used again: what was taken stays as it was.
	q.Add(where, "me", ds, Merged{IDs: []uint32{5, 2}, Scores: []float32{52, 20}}, nil)
	check(got, map[string][]float32{"a": {30, 50, 31, 60, 80, 51}, "b": {50, 80, 51}, "c": {40}})
	check(q.Take(false), map[string][]float32{"a": {52, 20}, "b": {52, 20}})
	// A sample of a group out of range amid a batch is dropped, and the
	// others go to their groups' owners.
	mixed := Placement{Groups: 3, Group: func(id uint32) int {
		if id == 9 {
			return -1
		}
		return int(id % 3)
	}, Owners: where.Owners}
	q.Add(mixed, "me", ds, Merged{IDs: []uint32{4, 9, 5, 9}, Scores: []float32{41, 90, 53, 91}}, nil)
	if q.Queued() != 2 {
		t.Fatalf("%d samples queued of a batch with two out of range, want 2", q.Queued())
	}
	check(q.Take(false), map[string][]float32{"c": {41}, "a": {53}, "b": {53}})
	// A group out of range is dropped; a placement of another size
	// queues again what was queued.
	q.Add(Placement{Groups: 3, Group: func(uint32) int { return 7 }, Owners: where.Owners}, "me", ds, Merged{IDs: []uint32{1}, Scores: []float32{10}}, nil)
	q.Add(where, "me", ds, Merged{IDs: []uint32{4}, Scores: []float32{40}}, nil)
	two := Placement{Groups: 2, Group: func(id uint32) int { return int(id % 2) }, Owners: func(g int) []string { return owners[g+1] }}
	if l := q.Add(two, "me", ds, Merged{IDs: []uint32{7}, Scores: []float32{70}}, nil); len(l) != 0 || q.Queued() != 2 {
		t.Fatalf("after a change of groups: local %v, %d queued; want none local, 2 queued", l, q.Queued())
	}
	check(q.Take(false), map[string][]float32{"c": {40}, "a": {70}, "b": {70}})
	// Samples that self alone owns: nothing to take.
	alone := Placement{Groups: 3, Group: where.Group, Owners: func(int) []string { return []string{"me"} }}
	if l := q.Add(alone, "me", ds, Merged{IDs: []uint32{0, 1}, Scores: []float32{0, 10}}, nil); len(l) != 2 {
		t.Fatalf("self's share %v, want [0 1]", l)
	}
	if got := q.Take(false); got != nil {
		t.Fatalf("self's share alone: took %v", got)
	}
}

// TestScoreQueueKeepsOwnersWhileKeyStays: with a placement's Key, each
// group's owners are asked for once while the Key stays, over takes; a
// new Key asks again and its owners get the samples.
func TestScoreQueueKeepsOwnersWhileKeyStays(t *testing.T) {
	owners := [][]string{{"a", "me"}, {"b"}, {"a", "b"}}
	asked := 0
	placement := func(key any) Placement {
		return Placement{Groups: 3, Group: func(id uint32) int { return int(id % 3) }, Owners: func(g int) []string { asked++; return owners[g] }, Key: key}
	}
	var q ScoreQueue
	ds := JobKey{Dataset: "ds"}
	one, two := new(int), new(int)
	for round := range 3 {
		local := q.Add(placement(one), "me", ds, Merged{IDs: []uint32{3, 4, 5}, Scores: []float32{30, 40, 50}}, nil)
		got := q.Take(false)[ds]
		if !slices.Equal(local, []uint32{3}) || len(got) != 2 || !slices.Equal(got["a"].IDs, U32s{3, 5}) || !slices.Equal(got["b"].IDs, U32s{4, 5}) {
			t.Fatalf("round %d: local %v, taken %+v", round, local, got)
		}
		// Once a group while adding, once a group when taken: the
		// first round only.
		if asked != 6 {
			t.Fatalf("round %d: owners asked %d times, want 6", round, asked)
		}
	}
	owners[1] = []string{"c", "me"}
	local := q.Add(placement(two), "me", ds, Merged{IDs: []uint32{3, 4, 5}, Scores: []float32{30, 40, 50}}, nil)
	got := q.Take(false)[ds]
	if !slices.Equal(local, []uint32{3, 4}) || len(got) != 3 || !slices.Equal(got["a"].IDs, U32s{3, 5}) || !slices.Equal(got["b"].IDs, U32s{5}) || !slices.Equal(got["c"].IDs, U32s{4}) || asked != 12 {
		t.Fatalf("a new key: local %v, taken %v, owners asked %d times; want [3 4], a [3 5], b [5], c [4], 12", local, got, asked)
	}
}

// TestScoreQueuePassesOn: taken to pass on, the samples of a group that
// self does not own go to its first owner alone, first in its message and
// counted in Pass; those of a group self owns, or of a group of one
// owner, go to each owner as before. Taken without pass after that (with
// the same Key, whose slots the queue keeps), every owner gets its own.
func TestScoreQueuePassesOn(t *testing.T) {
	owners := [][]string{{"a", "me"}, {"b"}, {"a", "b"}, {"c", "a"}}
	key := new(int)
	where := Placement{Groups: 4, Group: func(id uint32) int { return int(id % 4) }, Owners: func(g int) []string { return owners[g] }, Key: key}
	var q ScoreQueue
	ds := JobKey{Dataset: "ds"}
	add := func() {
		// Sample 10*g+k is in group g (ids below 40, id%4 = g for these).
		q.Add(where, "me", ds, Merged{IDs: []uint32{0, 1, 2, 3, 4, 6, 7}, Scores: []float32{0, 10, 20, 30, 40, 60, 70}}, nil)
	}
	add()
	got := q.Take(true)[ds]
	want := map[string]struct {
		ids  U32s
		pass int
	}{"a": {U32s{2, 6, 0, 4}, 2}, "b": {U32s{1}, 0}, "c": {U32s{3, 7}, 2}}
	if len(got) != len(want) {
		t.Fatalf("passing on: taken %+v, want %v", got, want)
	}
	for owner, w := range want {
		req := got[owner]
		if req == nil || !slices.Equal(req.IDs, w.ids) || req.Pass != w.pass {
			t.Fatalf("passing on, %s: %+v, want ids %v, pass %d", owner, req, w.ids, w.pass)
		}
		for i, id := range req.IDs {
			if req.Scores[i] != float32(10*id) {
				t.Fatalf("passing on, %s: sample %d with score %v", owner, id, req.Scores[i])
			}
		}
	}
	add()
	got = q.Take(false)[ds]
	if len(got) != 3 || !slices.Equal(got["a"].IDs, U32s{0, 2, 3, 4, 6, 7}) || got["a"].Pass != 0 || !slices.Equal(got["b"].IDs, U32s{1, 2, 6}) ||
		!slices.Equal(got["c"].IDs, U32s{3, 7}) || got["c"].Pass != 0 {
		t.Fatalf("each owner its own: %+v %+v %+v", got["a"], got["b"], got["c"])
	}
}

func TestNewerBetter(t *testing.T) {
	p := &PublishMsg{Gen: 1, Epoch: 2, Term: 3}
	for _, c := range []struct {
		q    *PublishMsg
		want bool
	}{
		{nil, true},
		{&PublishMsg{Gen: 2}, false},
		{&PublishMsg{Gen: 1, Epoch: 1, Term: 9}, true},
		{&PublishMsg{Gen: 1, Epoch: 2, Term: 3}, false},
		{&PublishMsg{Gen: 1, Epoch: 2, Term: 2}, true},
	} {
		if got := p.Newer(c.q); got != c.want {
			t.Errorf("%+v newer than %+v: %v, want %v", p, c.q, got, c.want)
		}
	}
	a := TableInfo{Term: 2, Scored: 1}
	if !a.Better(TableInfo{Term: 1, Scored: 9}) || a.Better(TableInfo{Term: 2, Scored: 1}) || !a.Better(TableInfo{Term: 2}) {
		t.Error("TableInfo.Better")
	}
}

// TestPackedListsRoundTrip encodes reports and scores with their packed
// lists and decodes them back through the transport's structure check, bit
// for bit (NaN and the largest id included, nil as empty), and refuses a
// list whose bytes are not a whole number of its words.
func TestPackedListsRoundTrip(t *testing.T) {
	nan := math.Float64frombits(0x7ff8000000000001)
	for _, in := range []ReportBatch{
		{Dataset: "ds", Epoch: 3, IDs: U32s{0, 1, math.MaxUint32}, Losses: F32s{0, -1.5, float32(math.Inf(1)), math.Float32frombits(0x7fc00001)}},
		{Dataset: "ds", Job: "j"},
	} {
		b, err := msgpack.Marshal(&ReportReq{Batches: []ReportBatch{in}})
		if err != nil {
			t.Fatal(err)
		}
		if err := peer.CheckMsgpack(b); err != nil {
			t.Fatalf("structure check refused a packed report: %v", err)
		}
		var out ReportReq
		if err := msgpack.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		got := out.Batches[0]
		if got.Dataset != in.Dataset || got.Job != in.Job || got.Epoch != in.Epoch || !slices.Equal(got.IDs, in.IDs) || len(got.Losses) != len(in.Losses) {
			t.Fatalf("report %+v came back as %+v", in, got)
		}
		for i := range in.Losses {
			if math.Float32bits(got.Losses[i]) != math.Float32bits(in.Losses[i]) {
				t.Fatalf("loss %d: %v came back as %v", i, in.Losses[i], got.Losses[i])
			}
		}
	}
	// Losses as a build before singles sent them: doubles, tag "L".
	b, err := msgpack.Marshal(map[string]any{"d": "ds", "e": 3, "I": U32s{4, 5}, "L": F64s{0.25, nan}})
	if err != nil {
		t.Fatal(err)
	}
	var old ReportBatch
	if err := msgpack.Unmarshal(b, &old); err != nil || !slices.Equal(old.IDs, U32s{4, 5}) || len(old.Singles()) != 2 || old.Singles()[0] != 0.25 || !math.IsNaN(float64(old.Singles()[1])) {
		t.Fatalf("doubles came back as %+v, singles %v (%v)", old, old.Singles(), err)
	}
	scores := &ScoresReq{Dataset: "ds", IDs: U32s{7, 9}, Scores: F32s{1.5, 2.5}, Mean: 2, Term: 3, Seqs: U32s{12, math.MaxUint32}}
	b, err = msgpack.Marshal(scores)
	if err != nil {
		t.Fatal(err)
	}
	var back ScoresReq
	if err := msgpack.Unmarshal(b, &back); err != nil || !slices.Equal(back.IDs, scores.IDs) || !slices.Equal(back.Singles(), scores.Scores) || back.Mean != 2 || back.Doubles != nil ||
		back.Term != 3 || !slices.Equal(back.Seqs, scores.Seqs) {
		t.Fatalf("scores %+v came back as %+v (%v)", scores, back, err)
	}
	// Scores as a build before singles sent them: doubles, tag "S".
	b, err = msgpack.Marshal(map[string]any{"d": "ds", "I": U32s{7, 9}, "S": F64s{1.5, 2.5}, "m": 2.0})
	if err != nil {
		t.Fatal(err)
	}
	back = ScoresReq{}
	if err := msgpack.Unmarshal(b, &back); err != nil || !slices.Equal(back.IDs, scores.IDs) || !slices.Equal(back.Singles(), scores.Scores) || back.Mean != 2 ||
		back.Term != 0 || back.Seqs != nil {
		t.Fatalf("doubles came back as %+v, singles %v (%v)", back, back.Singles(), err)
	}

	order := &PublishMsg{Dataset: "ds", Epoch: 2, World: 2, Slices: []U32s{{1, 2}, {3, math.MaxUint32}},
		Weights: []F32s{{0.5, float32(math.Inf(1))}, {1, float32(nan)}}, Ranks: []string{"a", ""}}
	b, err = msgpack.Marshal(order)
	if err != nil {
		t.Fatal(err)
	}
	var gotOrder PublishMsg
	if err := msgpack.Unmarshal(b, &gotOrder); err != nil || len(gotOrder.Slices) != 2 || !slices.Equal(gotOrder.Slices[1], order.Slices[1]) ||
		len(gotOrder.Weights) != 2 || math.Float32bits(gotOrder.Weights[1][1]) != math.Float32bits(order.Weights[1][1]) || gotOrder.Weights[0][0] != 0.5 {
		t.Fatalf("order %+v came back as %+v (%v)", order, gotOrder, err)
	}
	if sized, err := order.Encode(); err != nil || !bytes.Equal(sized, b) {
		t.Fatalf("Encode gives %x (%v), msgpack.Marshal %x", sized, err, b)
	}
	var badOrder PublishMsg
	if b, _ := msgpack.Marshal(map[string]any{"X": [][]byte{make([]byte, 6)}}); msgpack.Unmarshal(b, &badOrder) == nil {
		t.Fatal("weights of 6 bytes decoded")
	}

	for _, bad := range []map[string]any{{"I": []byte{1, 2, 3}}, {"L": make([]byte, 12)}, {"I": []int{1, 2}}} {
		b, err := msgpack.Marshal(bad)
		if err != nil {
			t.Fatal(err)
		}
		var out ReportBatch
		if err := msgpack.Unmarshal(b, &out); err == nil {
			t.Fatalf("%v decoded as %+v", bad, out)
		}
	}
}

// TestRelayGroupsAndParts checks the relay's pieces: groups cover every
// name once, in order, at most fanout of them, sizes within one; hops
// grow as the log of the members; and a relay message built from parts
// decodes to its members, its method and the body byte for byte.
func TestRelayGroupsAndParts(t *testing.T) {
	for _, n := range []int{0, 1, 5, 16, 17, 999} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprint("peer-", i)
		}
		for _, fanout := range []int{0, 1, 2, 16} {
			groups := RelayGroups(names, fanout)
			var all []string
			lo, hi := n, 0
			for _, g := range groups {
				all = append(all, g...)
				lo, hi = min(lo, len(g)), max(hi, len(g))
			}
			if !slices.Equal(all, names) || len(groups) > max(fanout, 1) || (n > 0 && (lo == 0 || hi-lo > 1)) {
				t.Fatalf("%d names, fanout %d: groups %v", n, fanout, groups)
			}
		}
	}
	for _, c := range [][3]int{{999, 16, 3}, {16, 16, 1}, {17, 16, 2}, {5, 1, 5}, {6, 2, 2}, {7, 2, 3}, {0, 16, 0}} {
		if got := RelayHops(c[0], c[1]); got != c[2] {
			t.Errorf("RelayHops(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}

	body, err := msgpack.Marshal(&PublishMsg{Dataset: "ds", Epoch: 4, World: 2, Slices: []U32s{{1, 2}, {3, 4}}})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := RelayParts([]string{"b", "c"}, MethodPublish, body)
	if err != nil {
		t.Fatal(err)
	}
	got := decodeRelayParts(t, parts, body)
	var p PublishMsg
	if !slices.Equal(got.To, []string{"b", "c"}) || got.Method != uint16(MethodPublish) || !bytes.Equal(got.Body, body) ||
		msgpack.Unmarshal(got.Body, &p) != nil || p.Epoch != 4 {
		t.Fatalf("relay message came back as %+v (order %+v)", got, p)
	}
}

// decodeRelayParts checks that the last of a relay message's parts is the
// bytes of src itself (not a copy), that the whole is one valid msgpack
// value, and decodes it.
func decodeRelayParts(t *testing.T, parts peer.Encoded, src []byte) *RelayMsg {
	t.Helper()
	if &parts[len(parts)-1][0] != &src[0] {
		t.Fatal("the bytes were copied into the relay message")
	}
	whole := slices.Concat(parts...)
	if err := peer.CheckMsgpack(whole); err != nil {
		t.Fatal(err)
	}
	var m RelayMsg
	if err := msgpack.Unmarshal(whole, &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// TestPackedListsAreLittleEndianBins checks the bytes of each packed list
// against the wire's layout written out value by value, by the copy made
// value by value (any machine) and by the list's own memory (a
// little-endian machine), and that each way of reading the bin gives the
// values back bit for bit; a bin unaligned for its values is not viewed
// in place.
func TestPackedListsAreLittleEndianBins(t *testing.T) {
	ids, singles, doubles := []uint32{1, 0xdeadbeef, math.MaxUint32}, []float32{0.5, -2, float32(math.Inf(-1))}, []float64{math.Pi, -0.0, 1e300}
	var want32, wantS, wantD []byte
	for i := range ids {
		want32 = binary.LittleEndian.AppendUint32(want32, ids[i])
		wantS = binary.LittleEndian.AppendUint32(wantS, math.Float32bits(singles[i]))
		wantD = binary.LittleEndian.AppendUint64(wantD, math.Float64bits(doubles[i]))
	}
	checkPackedList(t, ids, want32, func(v uint32) uint64 { return uint64(v) })
	checkPackedList(t, singles, wantS, func(v float32) uint64 { return uint64(math.Float32bits(v)) })
	checkPackedList(t, doubles, wantD, math.Float64bits)
	// The types' own methods take the machine's way.
	for _, c := range []struct {
		list any
		want []byte
	}{{U32s(ids), want32}, {F32s(singles), wantS}, {F64s(doubles), wantD}} {
		b, err := msgpack.Marshal(c.list)
		if err != nil {
			t.Fatal(err)
		}
		var bin []byte
		if err := msgpack.Unmarshal(b, &bin); err != nil || !bytes.Equal(bin, c.want) {
			t.Fatalf("%T %v went out as %x (%v), want the bin %x", c.list, c.list, bin, err, c.want)
		}
	}
	for off := range 8 {
		raw := make([]byte, off+len(wantD))
		b := raw[off:]
		copy(b, wantD)
		if got := fromBin[float64](b); got != nil && uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
			t.Fatalf("a bin at offset %d, unaligned for doubles, was viewed in place", off)
		} else if got != nil && littleEndian && !slices.Equal(got, doubles) {
			t.Fatalf("a bin at offset %d viewed as %v, want %v", off, got, doubles)
		}
	}
}

// checkPackedList encodes l both ways a machine may (its own memory only
// on a little-endian one), checks each bin against want, and reads each
// back both ways, comparing the values' bits.
func checkPackedList[T number](t *testing.T, l []T, want []byte, bits func(T) uint64) {
	t.Helper()
	ways := []bool{false}
	if littleEndian {
		ways = append(ways, true)
	}
	for _, encNative := range ways {
		var buf bytes.Buffer
		if err := encodeList(msgpack.NewEncoder(&buf), l, encNative); err != nil {
			t.Fatal(err)
		}
		var bin []byte
		if err := msgpack.Unmarshal(buf.Bytes(), &bin); err != nil || !bytes.Equal(bin, want) {
			t.Fatalf("%T, own memory %t: went out as %x (%v), want %x", l, encNative, bin, err, want)
		}
		for _, decNative := range ways {
			got, err := decodeList[T](msgpack.NewDecoder(bytes.NewReader(buf.Bytes())), decNative, "values")
			if err != nil || len(got) != len(l) {
				t.Fatalf("%T, own memory %t/%t: read back %v (%v)", l, encNative, decNative, got, err)
			}
			for i := range l {
				if bits(got[i]) != bits(l[i]) {
					t.Fatalf("%T, own memory %t/%t: value %d came back as %v, want %v", l, encNative, decNative, i, got[i], l[i])
				}
			}
		}
	}
}

// BenchmarkEncodeOrder encodes an order of 1.28 M samples among 1,000
// ranks, with weights, as a leader does once for every epoch.
func BenchmarkEncodeOrder(b *testing.B) {
	p := benchOrder()
	for b.Loop() {
		if _, err := p.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeOrder decodes an order of 1.28 M samples among 1,000
// ranks, with weights, as every peer does with every epoch's order.
func BenchmarkDecodeOrder(b *testing.B) {
	p := benchOrder()
	body, err := msgpack.Marshal(p)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var got PublishMsg
		if err := msgpack.Unmarshal(body, &got); err != nil || len(got.Slices) != p.World {
			b.Fatal(err)
		}
	}
}

// benchOrder is an order of 1.28 M samples among 1,000 ranks, with
// weights.
func benchOrder() *PublishMsg {
	const n, world = 1280000, 1000
	p := &PublishMsg{Dataset: "imagenet", Version: "v1", Epoch: 1, World: world, Ranks: make([]string, world)}
	for r := range world {
		s, w := make(U32s, n/world), make(F32s, n/world)
		for i := range s {
			s[i], w[i] = uint32(i*world+r), 1.5
		}
		p.Slices, p.Weights = append(p.Slices, s), append(p.Weights, w)
	}
	return p
}

// TestRelayPieces checks an order relayed in pieces: each piece's message
// decodes to its place in the order, its bytes not copied by the sender;
// an assembly takes the pieces in any order, a repeat too, marks each
// ready as it comes, and hands out the order only once every piece is in
// and the bytes hash to its sum and make one msgpack value; a piece that
// does not fit is refused and changes nothing.
func TestRelayPieces(t *testing.T) {
	payload := make([]byte, 997)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	body, err := msgpack.Marshal(payload) // a bin of 1,000 bytes with its head
	if err != nil || len(body) != 1000 {
		t.Fatalf("%d bytes, %v", len(body), err)
	}
	const piece = 128
	whole := WholeAssembly(body, piece)
	if whole.Pieces() != 8 || !whole.Complete() {
		t.Fatalf("%d pieces, complete %v; want 8, complete", whole.Pieces(), whole.Complete())
	}
	msgs := make([]*RelayMsg, whole.Pieces())
	for i := range msgs {
		parts, err := RelayPieceParts([]string{"b"}, MethodPublish, whole, i)
		if err != nil {
			t.Fatal(err)
		}
		m := decodeRelayParts(t, parts, body[i*piece:])
		end := min((i+1)*piece, len(body))
		if !m.IsPiece() || m.Size != len(body) || m.PieceSize != piece || m.Off != i*piece || !bytes.Equal(m.Piece, body[i*piece:end]) ||
			!slices.Equal(m.To, []string{"b"}) || m.Method != uint16(MethodPublish) || len(m.Body) != 0 {
			t.Fatalf("piece %d came back as to %v, method %d, size %d, piece size %d, offset %d, %d bytes", i, m.To, m.Method, m.Size, m.PieceSize, m.Off, len(m.Piece))
		}
		msgs[i] = m
	}

	if _, err := NewAssembly(len(body), piece, msgs[0].Sum, len(body)-1); !errors.Is(err, ErrBadPiece) {
		t.Fatalf("a message over the limit: %v", err)
	}
	for _, sp := range [][2]int{{0, piece}, {len(body), 0}, {-1, piece}} {
		if _, err := NewAssembly(sp[0], sp[1], 0, 1<<20); !errors.Is(err, ErrBadPiece) {
			t.Fatalf("size %d, piece %d: %v", sp[0], sp[1], err)
		}
	}
	a, err := NewAssembly(len(body), piece, msgs[0].Sum, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Matches(msgs[3]) || a.Matches(&RelayMsg{Size: len(body), PieceSize: piece, Sum: msgs[0].Sum + 1}) {
		t.Fatal("an assembly matches pieces by size, piece size and sum")
	}
	bad := []*RelayMsg{
		{Off: 5, Piece: body[5 : 5+piece]},               // not a piece's offset
		{Off: len(body), Piece: nil},                     // past the end
		{Off: -piece, Piece: body[:piece]},               // before the start
		{Off: piece, Piece: body[piece : 2*piece-1]},     // short
		{Off: 7 * piece, Piece: body[6*piece : 7*piece]}, // the last piece is shorter
	}
	for _, order := range []int{5, 0, 7, 2, 2, 6, 1, 3} {
		for _, b := range bad {
			if err := a.Put(b); !errors.Is(err, ErrBadPiece) {
				t.Fatalf("a piece at %d of %d bytes: %v", b.Off, len(b.Piece), err)
			}
		}
		if _, ok, _ := a.Whole(); ok || a.Complete() {
			t.Fatal("whole before every piece is in")
		}
		if err := a.Put(msgs[order]); err != nil || a.Complete() {
			t.Fatalf("piece %d: complete %v, %v", order, a.Complete(), err)
		}
		select {
		case <-a.Ready(order):
		default:
			t.Fatalf("piece %d in, not ready", order)
		}
	}
	select {
	case <-a.Ready(4):
		t.Fatal("piece 4 ready before it came")
	default:
	}
	other := *msgs[2]
	other.Piece = slices.Clone(other.Piece)
	other.Piece[0]++
	if err := a.Put(&other); !errors.Is(err, ErrBadPiece) {
		t.Fatalf("a repeat unlike the piece in: %v", err)
	}
	if err := a.Put(msgs[4]); err != nil || !a.Complete() {
		t.Fatalf("the last piece: complete %v, %v", a.Complete(), err)
	}
	if got, ok, err := a.Whole(); err != nil || !ok || !bytes.Equal(got, body) {
		t.Fatalf("whole: %v, %v; bytes equal %v", ok, err, bytes.Equal(got, body))
	}

	// Pieces alike in size and sum but of other bytes (as good as never)
	// never make a message.
	wrong, _ := NewAssembly(len(body), piece, msgs[0].Sum, 1<<20)
	for _, m := range msgs {
		m := *m
		m.Piece = make([]byte, len(m.Piece))
		if err := wrong.Put(&m); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := wrong.Whole(); ok || !errors.Is(err, ErrBadPiece) {
		t.Fatalf("pieces that do not hash to the sum: %v, %v", ok, err)
	}

	// Bytes that hash to their sum but are no msgpack value (an array
	// that declares a billion elements) never make a message either.
	junk := append([]byte{0xdd, 0x40, 0, 0, 0}, body[5:]...)
	malformed := WholeAssembly(junk, piece)
	if _, ok, err := malformed.Whole(); ok || !errors.Is(err, ErrBadPiece) || !errors.Is(err, peer.ErrBadFrame) {
		t.Fatalf("pieces of no msgpack value: %v, %v", ok, err)
	}
}

// TestDoneAnswers: a leader's answer to a done comes back as sent, and an
// empty answer (that of a leader that answers none) holds nothing.
func TestDoneAnswers(t *testing.T) {
	sent := DoneResp{Wait: int64(3 * time.Second), Jobs: []string{"a", "b"}}
	body, err := msgpack.Marshal(&sent)
	if err != nil {
		t.Fatal(err)
	}
	var got DoneResp
	if err := msgpack.Unmarshal(body, &got); err != nil || got.Wait != sent.Wait || !slices.Equal(got.Jobs, sent.Jobs) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, sent)
	}
	empty, err := msgpack.Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	got = DoneResp{}
	if err := msgpack.Unmarshal(empty, &got); err != nil || got.Wait != 0 || got.Jobs != nil {
		t.Fatalf("an empty answer decoded as %+v, %v", got, err)
	}
}

// TestPeekOrder: an order's epoch and Ahead are read from the first bytes
// of its encoding, before its slices (an order's first relayed piece);
// a prefix that ends before them says so.
func TestPeekOrder(t *testing.T) {
	for _, ahead := range []int{0, 1} {
		p := &PublishMsg{Dataset: "ds", Job: "j", Version: "v", Gen: 3, Epoch: 7, Term: 2, World: 2, Ahead: ahead,
			Slices: []U32s{make(U32s, 5000), make(U32s, 5000)}, Sampler: make([]byte, 100), Ranks: []string{"a", "b"}}
		body, err := p.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if epoch, got, ok := PeekOrder(body[:64]); !ok || epoch != 7 || got != ahead {
			t.Fatalf("PeekOrder of 64 bytes = epoch %d, ahead %d, %v; want 7, %d", epoch, got, ok, ahead)
		}
		if _, _, ok := PeekOrder(body[:12]); ok {
			t.Fatalf("PeekOrder of 12 bytes: ok, before the epoch")
		}
	}
}

// TestScoreQueueStamps: each owner's message carries the stamps of its
// scores, in its order, and the queue's term; scores of an earlier term
// than those queued are dropped, and those queued go for scores of a
// later one (a leader that took over); unstamped ones go with seq 0.
func TestScoreQueueStamps(t *testing.T) {
	where := Placement{Groups: 2, Group: func(id uint32) int { return int(id % 2) }, Owners: func(g int) []string { return [][]string{{"a"}, {"b", "a"}}[g] }}
	var q ScoreQueue
	ds := JobKey{Dataset: "ds"}
	q.Add(where, "me", ds, Stamped(5, 7, []uint32{2, 3}, []float32{20, 30}), nil)
	q.Add(where, "me", ds, Merged{Term: 5, IDs: []uint32{4, 5}, Scores: []float32{40, 50}, Seqs: []uint32{9, 8}}, nil)
	q.Add(where, "me", ds, Stamped(4, 99, []uint32{6}, []float32{60}), nil) // an earlier term: dropped
	q.Add(where, "me", ds, Merged{IDs: []uint32{7}, Scores: []float32{70}}, nil)
	got := q.Take(true)[ds]
	if a := got["a"]; a == nil || !slices.Equal(a.IDs, []uint32{2, 4}) || !slices.Equal(a.Seqs, []uint32{7, 9}) || a.Term != 5 {
		t.Fatalf("a's message %+v, want ids [2 4], seqs [7 9], term 5", a)
	}
	if b := got["b"]; b == nil || !slices.Equal(b.IDs, []uint32{3, 5, 7}) || !slices.Equal(b.Seqs, []uint32{7, 8, 0}) || b.Term != 5 || b.Pass != 3 {
		t.Fatalf("b's message %+v, want ids [3 5 7] to pass on, seqs [7 8 0], term 5", b)
	}
	q.Add(where, "me", ds, Stamped(5, 10, []uint32{2}, []float32{21}), nil)
	q.Add(where, "me", ds, Stamped(6, 1, []uint32{4}, []float32{41}), nil) // a later term: what is queued goes
	got = q.Take(true)[ds]
	if a := got["a"]; len(got) != 1 || a == nil || !slices.Equal(a.IDs, []uint32{4}) || !slices.Equal(a.Seqs, []uint32{1}) || a.Term != 6 {
		t.Fatalf("after a later term: %v, want a's [4] of term 6 alone", got)
	}
}
