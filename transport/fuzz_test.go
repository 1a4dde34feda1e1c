package transport_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/shade-mesh/shade/mesh"
	"github.com/shade-mesh/shade/transport"
)

// startFuzzPeer serves a real node with a small dataset on a socket.
func startFuzzPeer(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for i := 0; i < 40; i++ {
		class := filepath.Join(dir, strconv.Itoa(i%4))
		os.MkdirAll(class, 0o755)
		os.WriteFile(filepath.Join(class, fmt.Sprintf("%03d", i)), bytes.Repeat([]byte{byte(i)}, 10+i), 0o644)
	}
	node, err := mesh.New(mesh.Config{Name: "fuzz", CacheSize: 1 << 20, Datasets: []mesh.DatasetConfig{{Name: "ds", Dir: dir}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "s.sock")
	sock, err := transport.ListenSocket(transport.SocketConfig{
		Path: path, MaxOrderWait: 20 * time.Millisecond, MaxKeys: 64,
		MaxValue: 1 << 20, MaxClientMemory: 16 << 20, WriteTimeout: time.Second,
	}, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close(); node.Close() })
	return path
}

func respArray(args ...[]byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.Bytes()
}

var fuzzCommands = []string{"SHADE.REPORT", "SHADE.ORDER", "SHADE.DONE", "SHADE.MANIFEST", "SHADE.STATS", "SHADE.RESET", "GET", "MGET", "SET", "DEL", "EXISTS"}

// FuzzParseCommands sends SHADE.* (and key) commands with fuzzed arguments,
// or raw fuzzed bytes, to a live node. A well-formed command must get
// exactly one reply and leave the connection serving (PING answers PONG);
// raw garbage may close its connection but never the daemon.
func FuzzParseCommands(f *testing.F) {
	path := startFuzzPeer(f)
	f.Add([]byte("\x00ds\x001\x005\x000.5"))
	f.Add([]byte("\x01ds\x000\x000\x001"))
	f.Add([]byte("\x02ds\x000\x000"))
	f.Add([]byte("\x00ds\x000\x0039\x00nan\x001\x00-inf"))
	f.Add([]byte("\x01ds\x009999999999\x000\x001\x00100"))
	f.Add([]byte("\x07ds/1\x00ds/40\x00ds/01\x00x"))
	f.Add([]byte("\x0b*2\r\n$3\r\nGET\r\n$-5\r\n"))
	f.Add([]byte("\x0d*99999999999\r\n"))
	// Bulk lengths near 2^63 once overflowed the parser and panicked.
	f.Add([]byte("\x0b*2\r\n$3\r\nGET\r\n$9223372036854775807\r\n"))
	f.Add([]byte("\x0b*2\r\n$3\r\nGET\r\n$9223372036854775806\r\nab\r\n"))
	// A world this large once made the node allocate gigabytes.
	f.Add([]byte("\x01ds\x000\x000\x002147483647"))
	f.Add([]byte("\x01ds\x002147483647\x002147483646\x002147483647\x002147483647"))
	f.Add([]byte("\x0bAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"))
	// Named jobs: each is bounded (Config.MaxJobs) and checked.
	f.Add([]byte("\x01ds\x000\x000\x001\x00JOB\x00sweep-1"))
	f.Add([]byte("\x01ds\x000\x000\x001\x00WITHWEIGHTS\x00JOB\x00b"))
	f.Add([]byte("\x01ds\x000\x000\x001\x00JOB\x00../etc"))
	f.Add([]byte("\x00ds\x001\x005\x000.5\x00JOB\x00a"))
	f.Add([]byte("\x02ds\x000\x000\x00JOB\x00a"))
	f.Add([]byte("\x05ds\x00JOB\x00never"))
	// Packed orders and reports.
	f.Add([]byte("\x01ds\x000\x000\x001\x00PACKED\x00WITHWEIGHTS"))
	f.Add([]byte("\x00ds\x000\x00PACKED\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\xe0\x3f"))
	f.Add([]byte("\x00ds\x000\x00PACKED\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\xf8\x7f"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		// No input may make the node allocate more than fuzzAllocBound
		// while it handles it (counting every goroutine's allocations,
		// so the bound is loose, but a size taken from the input would
		// blow through it).
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		defer func() {
			runtime.ReadMemStats(&after)
			if d := after.TotalAlloc - before.TotalAlloc; d > fuzzAllocBound {
				t.Fatalf("handling %q allocated %d bytes, more than %d", in, d, fuzzAllocBound)
			}
		}()
		conn, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("daemon not answering: %v", err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		sel := int(in[0])
		if sel >= len(fuzzCommands) {
			// Raw bytes: anything may happen to this connection, but a
			// fresh one must still be served.
			conn.Write(in[1:])
			conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			bufio.NewReader(conn).ReadString(0)
			assertServing(t, path)
			return
		}
		args := [][]byte{[]byte(fuzzCommands[sel])}
		if len(in) > 1 {
			args = append(args, bytes.Split(in[1:], []byte{0})...)
		}
		if len(args) > 200 {
			args = args[:200]
		}
		msg := append(respArray(args...), respArray([]byte("PING"))...)
		if _, err := conn.Write(msg); err != nil {
			t.Fatalf("write: %v", err)
		}
		rd := bufio.NewReader(conn)
		if err := readReply(rd); err != nil {
			t.Fatalf("%q: reply: %v", args, err)
		}
		line, err := rd.ReadString('\n')
		if err != nil || line != "+PONG\r\n" {
			t.Fatalf("%q: connection not serving after the command: %q %v", args, line, err)
		}
	})
}

// fuzzAllocBound bounds what the node may allocate for one fuzzed input:
// well above its input bounds (MaxValue 1 MiB, 64 keys), far below what an
// allocation sized by a fuzzed number would take.
const fuzzAllocBound = 64 << 20

func assertServing(t *testing.T, path string) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("daemon not answering: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("PING\r\n"))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "+PONG\r\n" {
		t.Fatalf("daemon not serving: %q %v", line, err)
	}
}

// readReply reads one RESP2 reply of any type and checks its framing.
func readReply(rd *bufio.Reader) error {
	line, err := rd.ReadString('\n')
	if err != nil {
		return err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return fmt.Errorf("bad line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', '-', ':':
		return nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return fmt.Errorf("bad bulk length %q", line)
		}
		if n == -1 {
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return err
		}
		if string(buf[n:]) != "\r\n" {
			return fmt.Errorf("bulk not terminated")
		}
		return nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return fmt.Errorf("bad array length %q", line)
		}
		for i := 0; i < n; i++ {
			if err := readReply(rd); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown reply type %q", line)
}
