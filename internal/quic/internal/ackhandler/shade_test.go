package ackhandler

import (
	"testing"

	"github.com/shade-mesh/shade/internal/quic/internal/monotime"
	"github.com/shade-mesh/shade/internal/quic/internal/protocol"
	"github.com/shade-mesh/shade/internal/quic/internal/utils"
	"github.com/shade-mesh/shade/internal/quic/internal/wire"
)

// TestMTUProbeDoesNotBlockSending checks that a path MTU probe larger
// than the congestion window leaves the window to the data: a probe
// lost on the way (or refused by the kernel) would otherwise count as in
// flight until a later packet's acknowledgement declared it lost, and no
// later packet could be sent.
func TestMTUProbeDoesNotBlockSending(t *testing.T) {
	h := NewSentPacketHandler(0, 1252, utils.NewRTTStats(), &utils.ConnectionStats{}, true, false, nil,
		protocol.PerspectiveClient, nil, utils.DefaultLogger).(*sentPacketHandler)
	now := monotime.Now()
	window := h.congestion.GetCongestionWindow()
	probe := []Frame{{Frame: &wire.PingFrame{}}}
	h.SentPacket(now, h.PopPacketNumber(protocol.Encryption1RTT.PacketNumberSpace()), protocol.InvalidPacketNumber, nil, probe,
		protocol.Encryption1RTT, protocol.ECNNon, window+1000, true, false)
	if h.bytesInFlight != 0 {
		t.Fatalf("a probe of %d bytes counts %d bytes in flight, want 0", window+1000, h.bytesInFlight)
	}
	// Pacing may hold the next packet for a moment; the window must not.
	if m := h.SendMode(now); m != SendAny && m != SendPacingLimited {
		t.Fatalf("after a probe larger than the window (%d bytes) the send mode is %s, want %s or %s", window, m, SendAny, SendPacingLimited)
	}

	// A data packet still counts.
	data := []Frame{{Frame: &wire.PingFrame{}}}
	h.SentPacket(now, h.PopPacketNumber(protocol.Encryption1RTT.PacketNumberSpace()), protocol.InvalidPacketNumber, nil, data,
		protocol.Encryption1RTT, protocol.ECNNon, 1200, false, false)
	if h.bytesInFlight != 1200 {
		t.Fatalf("a data packet of 1200 bytes counts %d bytes in flight", h.bytesInFlight)
	}
}
