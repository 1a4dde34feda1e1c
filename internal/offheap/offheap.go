// Package offheap hands out fixed-size values in memory mapped outside
// the Go heap, for the tables a cache keeps an entry of per sample (the
// store's index, the policy's heap): at millions of small samples they
// are tens of MB, which on the Go heap the garbage collector would count
// and let the heap grow by as much again before collecting. Memory
// mapped here it neither counts nor scans.
//
// A Pool's values must hold no Go pointers (the collector does not see
// them) and must not be used after Release. It is a leaf: it imports
// nothing of this module.
package offheap

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// slabBytes is about how much one mapping holds: a slab of several
// values (at least one), mapped at once; the kernel gives its pages only
// as they are first written, so a slab barely begun takes little memory.
const slabBytes = 1 << 20

// Pool hands out values of T from anonymous mappings and keeps those
// given back (Put) for the next Get. Get, Put and Release need the
// caller's lock (a Pool is used by one goroutine at a time); Bytes needs
// none. The zero value is an empty pool.
type Pool[T any] struct {
	slabs   [][]byte // the mappings; the last one handed out up to next
	next    int      // values handed out of the last slab
	free    []*T     // values given back
	written atomic.Int64
}

// size is the bytes of a T, and perSlab the values of T a slab holds.
func size[T any]() int    { return int(unsafe.Sizeof(*new(T))) }
func perSlab[T any]() int { return max(1, slabBytes/size[T]()) }

// Get returns a zeroed value. Where no memory can be mapped for it, it
// panics, as an allocation on the Go heap would fail.
func (p *Pool[T]) Get() *T {
	n := size[T]()
	if k := len(p.free); k > 0 {
		v := p.free[k-1]
		p.free = p.free[:k-1]
		clear(unsafe.Slice((*byte)(unsafe.Pointer(v)), n))
		return v
	}
	if len(p.slabs) == 0 || p.next == perSlab[T]() {
		mem, err := unix.Mmap(-1, 0, perSlab[T]()*n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			panic(fmt.Sprintf("offheap: mapping %d bytes: %v", perSlab[T]()*n, err))
		}
		p.slabs = append(p.slabs, mem)
		p.next = 0
	}
	// A fresh mapping is zero. Values lie end to end: a mapping starts
	// on a page, and a Go type's size is a multiple of its alignment.
	v := (*T)(unsafe.Pointer(&p.slabs[len(p.slabs)-1][p.next*n]))
	p.next++
	p.written.Add(int64(n))
	return v
}

// Put takes back v, from this pool, which its caller no longer uses; the
// next Get may return it.
func (p *Pool[T]) Put(v *T) { p.free = append(p.free, v) }

// Bytes is the memory of the values ever handed out (the slabs' pages in
// use, about), values given back included.
func (p *Pool[T]) Bytes() int64 { return p.written.Load() }

// Release unmaps every slab: no value handed out may be used after it.
// The pool is then empty, and may be used again.
func (p *Pool[T]) Release() {
	for _, mem := range p.slabs {
		if err := unix.Munmap(mem); err != nil {
			panic(fmt.Sprintf("offheap: unmapping %d bytes: %v", len(mem), err))
		}
	}
	p.slabs, p.next, p.free = nil, 0, nil
	p.written.Store(0)
}
