package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/protocol/crc32c"
)

// mRaw answers with a *RawReply, mCrafted with the body bytes the test
// chose (any bytes: a raw reply that lies).
const (
	mRaw     Method = 30
	mCrafted Method = 31
)

// rawValues is what the raw test handler sends: three values cut from one
// array (written with one write), an empty one and one of its own.
func rawValues() [][]byte {
	arr := make([]byte, 300<<10)
	for i := range arr {
		arr[i] = byte(i * 7)
	}
	own := bytes.Repeat([]byte("own"), 1000)
	return [][]byte{arr[:100<<10], arr[100<<10 : 250<<10], arr[250<<10:], nil, own}
}

func rawHandler(values [][]byte, released *atomic.Int64, crafted *[][]byte) HandlerFunc {
	return func(ctx context.Context, from string, m Method, body []byte) (any, error) {
		switch m {
		case mRaw:
			lens := make([]int, len(values))
			for i, v := range values {
				lens[i] = len(v)
			}
			return &RawReply{Head: lens, Values: values, Release: func() { released.Add(1) }}, nil
		case mCrafted:
			var i int
			if err := msgpack.Unmarshal(body, &i); err != nil {
				return nil, err
			}
			return msgpack.RawMessage((*crafted)[i]), nil
		}
		return nil, &Error{Code: CodeNotFound}
	}
}

// readInto returns a CallRaw reader that cuts the values, whose lengths
// the head gave, from one buffer.
func readInto(lens *[]int, out *[][]byte) func(io.Reader, int) error {
	return func(r io.Reader, size int) error {
		total := 0
		for _, l := range *lens {
			total += l
		}
		if total != size {
			return fmt.Errorf("head says %d bytes, %d follow", total, size)
		}
		buf := make([]byte, size)
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		*out = nil
		for _, l := range *lens {
			*out = append(*out, buf[:l])
			buf = buf[l:]
		}
		return nil
	}
}

func TestCallRawRoundTrip(t *testing.T) {
	dir := t.TempDir()
	values := rawValues()
	var released atomic.Int64
	a := testNode(t, dir, "node-a", newTestHandler())
	b := testNode(t, dir, "node-b", rawHandler(values, &released, nil))
	for round := 1; round <= 3; round++ {
		var lens []int
		var got [][]byte
		if err := a.CallRaw(ctxT(t), b.Addr(), "node-b", mRaw, nil, &lens, readInto(&lens, &got)); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(values) {
			t.Fatalf("%d values, want %d", len(got), len(values))
		}
		for i := range values {
			if !bytes.Equal(got[i], values[i]) {
				t.Fatalf("value %d differs", i)
			}
		}
		waitFor(t, "the reply's release", func() bool { return released.Load() == int64(round) })
	}
	if used, _, _ := b.RequestMemory(); used != 0 {
		t.Fatalf("%d bytes of request memory held after the replies", used)
	}
}

// selfCoded is a message that encodes and decodes itself (Appender,
// msgpack.Unmarshaler) as a msgpack array of ints, counting the calls;
// refuse makes its UnmarshalMsgpack fail.
type selfCoded struct {
	V      []int
	calls  *atomic.Int64
	refuse bool
}

func (c selfCoded) AppendMsgpack(dst []byte) ([]byte, error) {
	c.calls.Add(1)
	b, err := msgpack.Marshal(c.V)
	return append(dst, b...), err
}

func (c *selfCoded) UnmarshalMsgpack(b []byte) error {
	c.calls.Add(1)
	if c.refuse {
		return errors.New("refused")
	}
	return msgpack.Unmarshal(b, &c.V)
}

