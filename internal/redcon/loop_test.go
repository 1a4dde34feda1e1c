package redcon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// mode is how a test server serves its connections.
type mode int

const (
	goroutines mode = iota // a goroutine per connection
	allWorkers             // event loops that answer nothing themselves
	mixed                  // event loops that answer about half the commands
	loopsOnly              // event loops that answer every command
)

func (m mode) String() string { return [...]string{"goroutines", "workers", "mixed", "loops only"}[m] }

// set makes s serve as m, with handler as the loops' fast path where m
// is mixed: it takes the commands of even length but DETACH and BLOCK.
func (m mode) set(s *Server, handler func(Conn, Command)) {
	switch m {
	case allWorkers:
		s.SetLoops(2, nil)
	case mixed:
		s.SetLoops(2, func(conn Conn, cmd Command) bool {
			name := string(cmd.Args[0])
			if name == "DETACH" || name == "BLOCK" || len(cmd.Raw)%2 != 0 {
				return false
			}
			handler(conn, cmd)
			return true
		})
	case loopsOnly:
		s.SetLoops(1, func(conn Conn, cmd Command) bool { handler(conn, cmd); return true })
	}
}

func forModes(t *testing.T, test func(*testing.T, mode)) {
	for _, m := range []mode{goroutines, allWorkers, mixed} {
		t.Run(m.String(), func(t *testing.T) { test(t, m) })
	}
}

// loopServer serves handler on a Unix socket with event loops (mixed) and
// the given limits; closed receives every connection's end.
func loopServer(t *testing.T, lim Limits, idle time.Duration, handler func(Conn, Command)) (path string, closed chan error, stop func()) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	closed = make(chan error, 64)
	s := NewServerNetwork("unix", path, handler, nil, func(_ Conn, err error) { closed <- err })
	s.SetLimits(lim)
	s.SetIdleClose(idle)
	mixed.set(s, handler)
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(ln) }()
	var once sync.Once
	stop = func() { once.Do(func() { ln.Close(); <-done }) }
	t.Cleanup(stop)
	return path, closed, stop
}

