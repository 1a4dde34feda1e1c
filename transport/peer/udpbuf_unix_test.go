//go:build unix

package peer

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestSmallUDPBuffersWarned(t *testing.T) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	if err := udp.SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	recv, send, ok := udpBuffers(udp)
	if !ok || recv <= 0 || send <= 0 {
		t.Fatalf("udpBuffers = %d, %d, %v", recv, send, ok)
	}
	var logs bytes.Buffer
	warnSmallBuffers(udp, zerolog.New(&logs))
	if !strings.Contains(logs.String(), "rmem_max") {
		t.Fatalf("a receive buffer of %d KiB was not warned of: %q", recv>>10, logs.String())
	}
	// A node's socket, as quic-go left it, is logged only if it is small.
	n := testNode(t, t.TempDir(), "node-a", newTestHandler())
	recv, send, _ = udpBuffers(n.udp)
	logs.Reset()
	warnSmallBuffers(n.udp, zerolog.New(&logs))
	if small := recv < wantUDPBuffer || send < wantUDPBuffer; small != (logs.Len() > 0) {
		t.Fatalf("buffers of %d and %d KiB: warned %q", recv>>10, send>>10, logs.String())
	}
}