// TestSelfCodedMessages: a request and a raw reply's head that are
// Appenders go by their own AppendMsgpack, and a head that is a
// msgpack.Unmarshaler is handed its bytes: the server reads the request's
// msgpack, the caller the head and the values after it; a head that
// refuses its bytes fails the call with ErrBadFrame.
func TestSelfCodedMessages(t *testing.T) {
	dir := t.TempDir()
	values := rawValues()
	var sent, read atomic.Int64
	var mu sync.Mutex // the handler's goroutine writes asked, the test reads it
	var asked []int
	a := testNode(t, dir, "node-a", newTestHandler())
	b := testNode(t, dir, "node-b", HandlerFunc(func(ctx context.Context, from string, m Method, body []byte) (any, error) {
		var req []int
		if err := msgpack.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		mu.Lock()
		asked = req
		mu.Unlock()
		lens := make([]int, len(values))
		for i, v := range values {
			lens[i] = len(v)
		}
		return &RawReply{Head: selfCoded{V: lens, calls: &sent}, Values: values}, nil
	}))
	head := selfCoded{calls: &read}
	var got [][]byte
	req := selfCoded{V: []int{7, 8}, calls: &sent}
	if err := a.CallRaw(ctxT(t), b.Addr(), "node-b", mRaw, req, &head, readInto(&head.V, &got)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	first := asked
	mu.Unlock()
	if !slices.Equal(first, []int{7, 8}) || len(got) != len(values) || sent.Load() != 2 || read.Load() != 1 {
		t.Fatalf("the server read %v, the caller %d values; %d appended, %d unmarshalled; want [7 8], %d, 2, 1", first, len(got), sent.Load(), read.Load(), len(values))
	}
	for i := range values {
		if !bytes.Equal(got[i], values[i]) {
			t.Fatalf("value %d differs", i)
		}
	}
	refusing := selfCoded{calls: &read, refuse: true}
	err := a.CallRaw(ctxT(t), b.Addr(), "node-b", mRaw, req, &refusing, func(io.Reader, int) error { return nil })
	if !errors.Is(err, ErrBadFrame) {
		t.Fatalf("a head that refuses its bytes: %v, want ErrBadFrame", err)
	}
}

// failingAppender fails to encode, returning nothing.
type failingAppender struct{}

func (failingAppender) AppendMsgpack([]byte) ([]byte, error) { return nil, errors.New("cannot") }

// TestAppenderThatFails: a frame whose message fails to append itself is
// an error, and the buffer comes back as it was given.
func TestAppenderThatFails(t *testing.T) {
	got, err := appendFrame([]byte("kept"), 1, failingAppender{})
	if err == nil || string(got) != "kept" {
		t.Fatalf("appendFrame: %q, %v; want \"kept\" and an error", got, err)
	}
	got, _, err = appendRawHead([]byte("kept"), &RawReply{Head: failingAppender{}})
	if err == nil || string(got) != "kept" {
		t.Fatalf("appendRawHead: %q, %v; want \"kept\" and an error", got, err)
	}
}

func TestRawReplyOverTheFrameLimit(t *testing.T) {
	dir := t.TempDir()
	var released atomic.Int64
	a := testNode(t, dir, "node-a", newTestHandler())
	b := testNode(t, dir, "node-b", rawHandler(rawValues(), &released, nil), func(c *Config) { c.MaxFrame = 200 << 10 })
	var lens []int
	var got [][]byte
	err := a.CallRaw(ctxT(t), b.Addr(), "node-b", mRaw, nil, &lens, readInto(&lens, &got))
	if !errors.Is(err, &Error{Code: CodeTooLarge}) {
		t.Fatalf("a raw reply over the server's frame limit: %v, want CodeTooLarge", err)
	}
	waitFor(t, "the refused reply's release", func() bool { return released.Load() == 1 })
	// And over the caller's limit: refused before its body is read.
	c := testNode(t, dir, "node-c", newTestHandler(), func(c *Config) { c.MaxFrame = 200 << 10 })
	b2 := testNode(t, dir, "node-d", rawHandler(rawValues(), &released, nil))
	called := false
	err = c.CallRaw(ctxT(t), b2.Addr(), "node-d", mRaw, nil, &lens, func(io.Reader, int) error { called = true; return nil })
	if !errors.Is(err, ErrFrameTooLarge) || called {
		t.Fatalf("a raw reply over the caller's frame limit: %v (values read: %v), want ErrFrameTooLarge", err, called)
	}
}

func TestCallRawRefusesMalformedReplies(t *testing.T) {
	dir := t.TempDir()
	var released atomic.Int64
	crafted := [][]byte{
		{0, 0},             // no head length
		{0, 0, 0, 9, 0x90}, // a head longer than the body
		{0, 0, 0, 1, 0xc1}, // a head that is not msgpack
		{0, 0, 0, 5, 0xdd, 0xff, 0xff, 0xff, 0xff}, // an array of 4 billion in 5 bytes
		{0, 0, 0, 2, 0x91, 0x04, 1, 2, 3, 4, 5},    // one value of 4, but 5 bytes follow
		{0, 0, 0, 2, 0x91, 0x04, 1, 2, 3, 4},       // well formed
	}
	a := testNode(t, dir, "node-a", newTestHandler())
	b := testNode(t, dir, "node-b", rawHandler(nil, &released, &crafted))
	for i, want := range []error{ErrBadFrame, ErrBadFrame, ErrBadFrame, ErrBadFrame, errHeadDisagrees, nil} {
		var lens []int
		var got [][]byte
		read := readInto(&lens, &got)
		called := false
		err := a.CallRaw(ctxT(t), b.Addr(), "node-b", mCrafted, i, &lens, func(r io.Reader, size int) error {
			called = true
			if err := read(r, size); err != nil {
				return fmt.Errorf("%w: %v", errHeadDisagrees, err)
			}
			return nil
		})
		if want == nil {
			if err != nil || len(got) != 1 || !bytes.Equal(got[0], []byte{1, 2, 3, 4}) {
				t.Fatalf("reply %d: %v, values %v", i, err, got)
			}
			continue
		}
		if !errors.Is(err, want) {
			t.Errorf("reply %d: %v, want %v", i, err, want)
		}
		if want == ErrBadFrame && called {
			t.Errorf("reply %d: the values were read after a bad head", i)
		}
	}
	// A reader that stops early leaves the reply malformed.
	var lens []int
	err := a.CallRaw(ctxT(t), b.Addr(), "node-b", mCrafted, 5, &lens, func(r io.Reader, size int) error { return nil })
	if !errors.Is(err, ErrBadFrame) {
		t.Fatalf("values left unread: %v, want ErrBadFrame", err)
	}
	if a.liveConns() != 1 {
		t.Fatalf("%d live connections after refused replies, want the one", a.liveConns())
	}
}

var errHeadDisagrees = errors.New("values disagree with the head")

// countWriter counts Write calls.
type countWriter struct {
	bytes.Buffer
	writes int
}

func (w *countWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

func TestWriteValuesJoinsNeighbours(t *testing.T) {
	arr := []byte("abcdefghij")
	for _, tc := range []struct {
		name   string
		values [][]byte
		writes int
	}{
		{"one array", [][]byte{arr[:3], arr[3:5], nil, arr[5:]}, 1},
		{"a gap", [][]byte{arr[:3], arr[4:]}, 2},
		{"out of order", [][]byte{arr[5:], arr[:5]}, 2},
		{"capped", [][]byte{arr[:3:3], arr[3:]}, 2},
		{"apart", [][]byte{[]byte("abc"), []byte("def")}, 2},
		{"none", nil, 0},
	} {
		var w countWriter
		n, err := writeValues(&w, tc.values)
		want := bytes.Join(tc.values, nil)
		if err != nil || n != int64(len(want)) || !bytes.Equal(w.Bytes(), want) || w.writes != tc.writes {
			t.Errorf("%s: wrote %q (%d, %v) in %d writes, want %q in %d", tc.name, w.Bytes(), n, err, w.writes, want, tc.writes)
		}
	}
}

func TestValueReaderCutShort(t *testing.T) {
	vr := &valueReader{r: bytes.NewReader([]byte{1, 2, 3}), left: 5}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(vr, buf); !errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(vr.err, io.ErrUnexpectedEOF) {
		t.Fatalf("3 of 5 bytes: %v (kept %v), want io.ErrUnexpectedEOF", err, vr.err)
	}
	vr = &valueReader{r: bytes.NewReader([]byte{1, 2, 3, 4}), left: 3}
	if b, err := io.ReadAll(vr); err != nil || len(b) != 3 || vr.err != nil {
		t.Fatalf("3 of 4 bytes: %v, %v", b, err)
	}
}

// sumReader reads a raw reply's values with ReadSummed, the head's
// lengths as its parts, into got and sums, after checking that r lets it
// sum the values as they come out of the stream's packets.
func sumReader(lens *[]int, got *[]byte, sums *[]uint32) func(io.Reader, int) error {
	return func(r io.Reader, size int) error {
		vr, ok := r.(*valueReader)
		if !ok {
			return fmt.Errorf("values read through a %T", r)
		}
		if _, ok := vr.r.(copyReader); !ok {
			return fmt.Errorf("values read from a %T, which cannot sum them as it copies them", vr.r)
		}
		parts := make([]uint32, len(*lens))
		for i, l := range *lens {
			parts[i] = uint32(l)
		}
		*got = make([]byte, size)
		*sums = make([]uint32, len(parts))
		return ReadSummed(r, *got, parts, *sums)
	}
}

// TestReadSummed reads a raw reply's values with ReadSummed, over a QUIC
// stream (each part summed as it is copied out of the packets; through
// a proxy that drops one datagram in 25 each way, too, so that frames
// come again) and, the same bytes, from a plain reader: the bytes must be
// the values and each part's sum crc32c.Checksum's, empty parts and
// parts of a byte included. Parts that do not add up to the buffer are
// refused before anything is read, and a reader that ends early fails
// the read.
func TestReadSummed(t *testing.T) {
	dir := t.TempDir()
	values := append(rawValues(), []byte{7}, nil, bytes.Repeat([]byte{1, 2, 3}, 21))
	lens := make([]int, len(values))
	for i, v := range values {
		lens[i] = len(v)
	}
	long := func(c *Config) { c.RequestTimeout = 30 * time.Second }
	a := testNode(t, dir, "node-a", newTestHandler(), long)
	b := testNode(t, dir, "node-b", HandlerFunc(func(context.Context, string, Method, []byte) (any, error) {
		return &RawReply{Head: lens, Values: values}, nil
	}), long)
	proxy, _, toCaller := lossyProxy(t, b.Addr(), 25)
	check := func(how string, got []byte, sums []uint32) {
		t.Helper()
		if len(sums) != len(values) {
			t.Fatalf("%s: %d sums for %d values", how, len(sums), len(values))
		}
		for i, v := range values {
			if !bytes.Equal(got[:len(v)], v) {
				t.Fatalf("%s: value %d differs", how, i)
			}
			if sums[i] != crc32c.Checksum(v) {
				t.Fatalf("%s: value %d summed %#x, want %#x", how, i, sums[i], crc32c.Checksum(v))
			}
			got = got[len(v):]
		}
	}
	for _, to := range []string{b.Addr(), proxy, proxy} {
		var gotLens []int
		var got []byte
		var sums []uint32
		if err := a.CallRaw(ctxT(t), to, "node-b", mRaw, nil, &gotLens, sumReader(&gotLens, &got, &sums)); err != nil {
			t.Fatal(err)
		}
		check("over QUIC to "+to, got, sums)
	}
	t.Logf("%d datagrams to the caller dropped", toCaller.Load())
	all := bytes.Join(values, nil)
	parts := make([]uint32, len(lens))
	for i, l := range lens {
		parts[i] = uint32(l)
	}
	got, sums := make([]byte, len(all)), make([]uint32, len(parts))
	if err := ReadSummed(bytes.NewReader(all), got, parts, sums); err != nil {
		t.Fatal(err)
	}
	check("from a bytes.Reader", got, sums)

	r := bytes.NewReader(all)
	if err := ReadSummed(r, got[:len(all)-1], parts, sums); err == nil || r.Len() != len(all) {
		t.Fatalf("parts of %d bytes into %d: %v, %d bytes read", len(all), len(all)-1, err, len(all)-r.Len())
	}
	if err := ReadSummed(r, got, parts, sums[1:]); err == nil || r.Len() != len(all) {
		t.Fatalf("%d sums for %d parts: %v", len(sums)-1, len(parts), err)
	}
	short := &valueReader{r: &copyingReader{bytes.NewReader(all[:1000])}, left: len(all)}
	if err := ReadSummed(short, got, parts, sums); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("1000 of %d bytes from a copyReader: %v, want io.ErrUnexpectedEOF", len(all), err)
	}
}

// copyingReader is a copyReader over a bytes.Reader.
type copyingReader struct{ r *bytes.Reader }

func (c *copyingReader) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *copyingReader) ReadCopy(p []byte, cp func(dst, src []byte) int) (int, error) {
	if c.r.Len() == 0 {
		return 0, io.EOF
	}
	b := make([]byte, min(len(p), c.r.Len(), 333))
	c.r.Read(b)
	return cp(p, b), nil
}

