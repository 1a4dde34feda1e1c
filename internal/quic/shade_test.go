package quic

import (
	"sync"
	"testing"

	"github.com/shade-mesh/shade/internal/quic/internal/protocol"
)

// TestPinnedBufferOutlivesItsPacket checks the holders of a received
// packet's buffer: a STREAM frame of at least an eighth of the buffer pins
// it, a smaller one is declined, and the buffer goes back to the pool only
// when both the packet's handling and every pinned frame have let go, in
// either order, from different goroutines.
func TestPinnedBufferOutlivesItsPacket(t *testing.T) {
	b := getPacketBuffer()
	b.Data = b.Data[:protocol.MaxPacketBufferSize]
	if b.pin(protocol.MaxPacketBufferSize/8-1) != nil {
		t.Fatal("a frame under an eighth of the buffer pinned it")
	}
	var wg sync.WaitGroup
	for range 4 {
		release := b.pin(protocol.MaxPacketBufferSize / 8)
		if release == nil {
			t.Fatal("a frame of an eighth of the buffer was declined")
		}
		wg.Go(release) // a stream's reader lets go
	}
	b.Release() // the packet is handled
	wg.Wait()
	if h := b.holders.Load(); h != 0 {
		t.Fatalf("%d holders left after everyone let go", h)
	}

	// The packet's handling lets go last.
	b = getPacketBuffer()
	b.Data = b.Data[:protocol.MaxPacketBufferSize]
	release := b.pin(protocol.MaxPacketBufferSize)
	release()
	if h := b.holders.Load(); h != 1 {
		t.Fatalf("%d holders while the packet is being handled, want 1", h)
	}
	b.Release()
	if h := b.holders.Load(); h != 0 {
		t.Fatalf("%d holders left after everyone let go", h)
	}
}
