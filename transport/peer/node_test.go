package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/internal/quic"
)

// Methods of the test handler.
const (
	mEcho   Method = 1 // echoes an echoMsg with From set to the caller
	mFail   Method = 2 // returns the error named by the request
	mBlock  Method = 3 // blocks until ctx is done
	mSized  Method = 4 // returns a []byte of the requested size
	mRawBin Method = 5 // echoes the request body as it is
)

type echoMsg struct {
	Text string
	N    int
	Blob []byte
	From string
}

// testHandler serves the test methods and counts what it saw.
type testHandler struct {
	calls   atomic.Int64
	blocked chan struct{} // receives when mBlock sees ctx done
}

func newTestHandler() *testHandler { return &testHandler{blocked: make(chan struct{}, 16)} }

func (h *testHandler) ServePeer(ctx context.Context, from string, m Method, body []byte) (any, error) {
	h.calls.Add(1)
	switch m {
	case mEcho:
		var req echoMsg
		if err := msgpack.Unmarshal(body, &req); err != nil {
			return nil, &Error{Code: CodeBadRequest, Msg: err.Error()}
		}
		req.From = from
		req.N++
		return req, nil
	case mFail:
		var code int
		if err := msgpack.Unmarshal(body, &code); err != nil {
			return nil, err
		}
		if code == 0 {
			return nil, errors.New("plain failure")
		}
		return nil, &Error{Code: Code(code), Msg: "refused on purpose"}
	case mBlock:
		<-ctx.Done()
		h.blocked <- struct{}{}
		return nil, ctx.Err()
	case mSized:
		var size int
		if err := msgpack.Unmarshal(body, &size); err != nil {
			return nil, err
		}
		return make([]byte, size), nil
	case mRawBin:
		return msgpack.RawMessage(body), nil
	}
	return nil, &Error{Code: CodeNotFound, Msg: fmt.Sprintf("no method %d", m)}
}

