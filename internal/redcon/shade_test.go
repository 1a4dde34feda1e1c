package redcon

// Tests of the shade patches (see PATCHES.md).

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shade-mesh/shade/internal/budget"
)

func respCommand(args ...[]byte) []byte {
	b := AppendArray(nil, len(args))
	for _, a := range args {
		b = AppendBulk(b, a)
	}
	return b
}

// chunkWriter writes its input in pieces of random length, as a socket
// may deliver it.
func chunkWriter(w io.WriteCloser, data []byte, rng *rand.Rand) {
	defer w.Close()
	for len(data) > 0 {
		n := 1 + rng.Intn(300<<10)
		if n > len(data) {
			n = len(data)
		}
		if _, err := w.Write(data[:n]); err != nil {
			return
		}
		data = data[n:]
	}
}

// TestLendingReader reads pipelines of commands with values from empty to
// 300 KiB, arriving in random pieces, the way the server loop does: a
// whole batch is checked before the next read. Lent commands must stay
// intact for the whole batch, and the buffer must stay bounded.
func TestLendingReader(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var want [][][]byte
	var stream []byte
	for i := 0; i < 3000; i++ {
		size := rng.Intn(5 << 10)
		switch rng.Intn(10) {
		case 0:
			size = rng.Intn(300 << 10)
		case 1:
			size = 100 << 10
		}
		val := make([]byte, size)
		rng.Read(val)
		args := [][]byte{[]byte("SET"), []byte("key:" + strconv.Itoa(i)), val}
		want = append(want, args)
		stream = append(stream, respCommand(args...)...)
	}
	pr, pw := io.Pipe()
	go chunkWriter(pw, stream, rand.New(rand.NewSource(2)))
	rd := NewReader(pr)
	rd.lend = true
	got := 0
	for got < len(want) {
		cmds, err := rd.readCommands(nil)
		if err != nil {
			t.Fatalf("after %d commands: %v", got, err)
		}
		for _, cmd := range cmds {
			if len(cmd.Args) != 3 {
				t.Fatalf("command %d: %d args", got, len(cmd.Args))
			}
			for j := range cmd.Args {
				if !bytes.Equal(cmd.Args[j], want[got][j]) {
					t.Fatalf("command %d arg %d differs", got, j)
				}
			}
			if !bytes.Equal(cmd.Raw, respCommand(want[got]...)) {
				t.Fatalf("command %d: raw differs", got)
			}
			got++
		}
		if len(rd.buf) > 4*maxReadKeep {
			t.Fatalf("read buffer grew to %d bytes", len(rd.buf))
		}
	}
	if _, err := rd.readCommands(nil); err != io.EOF {
		t.Fatalf("after the last command: %v, want EOF", err)
	}
}

// TestLendingReaderKeepsItsBuffer: a drained buffer is reused, not cut back
// and regrown, so a steady stream of large pipelines allocates nothing.
func TestLendingReaderKeepsItsBuffer(t *testing.T) {
	val := bytes.Repeat([]byte("v"), 100<<10)
	var pipeline []byte
	for i := 0; i < 16; i++ {
		pipeline = append(pipeline, respCommand([]byte("SET"), []byte("k"), val)...)
	}
	var src bytes.Reader
	rd := NewReader(&src)
	rd.lend = true
	batch := func() {
		src.Reset(pipeline)
		for n := 0; n < 16; {
			cmds, err := rd.readCommands(nil)
			if err != nil {
				t.Fatal(err)
			}
			n += len(cmds)
		}
	}
	batch()
	if allocs := testing.AllocsPerRun(20, batch); allocs > 0 {
		t.Fatalf("%v allocations per pipeline of 16 100 KiB commands, want 0", allocs)
	}
}

