package policy

import (
	"compress/gzip"
	"flag"
	"os"
	"testing"
)

var variantsFlag = flag.Bool("variants", false, "measure the order-aware rule's variants on the real trace (slow)")

// realTracePath is a trace recorded by a peer: 6,000 Fashion-MNIST samples,
// 3 ranks, PADS with APP, 6 epochs (see test/results/order-aware.md).
const realTracePath = "../test/results/traces/fmnist6k-pads-app.trace.gz"

func realTrace(t *testing.T) []Access {
	t.Helper()
	f, err := os.Open(realTracePath)
	if err != nil {
		t.Skipf("no real trace: %v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ReadTrace(zr)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestOrderAwareRealTrace: on the recorded PADS trace the order-aware policy
// closes at least half of the gap between APP and MIN (the target)
// at every cache size measured, and stays below MIN.
func TestOrderAwareRealTrace(t *testing.T) {
	tr := realTrace(t)
	_, ws := WorkingSet(tr)
	for _, frac := range []float64{0.05, 0.1, 0.2} {
		capacity := int64(frac * float64(ws))
		app := Replay(NewAPP(Options{}), tr, capacity).HitRatio
		min := Replay(NewMIN(Reads(tr)), tr, capacity).HitRatio
		order := Replay(NewOrderAware(Options{}), tr, capacity).HitRatio
		gap := (order - app) / (min - app)
		t.Logf("%v: app %.4f order %.4f min %.4f, gap closed %.3f", frac, app, order, min, gap)
		if !(order <= min) || !(gap >= 0.5) {
			t.Errorf("%v: app %.4f order %.4f min %.4f: gap closed %.3f, want >= 0.5 and order <= min",
				frac, app, order, min, gap)
		}
	}
}

// TestOrderAwareVariants measures variants of the rule on the real trace
// (go test ./policy -run Variants -v -args -variants); it asserts nothing.
//
//   - gate: the importance gate first, as SHADE's APP: a newcomer may evict
//     only residents less important than itself, and among those the one
//     read furthest ahead; it is bypassed if that one is read before it.
//   - no importance: residents never read again go oldest first, scores
//     and frequencies unused.
//   - buckets of B: places compared in buckets of B reads, importance
//     deciding within a bucket.
func TestOrderAwareVariants(t *testing.T) {
	if !*variantsFlag {
		t.Skip("pass -variants to measure")
	}
	tr := realTrace(t)
	_, ws := WorkingSet(tr)
	for _, frac := range []float64{0.05, 0.1, 0.2} {
		capacity := int64(frac * float64(ws))
		app := Replay(NewAPP(Options{}), tr, capacity).HitRatio
		min := Replay(NewMIN(Reads(tr)), tr, capacity).HitRatio
		report := func(name string, p Policy) {
			r := Replay(p, tr, capacity).HitRatio
			t.Logf("%v %-16s %6.2f%%  gap closed %5.1f%%", frac, name, 100*r, 100*(r-app)/(min-app))
		}
		report("order", NewOrderAware(Options{}))
		report("gate", &variant{gate: true})
		report("no importance", &variant{noImp: true})
		report("buckets of 64", &variant{bucket: 64})
		report("buckets of 600", &variant{bucket: 600})
	}
}

// variant is OrderAware's bookkeeping with a rule chosen by its fields and
// an O(n) scan for the victim: a yardstick, not a policy to ship.
type variant struct {
	*OrderAware
	res    map[ID]orderKey
	bucket int64
	gate   bool
	noImp  bool
}

func (v *variant) init() {
	if v.res == nil {
		v.OrderAware = NewOrderAware(Options{})
		v.res = make(map[ID]orderKey)
	}
}

func (v *variant) BeginEpoch(epoch int, reads []ID) {
	v.init()
	v.OrderAware.BeginEpoch(epoch, reads)
	v.rekey()
}

func (v *variant) AppendEpoch(epoch int, reads []ID) {
	v.init()
	v.OrderAware.AppendEpoch(epoch, reads)
	v.rekey()
}

func (v *variant) MergeEpoch(epoch int, reads []ID, start, others int) {
	v.init()
	v.OrderAware.MergeEpoch(epoch, reads, start, others)
	v.rekey()
}

// get returns id's place in c, and whether it has one.
func (c *cursors) get(id ID) (int32, bool) {
	sl := c.find(id)
	if sl == nil {
		return 0, false
	}
	return int32(sl.v.index()), true
}

// rekey gives every resident its first place in the order just installed.
func (v *variant) rekey() {
	for id, k := range v.res {
		k.next = never
		if p, ok := v.cursor.get(id); ok {
			k.next = int64(p)
		}
		v.res[id] = k
	}
}

func (v *variant) imp(k appKey) appKey {
	if v.noImp {
		k.score, k.freq = 0, 0
	}
	return k
}

// before reports whether a is a better victim than b.
func (v *variant) before(a, b orderKey) bool {
	an, bn := a.next, b.next
	if v.bucket > 0 && an != never {
		an /= v.bucket
	}
	if v.bucket > 0 && bn != never {
		bn /= v.bucket
	}
	if an != bn {
		return an > bn
	}
	return v.imp(a.imp).less(v.imp(b.imp))
}

func (v *variant) Hit(id ID) {
	v.init()
	v.now++
	g := v.ghosts.touch(id)
	n := v.consume(id)
	if k, ok := v.res[id]; ok {
		k.next = n
		k.imp.freq, k.imp.last = g.freq, v.now
		v.res[id] = k
	}
}

func (v *variant) Miss(id ID, size int64, room Room) bool {
	v.init()
	if _, ok := v.res[id]; ok {
		v.Hit(id)
		return true
	}
	v.now++
	g := v.ghosts.touch(id)
	k := orderKey{next: v.consume(id), imp: g.key(v.def, v.now)}
	if refuse(room, size) {
		return false
	}
	for !room.Fits(id, size) {
		var vid ID
		var vk orderKey
		found := false
		for rid, rk := range v.res {
			if v.gate && !v.imp(rk.imp).less(v.imp(k.imp)) {
				continue
			}
			if !found || v.before(rk, vk) || !v.before(vk, rk) && rid < vid {
				vid, vk, found = rid, rk, true
			}
		}
		if !found || v.gate && vk.next < k.next || !v.gate && !v.before(vk, k) {
			break
		}
		delete(v.res, vid)
		room.Evict(vid)
	}
	if !room.Fits(id, size) {
		return false
	}
	v.res[id] = k
	return true
}

func (v *variant) Remove(id ID)        { delete(v.res, id) }
func (v *variant) Resident(id ID) bool { _, ok := v.res[id]; return ok }
func (v *variant) Len() int            { return len(v.res) }

func (v *variant) SetScore(id ID, score float64) {
	v.init()
	s := v.ghosts.setScore(id, score)
	if k, ok := v.res[id]; ok {
		k.imp.score = s
		v.res[id] = k
	}
}

func (v *variant) SetDefaultScore(score float64) {
	v.init()
	v.def = float32(score)
}
