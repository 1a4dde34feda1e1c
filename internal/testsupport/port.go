package testsupport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// FreePort returns a port of 127.0.0.1 that was free for both TCP and UDP
// a moment ago (gossip uses both; QUIC uses UDP) and that no other test
// holds, in this process or another, until tb ends.
//
// Ports are drawn at random below the kernel's ephemeral range
// (ip_local_port_range), which the kernel never hands to a socket bound to
// port 0: a port taken from that range was sometimes given to another
// test's socket before the caller bound it. Below it, only another test
// could take the port, so each port handed out is reserved for tb's
// lifetime by an exclusive flock on a file named after it (see
// reservePort): tests of several packages run at once, and a test that
// restarts a peer on the same port must not find it drawn by another test
// meanwhile ("address already in use", once in CI). Where the range leaves
// no room below it, the kernel picks.
func FreePort(tb testing.TB) int {
	tb.Helper()
	if lo, hi := 10000, ephemeralStart(); hi-lo >= 1000 {
		for range 200 {
			if port := lo + rand.IntN(hi-lo); reservePort(tb, port) {
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
		if reservePort(tb, port) {
			return port
		}
	}
	tb.Fatal("testsupport: no port free for both TCP and UDP on 127.0.0.1")
	return 0
}

// reservePort takes port for tb: it locks the port's file in the machine's
// reservation directory without waiting, and then checks that the port can
// be bound now. It reports false, holding nothing, where another test holds
// the port or it cannot be bound. The lock is an flock on a file opened
// here, so it also excludes this process's other draws, and it goes with
// the file when tb's cleanup closes it or the process dies. The files stay
// (one per port ever drawn, empty): removing one while another process has
// it open could let two tests lock two files of one name.
func reservePort(tb testing.TB, port int) bool {
	path := portFile(port)
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		tb.Fatalf("testsupport: port reservations: %v", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		tb.Fatalf("testsupport: port reservations: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false
		}
		tb.Fatalf("testsupport: reserve port %d: %v", port, err)
	}
	if !freeBoth(port) {
		f.Close()
		return false
	}
	tb.Cleanup(func() { f.Close() })
	return true
}

// portFile is the file whose lock reserves port, in a directory every
// test process of the machine shares.
func portFile(port int) string {
	return filepath.Join(os.TempDir(), "shade-test-ports", strconv.Itoa(port))
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
