// Copyright (c) 2018-2022 Burak Sezer
// All rights reserved.
//
// This code is licensed under the MIT License.
//
// Permission is hereby granted, free of charge, to any person obtaining a copy
// of this software and associated documentation files(the "Software"), to deal
// in the Software without restriction, including without limitation the rights
// to use, copy, modify, merge, publish, distribute, sublicense, and / or sell
// copies of the Software, and to permit persons to whom the Software is
// furnished to do so, subject to the following conditions :
//
// The above copyright notice and this permission notice shall be included in
// all copies or substantial portions of the Software.
//
// THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
// IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
// FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT.IN NO EVENT SHALL THE
// AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
// LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
// OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
// THE SOFTWARE.

// Package consistent provides a consistent hashing function with bounded loads. This implementation also adds
// partitioning logic on top of the original algorithm. For more information about the underlying algorithm,
// please take a look at https://research.googleblog.com/2017/04/consistent-hashing-with-bounded-loads.html
//
// Example Use:
//
//	cfg := consistent.Config{
//		PartitionCount:    71,
//		ReplicationFactor: 20,
//		Load:              1.25,
//		Hasher:            hasher{},
//	}
//
// Now you can create a new Consistent instance. This function can take a list of the members.
//
//	c := consistent.New(members, cfg)
//
// In the following sample, you add a new Member to the consistent hash ring. myMember is just a Go struct that
// implements the Member interface. You should know that modifying the consistent hash ring distributes partitions among
// members using the algorithm defined on Google Research Blog.
//
//	c.Add(myMember)
//
// Remove a member from the consistent hash ring:
//
//	c.Remove(member-name)
//
// LocateKey hashes the key and calculates partition ID with this modulo operation: MOD(hash result, partition count)
// The owner of the partition is already calculated by New/Add/Remove. LocateKey just returns the member that is responsible
// for the key.
//
//	key := []byte("my-key")
//	member := c.LocateKey(key)
package consistent

import (
	"cmp"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
)

const (
	DefaultPartitionCount    int     = 271
	DefaultReplicationFactor int     = 20
	DefaultLoad              float64 = 1.25
)

// ErrInsufficientMemberCount represents an error which means there are not enough members to complete the task.
var ErrInsufficientMemberCount = errors.New("insufficient member count")

// Hasher is responsible for generating unsigned, 64-bit hash of provided byte slice.
// Hasher should minimize collisions (generating same hash for different byte slice)
// and while performance is also important fast functions are preferable (i.e.
// you can use FarmHash family).
type Hasher interface {
	Sum64([]byte) uint64
}

// Member interface represents a member in consistent hash ring.
type Member interface {
	String() string
}

// Config represents a structure to control consistent package.
type Config struct {
	// Hasher is responsible for generating unsigned, 64-bit hash of provided byte slice.
	Hasher Hasher

	// Keys are distributed among partitions. Prime numbers are good to
	// distribute keys uniformly. Select a big PartitionCount if you have
	// too many keys.
	PartitionCount int

	// Members are replicated on consistent hash ring. This number means that a member
	// how many times replicated on the ring.
	ReplicationFactor int

	// Load is used to calculate average load. See the code, the paper and Google's blog post to learn about it.
	Load float64
}

// Consistent holds the information about the members of the consistent hash circle.
type Consistent struct {
	mu sync.RWMutex

	config         Config
	hasher         Hasher
	sortedSet      []uint64
	partitionCount uint64
	loads          map[string]float64
	members        map[string]*Member
	partitions     []Member // shade: by partition; nil where none (upstream: a map)

	// shade: pointSlot[i] is the slot in slots of the member point
	// sortedSet[i] belongs to: what upstream's ring map (hash to member)
	// held for the point's hash, which the last member to add a point at
	// that hash set, and which a removal of a point at it deleted; 0 for a
	// deleted one (slots[0] is nil: a partition that tries such a point
	// panics, as upstream's look-up did). Every point at one hash has the
	// same slot. It replaces the ring map (200,000 entries at 1,000 members
	// of 200 points: 4.5 MiB of the 7.1 a ring held); distributePartitions reads
	// a point's member and counts its load by slot, where upstream looked
	// the point up in the map and the load in a map by member.
	pointSlot []int32
	slots     []*Member        // by slot; slots[0] and freed ones nil
	slotOf    map[string]int32 // each member's slot, by name
	freeSlots []int32
	// shade: partKeys[p] is partition p's place on the circle, partOrder
	// the partitions by it (both fixed by the partition count and the
	// hasher); distributePartitions finds every partition's first point
	// in one pass over the circle beside them, where upstream searched
	// the circle for each. partIdx and loadBuf are its scratch.
	partKeys  []uint64
	partOrder []int32
	partIdx   []int32
	loadBuf   []float64
}

