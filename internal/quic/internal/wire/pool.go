package wire

import (
	"sync"

	"github.com/shade-mesh/shade/internal/quic/internal/protocol"
)

// shade: upstream keeps one pool of frames with MaxPacketBufferSize-byte
// buffers. With that size raised from 1,452 to 65,000 bytes, a STREAM
// frame of a few hundred bytes (a request, a small reply) would pin a
// 65,000-byte buffer until it is acknowledged (sent) or read (received),
// 45 times what upstream pins. Frames are instead taken from the smallest
// of three pools that holds their data (GetStreamFrameFor): upstream's
// 1,452 bytes, a jumbo frame's JumboPacketSize, and MaxPacketBufferSize.
// A frame of up to 1,452 bytes pins what upstream's would, and a larger
// one at most about 7 times its bytes.

// smallFrameSize is the buffer size of the small frames' pool: upstream's
// MaxPacketBufferSize.
const smallFrameSize = 1452

var pool, jumboPool, smallPool sync.Pool

func init() {
	for _, p := range []struct {
		pool *sync.Pool
		size int
	}{{&pool, protocol.MaxPacketBufferSize}, {&jumboPool, protocol.JumboPacketSize}, {&smallPool, smallFrameSize}} {
		p.pool.New = func() any {
			return &StreamFrame{Data: make([]byte, 0, p.size), fromPool: true}
		}
	}
}

// GetStreamFrame returns a pooled frame whose buffer holds a packet of
// the largest size.
func GetStreamFrame() *StreamFrame {
	return pool.Get().(*StreamFrame)
}

// GetStreamFrameFor returns a pooled frame whose buffer holds dataLen
// bytes, from the smallest pool where it fits (shade).
func GetStreamFrameFor[N ~int | ~int64 | ~uint64](dataLen N) *StreamFrame {
	switch {
	case dataLen <= smallFrameSize:
		return smallPool.Get().(*StreamFrame)
	case dataLen <= protocol.JumboPacketSize:
		return jumboPool.Get().(*StreamFrame)
	}
	return GetStreamFrame()
}

func putStreamFrame(f *StreamFrame) {
	if !f.fromPool {
		return
	}
	switch protocol.ByteCount(cap(f.Data)) {
	case protocol.MaxPacketBufferSize:
		pool.Put(f)
	case protocol.JumboPacketSize:
		jumboPool.Put(f)
	case smallFrameSize:
		smallPool.Put(f)
	default:
		panic("wire.PutStreamFrame called with packet of wrong size!")
	}
}
