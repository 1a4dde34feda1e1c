//go:build linux

package peer

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// vethPair makes two network namespaces joined by one veth pair with the
// given MTU, on a private /24 that exists only inside them, and returns
// the namespaces and their addresses; or skips the test where namespaces
// cannot be made (not root, no iproute2, a sandbox without the
// capability).
func vethPair(t testing.TB, mtu int) (ns, addr [2]string) {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipped: iproute2 'ip' not installed")
	}
	b := make([]byte, 2)
	rand.Read(b)
	tag := hex.EncodeToString(b)
	subnet := fmt.Sprintf("10.%d.%d", 200+int(b[0])%50, b[1])
	for i := range ns {
		ns[i] = fmt.Sprintf("shdq%s%d", tag, i)
		if err := testsupport.IP("netns", "add", ns[i]); err != nil {
			t.Skipf("skipped: cannot make network namespaces here: %v", err)
		}
		t.Cleanup(func() { testsupport.IP("netns", "del", ns[i]) })
		addr[i] = fmt.Sprintf("%s.%d", subnet, i+1)
	}
	link := [2]string{"q" + tag + "a", "q" + tag + "b"}
	steps := [][]string{{"link", "add", link[0], "netns", ns[0], "type", "veth", "peer", "name", link[1], "netns", ns[1]}}
	for i := range ns {
		steps = append(steps,
			[]string{"-n", ns[i], "link", "set", link[i], "mtu", fmt.Sprint(mtu)},
			[]string{"-n", ns[i], "addr", "add", addr[i] + "/24", "dev", link[i]},
			[]string{"-n", ns[i], "link", "set", link[i], "up"})
	}
	for _, s := range steps {
		if err := testsupport.IP(s...); err != nil {
			t.Fatal(err)
		}
	}
	return ns, addr
}

// inNetns runs fn on a thread moved into network namespace ns, so that
// the sockets fn opens are ns's (a socket stays in its namespace whatever
// thread uses it later). The thread exits with its goroutine: it is never
// unlocked.
func inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// listenIn is listenTLS with the node's socket opened in network
// namespace ns.
func listenIn(t testing.TB, ns, dir, name, addr string, h Handler) *Node {
	t.Helper()
	tc, err := DevTLS(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	var n *Node
	if err := inNetns(ns, func() (err error) {
		n, err = Listen(Config{ListenAddr: addr + ":0", TLS: tc, RequestTimeout: 10 * time.Second}, h)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// TestPathMTUOnRealLinks runs two nodes in two network namespaces joined
// by a veth pair, as two hosts on one link. On a 1,500-byte link the
// packets must stay within it (path MTU discovery's larger probes are
// refused by the kernel and must not be taken for the path's size: were
// they, every full packet would be lost and the calls would fail). On a
// 9,000-byte (jumbo frame) link they must grow past twice 1,452 bytes.
// Every call echoes 1 MiB of random bytes, which must come back intact.
func TestPathMTUOnRealLinks(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		t.Run(fmt.Sprint(mtu), func(t *testing.T) {
			ns, addr := vethPair(t, mtu)
			dir := t.TempDir()
			a := listenIn(t, ns[0], dir, "node-a", addr[0], newTestHandler())
			b := listenIn(t, ns[1], dir, "node-b", addr[1], newTestHandler())
			ctx := ctxT(t)
			body := make([]byte, 1<<20)
			var prevBytes, prevPackets uint64
			for call := 1; call <= 20; call++ {
				rand.Read(body)
				var got []byte
				if err := a.Call(ctx, b.Addr(), "node-b", mRawBin, body, &got); err != nil {
					t.Fatalf("call %d: %v", call, err)
				}
				if !bytes.Equal(got, body) {
					t.Fatalf("call %d: the echo of %d bytes came back as %d different bytes", call, len(body), len(got))
				}
				st := b.connStats(t)
				sent, packets := st.BytesSent-prevBytes, st.PacketsSent-prevPackets
				prevBytes, prevPackets = st.BytesSent, st.PacketsSent
				avg := sent / max(packets, 1)
				// IPv4 and UDP headers take 28 bytes of the MTU. A packet
				// the kernel refused (EMSGSIZE) still counts as sent, so
				// packets sized past the link show here.
				if avg > uint64(mtu-28) {
					t.Fatalf("call %d: b sent %d bytes a packet on a link of %d", call, avg, mtu)
				}
				if mtu == 9000 && avg > 2*1452 {
					t.Logf("call %d: b sent %d bytes in %d packets (%d a packet)", call, sent, packets, avg)
					return
				}
			}
			t.Logf("b sends %d bytes in %d packets (%d a packet)", prevBytes, prevPackets, prevBytes/max(prevPackets, 1))
			if mtu == 9000 {
				t.Fatalf("after 20 calls b still sends packets of %d bytes or less on a jumbo-frame link", 2*1452)
			}
		})
	}
}