// New creates and returns a new Consistent object.
func New(members []Member, config Config) *Consistent {
	if config.Hasher == nil {
		panic("Hasher cannot be nil")
	}
	if config.PartitionCount == 0 {
		config.PartitionCount = DefaultPartitionCount
	}
	if config.ReplicationFactor == 0 {
		config.ReplicationFactor = DefaultReplicationFactor
	}
	if config.Load == 0 {
		config.Load = DefaultLoad
	}

	// shade: the maps are made for every member's points at once (upstream
	// grew them point by point, half of New's time at 1,000 members).
	c := &Consistent{
		config:         config,
		members:        make(map[string]*Member, len(members)),
		partitionCount: uint64(config.PartitionCount),
		sortedSet:      make([]uint64, 0, len(members)*config.ReplicationFactor),
		pointSlot:      make([]int32, 0, len(members)*config.ReplicationFactor),
		slots:          make([]*Member, 1, len(members)+1),
		slotOf:         make(map[string]int32, len(members)),
	}

	c.hasher = config.Hasher
	// shade: every member's points go on the circle, then it is sorted
	// once. Upstream sorted the whole circle after each member (add), so
	// New cost O(M²·points·log): 12.8 s for 1,000 members of 200 points.
	for _, member := range members {
		c.addPoints(member)
	}
	sortPoints(c.sortedSet, c.pointSlot)
	if members != nil {
		c.distributePartitions()
	}
	return c
}

// shade: newSlot gives m a slot, a freed one or one past the last.
func (c *Consistent) newSlot(m *Member) int32 {
	if n := len(c.freeSlots); n > 0 {
		s := c.freeSlots[n-1]
		c.freeSlots, c.slots[s] = c.freeSlots[:n-1], m
		return s
	}
	c.slots = append(c.slots, m)
	return int32(len(c.slots) - 1)
}