// TestLargestFetchFitsTheWindows sends, on a new connection, a reply as
// large as the mesh's largest fetch (64 samples, 4 MiB) and checks that
// its writer is done, and its Release called, before the caller reads
// the values: the flow-control windows a stream and a connection start
// with take the whole reply, so the owner neither waits on the caller
// nor holds what it lent meanwhile. With quic-go's starting windows
// (512 KiB a stream) the writer waits until the caller reads.
func TestLargestFetchFitsTheWindows(t *testing.T) {
	dir := t.TempDir()
	arr := make([]byte, 4<<20)
	for i := range arr {
		arr[i] = byte(i*31 + i>>11)
	}
	var values [][]byte
	for v := range slices.Chunk(arr, 64<<10) {
		values = append(values, v)
	}
	lens := make([]int, len(values))
	for i, v := range values {
		lens[i] = len(v)
	}
	released := make(chan struct{})
	var once sync.Once
	// The writer's deadline outlasts the caller's wait, so that a writer
	// waiting on the caller fails the wait below, not the reply.
	long := func(c *Config) { c.RequestTimeout = 30 * time.Second }
	a := testNode(t, dir, "node-a", newTestHandler(), long)
	b := testNode(t, dir, "node-b", HandlerFunc(func(context.Context, string, Method, []byte) (any, error) {
		return &RawReply{Head: lens, Values: values, Release: func() { once.Do(func() { close(released) }) }}, nil
	}), long)
	ctx := ctxT(t)
	var gotLens []int
	var got [][]byte
	read := readInto(&gotLens, &got)
	written := false
	err := a.CallRaw(ctx, b.Addr(), "node-b", mRaw, nil, &gotLens, func(r io.Reader, size int) error {
		select {
		case <-released:
			written = true
		case <-ctx.Done():
		}
		return read(r, size)
	})
	if !written {
		t.Fatalf("the writer of a %d-byte reply still waited for its caller to read it (%v)", len(arr), err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i := range values {
		if i >= len(got) || !bytes.Equal(got[i], values[i]) {
			t.Fatalf("value %d differs", i)
		}
	}
}

// TestOwnedRawReplyThroughLoss sends owned values, which the stream's
// frames carry as they lie instead of a copy, through a proxy that drops
// one datagram in 25 each way: frames are lost and sent again from the
// values themselves, and every byte arrives as it was.
func TestOwnedRawReplyThroughLoss(t *testing.T) {
	dir := t.TempDir()
	arr := make([]byte, 1<<20)
	for i := range arr {
		arr[i] = byte(i*13 + i>>9)
	}
	values := [][]byte{arr[:300<<10], arr[300<<10 : 700<<10], arr[700<<10:], bytes.Repeat([]byte("own"), 3000)}
	lens := make([]int, len(values))
	for i, v := range values {
		lens[i] = len(v)
	}
	var released atomic.Int64
	long := func(c *Config) { c.RequestTimeout = 30 * time.Second }
	a := testNode(t, dir, "node-a", newTestHandler(), long)
	b := testNode(t, dir, "node-b", HandlerFunc(func(context.Context, string, Method, []byte) (any, error) {
		return &RawReply{Head: lens, Values: values, Owned: true, Release: func() { released.Add(1) }}, nil
	}), long)
	proxy, _, toCaller := lossyProxy(t, b.Addr(), 25)
	for round := 1; round <= 3; round++ {
		var gotLens []int
		var got [][]byte
		if err := a.CallRaw(ctxT(t), proxy, "node-b", mRaw, nil, &gotLens, readInto(&gotLens, &got)); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i := range values {
			if i >= len(got) || !bytes.Equal(got[i], values[i]) {
				t.Fatalf("round %d: value %d differs", round, i)
			}
		}
		waitFor(t, "the reply's release", func() bool { return released.Load() == int64(round) })
	}
	if toCaller.Load() == 0 {
		t.Fatal("the proxy dropped nothing on the way to the caller: no frame of the values was sent again")
	}
	t.Logf("%d datagrams to the caller dropped", toCaller.Load())
}

// lossyProxy relays UDP datagrams between the one client that writes to
// the address it returns and target, dropping every nth datagram of each
// direction, and counts those it dropped on the way to target and on the
// way to the client. It stops with the test.
func lossyProxy(t *testing.T, target string, nth int64) (string, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	to, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	back, err := net.DialUDP("udp", nil, to)
	if err != nil {
		front.Close()
		t.Fatal(err)
	}
	var toTarget, toClient, up, down atomic.Int64
	var client atomic.Pointer[net.UDPAddr]
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 1<<16)
		for {
			n, from, err := front.ReadFromUDP(buf)
			if err != nil {
				return
			}
			client.Store(from)
			if up.Add(1)%nth == 0 {
				toTarget.Add(1)
				continue
			}
			back.Write(buf[:n])
		}
	})
	wg.Go(func() {
		buf := make([]byte, 1<<16)
		for {
			n, err := back.Read(buf)
			if err != nil {
				return
			}
			c := client.Load()
			if c == nil {
				continue
			}
			if down.Add(1)%nth == 0 {
				toClient.Add(1)
				continue
			}
			front.WriteToUDP(buf[:n], c)
		}
	})
	t.Cleanup(func() {
		front.Close()
		back.Close()
		wg.Wait()
	})
	return front.LocalAddr().String(), &toTarget, &toClient
}
