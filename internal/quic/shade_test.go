package quic

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/shade-mesh/shade/internal/quic/internal/protocol"
	"github.com/shade-mesh/shade/internal/quic/internal/utils"
	"github.com/shade-mesh/shade/internal/quic/internal/wire"
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

// dataSender is what a send stream tells its connection: only that the
// stream has data to send matters here.
type dataSender struct{ data chan struct{} }

func (d dataSender) onHasStreamData(protocol.StreamID, *SendStream) {
	select {
	case d.data <- struct{}{}:
	default:
	}
}
func (dataSender) onHasConnectionData()                                                {}
func (dataSender) onHasStreamRetransmission(protocol.StreamID, *SendStream)            {}
func (dataSender) onHasStreamControlFrame(protocol.StreamID, streamControlFrameGetter) {}
func (dataSender) updateStreamPriority(protocol.StreamID)                              {}
func (dataSender) recordStreamPriorityUpdated(protocol.StreamID, int8, bool)           {}
func (dataSender) onStreamCompleted(protocol.StreamID)                                 {}
func (dataSender) onStreamCreditReleased(protocol.StreamID)                            {}

// TestSentFramesSizedByTheirData checks that the STREAM frames a send
// stream queues until they are acknowledged keep buffers sized by their
// data (upstream's 1,452 bytes, a jumbo frame's, or the largest packet's),
// not a buffer of the largest packet each, and that their bytes and
// offsets are what was written: small writes, writes that grow the queued
// frame past its buffer, and a write of several packets.
func TestSentFramesSizedByTheirData(t *testing.T) {
	const window = 1 << 30
	rtt := utils.NewRTTStats()
	conn := newConnectionFlowController(window, window, nil, rtt, utils.DefaultLogger)
	fc := newStreamFlowController(4, conn, window, window, window, rtt, utils.DefaultLogger)
	conn.UpdateSendWindow(window)
	sender := dataSender{make(chan struct{}, 1)}
	s := newSendStream(context.Background(), 4, sender, fc, false)

	var sent []byte
	pop := func(wantCap int) {
		t.Helper()
		f, _, _ := s.popStreamFrame(protocol.MaxPacketBufferSize, protocol.Version1)
		for f.Frame == nil { // a Write on another goroutine has yet to queue its data
			<-sender.data
			f, _, _ = s.popStreamFrame(protocol.MaxPacketBufferSize, protocol.Version1)
		}
		if int(f.Frame.Offset) != len(sent) {
			t.Fatalf("frame at offset %d, want %d", f.Frame.Offset, len(sent))
		}
		if cap(f.Frame.Data) != wantCap {
			t.Fatalf("frame of %d bytes keeps a buffer of %d, want %d", len(f.Frame.Data), cap(f.Frame.Data), wantCap)
		}
		sent = append(sent, f.Frame.Data...)
		f.Frame.PutBack()
	}
	var written []byte
	write := func(n int) {
		t.Helper()
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(len(written) + i*7)
		}
		written = append(written, b...)
		if _, err := s.Write(b); err != nil {
			t.Fatal(err)
		}
	}

	write(100)
	pop(1452)
	write(5000)
	pop(protocol.JumboPacketSize)
	write(100)
	write(100)
	write(3000) // the queued frame moves into a jumbo one
	pop(protocol.JumboPacketSize)

	// A write of several packets returns once all but the last is sent.
	done := make(chan error, 1)
	n := 3*protocol.MaxPacketBufferSize + 500
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(len(written) + i*7)
	}
	written = append(written, b...)
	go func() { _, err := s.Write(b); done <- err }()
	for range 3 {
		pop(protocol.MaxPacketBufferSize)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	pop(1452) // the rest, 530 bytes
	if _, _, more := s.popStreamFrame(protocol.MaxPacketBufferSize, protocol.Version1); more {
		t.Fatal("the stream has more to send than was written")
	}
	if !bytes.Equal(sent, written) {
		t.Fatal("the frames' bytes are not what was written")
	}
}

// TestMaxStreamsOnceHalfUsed checks that new stream credit goes to the
// peer once it may open no more than half of the streams allowed under
// the limit it was last given, not as each stream ends, and that a peer
// that has used all of its credit gets more as soon as a stream ends.
func TestMaxStreamsOnceHalfUsed(t *testing.T) {
	const allowed = 8
	var frames []*wire.MaxStreamsFrame
	m := newIncomingStreamsMap(protocol.StreamTypeBidi,
		func(protocol.StreamID) *ReceiveStream { return &ReceiveStream{} },
		allowed, false,
		func(f wire.Frame) { frames = append(frames, f.(*wire.MaxStreamsFrame)) },
		protocol.PerspectiveServer)
	id := protocol.FirstIncomingBidiStreamServer
	// One request at a time: open, accept, end.
	oneRequest := func() {
		t.Helper()
		if _, err := m.GetOrOpenStream(id); err != nil {
			t.Fatal(err)
		}
		if _, err := m.AcceptStream(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := m.DeleteStream(id); err != nil {
			t.Fatal(err)
		}
		id += 4
	}
	for k := range 3 {
		oneRequest()
		if len(frames) != 0 {
			t.Fatalf("stream credit sent after %d of %d streams were used", k+1, allowed)
		}
	}
	oneRequest() // the fourth: four left, half of the eight
	if len(frames) != 1 || frames[0].MaxStreamNum != 4+allowed {
		t.Fatalf("after half the streams were used, frames %+v, want one raising the limit to %d", frames, 4+allowed)
	}

	// All the credit used, every stream open: each that ends gives more.
	frames = nil
	var open []protocol.StreamID
	for range allowed {
		if _, err := m.GetOrOpenStream(id); err != nil {
			t.Fatal(err)
		}
		if _, err := m.AcceptStream(context.Background()); err != nil {
			t.Fatal(err)
		}
		open = append(open, id)
		id += 4
	}
	if _, err := m.GetOrOpenStream(id); err == nil {
		t.Fatal("the peer opened a stream past its limit")
	}
	if err := m.DeleteStream(open[0]); err != nil {
		t.Fatal(err)
	}
	if len(frames) != 1 || frames[0].MaxStreamNum != 4+allowed+1 {
		t.Fatalf("after a stream ended with no credit left, frames %+v, want one raising the limit to %d", frames, 4+allowed+1)
	}
}