// TestBulkLengthBounds: a bulk length past maxBulkLen is a protocol error
// (a length near 2^63 overflowed and panicked), and a huge multibulk count
// waits for its data instead of spinning.
func TestBulkLengthBounds(t *testing.T) {
	for _, in := range []string{
		"*2\r\n$3\r\nGET\r\n$9223372036854775807\r\n",
		"*2\r\n$3\r\nGET\r\n$9223372036854775806\r\nxx\r\n",
		"*1\r\n$" + strconv.Itoa(maxBulkLen+1) + "\r\n",
	} {
		_, err := NewReader(bytes.NewReader([]byte(in))).ReadCommand()
		if err != errInvalidBulkLength {
			t.Errorf("%q: %v, want %v", in, err, errInvalidBulkLength)
		}
	}
	// A count past MaxArgs is refused as it is read; one within it waits
	// for its data instead of spinning through the count.
	_, err := NewReader(bytes.NewReader([]byte("*99999999999\r\n$1\r\n"))).ReadCommand()
	if err != errTooManyArgs {
		t.Errorf("huge count: %v, want %v", err, errTooManyArgs)
	}
	_, err = NewReader(bytes.NewReader([]byte("*1048576\r\n$1\r\n"))).ReadCommand()
	if err != io.EOF {
		t.Errorf("count at the limit: %v, want EOF", err)
	}
}

// serveUnix runs a server with handler on a socket in a temporary folder.
func serveUnix(t *testing.T, m mode, handler func(conn Conn, cmd Command)) string {
	t.Helper()
	return serveUnixLimited(t, m, Limits{}, handler, nil)
}

// serveUnixLimited is serveUnix with limits, and closed called with every
// connection's end (nil: none).
func serveUnixLimited(t *testing.T, m mode, lim Limits, handler func(conn Conn, cmd Command), closed func(Conn, error)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServerNetwork("unix", path, handler, nil, closed)
	s.SetLimits(lim)
	m.set(s, handler)
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(ln) }()
	t.Cleanup(func() { ln.Close(); <-done })
	return path
}

// TestServerLargePipelines: pipelines of large arguments in and large
// replies out (flushed between commands) arrive whole and in order, whether
// written with WriteBulk, appended in place through Reply and SetReply, or
// lent (WriteLent); every lent value is given back once, after it is
// written.
func TestServerLargePipelines(t *testing.T) { forModes(t, testServerLargePipelines) }

