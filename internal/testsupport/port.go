package testsupport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePort returns a port of 127.0.0.1 that was free for both TCP and UDP
// a moment ago (gossip uses both; QUIC uses UDP). It draws ports at random
// below the kernel's ephemeral range (ip_local_port_range), which the
// kernel never hands to a socket bound to port 0: with tests of several
// packages running at once, a port taken from that range was sometimes
// given to another test's socket before the caller bound it ("address
// already in use"). Only another test drawing the same port can take it
// now. Where the range leaves no room below it, the kernel picks.
func FreePort(tb testing.TB) int {
	tb.Helper()
	if lo, hi := 10000, ephemeralStart(); hi-lo >= 1000 {
		for range 200 {
			if port := lo + rand.IntN(hi-lo); freeBoth(port) {
				return port
			}
		}
	}
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if freeBoth(port) {
			return port
		}
	}
	tb.Fatal("testsupport: no port free for both TCP and UDP on 127.0.0.1")
	return 0
}

// freeBoth reports whether port of 127.0.0.1 can be bound for TCP and for
// UDP now; it binds both and lets them go.
func freeBoth(port int) bool {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// ephemeralStart is the first port of the kernel's ephemeral range (32768
// where it cannot be read).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	if f := strings.Fields(string(b)); len(f) == 2 {
		if n, err := strconv.Atoi(f[0]); err == nil {
			return n
		}
	}
	return 32768
}

// LoopbackAddr returns "127.0.0.1:<FreePort>".
func LoopbackAddr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(tb))
}
