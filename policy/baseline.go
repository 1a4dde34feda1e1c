package policy

import "math"

// queue is LRU and FIFO: residents in a doubly linked list, newest at the
// head, victims taken from the tail. LRU moves an item to the head on a hit;
// FIFO does not. Both always admit, evicting from the tail until the item
// fits; an item that does not fit in an empty cache is refused.
//
// The list lives in a slice indexed by int32 links, with freed slots reused,
// so it holds no pointers.
type queue struct {
	name       string
	moveOnHit  bool
	at         map[ID]int32
	nodes      []qnode
	free       []int32
	head, tail int32 // -1 when empty
}

type qnode struct {
	id         ID
	prev, next int32
}

var (
	_ Policy = (*queue)(nil)
	_ Policy = (*LFU)(nil)
	_ Policy = (*MinIO)(nil)
)

// NewLRU returns an empty least-recently-used policy.
func NewLRU() Policy { return newQueue("lru", true) }

// NewFIFO returns an empty first-in-first-out policy: a hit does not renew
// an item, the oldest admitted goes first.
func NewFIFO() Policy { return newQueue("fifo", false) }

func newQueue(name string, moveOnHit bool) *queue {
	return &queue{name: name, moveOnHit: moveOnHit, at: make(map[ID]int32), head: -1, tail: -1}
}

func (q *queue) Name() string { return q.name }

func (q *queue) Hit(id ID) {
	if !q.moveOnHit {
		return
	}
	if i, ok := q.at[id]; ok && i != q.head {
		q.unlink(i)
		q.linkHead(i)
	}
}

func (q *queue) Miss(id ID, size int64, room Room) bool {
	if _, ok := q.at[id]; ok {
		q.Hit(id)
		return true
	}
	if refuse(room, size) {
		return false
	}
	for !room.Fits(id, size) && q.tail >= 0 {
		i := q.tail
		victim := q.nodes[i].id
		q.drop(i)
		room.Evict(victim)
	}
	if !room.Fits(id, size) {
		return false
	}
	var i int32
	if n := len(q.free); n > 0 {
		i = q.free[n-1]
		q.free = q.free[:n-1]
	} else {
		i = int32(len(q.nodes))
		q.nodes = append(q.nodes, qnode{})
	}
	q.nodes[i].id = id
	q.at[id] = i
	q.linkHead(i)
	return true
}

func (q *queue) Remove(id ID) {
	if i, ok := q.at[id]; ok {
		q.drop(i)
	}
}

func (q *queue) Resident(id ID) bool {
	_, ok := q.at[id]
	return ok
}

func (q *queue) Len() int { return len(q.at) }

func (q *queue) drop(i int32) {
	delete(q.at, q.nodes[i].id)
	q.unlink(i)
	q.nodes[i] = qnode{}
	q.free = append(q.free, i)
}

func (q *queue) unlink(i int32) {
	n := q.nodes[i]
	if n.prev >= 0 {
		q.nodes[n.prev].next = n.next
	} else {
		q.head = n.next
	}
	if n.next >= 0 {
		q.nodes[n.next].prev = n.prev
	} else {
		q.tail = n.prev
	}
}

func (q *queue) linkHead(i int32) {
	q.nodes[i].prev = -1
	q.nodes[i].next = q.head
	if q.head >= 0 {
		q.nodes[q.head].prev = i
	} else {
		q.tail = i
	}
	q.head = i
}

// LFU is the classic in-cache least-frequently-used policy: it always
// admits, and evicts the resident with the fewest reads, ties going to the
// least recently used. Frequencies are counted only while an item is
// resident: an evicted item comes back with a count of one. (Counts that
// survive eviction are what APP's ghost table adds; keeping LFU classic keeps
// the baseline honest.)
type LFU struct {
	heap idHeap[appKey] // score is always 0
	now  uint64
}

// NewLFU returns an empty LFU policy.
func NewLFU() *LFU {
	l := &LFU{heap: newIDHeap(appLess)}
	releaseWith(l, l.heap.pools()...)
	return l
}

// Name returns "lfu".
func (l *LFU) Name() string { return "lfu" }

// Hit counts a read of a resident.
func (l *LFU) Hit(id ID) {
	l.now++
	if s, ok := l.heap.find(id); ok {
		k := l.heap.keyOf(s)
		if k.freq < math.MaxUint32 {
			k.freq++
		}
		k.last = l.now
		l.heap.setSlot(s, k)
	}
}

// Miss evicts least-frequently-used residents until id fits, then admits it.
func (l *LFU) Miss(id ID, size int64, room Room) bool {
	if l.heap.has(id) {
		l.Hit(id)
		return true
	}
	l.now++
	if refuse(room, size) {
		return false
	}
	for !room.Fits(id, size) && l.heap.len() > 0 {
		room.Evict(l.heap.pop().id)
	}
	if !room.Fits(id, size) {
		return false
	}
	l.heap.push(id, appKey{freq: 1, last: l.now}, 0)
	return true
}

// Remove forgets id and its count.
func (l *LFU) Remove(id ID) { l.heap.remove(id) }

// Resident reports whether id is in the cache.
func (l *LFU) Resident(id ID) bool { return l.heap.has(id) }

// Len is the number of residents.
func (l *LFU) Len() int { return l.heap.len() }

// OffHeapBytes implements OffHeap.
func (l *LFU) OffHeapBytes() int64 { return l.heap.bytes() }

// MinIO is CoorDL's policy: admit while the item fits, never evict. After
// the first epoch fills the cache its contents stay fixed (unless the node
// Removes items).
type MinIO struct {
	in map[ID]struct{}
}

// NewMinIO returns an empty MinIO policy.
func NewMinIO() *MinIO { return &MinIO{in: make(map[ID]struct{})} }

// Name returns "minio".
func (m *MinIO) Name() string { return "minio" }

// Hit does nothing: MinIO keeps no order.
func (m *MinIO) Hit(ID) {}

// Miss admits id if it fits; it never evicts.
func (m *MinIO) Miss(id ID, size int64, room Room) bool {
	if _, ok := m.in[id]; ok {
		return true
	}
	if size < 0 || !room.Fits(id, size) {
		return false
	}
	m.in[id] = struct{}{}
	return true
}

// Remove forgets id.
func (m *MinIO) Remove(id ID) { delete(m.in, id) }

// Resident reports whether id is in the cache.
func (m *MinIO) Resident(id ID) bool {
	_, ok := m.in[id]
	return ok
}

// Len is the number of residents.
func (m *MinIO) Len() int { return len(m.in) }

// None admits nothing: every read is a miss served from the source. It is
// the baseline of training without a cache, behind the same interface.
type None struct{}

// Name returns "none".
func (None) Name() string { return "none" }

// Hit does nothing: nothing is resident.
func (None) Hit(ID) {}

// Miss refuses id.
func (None) Miss(ID, int64, Room) bool { return false }

// Remove does nothing: nothing is resident.
func (None) Remove(ID) {}

// Resident is always false.
func (None) Resident(ID) bool { return false }

// Len is always 0.
func (None) Len() int { return 0 }
