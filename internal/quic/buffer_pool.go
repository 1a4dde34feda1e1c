package quic

import (
	"sync"
	"sync/atomic"

	"github.com/shade-mesh/shade/internal/quic/internal/protocol"
)

type packetBuffer struct {
	Data []byte

	// refCount counts how many packets Data is used in.
	// It doesn't support concurrent use.
	// It is > 1 when used for coalesced packet.
	refCount int

	// shade: holders counts who keeps Data from the pool: 1 while
	// refCount's packets are being handled (or the buffer is being sent),
	// plus 1 for each received STREAM frame whose data lies in Data (see
	// pin). The last to let go puts the buffer back. Unlike refCount it is
	// safe for concurrent use: a stream's reader lets go of its frames.
	holders atomic.Int32
	// shade: parent, on a segment of a datagram the kernel coalesced
	// (UDP GRO), is the buffer the segment's Data lies in: the segment
	// holds it until the segment goes back to the pool.
	parent *packetBuffer
}

// shade: pin keeps the buffer from the pool until the returned function
// is called (once), so that a received STREAM frame of n bytes keeps its
// data in the buffer until the stream's reader has consumed it, instead
// of a copy. It declines (returns nil) a frame under an eighth of the
// buffer: a peer's frames then pin at most 8 times the bytes its flow
// control lets it queue. Only the goroutine handling the packet may pin
// the buffer, before it releases it.
func (b *packetBuffer) pin(n int) func() {
	held := b
	if b.parent != nil {
		held = b.parent // what the frame keeps from the pool
	}
	if n*8 < cap(held.Data) {
		return nil
	}
	b.holders.Add(1)
	return b.letGo
}

// shade: letGo drops one holder and puts the buffer back if it was the
// last.
func (b *packetBuffer) letGo() {
	if b.holders.Add(-1) == 0 {
		b.recycle()
	}
}

// Split increases the refCount.
// It must be called when a packet buffer is used for more than one packet,
// e.g. when splitting coalesced packets.
func (b *packetBuffer) Split() {
	b.refCount++
}

// Decrement decrements the reference counter.
// It doesn't put the buffer back into the pool.
func (b *packetBuffer) Decrement() {
	b.refCount--
	if b.refCount < 0 {
		panic("negative packetBuffer refCount")
	}
}

// MaybeRelease puts the packet buffer back into the pool,
// if the reference counter already reached 0.
func (b *packetBuffer) MaybeRelease() {
	// only put the packetBuffer back if it's not used any more
	if b.refCount == 0 {
		b.putBack()
	}
}

// Release puts back the packet buffer into the pool.
// It should be called when processing is definitely finished.
func (b *packetBuffer) Release() {
	b.Decrement()
	if b.refCount != 0 {
		panic("packetBuffer refCount not zero")
	}
	b.putBack()
}

// Len returns the length of Data
func (b *packetBuffer) Len() protocol.ByteCount { return protocol.ByteCount(len(b.Data)) }
func (b *packetBuffer) Cap() protocol.ByteCount { return protocol.ByteCount(cap(b.Data)) }

// putBack lets go of the packet handling's hold (shade: pinned frames
// may keep the buffer out of the pool for longer).
func (b *packetBuffer) putBack() { b.letGo() }

func (b *packetBuffer) recycle() {
	if parent := b.parent; parent != nil { // shade: a GRO segment
		b.parent, b.Data = nil, nil
		segmentPool.Put(b)
		parent.letGo()
		return
	}
	if cap(b.Data) == protocol.MaxPacketBufferSize {
		bufferPool.Put(b)
		return
	}
	if cap(b.Data) == protocol.JumboPacketSize { // shade
		jumboBufferPool.Put(b)
		return
	}
	if cap(b.Data) == groBufferSize { // shade
		groBufferPool.Put(b)
		return
	}
	panic("putPacketBuffer called with packet of wrong size!")
}

// shade: groBufferSize is the size of a receive buffer with UDP GRO on:
// the kernel coalesces datagrams up to 64 KiB.
const groBufferSize = 1 << 16

// shade: groBufferPool holds receive buffers for coalesced datagrams, and
// segmentPool the buffers that stand for one datagram of them.
var groBufferPool, segmentPool sync.Pool

// shade: getGROBuffer returns a receive buffer for coalesced datagrams.
func getGROBuffer() *packetBuffer {
	return fromPool(&groBufferPool)
}

// shade: segment returns a buffer for data, one datagram of the coalesced
// ones in b, that holds b until it goes back to the pool itself. Only the
// goroutine that holds b may call it.
func (b *packetBuffer) segment(data []byte) *packetBuffer {
	b.holders.Add(1)
	seg := segmentPool.Get().(*packetBuffer)
	seg.refCount = 1
	seg.holders.Store(1)
	seg.Data = data
	seg.parent = b
	return seg
}

// shade: jumboBufferPool holds buffers of JumboPacketSize for received
// datagrams that are small beside the buffer they were read into (see
// shrink).
var bufferPool, jumboBufferPool sync.Pool

func getPacketBuffer() *packetBuffer {
	return fromPool(&bufferPool)
}

// shade: upstream keeps a pool of its own for GSO batches. Here a batch
// is as large as one packet may be (MaxLargePacketBufferSize), so both
// come from one pool.
func getLargePacketBuffer() *packetBuffer {
	return fromPool(&bufferPool)
}

func fromPool(pool *sync.Pool) *packetBuffer {
	buf := pool.Get().(*packetBuffer)
	buf.refCount = 1
	buf.holders.Store(1) // shade
	buf.Data = buf.Data[:0]
	return buf
}

// shade: shrink returns p with its data copied into a buffer of
// JumboPacketSize if it takes less than an eighth of the buffer it was
// read into, so that small datagrams (acknowledgements, requests) queued
// for their connection do not each keep a 64 KiB buffer from the pool.
func shrink(p receivedPacket) receivedPacket {
	if len(p.data)*8 >= cap(p.buffer.Data) || len(p.data) > protocol.JumboPacketSize {
		return p
	}
	small := fromPool(&jumboBufferPool)
	small.Data = append(small.Data, p.data...)
	p.buffer.Release()
	p.buffer, p.data = small, small.Data
	return p
}

func init() {
	bufferPool.New = func() any {
		return &packetBuffer{Data: make([]byte, 0, protocol.MaxPacketBufferSize)}
	}
	jumboBufferPool.New = func() any { // shade
		return &packetBuffer{Data: make([]byte, 0, protocol.JumboPacketSize)}
	}
	groBufferPool.New = func() any { // shade
		return &packetBuffer{Data: make([]byte, 0, groBufferSize)}
	}
	segmentPool.New = func() any { return new(packetBuffer) } // shade
}
