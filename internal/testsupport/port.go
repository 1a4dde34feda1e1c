package testsupport

import (
	"fmt"
	"net"
	"testing"
)

// FreePort returns a port of 127.0.0.1 that was free for both TCP and UDP
// a moment ago (gossip uses both; QUIC uses UDP). Another process may take
// it before the caller binds it; on loopback in a test that is rare.
func FreePort(tb testing.TB) int {
	tb.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	tb.Fatal("testsupport: no port free for both TCP and UDP on 127.0.0.1")
	return 0
}

// LoopbackAddr returns "127.0.0.1:<FreePort>".
func LoopbackAddr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(tb))
}
