package wire

import (
	"sync"

	"github.com/shade-mesh/shade/internal/quic/internal/protocol"
)

// shade: upstream keeps one pool of frames with MaxPacketBufferSize-byte
// buffers. With that size raised from 1,452 to 8,952 bytes, a received
// STREAM frame of a few hundred bytes would pin an 8,952-byte buffer until
// the application reads it, six times what upstream pins. Received frames
// that fit in upstream's packet size take their buffer from a second pool
// of 1,452-byte buffers instead (smallFrameSize), so the memory a peer can
// make a stream hold per byte of flow-control window stays as upstream's.

// smallFrameSize is the buffer size of the small frames' pool: upstream's
// MaxPacketBufferSize.
const smallFrameSize = 1452

var pool, smallPool sync.Pool

func init() {
	pool.New = func() any {
		return &StreamFrame{
			Data:     make([]byte, 0, protocol.MaxPacketBufferSize),
			fromPool: true,
		}
	}
	smallPool.New = func() any {
		return &StreamFrame{
			Data:     make([]byte, 0, smallFrameSize),
			fromPool: true,
		}
	}
}

func GetStreamFrame() *StreamFrame {
	f := pool.Get().(*StreamFrame)
	return f
}

// getStreamFrameFor returns a pooled frame whose buffer holds dataLen
// bytes, from the small pool where it fits there.
func getStreamFrameFor(dataLen uint64) *StreamFrame {
	if dataLen <= smallFrameSize {
		return smallPool.Get().(*StreamFrame)
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
	case smallFrameSize:
		smallPool.Put(f)
	default:
		panic("wire.PutStreamFrame called with packet of wrong size!")
	}
}