// shade: sortPoints sorts the circle, hashes with their slots beside
// them, and gives every point at one hash the slot of the last point added
// at it (points added in slots' order), as upstream's ring map kept the
// member whose point was written last.
func sortPoints(hashes []uint64, slots []int32) {
	type point struct {
		h    uint64
		s, i int32
	}
	ps := make([]point, len(hashes))
	for i, h := range hashes {
		ps[i] = point{h, slots[i], int32(i)}
	}
	slices.SortFunc(ps, func(a, b point) int {
		if c := cmp.Compare(a.h, b.h); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	for i := len(ps) - 1; i >= 0; i-- {
		hashes[i], slots[i] = ps[i].h, ps[i].s
		if i+1 < len(ps) && ps[i+1].h == ps[i].h {
			slots[i] = slots[i+1] // the last added at this hash
		}
	}
}

// shade: setSlots gives every point at h slot s: the member that added a
// point at h, or 0 where a removal deleted h (upstream's ring map entry).
func (c *Consistent) setSlots(h uint64, s int32) {
	i, _ := slices.BinarySearch(c.sortedSet, h)
	for ; i < len(c.sortedSet) && c.sortedSet[i] == h; i++ {
		c.pointSlot[i] = s
	}
}

// GetMembers returns a thread-safe copy of members. If there are no members, it returns an empty slice of Member.
func (c *Consistent) GetMembers() []Member {
	c.mu.RLock()
	defer c.mu.RUnlock()

	// Create a thread-safe copy of member list.
	members := make([]Member, 0, len(c.members))
	for _, member := range c.members {
		members = append(members, *member)
	}
	return members
}

// AverageLoad exposes the current average load.
func (c *Consistent) AverageLoad() float64 {
	c.mu.RLock()
	defer c.mu.RUnlock()

	return c.averageLoad()
}

func (c *Consistent) averageLoad() float64 {
	if len(c.members) == 0 {
		return 0
	}

	avgLoad := float64(c.partitionCount/uint64(len(c.members))) * c.config.Load
	return math.Ceil(avgLoad)
}

// shade: distributeWithLoad counts loads by the slot beside each point
// it tries, an index into a slice, and places partitions in a slice;
// upstream counted them by member.String() (two string-keyed
// look-ups) and placed them in a map, each through a copy of the member
// on the heap. The table is upstream's (shade_test.go).
func (c *Consistent) distributeWithLoad(partID, idx int, avgLoad float64, partitions []Member, loads []float64) {
	var count int
	for {
		count++
		if count >= len(c.sortedSet) {
			// User needs to decrease partition count, increase member count or increase load factor.
			panic("not enough room to distribute partitions")
		}
		s := c.pointSlot[idx]
		m := c.slots[s]
		member := *m // as upstream: a point whose ring entry a removal deleted panics here
		if loads[s]+1 <= avgLoad {
			partitions[partID] = member
			loads[s]++
			return
		}
		idx++
		if idx >= len(c.sortedSet) {
			idx = 0
		}
	}
}

func (c *Consistent) distributePartitions() {
	// shade: loads by slot (upstream: a map by member); upstream computed
	// the average load again for every partition.
	loads := slices.Grow(c.loadBuf[:0], len(c.slots))[:len(c.slots)]
	clear(loads)
	partitions := make([]Member, c.partitionCount)
	avgLoad := c.averageLoad()

	c.findFirstPoints()
	for partID := range int(c.partitionCount) {
		c.distributeWithLoad(partID, int(c.partIdx[partID]), avgLoad, partitions, loads)
	}
	c.partitions = partitions
	// shade: the loads by name, as upstream keeps them for
	// LoadDistribution (members of no partition absent).
	c.loads = make(map[string]float64, len(c.members))
	for s, load := range loads {
		if load > 0 {
			c.loads[(*c.slots[s]).String()] += load
		}
	}
	c.loadBuf = loads
}

// shade: findFirstPoints sets partIdx[p] to the first point on the circle
// at or after partition p's key, 0 past the last, as upstream's
// sort.Search for each partition: the partitions in the order of their
// keys, in one pass over the circle, O(points + partitions).
func (c *Consistent) findFirstPoints() {
	if c.partKeys == nil {
		c.partKeys = make([]uint64, c.partitionCount)
		c.partOrder = make([]int32, c.partitionCount)
		c.partIdx = make([]int32, c.partitionCount)
		bs := make([]byte, 8)
		for partID := range c.partitionCount {
			binary.LittleEndian.PutUint64(bs, partID)
			c.partKeys[partID] = c.hasher.Sum64(bs)
			c.partOrder[partID] = int32(partID)
		}
		slices.SortFunc(c.partOrder, func(a, b int32) int { return cmp.Compare(c.partKeys[a], c.partKeys[b]) })
	}
	i := 0
	for _, p := range c.partOrder {
		for i < len(c.sortedSet) && c.sortedSet[i] < c.partKeys[p] {
			i++
		}
		if i < len(c.sortedSet) {
			c.partIdx[p] = int32(i)
		} else {
			c.partIdx[p] = 0
		}
	}
}

// shade: add merges the member's sorted points into the sorted circle,
// O(M·points); upstream appended them and sorted it all,
// O(M·points·log).
func (c *Consistent) add(member Member) {
	n := len(c.sortedSet)
	s := c.addPoints(member)
	slices.Sort(c.sortedSet[n:])
	added := slices.Clone(c.sortedSet[n:])
	// shade: the slots move with their points; then every point at a hash
	// the member took (its own, and another's whose ring entry it now
	// holds) is its.
	c.sortedSet, c.pointSlot = mergeTail(c.sortedSet, c.pointSlot, n)
	for _, h := range added {
		c.setSlots(h, s)
	}
}

// shade: addPoints puts member's points on the circle unsorted, each
// with the member's slot beside it (New sorts once; add merges), records
// the member, and returns its slot. The points' keys are upstream's,
// fmt.Sprintf("%s%d", member, i), built in one buffer.
func (c *Consistent) addPoints(member Member) int32 {
	name := member.String()
	s := c.newSlot(&member)
	c.slotOf[name] = s
	key := make([]byte, 0, len(name)+20)
	for i := 0; i < c.config.ReplicationFactor; i++ {
		key = strconv.AppendInt(append(key[:0], name...), int64(i), 10)
		c.sortedSet = append(c.sortedSet, c.hasher.Sum64(key))
		c.pointSlot = append(c.pointSlot, s)
	}
	// Storing member at this map is useful to find backup members of a partition.
	c.members[name] = &member
	return s
}

// shade: mergeTail sorts s whose s[:n] and s[n:] are each sorted, in
// place, from the back, moving each element of slots (which runs beside s)
// with its element of s: O(len(s)) and no allocation but for the tails'
// copies.
func mergeTail(s []uint64, slots []int32, n int) ([]uint64, []int32) {
	tail, tailSlots := slices.Clone(s[n:]), slices.Clone(slots[n:])
	i, j := n-1, len(tail)-1
	for k := len(s) - 1; j >= 0; k-- {
		if i >= 0 && s[i] > tail[j] {
			s[k], slots[k] = s[i], slots[i]
			i--
		} else {
			s[k], slots[k] = tail[j], tailSlots[j]
			j--
		}
	}
	return s, slots
}

// Add adds a new member to the consistent hash circle.
func (c *Consistent) Add(member Member) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if _, ok := c.members[member.String()]; ok {
		// We already have this member. Quit immediately.
		return
	}
	c.add(member)
	c.distributePartitions()
}

// shade: removeSorted removes from the sorted set one occurrence of each
// of gone's values (upstream's delSlice, once a value), in one pass, and
// the same places from slots, which runs beside set.
func removeSorted(set []uint64, slots []int32, gone []uint64) ([]uint64, []int32) {
	slices.Sort(gone)
	w, j := 0, 0
	for i, h := range set {
		for j < len(gone) && gone[j] < h {
			j++ // not on the circle: nothing to remove
		}
		if j < len(gone) && gone[j] == h {
			j++
			continue
		}
		set[w], slots[w] = h, slots[i]
		w++
	}
	return set[:w], slots[:w]
}

// Remove removes a member from the consistent hash circle.
func (c *Consistent) Remove(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if _, ok := c.members[name]; !ok {
		// There is no member with that name. Quit immediately.
		return
	}

	// shade: the member's points leave the circle in one pass over it,
	// O(M·points); upstream searched it from the start for each point,
	// O(M·points²). As upstream, one occurrence of each point's hash is
	// removed, and any point left at that hash has no member (upstream
	// deleted the hash from its ring map).
	gone := make([]uint64, 0, c.config.ReplicationFactor)
	key := make([]byte, 0, len(name)+20)
	for i := 0; i < c.config.ReplicationFactor; i++ {
		key = strconv.AppendInt(append(key[:0], name...), int64(i), 10)
		gone = append(gone, c.hasher.Sum64(key))
	}
	c.sortedSet, c.pointSlot = removeSorted(c.sortedSet, c.pointSlot, gone)
	// shade: a point left at a hash whose ring entry went has no member,
	// and the member's slot is free.
	for _, h := range gone {
		c.setSlots(h, 0)
	}
	s := c.slotOf[name]
	delete(c.slotOf, name)
	c.slots[s] = nil
	c.freeSlots = append(c.freeSlots, s)
	delete(c.members, name)
	if len(c.members) == 0 {
		// consistent hash ring is empty now. Reset the partition table.
		c.partitions = nil
		return
	}
	c.distributePartitions()
}

// LoadDistribution exposes load distribution of members.
func (c *Consistent) LoadDistribution() map[string]float64 {
	c.mu.RLock()
	defer c.mu.RUnlock()

	// Create a thread-safe copy
	res := make(map[string]float64)
	for member, load := range c.loads {
		res[member] = load
	}
	return res
}

// FindPartitionID returns partition id for given key.
func (c *Consistent) FindPartitionID(key []byte) int {
	hkey := c.hasher.Sum64(key)
	return int(hkey % c.partitionCount)
}

// GetPartitionOwner returns the owner of the given partition.
func (c *Consistent) GetPartitionOwner(partID int) Member {
	c.mu.RLock()
	defer c.mu.RUnlock()

	return c.getPartitionOwner(partID)
}

// getPartitionOwner returns the owner of the given partition. It's not thread-safe.
func (c *Consistent) getPartitionOwner(partID int) Member {
	if partID < 0 || partID >= len(c.partitions) {
		return nil
	}
	return c.partitions[partID]
}

// LocateKey finds a home for given key
func (c *Consistent) LocateKey(key []byte) Member {
	partID := c.FindPartitionID(key)
	return c.GetPartitionOwner(partID)
}

func (c *Consistent) getClosestN(partID, count int) ([]Member, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()

	var res []Member
	if count > len(c.members) {
		return res, ErrInsufficientMemberCount
	}

	var ownerKey uint64
	owner := c.getPartitionOwner(partID)
	// Hash and sort all the names.
	var keys []uint64
	kmems := make(map[uint64]*Member)
	for name, member := range c.members {
		key := c.hasher.Sum64([]byte(name))
		if name == owner.String() {
			ownerKey = key
		}
		keys = append(keys, key)
		kmems[key] = member
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i] < keys[j]
	})

	// Find the key owner
	idx := 0
	for idx < len(keys) {
		if keys[idx] == ownerKey {
			key := keys[idx]
			res = append(res, *kmems[key])
			break
		}
		idx++
	}

	// Find the closest(replica owners) members.
	for len(res) < count {
		idx++
		if idx >= len(keys) {
			idx = 0
		}
		key := keys[idx]
		res = append(res, *kmems[key])
	}
	return res, nil
}

// GetClosestN returns the closest N member to a key in the hash ring.
// This may be useful to find members for replication.
func (c *Consistent) GetClosestN(key []byte, count int) ([]Member, error) {
	partID := c.FindPartitionID(key)
	return c.getClosestN(partID, count)
}

// GetClosestNForPartition returns the closest N member for given partition.
// This may be useful to find members for replication.
func (c *Consistent) GetClosestNForPartition(partID, count int) ([]Member, error) {
	return c.getClosestN(partID, count)
}