// testNode listens on a free loopback port with a DevTLS identity from dir.
func testNode(t testing.TB, dir, name string, h Handler, tweak ...func(*Config)) *Node {
	t.Helper()
	tc, err := DevTLS(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return listenTLS(t, tc, "127.0.0.1:0", h, tweak...)
}

func listenTLS(t testing.TB, tc *TLSConfig, addr string, h Handler, tweak ...func(*Config)) *Node {
	t.Helper()
	cfg := Config{ListenAddr: addr, TLS: tc, RequestTimeout: 5 * time.Second}
	for _, f := range tweak {
		f(&cfg)
	}
	n, err := Listen(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// liveConns counts n's live connections.
func (n *Node) liveConns() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for c := range n.conns {
		if c.qc.Context().Err() == nil {
			k++
		}
	}
	return k
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCallRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ha, hb := newTestHandler(), newTestHandler()
	a := testNode(t, dir, "node-a", ha)
	b := testNode(t, dir, "node-b", hb)
	ctx := ctxT(t)

	var got echoMsg
	req := echoMsg{Text: "hello", N: 41, Blob: []byte{1, 2, 3}}
	if err := a.Call(ctx, b.Addr(), "node-b", mEcho, req, &got); err != nil {
		t.Fatal(err)
	}
	want := echoMsg{Text: "hello", N: 42, Blob: []byte{1, 2, 3}, From: "node-a"}
	if got.Text != want.Text || got.N != want.N || !bytes.Equal(got.Blob, want.Blob) || got.From != want.From {
		t.Fatalf("reply %+v, want %+v", got, want)
	}
	// The other way round reuses the connection a dialled.
	if err := b.Call(ctx, a.Addr(), "node-a", mEcho, req, &got); err != nil {
		t.Fatal(err)
	}
	if got.From != "node-b" {
		t.Fatalf("from %q, want node-b", got.From)
	}
	// A nil out discards the reply; a raw body comes back as it went.
	if err := a.Call(ctx, b.Addr(), "node-b", mEcho, req, nil); err != nil {
		t.Fatal(err)
	}
	var raw []int
	if err := a.Call(ctx, b.Addr(), "node-b", mRawBin, []int{4, 5}, &raw); err != nil || len(raw) != 2 || raw[1] != 5 {
		t.Fatalf("raw echo = %v, %v", raw, err)
	}
	if a.liveConns() != 1 || b.liveConns() != 1 {
		t.Fatalf("connections a=%d b=%d, want 1 each", a.liveConns(), b.liveConns())
	}
	st := a.PeerStats()[b.Addr()]
	if st.Name != "node-b" || !st.Connected || st.Requests != 3 || st.Served != 1 || st.Errors != 0 || st.BytesOut == 0 || st.BytesIn == 0 || st.LastCall <= 0 {
		t.Fatalf("a's stats for b: %+v", st)
	}
	if err := a.Call(ctx, b.Addr(), "node-b", 0, nil, nil); !errors.Is(err, &Error{Code: CodeBadRequest}) {
		t.Fatalf("method 0: %v", err)
	}
}

func TestConcurrentCallsShareOneConnection(t *testing.T) {
	dir := t.TempDir()
	a := testNode(t, dir, "node-a", newTestHandler())
	b := testNode(t, dir, "node-b", newTestHandler())
	ctx := ctxT(t)
	// Two nodes that call each other first at the same moment may make two
	// connections (both serve); once one is up, both sides use it.
	if err := a.Call(ctx, b.Addr(), "node-b", mEcho, echoMsg{}, nil); err != nil {
		t.Fatal(err)
	}

	const workers, each = 64, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				from, to, name := a, b, "node-b"
				if (w+i)%4 == 0 {
					from, to, name = b, a, "node-a"
				}
				var got echoMsg
				if err := from.Call(ctx, to.Addr(), name, mEcho, echoMsg{N: w*each + i}, &got); err != nil {
					errs <- err
					return
				}
				if got.N != w*each+i+1 {
					errs <- fmt.Errorf("reply N %d for request %d", got.N, w*each+i)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if a.liveConns() != 1 || b.liveConns() != 1 {
		t.Fatalf("connections a=%d b=%d, want 1 each", a.liveConns(), b.liveConns())
	}
	sa, sb := a.PeerStats()[b.Addr()], b.PeerStats()[a.Addr()]
	if sa.Requests+sb.Requests != workers*each+1 || sa.Requests != sb.Served || sb.Requests != sa.Served {
		t.Fatalf("stats disagree: a→b %+v, b→a %+v", sa, sb)
	}
}

func TestHandlerErrorsKeepTheirCode(t *testing.T) {
	dir := t.TempDir()
	a := testNode(t, dir, "node-a", newTestHandler())
	b := testNode(t, dir, "node-b", newTestHandler())
	ctx := ctxT(t)

	for _, code := range []Code{CodeNotFound, CodeNotOwner, CodeNotLeader, CodeStale, 900} {
		err := a.Call(ctx, b.Addr(), "node-b", mFail, int(code), nil)
		var e *Error
		if !errors.As(err, &e) || e.Code != code || e.Msg != "refused on purpose" {
			t.Fatalf("code %d: got %v", code, err)
		}
		if !errors.Is(err, &Error{Code: code}) || errors.Is(err, &Error{Code: CodeInternal}) {
			t.Fatalf("code %d: errors.Is by code fails for %v", code, err)
		}
		if CodeOf(err) != code {
			t.Fatalf("CodeOf = %v", CodeOf(err))
		}
	}
	err := a.Call(ctx, b.Addr(), "node-b", mFail, 0, nil)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeInternal || e.Msg != "plain failure" {
		t.Fatalf("plain error: got %v", err)
	}
	err = a.Call(ctx, b.Addr(), "node-b", 99, nil, nil)
	if !errors.Is(err, &Error{Code: CodeNotFound}) {
		t.Fatalf("unknown method: %v", err)
	}
	if st := a.PeerStats()[b.Addr()]; st.Errors != 7 {
		t.Fatalf("errors counted %d, want 7", st.Errors)
	}
}

func TestRequestTimeoutLeavesNodeUsable(t *testing.T) {
	dir := t.TempDir()
	hb := newTestHandler()
	a := testNode(t, dir, "node-a", newTestHandler(), func(c *Config) { c.RequestTimeout = 300 * time.Millisecond })
	b := testNode(t, dir, "node-b", hb)

	// The caller's default timeout applies when ctx has none.
	start := time.Now()
	err := a.Call(context.Background(), b.Addr(), "node-b", mBlock, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked call: %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("blocked call returned after %v", d)
	}
	// The handler sees its ctx end: the caller reset the stream.
	select {
	case <-hb.blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("handler's ctx not cancelled after the caller gave up")
	}
	// A caller's ctx cancellation works the same way.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if err := a.Call(ctx, b.Addr(), "node-b", mBlock, nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	<-hb.blocked
	var got echoMsg
	if err := a.Call(ctxT(t), b.Addr(), "node-b", mEcho, echoMsg{N: 1}, &got); err != nil || got.N != 2 {
		t.Fatalf("call after timeouts: %+v, %v", got, err)
	}
	if a.liveConns() != 1 {
		t.Fatalf("%d connections after timeouts, want 1", a.liveConns())
	}
}

// calledPair starts node-a and node-b, node-b with its TLS configuration
// returned so that a test can start it again on the same address, and
// makes one call from a to b.
func calledPair(t *testing.T) (a, b *Node, tb *TLSConfig) {
	t.Helper()
	dir := t.TempDir()
	a = testNode(t, dir, "node-a", newTestHandler())
	tb, err := DevTLS(dir, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	b = listenTLS(t, tb, "127.0.0.1:0", newTestHandler())
	if err := a.Call(ctxT(t), b.Addr(), "node-b", mEcho, echoMsg{}, nil); err != nil {
		t.Fatal(err)
	}
	return a, b, tb
}

func TestPeerRestartRedials(t *testing.T) {
	a, b, tb := calledPair(t)
	addr := b.Addr()
	ctx := ctxT(t)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// b said goodbye (CONNECTION_CLOSE); a drops the connection.
	waitFor(t, "a to see b's connection closed", func() bool { return !a.PeerStats()[addr].Connected })
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := a.Call(short, addr, "node-b", mEcho, echoMsg{}, nil); err == nil {
		t.Fatal("call to a closed peer succeeded")
	}
	b2 := listenTLS(t, tb, addr, newTestHandler())
	var got echoMsg
	if err := a.Call(ctx, addr, "node-b", mEcho, echoMsg{N: 1}, &got); err != nil || got.N != 2 {
		t.Fatalf("call after restart: %+v, %v", got, err)
	}
	if !a.PeerStats()[addr].Connected || b2.liveConns() != 1 {
		t.Fatal("not connected after restart")
	}
}

// TestPeerCrashRedials restarts a peer that vanished without closing its
// connections: the restarted node resets the stale connection (same key,
// same stateless reset key), the first call fails fast and the next redials.
func TestPeerCrashRedials(t *testing.T) {
	a, b, tb := calledPair(t)
	addr := b.Addr()
	ctx := ctxT(t)
	// Crash: drop every connection without a CONNECTION_CLOSE, free the port.
	b.tr.Close()
	b.udp.Close()
	b2 := listenTLS(t, tb, addr, newTestHandler())

	start := time.Now()
	err := a.Call(ctx, addr, "node-b", mEcho, echoMsg{}, nil)
	if err != nil && !errors.Is(err, &Error{Code: CodeUnavailable}) {
		t.Fatalf("first call after crash: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("first call after crash took %v: no stateless reset?", d)
	}
	var got echoMsg
	if err := a.Call(ctx, addr, "node-b", mEcho, echoMsg{N: 1}, &got); err != nil || got.N != 2 {
		t.Fatalf("second call after crash: %+v, %v", got, err)
	}
	if b2.liveConns() != 1 {
		t.Fatalf("restarted peer has %d connections", b2.liveConns())
	}
}

func TestOtherCARefused(t *testing.T) {
	dir, otherDir := t.TempDir(), t.TempDir()
	ha, hc := newTestHandler(), newTestHandler()
	a := testNode(t, dir, "node-a", ha)
	c := testNode(t, otherDir, "node-c", hc) // same kind of cert, other CA
	ctx := ctxT(t)

	if err := c.Call(ctx, a.Addr(), "node-a", mEcho, echoMsg{}, nil); !errors.Is(err, &Error{Code: CodeUnavailable}) {
		t.Fatalf("call from another CA's node: %v", err)
	}
	if err := a.Call(ctx, c.Addr(), "node-c", mEcho, echoMsg{}, nil); !errors.Is(err, &Error{Code: CodeUnavailable}) {
		t.Fatalf("call to another CA's node: %v", err)
	}
	if ha.calls.Load() != 0 || hc.calls.Load() != 0 {
		t.Fatal("a handler ran for a node of another CA")
	}
}

func TestExpiredCertificateRefused(t *testing.T) {
	dir := t.TempDir()
	ha := newTestHandler()
	a := testNode(t, dir, "node-a", ha)
	caPEM, caKeyPEM := readCA(t, dir)
	ca, caKey, err := parseCA(caPEM, caKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	certPEM, keyPEM, err := issueNode(ca, caKey, "node-x", now.Add(-3*time.Hour), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// LoadTLS would refuse it; build the config without looking.
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	tx := &TLSConfig{name: "node-x", cert: cert, roots: roots}
	hx := newTestHandler()
	x := listenTLS(t, tx, "127.0.0.1:0", hx)
	ctx := ctxT(t)
	if err := x.Call(ctx, a.Addr(), "node-a", mEcho, echoMsg{}, nil); !errors.Is(err, &Error{Code: CodeUnavailable}) {
		t.Fatalf("call with an expired certificate: %v", err)
	}
	if err := a.Call(ctx, x.Addr(), "node-x", mEcho, echoMsg{}, nil); !errors.Is(err, &Error{Code: CodeUnavailable}) {
		t.Fatalf("call to a node with an expired certificate: %v", err)
	}
	if ha.calls.Load() != 0 || hx.calls.Load() != 0 {
		t.Fatal("a handler ran across an expired certificate")
	}
}

func TestClientWithoutCertificateRefused(t *testing.T) {
	dir := t.TempDir()
	ha := newTestHandler()
	a := testNode(t, dir, "node-a", ha)
	tc, err := DevTLS(dir, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	conf := tc.clientConfig("node-a")
	conf.Certificates = nil
	ctx := ctxT(t)
	ua, _ := net.ResolveUDPAddr("udp", a.Addr())
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	defer udp.Close()
	defer tr.Close()
	// TLS 1.3 lets a client finish its side of the handshake before the
	// server has judged its certificate; the server refuses right after.
	qc, err := tr.Dial(ctx, ua, conf, &quic.Config{MaxIdleTimeout: 2 * time.Second})
	if err == nil {
		err = func() error {
			str, err := qc.OpenStreamSync(ctx)
			if err != nil {
				return err
			}
			body, _ := msgpack.Marshal(echoMsg{})
			if err := EncodeFrame(str, uint16(mEcho), body); err != nil {
				return err
			}
			str.Close()
			_, _, err = DecodeFrame(str, 1<<20)
			return err
		}()
	}
	if err == nil {
		t.Fatal("a client without a certificate got a reply")
	}
	if ha.calls.Load() != 0 {
		t.Fatal("handler ran for a client without a certificate")
	}
}

func TestWrongNameRefused(t *testing.T) {
	dir := t.TempDir()
	hb := newTestHandler()
	a := testNode(t, dir, "node-a", newTestHandler())
	b := testNode(t, dir, "node-b", hb)
	testNode(t, dir, "node-c", newTestHandler())
	ctx := ctxT(t)

	// node-b's certificate is valid, but the caller wants node-c there.
	err := a.Call(ctx, b.Addr(), "node-c", mEcho, echoMsg{}, nil)
	if !errors.Is(err, &Error{Code: CodeUnavailable}) {
		t.Fatalf("dial with the wrong name: %v", err)
	}
	if hb.calls.Load() != 0 {
		t.Fatal("handler ran for a call meant for another node")
	}
	// With a connection to node-b up, a call naming another node there is
	// refused too.
	if err := a.Call(ctx, b.Addr(), "node-b", mEcho, echoMsg{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Call(ctx, b.Addr(), "node-c", mEcho, echoMsg{}, nil); !errors.Is(err, ErrWrongPeer) {
		t.Fatalf("cached connection, wrong name: %v", err)
	}
}

func TestOversizeFramesRefused(t *testing.T) {
	dir := t.TempDir()
	a := testNode(t, dir, "node-a", newTestHandler(), func(c *Config) { c.MaxFrame = 256 << 10 })
	b := testNode(t, dir, "node-b", newTestHandler(), func(c *Config) { c.MaxFrame = 64 << 10 })
	ctx := ctxT(t)

	// Bigger than b accepts: refused by b, reading only the length.
	err := a.Call(ctx, b.Addr(), "node-b", mEcho, echoMsg{Blob: make([]byte, 200<<10)}, nil)
	if !errors.Is(err, &Error{Code: CodeTooLarge}) {
		t.Fatalf("oversize request: %v", err)
	}
	// Bigger than a sends: refused before it leaves.
	if err := a.Call(ctx, b.Addr(), "node-b", mEcho, echoMsg{Blob: make([]byte, 300<<10)}, nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("request over the caller's limit: %v", err)
	}
	// A reply bigger than b sends.
	if err := a.Call(ctx, b.Addr(), "node-b", mSized, 100<<10, nil); !errors.Is(err, &Error{Code: CodeTooLarge}) {
		t.Fatalf("oversize reply: %v", err)
	}
	// A reply bigger than the caller (b) accepts.
	if err := b.Call(ctx, a.Addr(), "node-a", mSized, 100<<10, nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("reply over the caller's limit: %v", err)
	}
	// The connection keeps serving.
	var got echoMsg
	if err := a.Call(ctx, b.Addr(), "node-b", mEcho, echoMsg{N: 1, Blob: make([]byte, 32<<10)}, &got); err != nil || got.N != 2 {
		t.Fatalf("call after refusals: %v", err)
	}
	if a.liveConns() != 1 || b.liveConns() != 1 {
		t.Fatalf("connections a=%d b=%d, want 1 each", a.liveConns(), b.liveConns())
	}
}

// rawExchange sends the bytes of a request on a new stream of a's
// connection to b and reads the reply frame.
func rawExchange(t *testing.T, a, b *Node, request []byte) (Code, string) {
	t.Helper()
	p, _ := a.peer(b.Addr())
	c, _, err := a.conn(ctxT(t), p, b.Name())
	if err != nil {
		t.Fatal(err)
	}
	str, err := c.qc.OpenStreamSync(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	str.Write(request)
	str.Close()
	code, body, err := DecodeFrame(str, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var msg string
	msgpack.Unmarshal(body, &msg)
	return Code(code), msg
}

func TestMalformedRequestsRefused(t *testing.T) {
	dir := t.TempDir()
	hb := newTestHandler()
	a := testNode(t, dir, "node-a", newTestHandler())
	b := testNode(t, dir, "node-b", hb)
	frame := func(tag uint16, body []byte) []byte {
		var buf bytes.Buffer
		EncodeFrame(&buf, tag, body)
		return buf.Bytes()
	}
	for _, tc := range []struct {
		name string
		req  []byte
		want Code
	}{
		{"array bomb", frame(uint16(mEcho), []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5}), CodeBadRequest},
		{"not msgpack", frame(uint16(mEcho), []byte{0xc1}), CodeBadRequest},
		{"method 0", frame(0, []byte{0xc0}), CodeBadRequest},
		{"data after the frame", append(frame(uint16(mEcho), []byte{0xc0}), 1), CodeBadRequest},
		{"length 1", []byte{0, 0, 0, 1, 0}, CodeBadRequest},
		{"length 4 GiB", []byte{0xff, 0xff, 0xff, 0xff, 0, 1}, CodeTooLarge},
	} {
		code, msg := rawExchange(t, a, b, tc.req)
		if code != tc.want {
			t.Errorf("%s: code %v (%s), want %v", tc.name, code, msg, tc.want)
		}
	}
	if hb.calls.Load() != 0 {
		t.Fatalf("handler ran %d times for malformed requests", hb.calls.Load())
	}
	if err := a.Call(ctxT(t), b.Addr(), "node-b", mEcho, echoMsg{}, nil); err != nil {
		t.Fatal(err)
	}
}

func TestCloseWaitsForHandlers(t *testing.T) {
	dir := t.TempDir()
	hb := newTestHandler()
	a := testNode(t, dir, "node-a", newTestHandler())
	b := testNode(t, dir, "node-b", hb)
	done := make(chan error, 1)
	go func() { done <- a.Call(context.Background(), b.Addr(), "node-b", mBlock, nil, nil) }()
	waitFor(t, "the handler to start", func() bool { return hb.calls.Load() == 1 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hb.blocked: // Close returned after the handler saw ctx done
	default:
		t.Fatal("Close returned before the handler")
	}
	if err := <-done; !errors.Is(err, &Error{Code: CodeUnavailable}) {
		t.Fatalf("call in flight at Close: %v", err)
	}
	if err := b.Call(context.Background(), a.Addr(), "node-a", mEcho, nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call on a closed node: %v", err)
	}
}

func TestListenChecksConfig(t *testing.T) {
	dir := t.TempDir()
	tc, err := DevTLS(dir, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(Config{ListenAddr: "127.0.0.1:0"}, newTestHandler()); err == nil {
		t.Fatal("Listen without TLS succeeded")
	}
	if _, err := Listen(Config{Name: "node-b", ListenAddr: "127.0.0.1:0", TLS: tc}, newTestHandler()); err == nil {
		t.Fatal("Listen with a name other than the certificate's succeeded")
	}
	n, err := Listen(Config{ListenAddr: "127.0.0.1:0", TLS: tc}, newTestHandler())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.Name() != "node-a" {
		t.Fatalf("Name() = %q", n.Name())
	}
}

func readCA(t testing.TB, dir string) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err = os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

func BenchmarkCall(b *testing.B) {
	dir := b.TempDir()
	srv := testNode(b, dir, "node-b", HandlerFunc(func(ctx context.Context, from string, m Method, body []byte) (any, error) {
		return msgpack.RawMessage(body), nil // echo
	}))
	cli := testNode(b, dir, "node-a", newTestHandler())
	for _, size := range []int{1 << 10, 1 << 20} {
		payload := make([]byte, size)
		ctx := context.Background()
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			var out []byte
			b.SetBytes(int64(2 * size)) // request and reply
			b.ReportAllocs()
			for b.Loop() {
				if err := cli.Call(ctx, srv.Addr(), "node-b", mEcho, payload, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("%dKiB-parallel", size>>10), func(b *testing.B) {
			b.SetBytes(int64(2 * size))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var out []byte
				for pb.Next() {
					if err := cli.Call(ctx, srv.Addr(), "node-b", mEcho, payload, &out); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// TestRequestMemoryBounded: a request that does not fit in the node's
// request memory, by its frame or by what decoding it would take (a frame
// of many empty arrays decodes to many times its size), is refused with
// CodeUnavailable before the handler sees it, nothing stays held, and
// the node goes on serving.
func TestRequestMemoryBounded(t *testing.T) {
	dir := t.TempDir()
	hb := newTestHandler()
	a := testNode(t, dir, "node-a", newTestHandler())
	b := testNode(t, dir, "node-b", hb, func(c *Config) { c.MaxRequestMemory = 64 << 10 })
	frame := func(tag uint16, body []byte) []byte {
		var buf bytes.Buffer
		EncodeFrame(&buf, tag, body)
		return buf.Bytes()
	}
	// 20,000 empty arrays in one array: 20 KiB of frame, about 480 KiB
	// decoded.
	bomb := append([]byte{0xdc, 0x4e, 0x20}, bytes.Repeat([]byte{0x90}, 20000)...)
	if cost, err := MsgpackCost(bomb); err != nil || cost < 20000*decodedValueCost {
		t.Fatalf("MsgpackCost of %d empty arrays: %d, %v", 20000, cost, err)
	}
	for _, tc := range []struct {
		name string
		req  []byte
	}{
		{"frame over the memory", frame(uint16(mEcho), append([]byte{0xc6, 0, 1, 0, 0}, make([]byte, 64<<10)...))},
		{"decoding over the memory", frame(uint16(mEcho), bomb)},
	} {
		if code, msg := rawExchange(t, a, b, tc.req); code != CodeUnavailable {
			t.Errorf("%s: code %v (%s), want %v", tc.name, code, msg, CodeUnavailable)
		}
	}
	if hb.calls.Load() != 0 {
		t.Fatalf("handler ran %d times for refused requests", hb.calls.Load())
	}
	waitFor(t, "the refused requests' memory to go back", func() bool {
		used, _, _ := b.RequestMemory()
		return used == 0
	})
	if _, limit, refused := b.RequestMemory(); limit != 64<<10 || refused != 2 {
		t.Fatalf("RequestMemory: limit %d refused %d, want %d and 2", limit, refused, 64<<10)
	}
	var got echoMsg
	if err := a.Call(ctxT(t), b.Addr(), "node-b", mEcho, echoMsg{N: 1}, &got); err != nil || got.N != 2 {
		t.Fatalf("call after refusals: %v", err)
	}
}

// TestEncodedRequestGoesAsItIs sends requests encoded already
// (msgpack.RawMessage, as a broadcast sends one encoding to every member):
// the handler sees the same body as when the struct is encoded for the
// call, small and multi-megabyte alike, and one over the frame limit is
// refused before it is sent.
func TestEncodedRequestGoesAsItIs(t *testing.T) {
	dir := t.TempDir()
	a := testNode(t, dir, "node-a", newTestHandler(), func(c *Config) { c.MaxFrame = 4 << 20 })
	b := testNode(t, dir, "node-b", newTestHandler(), func(c *Config) { c.MaxFrame = 4 << 20 })
	ctx := context.Background()
	for _, size := range []int{0, 100, 3 << 20} {
		req := echoMsg{Text: "hello", N: size, Blob: bytes.Repeat([]byte{7, 1}, size/2)}
		raw, err := msgpack.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		var viaStruct, viaRaw echoMsg
		if err := a.Call(ctx, b.Addr(), "node-b", mEcho, req, &viaStruct); err != nil {
			t.Fatal(err)
		}
		if err := a.Call(ctx, b.Addr(), "node-b", mEcho, msgpack.RawMessage(raw), &viaRaw); err != nil {
			t.Fatalf("%d bytes encoded already: %v", len(raw), err)
		}
		if viaRaw.Text != "hello" || viaRaw.N != size+1 || !bytes.Equal(viaRaw.Blob, req.Blob) || viaRaw.From != "node-a" ||
			viaStruct.N != viaRaw.N || !bytes.Equal(viaStruct.Blob, viaRaw.Blob) {
			t.Fatalf("%d bytes: encoded already came back as %+.40v, encoded for the call as %+.40v", len(raw), viaRaw, viaStruct)
		}
		var viaParts echoMsg
		cut := len(raw) / 3
		if err := a.Call(ctx, b.Addr(), "node-b", mEcho, Encoded{raw[:cut], nil, raw[cut:]}, &viaParts); err != nil {
			t.Fatalf("%d bytes in parts: %v", len(raw), err)
		}
		if viaParts.N != viaRaw.N || !bytes.Equal(viaParts.Blob, req.Blob) {
			t.Fatalf("%d bytes in parts came back as %+.40v", len(raw), viaParts)
		}
	}
	big := make([]byte, 5<<20)
	if err := a.Call(ctx, b.Addr(), "node-b", mEcho, msgpack.RawMessage(big), nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("a request of 5 MiB over a 4 MiB limit: %v, want ErrFrameTooLarge", err)
	}
	if err := a.Call(ctx, b.Addr(), "node-b", mEcho, Encoded{big[:3<<20], big[3<<20:]}, nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("a request of 5 MiB in parts over a 4 MiB limit: %v, want ErrFrameTooLarge", err)
	}
}

// TestShortCallIsOnePacketEachWay: a call whose request and reply are
// short sends one packet each way (the request or the reply with its FIN
// and the acknowledgement of the packet before), not a packet for the
// data, another for the FIN, and stream credit in packets of their own,
// which also made the other side acknowledge at once. Calls one after
// another, with a msgpack reply and with a raw one of owned values (a
// fetch's); an acknowledgement that waits past its delay (25 ms) on a busy
// machine adds a packet, so the bound is 1.5 a call, not 1.
func TestShortCallIsOnePacketEachWay(t *testing.T) {
	dir := t.TempDir()
	echo := newTestHandler()
	b := testNode(t, dir, "node-b", HandlerFunc(func(ctx context.Context, from string, m Method, body []byte) (any, error) {
		if m != mRaw {
			return echo.ServePeer(ctx, from, m, body)
		}
		v := bytes.Repeat([]byte{byte(len(body))}, 1000)
		return &RawReply{Head: []int{len(v)}, Values: [][]byte{v}, Owned: true}, nil
	}))
	a := testNode(t, dir, "node-a", newTestHandler())
	ctx := ctxT(t)
	calls := map[string]func(i int) error{
		"msgpack reply": func(i int) error {
			var got echoMsg
			if err := a.Call(ctx, b.Addr(), "node-b", mEcho, echoMsg{Text: "short", N: i}, &got); err != nil {
				return err
			}
			if got.N != i+1 || got.Text != "short" {
				return fmt.Errorf("call %d echoed %+v", i, got)
			}
			return nil
		},
		"raw reply": func(i int) error {
			var lens []int
			var got [][]byte
			if err := a.CallRaw(ctx, b.Addr(), "node-b", mRaw, i, &lens, readInto(&lens, &got)); err != nil {
				return err
			}
			if len(got) != 1 || len(got[0]) != 1000 {
				return fmt.Errorf("call %d: values %d", i, len(got))
			}
			return nil
		},
	}
	for name, call := range calls {
		if err := call(0); err != nil { // the connection
			t.Fatal(err)
		}
		heard := func() (fromB, fromA uint64) {
			fromB, okB := a.Heard(b.Addr())
			fromA, okA := b.Heard(a.Addr())
			if !okB || !okA {
				t.Fatalf("no connection between the two (a hears b: %v, b hears a: %v)", okB, okA)
			}
			return fromB, fromA
		}
		const n = 400
		b0, a0 := heard()
		for i := range n {
			if err := call(i); err != nil {
				t.Fatal(err)
			}
		}
		b1, a1 := heard()
		replies, requests := float64(b1-b0)/n, float64(a1-a0)/n
		t.Logf("%s: packets a call: %.2f from the caller, %.2f from the callee", name, requests, replies)
		if replies > 1.5 || requests > 1.5 {
			t.Errorf("%s: packets a call: %.2f from the caller, %.2f from the callee, want at most 1.5 each", name, requests, replies)
		}
	}
}

// TestHeard: while a handler blocks, the peer's QUIC stack still
// acknowledges the request, so the packets heard from it grow; once the
// peer has vanished (no CONNECTION_CLOSE), a call to it hears nothing.
func TestHeard(t *testing.T) {
	if _, ok := testNode(t, t.TempDir(), "node-c", newTestHandler()).Heard("127.0.0.1:9"); ok {
		t.Fatal("heard from a peer never called")
	}
	a, b, _ := calledPair(t)
	addr := b.Addr()
	before, ok := a.Heard(addr)
	if !ok {
		t.Fatal("no connection after a call")
	}
	ctx, cancel := context.WithCancel(context.Background())
	called := make(chan error, 1)
	go func() { called <- a.Call(ctx, addr, "node-b", mBlock, nil, nil) }()
	waitFor(t, "packets from the peer whose handler blocks", func() bool {
		now, ok := a.Heard(addr)
		return ok && now > before
	})
	cancel()
	<-called

	// Crash: drop every connection without a CONNECTION_CLOSE.
	b.tr.Close()
	b.udp.Close()
	// Packets b sent just before it vanished (its answer to the cancel, an
	// acknowledgement it had delayed) may still be on their way into a, and
	// count when a reads them. So each failed call is a round: the count
	// must stop growing within a few, and only a's own probes and timeouts
	// are left to count after that. Heard counting those would grow in
	// every round.
	var grew []uint64
	for range 5 {
		before, _ = a.Heard(addr)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := a.Call(ctx, addr, "node-b", mEcho, echoMsg{}, nil)
		cancel()
		if err == nil {
			t.Fatal("a call to a vanished peer was answered")
		}
		now, ok := a.Heard(addr)
		if !ok || now == before {
			return
		}
		grew = append(grew, now-before)
	}
	t.Fatalf("heard packets from a vanished peer in every call: %v", grew)
}