// TestLoopKeepsOrder: in pipelines where the loop answers some commands
// and workers the others, every reply comes back in its command's place,
// over many connections at once.
func TestLoopKeepsOrder(t *testing.T) {
	path, _, _ := loopServer(t, Limits{}, 0, func(conn Conn, cmd Command) {
		conn.WriteBulk(cmd.Args[1])
	})
	var wg sync.WaitGroup
	for client := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute)) // a missing reply fails, not hangs
			br := bufio.NewReader(c)
			for round := range 50 {
				var out []byte
				var want []string
				for i := range 1 + (round*7+client)%40 {
					v := strconv.Itoa(client) + "." + strconv.Itoa(round) + "." + strconv.Itoa(i)
					want = append(want, v)
					out = append(out, respCommand([]byte("ECHO"), []byte(v))...)
				}
				if _, err := c.Write(out); err != nil {
					t.Error(err)
					return
				}
				for i, v := range want {
					line, err := br.ReadString('\n')
					if err == nil && line == "$"+strconv.Itoa(len(v))+"\r\n" {
						line, err = br.ReadString('\n')
					}
					if err != nil || line != v+"\r\n" {
						t.Errorf("client %d round %d reply %d: %q %v, want %q", client, round, i, line, err, v)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// TestLoopGoesOnInKeptGoroutines: where a command goes to a worker, the
// loop's goroutine becomes the worker and the loop goes on in another;
// that other is one kept from an earlier hand-off (its stack grown by the
// commands it served), not a new goroutine each time. 200 commands sent
// one at a time, each to a worker, are served on a few goroutines, not
// on 200.
func TestLoopGoesOnInKeptGoroutines(t *testing.T) {
	var mu sync.Mutex
	served := map[string]int{} // by goroutine, the commands it served
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServerNetwork("unix", path, func(conn Conn, cmd Command) {
		buf := make([]byte, 64)
		id, _, _ := strings.Cut(strings.TrimPrefix(string(buf[:runtime.Stack(buf, false)]), "goroutine "), " ")
		mu.Lock()
		served[id]++
		mu.Unlock()
		conn.WriteString("OK")
	}, nil, nil)
	allWorkers.set(s, nil)
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(ln) }()
	t.Cleanup(func() { ln.Close(); <-done })
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute)) // a missing reply fails, not hangs
	br := bufio.NewReader(c)
	const commands = 200
	for i := range commands {
		if _, err := c.Write(respCommand([]byte("PING"))); err != nil {
			t.Fatal(err)
		}
		if line, err := br.ReadString('\n'); err != nil || line != "+OK\r\n" {
			t.Fatalf("command %d: %q, %v", i, line, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(served) > commands/10 {
		t.Fatalf("%d commands served by workers on %d goroutines, want at most %d", commands, len(served), commands/10)
	}
}

// TestLoopWriteTimeout: a client that stops reading while its replies are
// written, by a loop or for a worker, is closed after the write timeout,
// and every value lent to the replies is given back.
func TestLoopWriteTimeout(t *testing.T) {
	// GETX is answered by the loop (its command has an even length),
	// GETXY by a worker.
	for _, name := range []string{"GETX", "GETXY"} {
		t.Run(name, func(t *testing.T) { testLoopWriteTimeout(t, name) })
	}
}

func testLoopWriteTimeout(t *testing.T, name string) {
	var mu sync.Mutex
	lent, released := 0, 0
	value := bytes.Repeat([]byte("v"), 64<<10)
	path, closed, _ := loopServer(t, Limits{WriteTimeout: 200 * time.Millisecond}, 0, func(conn Conn, cmd Command) {
		mu.Lock()
		lent++
		mu.Unlock()
		conn.SetReply(AppendBulkHeader(conn.Reply(), len(value)))
		conn.WriteLent(value, func(uint64) { mu.Lock(); released++; mu.Unlock() }, 0)
		conn.SetReply(append(conn.Reply(), '\r', '\n'))
	})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out []byte
	for range 256 { // 16 MiB of replies, far past the socket's buffers
		out = append(out, respCommand([]byte(name))...)
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("closed with %v, want a deadline", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a client that does not read was not closed")
	}
	mu.Lock()
	defer mu.Unlock()
	if lent == 0 || released != lent {
		t.Fatalf("%d values lent, %d given back", lent, released)
	}
}

// TestLoopIdleClose: a loop closes a connection that sends nothing for
// the idle time, and not one that keeps sending.
func TestLoopIdleClose(t *testing.T) {
	path, closed, _ := loopServer(t, Limits{}, 300*time.Millisecond, func(conn Conn, cmd Command) {
		conn.WriteString("OK")
	})
	idle, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	busy, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	br := bufio.NewReader(busy)
	for give := time.Now().Add(time.Minute); time.Now().Before(give); {
		if _, err := busy.Write(respCommand([]byte("PG"))); err != nil {
			t.Fatal(err)
		}
		if line, err := br.ReadString('\n'); err != nil || line != "+OK\r\n" {
			t.Fatalf("busy connection: %q %v", line, err)
		}
		select {
		case err := <-closed:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("closed with %v, want a deadline", err)
			}
			if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("idle connection read %v after the close, want EOF", err)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("the idle connection was not closed within a minute")
}

// TestLoopProtocolError: a loop answers a protocol error and closes the
// connection.
func TestLoopProtocolError(t *testing.T) {
	path, closed, _ := loopServer(t, Limits{}, 0, func(conn Conn, cmd Command) {
		conn.WriteString("OK")
	})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(respCommand([]byte("PG")))
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("%q %v", line, err)
	}
	c.Write([]byte("*1\r\n$x\r\n"))
	reply, _ := io.ReadAll(br)
	if want := "-ERR Protocol error: invalid bulk length\r\n"; string(reply) != want {
		t.Fatalf("reply %q, want %q", reply, want)
	}
	if err := <-closed; !IsProtocolError(err) {
		t.Fatalf("closed with %v, want a protocol error", err)
	}
}

// TestLoopShutdown: closing the listener ends connections the loops serve
// and those out with a worker, each with its closed callback, and Serve
// returns while a worker's handler still runs.
func TestLoopShutdown(t *testing.T) {
	started, unblock := make(chan struct{}), make(chan struct{})
	path, closed, stop := loopServer(t, Limits{}, 0, func(conn Conn, cmd Command) {
		if string(cmd.Args[0]) == "BLOCK" {
			close(started)
			<-unblock
		}
		conn.WriteString("OK")
	})
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute)) // a connection left open fails, not hangs
		conns = append(conns, c)
	}
	// Every connection served once, so that each is in a loop.
	for _, c := range conns {
		c.Write(respCommand([]byte("PG")))
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "+OK\r\n" {
			t.Fatalf("%q %v", line, err)
		}
	}
	conns[0].Write(respCommand([]byte("BLOCK")))
	<-started
	stop()
	for _, c := range conns[1:] {
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("a loop's connection read %v after shutdown, want EOF", err)
		}
	}
	close(unblock)
	for range conns {
		select {
		case <-closed:
		case <-time.After(time.Minute):
			t.Fatal("a connection was never reported closed")
		}
	}
}

// TestLoopTakesInputWhileRepliesWait: a client writes a whole pipeline,
// 2.7 MB of commands whose replies come to 19 MB, before it reads any
// reply. While the first replies wait for room, the loop takes the rest of
// the pipeline in, whether the loop answers the commands, a worker does,
// or both in turn: so the client can finish writing and read every reply,
// in order, instead of both sides waiting on the other. (A goroutine per
// connection, the fallback of SetLoops(-1), still reads no input while
// its replies wait.)
func TestLoopTakesInputWhileRepliesWait(t *testing.T) {
	for _, m := range []mode{loopsOnly, allWorkers, mixed} {
		t.Run(m.String(), func(t *testing.T) { testInputWhileRepliesWait(t, m) })
	}
}

