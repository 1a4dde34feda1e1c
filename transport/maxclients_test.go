package transport_test

import (
	"bufio"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh"
	"github.com/shade-mesh/shade/transport"
)

// TestMaxConnections: a connection past MaxConnections is answered an
// error and closed; the open ones go on, and once one closes a new one is
// served.
func TestMaxConnections(t *testing.T) {
	node, err := mesh.New(mesh.Config{Name: "maxclients", CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "s.sock")
	sock, err := transport.ListenSocket(transport.SocketConfig{Path: path, MaxConnections: 2}, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close(); node.Close() })
	ping := func(c net.Conn) (string, error) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return "", err
		}
		return bufio.NewReader(c).ReadString('\n')
	}
	dial := func() net.Conn {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := dial(), dial()
	for _, c := range []net.Conn{a, b} {
		if line, err := ping(c); line != "+PONG\r\n" {
			t.Fatalf("a connection within the bound: %q %v", line, err)
		}
	}
	c := dial()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.Contains(line, "max number of clients reached") {
		t.Fatalf("the third connection: %q, want the max clients error", line)
	}
	if line, err := ping(a); line != "+PONG\r\n" {
		t.Fatalf("an open connection after the refusal: %q %v", line, err)
	}
	if got := sock.ClientStats().Refused["max-clients"]; got != 1 {
		t.Fatalf("max-clients refusals %d, want 1", got)
	}
	b.Close()
	testsupport.WaitFor(t, 10*time.Second, "a new connection to be served once one closed", func() bool {
		c := dial()
		line, _ := ping(c)
		c.Close()
		return line == "+PONG\r\n"
	})
}
