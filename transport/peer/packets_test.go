package peer

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/shade-mesh/shade/internal/quic"
)

// TestPathMTUAboveEthernet checks that the transport's QUIC (the internal,
// patched quic-go) leaves 1,452-byte packets behind where the path allows:
// loopback carries 64 KiB, and path MTU discovery should raise the packet
// size to the build's cap of 65,000 bytes within a few round trips, past
// what a jumbo frame carries. Each call echoes 1 MiB of random bytes,
// which must come back intact; the test stops as soon as the bytes b sent
// in one call went in packets of more than twice 8,952 bytes (a jumbo
// frame's) on average, and fails after 50 calls.
func TestPathMTUAboveEthernet(t *testing.T) {
	dir := t.TempDir()
	a := testNode(t, dir, "node-a", newTestHandler())
	b := testNode(t, dir, "node-b", newTestHandler())
	ctx := ctxT(t)
	body := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	var prevBytes, prevPackets uint64
	for call := 1; ; call++ {
		for i := range body {
			body[i] = byte(rng.Uint32())
		}
		var got []byte
		if err := a.Call(ctx, b.Addr(), "node-b", mRawBin, body, &got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("call %d: the echo of %d bytes came back as %d different bytes", call, len(body), len(got))
		}
		st := b.connStats(t)
		bytesSent, packets := st.BytesSent-prevBytes, st.PacketsSent-prevPackets
		prevBytes, prevPackets = st.BytesSent, st.PacketsSent
		if avg := bytesSent / max(packets, 1); avg > 2*8952 {
			t.Logf("call %d: b sent %d bytes in %d packets (%d bytes a packet)", call, bytesSent, packets, avg)
			return
		} else if call == 50 {
			t.Fatalf("after %d calls, b still sends %d bytes a packet (%d bytes in %d packets)", call, avg, bytesSent, packets)
		}
	}
}

// connStats returns the QUIC statistics of n's only connection.
func (n *Node) connStats(t *testing.T) quic.ConnectionStats {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.conns) != 1 {
		t.Fatalf("%d connections, want 1", len(n.conns))
	}
	for c := range n.conns {
		return c.qc.ConnectionStats()
	}
	panic("unreachable")
}
