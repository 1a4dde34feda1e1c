package shards

import (
	"bytes"
	"hash/maphash"

	"github.com/shade-mesh/shade/dataset"
)

// keySet is a set of names of a dataset.NamesBuilder, held as their
// places in it: open addressing over places plus one (0 is an empty
// slot), a name's slot found by its hash and the name itself compared in
// the builder, so that two names are the same only where their bytes are.
// It costs 8 to 16 bytes a name and no pointer, where a map[string]bool
// costs the name's string and about 40 bytes more. The zero value is an
// empty set; sized, it grows by doubling at half full.
type keySet struct {
	seed  maphash.Seed
	slots []uint32
	n     int
}

// sized makes room for n names.
func (k *keySet) sized(n int) {
	size := 16
	for size < 2*n {
		size *= 2
	}
	if size > len(k.slots) {
		k.seed = maphash.MakeSeed()
		k.slots = make([]uint32, size)
		k.n = 0
	}
}

// has says whether the set holds a name equal to key.
func (k *keySet) has(key []byte, names *dataset.NamesBuilder) bool {
	if k.n == 0 {
		return false
	}
	mask := uint64(len(k.slots) - 1)
	for s := maphash.Bytes(k.seed, key) & mask; ; s = (s + 1) & mask {
		p := k.slots[s]
		if p == 0 {
			return false
		}
		if bytes.Equal(names.Bytes(int(p-1)), key) {
			return true
		}
	}
}

// insert adds name i of names, which the set does not hold.
func (k *keySet) insert(i int, names *dataset.NamesBuilder) {
	if 2*(k.n+1) > len(k.slots) {
		old := k.slots
		k.sized(max(2*k.n, 8))
		for _, p := range old {
			if p != 0 {
				k.put(p, names)
			}
		}
	}
	k.put(uint32(i+1), names)
}

func (k *keySet) put(p uint32, names *dataset.NamesBuilder) {
	mask := uint64(len(k.slots) - 1)
	s := maphash.Bytes(k.seed, names.Bytes(int(p-1))) & mask
	for k.slots[s] != 0 {
		s = (s + 1) & mask
	}
	k.slots[s] = p
	k.n++
}