func testServerLargePipelines(t *testing.T, m mode) {
	var lent, released int
	path := serveUnix(t, m, func(conn Conn, cmd Command) {
		if string(cmd.Args[0]) == "RELEASED" {
			conn.WriteInt(released)
			return
		}
		// ECHO n: a reply of n bytes, each the low byte of n.
		n, _ := strconv.Atoi(string(cmd.Args[1]))
		if len(cmd.Args) == 3 && len(cmd.Args[2]) != n {
			conn.WriteError("ERR length")
			return
		}
		switch n % 4 {
		case 0, 2:
			conn.WriteBulk(bytes.Repeat([]byte{byte(n)}, n))
			return
		case 1:
			lent++
			conn.SetReply(AppendBulkHeader(conn.Reply(), n))
			value := bytes.Repeat([]byte{byte(n)}, n)
			conn.WriteLent(value, func(token uint64) {
				if token != uint64(n) {
					t.Errorf("value of %d bytes given back with token %d", n, token)
				}
				clear(value) // the caller may reuse it now
				released++
			}, uint64(n))
			conn.SetReply(append(conn.Reply(), '\r', '\n'))
			return
		}
		before := conn.Buffered()
		b := AppendBulkHeader(conn.Reply(), n)
		for range n {
			b = append(b, byte(n))
		}
		conn.SetReply(append(b, '\r', '\n'))
		if got, want := conn.Buffered(), before+len(AppendBulkHeader(nil, n))+n+2; got != want {
			t.Errorf("Buffered() = %d after appending a reply, want %d", got, want)
		}
	})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rng := rand.New(rand.NewSource(3))
	br := bufio.NewReader(c)
	for round := 0; round < 20; round++ {
		var sizes []int
		var out []byte
		for i := 0; i < 16; i++ {
			n := rng.Intn(200 << 10)
			sizes = append(sizes, n)
			args := [][]byte{[]byte("ECHO"), []byte(strconv.Itoa(n))}
			if rng.Intn(2) == 0 {
				args = append(args, bytes.Repeat([]byte{'x'}, n))
			}
			out = append(out, respCommand(args...)...)
		}
		errc := make(chan error, 1)
		go func() { _, err := c.Write(out); errc <- err }()
		for i, n := range sizes {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if line != "$"+strconv.Itoa(n)+"\r\n" {
				t.Fatalf("round %d reply %d: %q, want a bulk of %d", round, i, line, n)
			}
			body := make([]byte, n+2)
			if _, err := io.ReadFull(br, body); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(body[:n], bytes.Repeat([]byte{byte(n)}, n)) {
				t.Fatalf("round %d reply %d: wrong bytes", round, i)
			}
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		// The connection's goroutine gave every value back before it
		// read this command.
		if _, err := c.Write(respCommand([]byte("RELEASED"))); err != nil {
			t.Fatal(err)
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if want := ":" + strconv.Itoa(lent) + "\r\n"; line != want {
			t.Fatalf("round %d: %q values given back, want %q", round, line, want)
		}
	}
	if lent == 0 {
		t.Fatal("no value was lent")
	}
}

// TestWriterGivesLentValuesBack: a Writer gives lent values back after a
// failed write too, and at once once it has failed.
func TestWriterGivesLentValuesBack(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	w := NewWriter(a)
	released := map[uint64]int{}
	release := func(token uint64) { released[token]++ }
	w.WriteString("OK")
	w.WriteLent([]byte("one"), release, 1)
	w.WriteLent([]byte("two"), release, 2)
	if err := w.Flush(); err == nil {
		t.Fatal("Flush to a closed pipe succeeded")
	}
	w.WriteLent([]byte("three"), release, 3)
	if len(released) != 3 || released[1] != 1 || released[2] != 1 || released[3] != 1 {
		t.Fatalf("given back %v, want tokens 1, 2 and 3 once each", released)
	}
	if err := w.Flush(); err == nil || len(released) != 3 {
		t.Fatalf("Flush after a failure: %v, given back %v", err, released)
	}
}

// TestDetachKeepsThePipeline: commands pipelined behind the one that
// detaches are handed to the detached connection intact, although the
// reader goes on reading into its buffer.
func TestDetachKeepsThePipeline(t *testing.T) { forModes(t, testDetachKeepsThePipeline) }

func testDetachKeepsThePipeline(t *testing.T, m mode) {
	path := serveUnix(t, m, func(conn Conn, cmd Command) {
		if string(cmd.Args[0]) != "DETACH" {
			conn.WriteError("ERR attached")
			return
		}
		dc := conn.Detach()
		go func() {
			defer dc.Close()
			for {
				// Hold one command while reading the next, so that
				// the reader refills its buffer under the held one.
				a, err := dc.ReadCommand()
				if err != nil {
					return
				}
				b, err := dc.ReadCommand()
				if err != nil {
					return
				}
				dc.WriteBulk(a.Args[1])
				dc.WriteBulk(b.Args[1])
				if err := dc.Flush(); err != nil {
					return
				}
			}
		}()
	})
	// Small commands first, in varying number, so that the detached
	// connection holds a lent command across a read in some runs.
	for small := 0; small < 6; small++ {
		var out []byte
		var want [][]byte
		out = append(out, respCommand([]byte("DETACH"))...)
		for i := 0; i < small; i++ {
			want = append(want, []byte("small"))
			out = append(out, respCommand([]byte("ECHO"), want[i])...)
		}
		for i := 0; i < 40; i++ {
			v := bytes.Repeat([]byte{byte('a' + i%26)}, 1000*(i+1))
			want = append(want, v)
			out = append(out, respCommand([]byte("ECHO"), v)...)
		}
		checkEchoes(t, path, out, want)
	}
}

func checkEchoes(t *testing.T, path string, out []byte, want [][]byte) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go c.Write(out)
	br := bufio.NewReader(c)
	for i, v := range want {
		if i%2 == 0 && i == len(want)-1 {
			break // the detached loop answers in pairs
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line != fmt.Sprintf("$%d\r\n", len(v)) {
			t.Fatalf("reply %d: %q", i, line)
		}
		body := make([]byte, len(v)+2)
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(body[:len(v)], v) {
			t.Fatalf("reply %d: wrong bytes", i)
		}
	}
}

// chunkReader returns its data in pieces of the given sizes, in turn.
type chunkReader struct {
	data  []byte
	sizes []byte
	i     int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(r.sizes) > 0 {
		n = 1 + int(r.sizes[r.i%len(r.sizes)])*64
		r.i++
	}
	if n > len(p) {
		n = len(p)
	}
	if n > len(r.data) {
		n = len(r.data)
	}
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// FuzzLendingReader: the server loop's lending reader parses any input,
// delivered in any pieces, into the commands and the error that the copying
// reader finds in the whole input at once. (A reader drops the commands it
// parsed in the same read as a protocol error, so the lending reader, fed
// in pieces, may return more of them before the error; never other ones.)
func FuzzLendingReader(f *testing.F) {
	f.Add([]byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n"), []byte{0, 3, 1})
	f.Add([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n*1\r\n$4\r\nPING\r\n"), []byte{})
	f.Add([]byte("*1\r\n$99999999999999999999\r\n"), []byte{2})
	f.Add([]byte("*99999999999\r\n$1\r\na\r\n"), []byte{0})
	f.Fuzz(func(t *testing.T, in, sizes []byte) {
		var want [][][]byte
		wantErr := error(io.EOF)
		ref := NewReader(bytes.NewReader(in))
		for {
			cmd, err := ref.ReadCommand()
			if err != nil {
				wantErr = err
				break
			}
			want = append(want, cmd.Args)
		}
		rd := NewReader(&chunkReader{data: in, sizes: sizes})
		rd.lend = true
		got := 0
		for {
			cmds, err := rd.readCommands(nil)
			if err != nil {
				if got < len(want) || (wantErr == io.EOF && got != len(want)) || err.Error() != wantErr.Error() {
					t.Fatalf("after %d of %d commands: %v, want %v", got, len(want), err, wantErr)
				}
				return
			}
			for _, cmd := range cmds {
				if got >= len(want) {
					if wantErr == io.EOF {
						t.Fatalf("more commands than the copying reader")
					}
					got++ // dropped by the copying reader with the error
					continue
				}
				if len(cmd.Args) != len(want[got]) {
					t.Fatalf("command %d: %d args, want %d", got, len(cmd.Args), len(want[got]))
				}
				for j := range cmd.Args {
					if !bytes.Equal(cmd.Args[j], want[got][j]) {
						t.Fatalf("command %d arg %d: %q, want %q", got, j, cmd.Args[j], want[got][j])
					}
				}
				got++
			}
		}
	})
}

// TestTrickledCommand: a large command arriving a byte at a time. The
// reader loops where upstream recursed once per read, which for a value of
// this size outgrew the goroutine stack limit and killed the process.
func TestTrickledCommand(t *testing.T) {
	val := bytes.Repeat([]byte("t"), 8<<20)
	in := respCommand([]byte("SET"), []byte("k"), val)
	rd := NewReader(&chunkReader{data: in}) // one byte per read
	rd.lend = true
	cmds, err := rd.readCommands(nil)
	if err != nil || len(cmds) != 1 || !bytes.Equal(cmds[0].Args[2], val) {
		t.Fatalf("%d commands, %v", len(cmds), err)
	}
}

// TestInputBounds: a line without its newline, a count line without its
// newline, a bulk length past MaxBulk and too many arguments are refused
// as they arrive, before the buffer grows past the bound.
func TestInputBounds(t *testing.T) {
	lim := Limits{MaxInline: 1024, MaxBulk: 4096, MaxArgs: 8}
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"endless inline", bytes.Repeat([]byte("a"), 4096), errInlineTooBig},
		{"endless count", append([]byte("*"), bytes.Repeat([]byte("1"), 4096)...), errMultiBulkTooBig},
		{"endless bulk length", append([]byte("*1\r\n$"), bytes.Repeat([]byte("1"), 4096)...), errBulkCountTooBig},
		{"too many arguments", []byte("*9\r\n$1\r\na\r\n"), errTooManyArgs},
	} {
		rd := NewReader(bytes.NewReader(tc.in))
		rd.limits = lim.withDefaults()
		_, err := rd.ReadCommand()
		if err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if LimitOf(err) == "" {
			t.Errorf("%s: LimitOf(%v) names no bound", tc.name, err)
		}
		if len(rd.buf) > 8*lim.MaxInline {
			t.Errorf("%s: buffer grew to %d bytes", tc.name, len(rd.buf))
		}
	}
	rd := NewReader(bytes.NewReader([]byte("*1\r\n$4097\r\n")))
	rd.limits = lim.withDefaults()
	if _, err := rd.ReadCommand(); LimitOf(err) != LimitBulk {
		t.Errorf("bulk over MaxBulk: %v, want a %s refusal", err, LimitBulk)
	}
	// A line within the bound is read as before.
	rd = NewReader(bytes.NewReader([]byte("PING hello\r\n")))
	rd.limits = lim.withDefaults()
	if cmd, err := rd.ReadCommand(); err != nil || string(cmd.Args[1]) != "hello" {
		t.Errorf("inline PING: %v %q", err, cmd.Args)
	}
}

// TestClientMemoryBudget: a connection whose input would take the shared
// budget past its limit gets an error and is closed; what every
// connection held goes back to the budget when it closes, and a new
// connection is served.
func TestClientMemoryBudget(t *testing.T) { forModes(t, testClientMemoryBudget) }

func testClientMemoryBudget(t *testing.T, m mode) {
	b := budget.New(1 << 20)
	closed := make(chan error, 16)
	path := serveUnixLimited(t, m, Limits{Budget: b}, func(conn Conn, cmd Command) { conn.WriteString("OK") },
		func(_ Conn, err error) { closed <- err })

	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Announce 8 MiB and send 2 MiB of it: past the 1 MiB budget.
	go func() {
		c.Write([]byte("*2\r\n$3\r\nSET\r\n$8388608\r\n"))
		c.Write(make([]byte, 2<<20))
	}()
	reply, _ := io.ReadAll(c)
	if !bytes.Contains(reply, []byte("client memory limit")) {
		t.Errorf("reply %q, want the client memory error", reply)
	}
	if err := <-closed; LimitOf(err) != LimitClientMemory {
		t.Errorf("closed with %v, want a %s refusal", err, LimitClientMemory)
	}
	if b.Used() != 0 {
		t.Errorf("budget holds %d bytes after the only connection closed", b.Used())
	}
	c2, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Write([]byte("PING\r\n"))
	line, err := bufio.NewReader(c2).ReadString('\n')
	if err != nil || line != "+OK\r\n" {
		t.Errorf("a new connection: %q %v", line, err)
	}
}

// TestRoomKeepingKeepsParsedCommands: where a loop reads more input while
// commands parsed earlier are still to run, the buffer they alias is never
// written over, and stays charged to the clients' budget until the next
// parse; a buffer that held only input since goes at once.
func TestRoomKeepingKeepsParsedCommands(t *testing.T) {
	b := budget.New(1 << 20)
	rd := &Reader{poll: true, lend: true, share: budget.NewShare(b), buf: make([]byte, 4096)}
	rd.share.Force(4096)
	stream := respCommand([]byte("GET"), []byte("first"))
	for len(stream) < 4096 {
		stream = append(stream, respCommand([]byte("GET"), []byte("k"+strconv.Itoa(len(stream))))...)
	}
	rd.end = copy(rd.buf, stream)
	cmds, err := rd.readCommands(nil)
	if err != nil || len(cmds) < 2 {
		t.Fatalf("parsed %d commands: %v", len(cmds), err)
	}
	first := string(cmds[0].Args[1])
	base := rd.share.Held() // the buffer's 4096 bytes and the parse's slabs
	// Input arriving while the commands wait: the buffer is full, so room
	// means a new one; the old one, which the commands alias, is kept and
	// stays charged.
	if err := rd.makeRoom(true); err != nil {
		t.Fatal(err)
	}
	if got := rd.share.Held() - base; got != int64(len(rd.buf)) {
		t.Fatalf("%d bytes more charged for a new buffer of %d with the old one kept", got, len(rd.buf))
	}
	rd.end += copy(rd.buf[rd.end:], bytes.Repeat([]byte("x"), len(rd.buf)-rd.end))
	if err := rd.makeRoom(true); err != nil {
		t.Fatal(err)
	}
	if string(cmds[0].Args[1]) != first {
		t.Fatalf("a parsed command's argument became %q", cmds[0].Args[1])
	}
	if got := rd.share.Held() - base; got != int64(len(rd.buf)) {
		t.Fatalf("%d bytes more charged after a second new buffer of %d; the one in between held only input", got, len(rd.buf))
	}
	// The next parse: the commands are done, and their buffer goes.
	rd.start = rd.end
	rd.readCommands(nil)
	if got := rd.share.Held() - base; got != int64(len(rd.buf))-4096 {
		t.Fatalf("%d bytes more charged after the next parse; want the new buffer's %d less the old one's 4096", got, len(rd.buf))
	}
}

// TestReadsThatFillTheBufferGrowIt: a loop's read that fills all the room
// its buffer has marks the reader, and the next makeRoom doubles the
// buffer, charged to the clients' budget, up to maxReadAhead; a read that
// leaves room changes nothing, and where the budget is short the reader
// reads into the buffer it has, with no error.
func TestReadsThatFillTheBufferGrowIt(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if err := unix.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	b := budget.New(1 << 20)
	c := &conn{rd: &Reader{poll: true, lend: true, share: budget.NewShare(b), buf: make([]byte, 4096)}, ls: loopState{fd: fds[0]}}
	c.rd.share.Force(4096)
	l := &loop{}
	send := func(n int) {
		t.Helper()
		if _, err := unix.Write(fds[1], bytes.Repeat([]byte("x"), n)); err != nil {
			t.Fatal(err)
		}
	}
	read := func() {
		t.Helper()
		if eof, err := l.read(c); eof || err != nil {
			t.Fatalf("read: eof %v, %v", eof, err)
		}
		c.rd.start = c.rd.end // as if every byte read made a command now done
		if err := c.rd.makeRoom(false); err != nil {
			t.Fatal(err)
		}
	}
	send(100)
	read()
	if len(c.rd.buf) != 4096 || c.rd.share.Held() != 4096 {
		t.Fatalf("a read of 100 bytes: a buffer of %d, %d bytes charged; want 4096 for both", len(c.rd.buf), c.rd.share.Held())
	}
	for want := 8192; want <= maxReadAhead; want *= 2 {
		send(len(c.rd.buf))
		read()
		if len(c.rd.buf) != want || c.rd.share.Held() != int64(want) {
			t.Fatalf("a read that filled the buffer: a buffer of %d, %d bytes charged; want %d for both", len(c.rd.buf), c.rd.share.Held(), want)
		}
	}
	send(len(c.rd.buf))
	read()
	if len(c.rd.buf) != maxReadAhead {
		t.Fatalf("a buffer of %d past maxReadAhead (%d)", len(c.rd.buf), maxReadAhead)
	}

	// The budget short: the buffer stays as it is.
	short := budget.New(6000)
	c.rd = &Reader{poll: true, lend: true, share: budget.NewShare(short), buf: make([]byte, 4096)}
	c.rd.share.Force(4096)
	send(4096)
	read()
	if len(c.rd.buf) != 4096 || short.Used() != 4096 {
		t.Fatalf("with the budget short: a buffer of %d, %d bytes charged; want 4096 for both", len(c.rd.buf), short.Used())
	}
}

// TestWriterAdvance: writes that take any number of bytes at a time, as a
// socket does, send the buffer and the lent values in order, each byte
// once, and give each lent value back once its last byte is written and
// not before; replies written between the writes follow.
func TestWriterAdvance(t *testing.T) {
	for step := 1; step <= 40; step++ {
		w := NewWriter(io.Discard)
		var want, got []byte
		released := map[uint64]int{}
		ends := map[uint64]int{} // a lent value's end in want
		lend := func(token uint64, b []byte) {
			w.WriteLent(b, func(tok uint64) { released[tok]++ }, token)
			want = append(want, b...)
			ends[token] = len(want)
		}
		text := func(s string) {
			w.WriteString(s)
			want = append(want, "+"+s+"\r\n"...)
		}
		write := func(limit int) {
			n := 0
			for _, b := range w.vector() {
				d := min(len(b), limit-n)
				got = append(got, b[:d]...)
				if n += d; n == limit {
					break
				}
			}
			w.advance(n)
			for tok, end := range ends {
				if done := len(got) >= end; released[tok] != map[bool]int{false: 0, true: 1}[done] {
					t.Fatalf("step %d: token %d given back %d times with %d of %d bytes written", step, tok, released[tok], len(got), end)
				}
			}
		}
		text("first")
		lend(1, []byte("lent-one"))
		lend(2, []byte("lent-two, adjacent"))
		text("between")
		lend(3, []byte("three"))
		write(step)
		text("after a write")
		lend(4, []byte("four, lent after a write"))
		for range 100 {
			if len(w.vector()) == 0 {
				break
			}
			write(step)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("step %d: wrote %q, want %q", step, got, want)
		}
		if len(w.b) != 0 || w.sent != 0 || len(w.lent) != 0 || w.lentLen != 0 {
			t.Fatalf("step %d: once all is written the writer holds %d bytes (%d sent), %d lent values (%d bytes)", step, len(w.b), w.sent, len(w.lent), w.lentLen)
		}
	}
}

// TestFlushSomeNeverWaits: a handler that lends a reply far larger than
// the socket takes and calls FlushSome after each value runs to its end
// while the client reads nothing, the reply's start already sent;
// the client then reads every byte in order, and every value is given
// back once.
func TestFlushSomeNeverWaits(t *testing.T) {
	for _, m := range []mode{goroutines, allWorkers, loopsOnly} {
		t.Run(m.String(), func(t *testing.T) { testFlushSomeNeverWaits(t, m) })
	}
}

func testFlushSomeNeverWaits(t *testing.T, m mode) {
	const values, size = 64, 256 << 10
	var released sync.WaitGroup
	var times [values]atomic.Int32 // each value's releases
	done := make(chan struct{}, 1)
	path := serveUnix(t, m, func(conn Conn, cmd Command) {
		conn.WriteArray(values)
		released.Add(values)
		for i := range values {
			conn.SetReply(AppendBulkHeader(conn.Reply(), size))
			conn.WriteLent(bytes.Repeat([]byte{byte(i)}, size), func(tok uint64) {
				times[tok].Add(1)
				released.Done()
			}, uint64(i))
			conn.SetReply(append(conn.Reply(), '\r', '\n'))
			if err := conn.FlushSome(); err != nil {
				t.Errorf("FlushSome: %v", err)
			}
		}
		// The socket took the reply's start; the rest waits.
		if total := values * (size + len(AppendBulkHeader(nil, size)) + 2); conn.Buffered() >= total {
			t.Errorf("%d of %d bytes wait after FlushSome: it wrote nothing", conn.Buffered(), total)
		}
		done <- struct{}{}
	})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(respCommand([]byte("LONG"))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the handler waited for a client that reads nothing")
	}
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || line != "*"+strconv.Itoa(values)+"\r\n" {
		t.Fatalf("%q, %v: want an array of %d", line, err, values)
	}
	body := make([]byte, size+2)
	for i := range values {
		if line, err := br.ReadString('\n'); err != nil || line != "$"+strconv.Itoa(size)+"\r\n" {
			t.Fatalf("value %d: %q, %v", i, line, err)
		}
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(body[:size], bytes.Repeat([]byte{byte(i)}, size)) || string(body[size:]) != "\r\n" {
			t.Fatalf("value %d: wrong bytes", i)
		}
	}
	released.Wait()
	for i := range times {
		if n := times[i].Load(); n != 1 {
			t.Errorf("value %d given back %d times", i, n)
		}
	}
}

// TestLongRepliesReuseKeptBuffers: a reply longer than maxWriteKeep, its
// room made with Grow and written out in parts with FlushSome, leaves its
// buffer with the server once written, charged to the clients' budget,
// and the next long reply grows into that same buffer instead of a new
// one; every byte arrives right. Where the budget has no room for it, the
// buffer is not kept.
func TestLongRepliesReuseKeptBuffers(t *testing.T) {
	for _, m := range []mode{goroutines, allWorkers, loopsOnly} {
		t.Run(m.String(), func(t *testing.T) {
			t.Run("kept", func(t *testing.T) { testLongRepliesReuseKeptBuffers(t, m, 64<<20) })
			t.Run("no room", func(t *testing.T) { testLongRepliesReuseKeptBuffers(t, m, 1<<20) })
		})
	}
}

func testLongRepliesReuseKeptBuffers(t *testing.T, m mode, limit int64) {
	const size, part = 3 << 19, 256 << 10 // 1.5 MiB in parts of 256 KiB
	b := budget.New(limit)
	bufs := make(chan uintptr, 16) // where each long reply was made
	handler := func(cn Conn, cmd Command) {
		switch string(cmd.Args[0]) {
		case "KEPT": // the bytes the server keeps
			big := cn.(*conn).wr.big
			big.mu.Lock()
			held := big.held
			big.mu.Unlock()
			cn.WriteInt(held)
		case "LONG": // LONG tag: a bulk of size bytes, each tag's first byte
			cn.Grow(size + 32)
			bufs <- uintptr(unsafe.Pointer(unsafe.SliceData(cn.Reply())))
			r := AppendBulkHeader(cn.Reply(), size)
			for n := 0; n < size; n += part {
				r = append(r, bytes.Repeat(cmd.Args[1][:1], part)...)
				cn.SetReply(r)
				if cn.FlushSome() != nil {
					return
				}
				r = cn.Reply()
			}
			cn.SetReply(append(r, '\r', '\n'))
		}
	}
	path := serveUnixLimited(t, m, Limits{Budget: b}, handler, nil)
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	var first uintptr
	for round := range 4 {
		tag := byte('a' + round)
		if _, err := c.Write(respCommand([]byte("LONG"), []byte{tag})); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, len(AppendBulkHeader(nil, size))+size+2)
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatal(err)
		}
		if want := AppendBulk(nil, bytes.Repeat([]byte{tag}, size)); !bytes.Equal(body, want) {
			t.Fatalf("round %d: wrong bytes", round)
		}
		// Answered once the reply before it is out, so after its
		// buffer went back.
		if _, err := c.Write(respCommand([]byte("KEPT"))); err != nil {
			t.Fatal(err)
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		kept, _ := strconv.Atoi(line[1 : len(line)-2])
		buf := <-bufs
		switch {
		case limit < size:
			if kept != 0 {
				t.Fatalf("round %d: %d bytes kept where the budget (%d) has no room", round, kept, limit)
			}
			continue
		case kept <= maxWriteKeep || kept > maxBigKept:
			t.Fatalf("round %d: %d bytes kept, want one buffer of the reply's length", round, kept)
		case b.Used() < int64(kept):
			t.Fatalf("round %d: the budget holds %d bytes, less than the %d kept", round, b.Used(), kept)
		case round == 0:
			first = buf
		case buf != first:
			t.Fatalf("round %d: the reply grew into a new buffer, not the one kept", round)
		}
	}
}

// TestWriterGrowsIntoAKeptBuffer: grow moves what waits to be written,
// part of it sent and with lent values among it, into a kept buffer long
// enough, which is kept no more; the bytes written are the same.
func TestWriterGrowsIntoAKeptBuffer(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	w.big = &bigBuffers{}
	kept := make([]byte, 0, 2<<20)
	w.big.put(make([]byte, 0, maxWriteKeep+1)) // too short for what follows
	w.big.put(kept)
	w.WriteString("first")
	w.WriteLent([]byte("lent"), func(uint64) {}, 1)
	w.WriteString("second")
	w.advance(3) // "+fi" sent
	w.grow(maxWriteKeep + 4096)
	if unsafe.SliceData(w.b) != unsafe.SliceData(kept) || len(w.big.bufs) != 1 || w.big.held != maxWriteKeep+1 {
		t.Fatalf("grew into a buffer of %d bytes; %d kept (%d bytes)", cap(w.b), len(w.big.bufs), w.big.held)
	}
	w.WriteString("third")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "rst\r\nlent+second\r\n+third\r\n"; got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
	if w.big.held != maxWriteKeep+1+cap(kept) || len(w.b) != 0 {
		t.Fatalf("after the write %d bytes kept, the writer holds %d", w.big.held, len(w.b))
	}
}