func testInputWhileRepliesWait(t *testing.T, m mode) {
	path := serveUnix(t, m, func(conn Conn, cmd Command) {
		n, _ := strconv.Atoi(string(cmd.Args[1]))
		conn.WriteBulk(bytes.Repeat(cmd.Args[1][:1], n))
	})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute)) // a stall fails, not hangs
	pad := bytes.Repeat([]byte("p"), 10<<10)
	var pipeline []byte
	var want []int
	// The first command's reply alone fills the socket. While it waits,
	// the short commands after it, parsed already and still to be
	// answered, lie in the read buffer, where moving the input read
	// meanwhile would overwrite them.
	pipeline = respCommand([]byte("BIG"), []byte("3000000"))
	want = append(want, 3000000)
	for i := range 20000 {
		n := 10 + i%1000
		want = append(want, n)
		pipeline = append(pipeline, respCommand([]byte("BIG"), []byte(strconv.Itoa(n)))...)
	}
	for i := range 200 {
		n := 30000 + i
		want = append(want, n)
		pipeline = append(pipeline, respCommand([]byte("BIG"), []byte(strconv.Itoa(n)), pad)...)
	}
	if _, err := c.Write(pipeline); err != nil {
		t.Fatalf("writing the pipeline: %v", err)
	}
	br := bufio.NewReader(c)
	for i, n := range want {
		line, err := br.ReadString('\n')
		if err != nil || line != "$"+strconv.Itoa(n)+"\r\n" {
			t.Fatalf("reply %d: %q %v", i, line, err)
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(br, body); err != nil || !bytes.Equal(body[:n], bytes.Repeat([]byte{strconv.Itoa(n)[0]}, n)) {
			t.Fatalf("reply %d: %v", i, err)
		}
	}
}

// TestLoopLendsItsSpareBuffer: a loop writes the replies of the
// connections whose replies go out whole into one buffer it passes from
// one to the next, and a connection whose replies wait for room keeps
// its own. While one client's long replies wait unread, other clients'
// pipelines are answered; then it reads its replies, and every byte of
// every reply is its own.
func TestLoopLendsItsSpareBuffer(t *testing.T) {
	began := make(chan struct{})
	var once sync.Once
	path := serveUnix(t, loopsOnly, func(conn Conn, cmd Command) {
		if string(cmd.Args[0]) == "XGET" {
			once.Do(func() { close(began) })
		}
		n, _ := strconv.Atoi(string(cmd.Args[2]))
		conn.WriteBulk(bytes.Repeat(cmd.Args[1][:1], n))
	})
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(time.Minute)) // a stall fails, not hangs
		return c, bufio.NewReader(c)
	}
	// fill: byte i of the alphabet, n times.
	check := func(br *bufio.Reader, fill byte, n int) error {
		line, err := br.ReadString('\n')
		if err != nil || line != "$"+strconv.Itoa(n)+"\r\n" {
			return fmt.Errorf("header %q %v, want %d bytes", line, err, n)
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(br, body); err != nil {
			return err
		}
		if !bytes.Equal(body[:n], bytes.Repeat([]byte{fill}, n)) {
			return fmt.Errorf("%d bytes of %q, not all %q", n, body[:min(n, 16)], fill)
		}
		return nil
	}

	// The waiting client: 252 KiB of replies, more than its socket takes
	// (a Unix socket's send buffer is 208 KiB by default) and less than
	// the loop writes out before the pipeline's end (maxBufferCap): the
	// one loop answers them all, writes what the socket takes, and only
	// then answers the other clients, while the rest waits in the buffer.
	const xn, xlen = 7, 36 << 10
	x, xr := dial()
	var pipeline []byte
	for i := range xn {
		pipeline = append(pipeline, respCommand([]byte("XGET"), []byte{'a' + byte(i)}, []byte(strconv.Itoa(xlen)))...)
	}
	if _, err := x.Write(pipeline); err != nil {
		t.Fatal(err)
	}
	select {
	case <-began:
	case <-time.After(time.Minute):
		t.Fatal("the loop never began on the waiting client's pipeline")
	}

	var wg sync.WaitGroup
	for client := range 4 {
		wg.Go(func() {
			c, br := dial()
			for round := range 20 {
				// 512 KiB of replies: as far into the buffer as the
				// waiting client's unwritten replies lie.
				var out []byte
				fill := 'A' + byte((client*20+round)%26)
				for range 16 {
					out = append(out, respCommand([]byte("GET"), []byte{fill}, []byte("32768"))...)
				}
				if _, err := c.Write(out); err != nil {
					t.Error(err)
					return
				}
				for i := range 16 {
					if err := check(br, fill, 32768); err != nil {
						t.Errorf("client %d round %d reply %d: %v", client, round, i, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for i := range xn {
		if err := check(xr, 'a'+byte(i), xlen); err != nil {
			t.Fatalf("waiting client, reply %d: %v", i, err)
		}
	}
}
