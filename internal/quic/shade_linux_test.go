package quic

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/quic/internal/protocol"
)

// TestGROReadsComeApart sends datagrams on loopback as one GSO batch and
// reads them through a receiving connection with UDP GRO on: the kernel
// hands the batch over as one read, and ReadPacket must return each
// datagram on its own, byte for byte, in order, each with a buffer of its
// own that holds the read's buffer until every one has gone back. A lone
// small datagram is copied out of the 64 KiB buffer.
func TestGROReadsComeApart(t *testing.T) {
	recvUDP, recv := loopbackConn(t)
	if !recv.gro {
		t.Skip("UDP GRO not available on this kernel")
	}
	_, send := loopbackConn(t)
	if !send.capabilities().GSO {
		t.Skip("UDP GSO not available on this kernel")
	}
	recvUDP.SetReadDeadline(time.Now().Add(10 * time.Second))

	const segment, count = 8000, 7
	batch := make([]byte, segment*count-1234) // the last datagram is shorter
	for i := range batch {
		batch[i] = byte(i * 13 / segment)
	}
	if _, err := send.WritePacket(batch, recvUDP.LocalAddr(), nil, segment, protocol.ECNUnsupported); err != nil {
		t.Fatal(err)
	}
	var got []receivedPacket
	for off := 0; off < len(batch); {
		p, err := recv.ReadPacket()
		if err != nil {
			t.Fatal(err)
		}
		want := batch[off:min(off+segment, len(batch))]
		if !bytes.Equal(p.data, want) {
			t.Fatalf("datagram %d: %d bytes, want %d bytes as sent", len(got), len(p.data), len(want))
		}
		if p.buffer.parent == nil {
			t.Fatalf("datagram %d came in a read of its own: the kernel did not coalesce the batch", len(got))
		}
		off += len(want)
		got = append(got, p)
	}
	whole := got[0].buffer.parent
	if h := whole.holders.Load(); h != count {
		t.Fatalf("the read's buffer has %d holders, want one for each of %d datagrams", h, count)
	}
	for _, p := range got {
		p.buffer.Release()
	}
	if h := whole.holders.Load(); h != 0 {
		t.Fatalf("the read's buffer has %d holders after every datagram went back", h)
	}

	// A lone small datagram does not keep a 64 KiB buffer.
	if _, err := send.WritePacket([]byte("small"), recvUDP.LocalAddr(), nil, 0, protocol.ECNUnsupported); err != nil {
		t.Fatal(err)
	}
	p, err := recv.ReadPacket()
	if err != nil {
		t.Fatal(err)
	}
	if string(p.data) != "small" || p.buffer.parent != nil || p.buffer.Cap() != protocol.JumboPacketSize {
		t.Fatalf("small datagram %q in a buffer of %d bytes (segment %v)", p.data, p.buffer.Cap(), p.buffer.parent != nil)
	}
	p.buffer.Release()
}

// loopbackConn binds a UDP socket of 127.0.0.1, closed with the test, and
// its connection as a Transport makes it (GRO on where the kernel has it).
func loopbackConn(t *testing.T) (*net.UDPConn, *oobConn) {
	t.Helper()
	u, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	c, err := newConn(u, true)
	if err != nil {
		t.Fatal(err)
	}
	return u, c
}
