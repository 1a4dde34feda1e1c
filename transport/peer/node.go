package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/shade-mesh/shade/internal/budget"
	"github.com/shade-mesh/shade/internal/quic"
	"github.com/shade-mesh/shade/internal/workers"
	"github.com/vmihailenco/msgpack/v5"
)

// QUIC stream error codes, sent when a side abandons a stream.
const (
	streamCancelled quic.StreamErrorCode = 1 // the caller gave up, or the stream failed
	streamTooLarge  quic.StreamErrorCode = 2 // the frame exceeded MaxFrame
	streamBadFrame  quic.StreamErrorCode = 3 // the frame was malformed
	streamClosing   quic.StreamErrorCode = 4 // the node is closing
)

// connClosing is the QUIC application error code of a connection closed
// because its node is closing.
const connClosing quic.ApplicationErrorCode = 0

// maxStreams bounds the concurrent requests one peer may have in flight to a
// node (and so the goroutines serving them); more wait for a stream.
const maxStreams = 1024

// The flow-control windows of a connection and of each of its streams:
// what a peer may send before this node has read it. Every request opens
// a new stream, whose window starts at streamWindow: a reply of up to
// that size is written whole without waiting for the caller to read it,
// so the handler's Release comes at once, and it goes without a round
// trip for a window update. The largest request the mesh makes, a fetch of
// 4 MiB of samples, fits with room to spare; with quic-go's default of
// 512 KiB the sender of a 3.2 MiB reply stopped for a window update about
// twice on its way, and such replies moved at 0.7-0.86x the rate they do
// now (test/results/quic-vs-tcp.md). A connection's window starts at
// connWindow, four such replies at once. quic-go grows both as the reader
// keeps up with what arrives, to maxStreamWindow and maxConnWindow, which
// bound what one peer may leave here unread.
const (
	streamWindow    = 8 << 20
	connWindow      = 32 << 20
	maxStreamWindow = 16 << 20
	maxConnWindow   = 64 << 20
)

// maxPooledBuf is the largest frame buffer a Node keeps for reuse.
const maxPooledBuf = 8 << 20

// Node is one shade-peer endpoint: a QUIC transport on one UDP socket that
// both serves requests to a Handler and makes calls to other nodes. It keeps
// one connection per peer address, dialled by either side and used by both.
// All methods are safe for concurrent use.
type Node struct {
	cfg   Config
	log   zerolog.Logger
	h     Handler
	udp   *net.UDPConn
	tr    *quic.Transport
	ln    *quic.Listener
	qconf *quic.Config
	bufs  sync.Pool // *[]byte frame buffers

	// requests holds the bytes of the requests being served (frames, their
	// decoding, their replies) within Config.MaxRequestMemory; busy counts
	// the requests refused for want of room.
	requests *budget.Budget
	busy     atomic.Uint64

	noGSOWarned atomic.Bool // a connection without GSO was logged

	mu     sync.Mutex
	closed bool
	peers  map[string]*peerState // by address, see addrKey
	conns  map[*peerConn]struct{}
	wg     sync.WaitGroup // the accept loop, connection and stream goroutines

	// streams serves accepted streams on goroutines kept from earlier
	// requests: a request's handling calls deep (the stream's reads, the
	// handler), and a new goroutine grew its stack, and copied it, each
	// time.
	streams workers.Pool
}

// peerState is what a Node knows of one peer address.
type peerState struct {
	addr string

	// Guarded by Node.mu.
	conn *peerConn // the connection calls use; nil when none is live
	dial *dialCall // the dial in progress, if any
	name string    // verified name on the latest connection

	requests, errors, served atomic.Uint64
	bytesIn, bytesOut        atomic.Uint64
	lastCall                 atomic.Int64 // nanoseconds
}

// peerConn is a live QUIC connection and the verified name of its peer.
type peerConn struct {
	qc   *quic.Conn
	name string
	peer *peerState
}

// dialCall lets concurrent callers share one dial.
type dialCall struct {
	done chan struct{}
	err  error
}

// Listen opens cfg.ListenAddr and serves the requests of other nodes to h
// until Close. cfg.TLS is required and its certificate's name must be
// cfg.Name.
func Listen(cfg Config, h Handler) (*Node, error) {
	if h == nil {
		return nil, errors.New("peer: nil Handler")
	}
	if cfg.TLS == nil {
		return nil, errors.New("peer: Config.TLS is required (see LoadTLS, DevTLS)")
	}
	cfg = cfg.withDefaults()
	if cfg.Name != cfg.TLS.Name() {
		return nil, fmt.Errorf("peer: node name %q differs from its certificate's %q", cfg.Name, cfg.TLS.Name())
	}
	uaddr, err := net.ResolveUDPAddr("udp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("peer: listen address: %w", err)
	}
	udp, err := net.ListenUDP("udp", uaddr)
	if err != nil {
		return nil, fmt.Errorf("peer: %w", err)
	}
	resetKey := quic.StatelessResetKey(cfg.TLS.resetKey)
	tr := &quic.Transport{Conn: udp, StatelessResetKey: &resetKey}
	qconf := &quic.Config{
		HandshakeIdleTimeout:           cfg.IdleTimeout,
		MaxIdleTimeout:                 cfg.IdleTimeout,
		KeepAlivePeriod:                cfg.IdleTimeout / 3,
		MaxIncomingStreams:             maxStreams,
		MaxIncomingUniStreams:          -1,
		InitialStreamReceiveWindow:     streamWindow,
		InitialConnectionReceiveWindow: connWindow,
		MaxStreamReceiveWindow:         maxStreamWindow,
		MaxConnectionReceiveWindow:     maxConnWindow,
	}
	ln, err := tr.Listen(cfg.TLS.serverConfig(), qconf)
	if err != nil {
		tr.Close()
		udp.Close()
		return nil, fmt.Errorf("peer: %w", err)
	}
	warnSmallBuffers(udp, cfg.Logger)
	n := &Node{
		requests: budget.New(cfg.MaxRequestMemory),
		cfg:      cfg,
		log:      cfg.Logger.With().Str("node", cfg.Name).Logger(),
		h:        h,
		udp:      udp,
		tr:       tr,
		ln:       ln,
		qconf:    qconf,
		peers:    make(map[string]*peerState),
		conns:    make(map[*peerConn]struct{}),
	}
	n.wg.Add(1)
	go n.acceptLoop()
	return n, nil
}

// wantUDPBuffer is the socket buffer size quic-go asks the kernel for (as
// getsockopt reports it); it sets it when it starts using the socket.
const wantUDPBuffer = 7 << 20

// warnSmallBuffers logs a warning when the kernel kept udp's receive or
// send buffer below what quic-go asked for: a burst of packets then
// overflows the receive buffer, and each lost packet is sent again.
// quic-go can exceed net.core.rmem_max and wmem_max only with
// CAP_NET_ADMIN.
func warnSmallBuffers(udp *net.UDPConn, log zerolog.Logger) {
	recv, send, ok := udpBuffers(udp)
	if !ok || recv >= wantUDPBuffer && send >= wantUDPBuffer {
		return
	}
	log.Warn().Int("recv_kib", recv>>10).Int("send_kib", send>>10).Int("want_kib", wantUDPBuffer>>10).
		Msg("peer: UDP socket buffers are smaller than QUIC wants; raise net.core.rmem_max and net.core.wmem_max (sysctl) to at least 7340032")
}

// Addr is the UDP address the node listens on, with the port it got.
func (n *Node) Addr() string { return n.udp.LocalAddr().String() }

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Close closes every connection (in-flight calls fail, handlers see their
// ctx done), the listener and the socket, and waits for the node's
// goroutines, handlers included. Later calls return ErrClosed.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	conns := make([]*peerConn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()

	n.ln.Close()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { c.qc.CloseWithError(connClosing, "node closing") })
	}
	wg.Wait()
	err := n.tr.Close()
	if cerr := n.udp.Close(); err == nil {
		err = cerr
	}
	n.wg.Wait()
	n.streams.Close()
	return err
}

// PeerStats returns the counters of every peer address this node has talked
// to, keyed by address.
func (n *Node) PeerStats() map[string]PeerStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]PeerStats, len(n.peers))
	for key, p := range n.peers {
		s := PeerStats{
			Name:     p.name,
			Requests: p.requests.Load(),
			Errors:   p.errors.Load(),
			Served:   p.served.Load(),
			BytesOut: p.bytesOut.Load(),
			BytesIn:  p.bytesIn.Load(),
			LastCall: time.Duration(p.lastCall.Load()),
		}
		if c := p.conn; c != nil && c.qc.Context().Err() == nil {
			s.Connected = true
			s.RTT = c.qc.ConnectionStats().SmoothedRTT
		}
		out[key] = s
	}
	return out
}

// Heard returns how many packets this node has received on the live
// connection that its calls to the peer at addr use, and whether there is
// one. A peer's QUIC stack acknowledges what it is sent within its
// acknowledgement delay (25 ms at most), whatever its handlers are doing:
// a count that grows while a call waits shows the peer alive, one that
// does not, a peer that may have died.
func (n *Node) Heard(addr string) (packets uint64, ok bool) {
	n.mu.Lock()
	p := n.peers[addrKey(addr)]
	var c *peerConn
	if p != nil {
		c = p.conn
	}
	n.mu.Unlock()
	if c == nil || c.qc.Context().Err() != nil {
		return 0, false
	}
	return c.qc.ConnectionStats().PacketsReceived, true
}

// addrKey normalizes an IP address and port so that the address a caller
// names and the one a peer's packets come from give the same key.
func addrKey(addr string) string {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	return addr
}

// peer returns the state of addr, creating it.
func (n *Node) peer(addr string) (*peerState, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	if p := n.peers[addr]; p != nil {
		return p, nil // addr is already a key
	}
	return n.peerLocked(addrKey(addr)), nil
}

func (n *Node) peerLocked(key string) *peerState {
	p := n.peers[key]
	if p == nil {
		p = &peerState{addr: key}
		n.peers[key] = p
	}
	return p
}

// addConn registers a handshaken connection and starts serving the streams
// its peer opens. A dialled connection becomes the one calls to its address
// use; an accepted one does when there is none, so that one connection
// serves a pair of nodes both ways.
func (n *Node) addConn(qc *quic.Conn, name, key string, dialled bool) (*peerConn, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		qc.CloseWithError(connClosing, "node closing")
		return nil, ErrClosed
	}
	p := n.peerLocked(key)
	c := &peerConn{qc: qc, name: name, peer: p}
	n.conns[c] = struct{}{}
	if dialled || p.conn == nil || p.conn.qc.Context().Err() != nil {
		p.conn = c
	}
	p.name = name
	n.wg.Add(1)
	n.mu.Unlock()
	gso := qc.ConnectionState().GSO
	n.log.Debug().Str("peer", name).Str("addr", key).Bool("dialled", dialled).Bool("gso", gso).Msg("peer connection up")
	if !gso && !n.noGSOWarned.Swap(true) {
		// Without segmentation offload every packet costs a system call:
		// about 1.8 times the CPU per byte sent, measured on loopback.
		n.log.Warn().Str("peer", name).Msg("peer: no UDP GSO on this connection; QUIC sends each packet with its own system call")
	}
	go n.serveConn(c)
	return c, nil
}

// uncache stops calls from using c; its serving goroutine removes it when
// it ends.
func (n *Node) uncache(c *peerConn) {
	n.mu.Lock()
	if c.peer.conn == c {
		c.peer.conn = nil
	}
	n.mu.Unlock()
}

func (n *Node) acceptLoop() {
	defer n.wg.Done()
	for {
		qc, err := n.ln.Accept(context.Background())
		if err != nil {
			return // the listener is closed
		}
		name, err := peerName(qc.ConnectionState().TLS)
		if err != nil {
			// crypto/tls has already run this check; keep it anyway.
			qc.CloseWithError(connClosing, "bad peer certificate")
			continue
		}
		n.addConn(qc, name, addrKey(qc.RemoteAddr().String()), false)
	}
}

// serveConn accepts the streams of c until it closes, each a request.
func (n *Node) serveConn(c *peerConn) {
	defer n.wg.Done()
	for {
		str, err := c.qc.AcceptStream(context.Background())
		if err != nil {
			break
		}
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			str.CancelRead(streamClosing)
			str.CancelWrite(streamClosing)
			continue
		}
		n.wg.Add(1)
		n.mu.Unlock()
		n.streams.Go(func() { n.serveStream(c, str) })
	}
	n.mu.Lock()
	delete(n.conns, c)
	if c.peer.conn == c {
		c.peer.conn = nil
	}
	n.mu.Unlock()
	n.log.Debug().Str("peer", c.name).Str("addr", c.peer.addr).Err(context.Cause(c.qc.Context())).Msg("peer connection down")
}

// serveStream reads one request from str, runs the handler and writes the
// reply.
func (n *Node) serveStream(c *peerConn, str *quic.Stream) {
	defer n.wg.Done()
	p := c.peer
	buf := n.getBuf()
	defer n.putBuf(buf)

	str.SetReadDeadline(time.Now().Add(n.cfg.RequestTimeout))
	var held int64 // bytes of the request budget this request holds
	defer func() { n.requests.Release(held) }()
	admit := func(size int) bool {
		if !n.requests.TryReserve(int64(size)) {
			return false
		}
		held = int64(size)
		return true
	}
	tag, body, err := readFrame(str, n.cfg.MaxFrame, *buf, admit)
	keep(buf, body)
	if err == nil {
		err = expectEOF(str)
	}
	if err == nil && tag != 0 {
		// Charge what decoding may take beyond the frame, before the
		// handler decodes it.
		cost, cerr := MsgpackCost(body)
		switch {
		case cerr != nil:
			err = cerr
		case !n.requests.TryReserve(cost - held):
			err = fmt.Errorf("%w: decoding %d bytes of msgpack may take %d", ErrBusy, len(body), cost)
		default:
			held = max(cost, held)
		}
	}
	switch {
	case errors.Is(err, ErrBusy):
		n.busy.Add(1)
		str.CancelRead(streamTooLarge)
		n.writeReply(str, p, nil, &Error{Code: CodeUnavailable, Msg: err.Error()})
		return
	case errors.Is(err, ErrFrameTooLarge):
		// Refused before reading (or allocating) the body: stop the sender
		// and tell it why.
		str.CancelRead(streamTooLarge)
		n.writeReply(str, p, nil, &Error{Code: CodeTooLarge, Msg: err.Error()})
		return
	case errors.Is(err, ErrBadFrame):
		str.CancelRead(streamBadFrame)
		n.writeReply(str, p, nil, &Error{Code: CodeBadRequest, Msg: err.Error()})
		return
	case err != nil:
		// Timed out, reset by the caller, or the connection is gone.
		str.CancelRead(streamCancelled)
		str.CancelWrite(streamCancelled)
		return
	}
	p.bytesIn.Add(uint64(headerLen + len(body)))
	p.served.Add(1)

	var resp any
	switch {
	case tag == 0:
		err = &Error{Code: CodeBadRequest, Msg: "method 0 is reserved"}
	default:
		// The body was checked by MsgpackCost above. The send side's context ends when the caller stops reading (it
		// gave up) or the connection closes.
		ctx, cancel := context.WithTimeout(str.Context(), n.cfg.RequestTimeout)
		resp, err = n.serve(ctx, c.name, Method(tag), body)
		cancel()
	}
	n.writeReply(str, p, resp, err)
}

// serve runs the handler, turning a panic into CodeInternal.
func (n *Node) serve(ctx context.Context, from string, m Method, body []byte) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			n.log.Error().Str("peer", from).Uint16("method", uint16(m)).
				Interface("panic", r).Bytes("stack", debug.Stack()).Msg("peer handler panicked")
			resp, err = nil, &Error{Code: CodeInternal, Msg: "handler panicked"}
		}
	}()
	return n.h.ServePeer(ctx, from, m, body)
}

// writeReply encodes resp, or herr when it is not nil, and sends it on str,
// then half-closes str. It encodes into a buffer of its own: resp may point
// into the request's.
func (n *Node) writeReply(str *quic.Stream, p *peerState, resp any, herr error) {
	if r, ok := resp.(*RawReply); ok && r != nil {
		if r.Release != nil {
			defer r.Release()
		}
		if herr == nil {
			herr = n.writeRaw(str, p, r)
			if herr == nil {
				return
			}
		}
		resp = nil
	}
	buf := n.getBuf()
	defer n.putBuf(buf)
	frame, err := n.replyFrame((*buf)[:0], resp, herr)
	keep(buf, frame)
	n.requests.Force(int64(len(frame)))
	defer n.requests.Release(int64(len(frame)))
	if err != nil {
		n.log.Error().Err(err).Msg("peer: encode reply")
		str.CancelWrite(streamCancelled)
		return
	}
	str.SetWriteDeadline(time.Now().Add(n.cfg.RequestTimeout))
	if _, err := str.Write(frame); err != nil {
		str.CancelWrite(streamCancelled)
		return
	}
	str.Close()
	p.bytesOut.Add(uint64(len(frame)))
}

// writeRaw sends r on str and half-closes str. It returns an error, for
// writeReply to send instead, only when nothing was sent: r does not fit
// in a frame, or its head cannot be encoded.
func (n *Node) writeRaw(str *quic.Stream, p *peerState, r *RawReply) error {
	buf := n.getBuf()
	defer n.putBuf(buf)
	start, size, err := appendRawHead((*buf)[:0], r)
	keep(buf, start)
	switch {
	case err == nil && size > int64(n.cfg.MaxFrame):
		return &Error{Code: CodeTooLarge, Msg: fmt.Sprintf("reply of %d bytes exceeds the frame limit of %d", size, n.cfg.MaxFrame)}
	case err != nil:
		return &Error{Code: CodeInternal, Msg: "encode reply: " + err.Error()}
	}
	n.requests.Force(size)
	defer n.requests.Release(size)
	str.SetWriteDeadline(time.Now().Add(n.cfg.RequestTimeout))
	if _, err := str.Write(start); err != nil {
		str.CancelWrite(streamCancelled)
		return nil
	}
	var w io.Writer = str
	if r.Owned {
		w = noCopyWriter{str}
	}
	if _, err := writeValues(w, r.Values); err != nil {
		str.CancelWrite(streamCancelled)
		return nil
	}
	str.Close()
	p.bytesOut.Add(uint64(4 + size))
	return nil
}

func (n *Node) replyFrame(dst []byte, resp any, herr error) ([]byte, error) {
	if herr == nil {
		frame, err := appendFrame(dst, uint16(CodeOK), resp)
		switch {
		case err != nil:
			herr = &Error{Code: CodeInternal, Msg: "encode reply: " + err.Error()}
		case len(frame)-4 > n.cfg.MaxFrame:
			herr = &Error{Code: CodeTooLarge, Msg: fmt.Sprintf("reply of %d bytes exceeds the frame limit of %d", len(frame)-4, n.cfg.MaxFrame)}
		default:
			return frame, nil
		}
	}
	code, msg := CodeInternal, herr.Error()
	var e *Error
	if errors.As(herr, &e) && e.Code != CodeOK {
		code = e.Code
		if herr == error(e) {
			msg = e.Msg
		}
	}
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	return appendFrame(dst[:0], uint16(code), msg)
}

// Call sends req (msgpack-encoded) as a request for method m to the node
// named wantName at addr, and decodes the reply into out, a pointer, or
// discards it when out is nil. A req that is a msgpack.RawMessage or an
// Encoded is encoded already and is written to the stream as it is, not
// copied into a frame; the caller must not change it until Call returns.
//
// Calls to one address share a connection, dialled on first use (concurrent
// callers wait for one dial) or accepted from that node; each call has a
// stream of its own. The peer must present a certificate that chains to the
// cluster CA with CN wantName. When the cached connection turns out to be
// dead before the request leaves, it is dropped and redialled once, in the
// same call; a connection that dies while a request is in flight fails that
// call (the request may or may not have been served) and is redialled by the
// next one.
//
// If ctx has no deadline, Config.RequestTimeout applies. Errors: a reply
// with a non-zero code is an *Error; a transport failure (dial, handshake,
// lost connection) matches &Error{Code: CodeUnavailable}; a timeout or
// cancellation wraps ctx.Err(); a request over MaxFrame wraps
// ErrFrameTooLarge without being sent; a Node that is closed returns
// ErrClosed.
func (n *Node) Call(ctx context.Context, addr, wantName string, m Method, req, out any) error {
	return n.callWith(ctx, addr, wantName, m, req, out, nil)
}

// CallRaw is Call for a method whose handler answers with a *RawReply. It
// decodes the reply's head into head (a pointer), once the head has passed
// MsgpackCost as any reply does, and then calls values with a reader of
// the values' bytes and their total length, so that the caller reads them
// straight into memory of its own. size has been checked against
// Config.MaxFrame only: values must check it against what head says
// before it allocates for it, and read the reader to its end, or return an
// error. The reader fails with the stream's error if the stream fails; a
// reply cut short fails it with io.ErrUnexpectedEOF.
//
// An error that values returns (its verdict on the reply, not the
// stream's) is returned wrapped, and the rest of the reply is abandoned.
// Replies with a non-zero code and every other failure are as for Call.
func (n *Node) CallRaw(ctx context.Context, addr, wantName string, m Method, req, head any, values func(r io.Reader, size int) error) error {
	if values == nil {
		return errors.New("peer: CallRaw without a reader of the values")
	}
	return n.callWith(ctx, addr, wantName, m, req, head, values)
}

// Encoded is a request body encoded already (msgpack), in parts that Call
// writes to the stream one after the other, as they are: a message sent
// to many members is encoded once, and what differs per member (a small
// head, say) goes in a part of its own. msgpack.RawMessage is the case of
// one part.
type Encoded [][]byte

// len is the body's length, all parts together.
func (e Encoded) len() int {
	n := 0
	for _, part := range e {
		n += len(part)
	}
	return n
}

// callWith is Call, or CallRaw when values is not nil (out is then the
// raw reply's head).
func (n *Node) callWith(ctx context.Context, addr, wantName string, m Method, req, out any, values func(io.Reader, int) error) error {
	if m == 0 {
		return &Error{Code: CodeBadRequest, Msg: "method 0 is reserved"}
	}
	// A request encoded already (msgpack.RawMessage: a broadcast encodes
	// once for every member) goes to the stream as it is, after a header
	// of its own: an epoch's order is megabytes, and a copy of it into a
	// frame for each of a thousand members cost more than the epoch.
	var frame []byte
	var encoded Encoded
	switch r := req.(type) {
	case msgpack.RawMessage:
		if r != nil {
			encoded = Encoded{r}
		}
	case Encoded:
		encoded = r
	}
	if encoded != nil {
		frame = make([]byte, headerLen)
		putHeaderOf(frame, uint16(m), encoded.len()) // a length past the limit is refused below
	} else {
		wbuf := n.getBuf()
		defer n.putBuf(wbuf)
		var err error
		frame, err = appendFrame((*wbuf)[:0], uint16(m), req)
		keep(wbuf, frame)
		if err != nil {
			return fmt.Errorf("peer: encode request: %w", err)
		}
	}
	if size := len(frame) - 4 + encoded.len(); size > n.cfg.MaxFrame {
		return fmt.Errorf("%w: request of %d bytes, limit %d", ErrFrameTooLarge, size, n.cfg.MaxFrame)
	}
	p, err := n.peer(addr)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.RequestTimeout)
		defer cancel()
	}
	p.requests.Add(1)
	start := time.Now()
	err = n.call(ctx, p, wantName, frame, encoded, out, values)
	if err != nil {
		p.errors.Add(1)
		return err
	}
	p.lastCall.Store(int64(time.Since(start)))
	return nil
}

func (n *Node) call(ctx context.Context, p *peerState, wantName string, frame []byte, encoded Encoded, out any, values func(io.Reader, int) error) error {
	for attempt := 0; ; attempt++ {
		c, fresh, err := n.conn(ctx, p, wantName)
		if err != nil {
			return err
		}
		str, err := c.qc.OpenStreamSync(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("peer: call %s: %w", p.addr, ctx.Err())
			}
			n.uncache(c)
			if !fresh && attempt == 0 {
				continue // nothing was sent: redial once
			}
			return n.callError(ctx, c, err)
		}
		return n.roundTrip(ctx, c, str, frame, encoded, out, values)
	}
}

// conn returns a live connection to p whose peer is wantName, dialling one
// if there is none; fresh reports a new dial.
func (n *Node) conn(ctx context.Context, p *peerState, wantName string) (c *peerConn, fresh bool, err error) {
	for {
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return nil, false, ErrClosed
		}
		if c := p.conn; c != nil {
			if c.qc.Context().Err() == nil {
				n.mu.Unlock()
				if c.name != wantName {
					return nil, false, fmt.Errorf("%w: %s is node %q, not %q", ErrWrongPeer, p.addr, c.name, wantName)
				}
				return c, false, nil
			}
			p.conn = nil
		}
		if d := p.dial; d != nil {
			n.mu.Unlock()
			select {
			case <-d.done:
			case <-ctx.Done():
				return nil, false, fmt.Errorf("peer: dial %s: %w", p.addr, ctx.Err())
			}
			if d.err != nil && !errors.Is(d.err, context.Canceled) && !errors.Is(d.err, context.DeadlineExceeded) {
				return nil, false, d.err
			}
			continue // use what it dialled, or dial again if its caller gave up
		}
		d := &dialCall{done: make(chan struct{})}
		p.dial = d
		n.mu.Unlock()

		c, d.err = n.dial(ctx, p, wantName)
		n.mu.Lock()
		p.dial = nil
		n.mu.Unlock()
		close(d.done)
		return c, true, d.err
	}
}

func (n *Node) dial(ctx context.Context, p *peerState, wantName string) (*peerConn, error) {
	ua, err := net.ResolveUDPAddr("udp", p.addr)
	if err != nil {
		return nil, &unavailableError{addr: p.addr, err: err}
	}
	qc, err := n.tr.Dial(ctx, ua, n.cfg.TLS.clientConfig(wantName), n.qconf)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("peer: dial %s: %w", p.addr, ctx.Err())
		case n.isClosed():
			return nil, ErrClosed
		}
		return nil, &unavailableError{addr: p.addr, err: err}
	}
	// The client config checked that the peer is wantName.
	return n.addConn(qc, wantName, p.addr, true)
}

// roundTrip writes the request frame on str and reads the reply: decoded
// into out, or, when values is not nil, a raw reply whose head is decoded
// into out and whose values go to values.
func (n *Node) roundTrip(ctx context.Context, c *peerConn, str *quic.Stream, frame []byte, encoded Encoded, out any, values func(io.Reader, int) error) error {
	p := c.peer
	stop := context.AfterFunc(ctx, func() {
		str.CancelRead(streamCancelled)
		str.CancelWrite(streamCancelled)
	})
	defer stop()

	_, werr := str.Write(frame)
	for _, part := range encoded { // the body of a request encoded already
		if werr == nil && len(part) > 0 {
			_, werr = str.Write(part)
		}
	}
	if werr == nil {
		str.Close()
		p.bytesOut.Add(uint64(len(frame) + encoded.len()))
	}
	// Read even if the write failed: a peer that refuses a request (too
	// large) replies before it stops the stream.
	rbuf := n.getBuf()
	defer n.putBuf(rbuf)
	fail := func(err error) error {
		str.CancelRead(streamCancelled)
		str.CancelWrite(streamCancelled)
		if werr != nil && !isFrameError(err) {
			err = werr
		}
		return n.callError(ctx, c, err)
	}
	code, size, err := readHeader(str, n.cfg.MaxFrame, nil)
	if err != nil {
		return fail(err)
	}
	if Code(code) == CodeOK && values != nil {
		return n.readRaw(ctx, c, str, size, rbuf, out, values, fail)
	}
	body, err := readBody(str, size, *rbuf)
	keep(rbuf, body)
	if err == nil {
		err = expectEOF(str)
	}
	if err != nil {
		return fail(err)
	}
	p.bytesIn.Add(uint64(headerLen + len(body)))
	if err := CheckMsgpack(body); err != nil {
		return fmt.Errorf("peer: reply from %s: %w", p.addr, err)
	}
	if Code(code) != CodeOK {
		var msg string
		if err := msgpack.Unmarshal(body, &msg); err != nil {
			msg = "(undecodable error message)"
		}
		return &Error{Code: Code(code), Msg: msg}
	}
	if out == nil {
		return nil
	}
	if err := msgpack.Unmarshal(body, out); err != nil {
		return fmt.Errorf("peer: decode reply from %s: %w", p.addr, err)
	}
	return nil
}

// readRaw reads the body of a raw reply of size bytes from str: the head
// into head, the values through values (see CallRaw). fail abandons the
// stream and classifies a failure of its own or of the stream.
func (n *Node) readRaw(ctx context.Context, c *peerConn, str *quic.Stream, size int, rbuf *[]byte, head any, values func(io.Reader, int) error, fail func(error) error) error {
	p := c.peer
	rest, body, err := readRawHead(str, size, *rbuf, head)
	keep(rbuf, body)
	if err != nil {
		return fail(err)
	}
	vr := &valueReader{r: str, left: rest}
	verr := values(vr, rest)
	switch {
	case vr.err != nil:
		return fail(vr.err)
	case verr != nil:
		str.CancelRead(streamCancelled)
		str.CancelWrite(streamCancelled)
		if ctx.Err() != nil {
			return fmt.Errorf("peer: call %s: %w", p.addr, ctx.Err())
		}
		return fmt.Errorf("peer: reply from %s: %w", p.addr, verr)
	case vr.left != 0:
		return fail(fmt.Errorf("%w: %d bytes of values left unread", ErrBadFrame, vr.left))
	}
	if err := expectEOF(str); err != nil {
		return fail(err)
	}
	p.bytesIn.Add(uint64(headerLen + size))
	return nil
}

// callError classifies the failure of a call on c.
func (n *Node) callError(ctx context.Context, c *peerConn, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("peer: call %s: %w", c.peer.addr, ctx.Err())
	case n.isClosed():
		return ErrClosed
	case isFrameError(err):
		return fmt.Errorf("peer: reply from %s: %w", c.peer.addr, err)
	}
	if c.qc.Context().Err() != nil {
		n.uncache(c)
	}
	return &unavailableError{addr: c.peer.addr, err: err}
}

func (n *Node) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// expectEOF reads the end of a stream after its one frame.
func expectEOF(r io.Reader) error {
	var b [1]byte
	for {
		k, err := r.Read(b[:])
		if k > 0 {
			return fmt.Errorf("%w: data after the frame", ErrBadFrame)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (n *Node) getBuf() *[]byte {
	if b, ok := n.bufs.Get().(*[]byte); ok {
		return b
	}
	return new([]byte)
}

func (n *Node) putBuf(b *[]byte) {
	if cap(*b) <= maxPooledBuf {
		n.bufs.Put(b)
	}
}

// keep makes buf hold the storage of b, which may have grown from it.
func keep(buf *[]byte, b []byte) {
	if cap(b) > cap(*buf) {
		*buf = b[:0]
	}
}

// appendFrame appends to dst a frame with tag and the msgpack encoding of v.
func appendFrame(dst []byte, tag uint16, v any) ([]byte, error) {
	framed := append(dst, make([]byte, headerLen)...)
	b, err := appendMsgpack(framed, v)
	if err != nil {
		return framed[:len(dst)], err
	}
	if uint64(len(b)-len(dst)-4) > 1<<32-1 {
		return b[:len(dst)], ErrFrameTooLarge
	}
	putHeader(b[len(dst):], tag)
	return b, nil
}

// appendMsgpack appends v's msgpack encoding to dst: by its own
// AppendMsgpack where it is an Appender, else by msgpack's encoder.
func appendMsgpack(dst []byte, v any) ([]byte, error) {
	if a, ok := v.(Appender); ok {
		return a.AppendMsgpack(dst)
	}
	w := sliceWriter{b: dst}
	enc := msgpack.GetEncoder()
	enc.Reset(&w)
	err := enc.Encode(v)
	msgpack.PutEncoder(enc)
	return w.b, err
}

// sliceWriter appends to a byte slice, for msgpack's encoder.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *sliceWriter) WriteByte(c byte) error {
	w.b = append(w.b, c)
	return nil
}

func (w *sliceWriter) WriteString(s string) (int, error) {
	w.b = append(w.b, s...)
	return len(s), nil
}

// RequestMemory returns the bytes the requests being served hold now, the
// bound (Config.MaxRequestMemory), and how many requests were refused for
// want of room since the node started.
func (n *Node) RequestMemory() (used, limit int64, refused uint64) {
	return n.requests.Used(), n.requests.Limit(), n.busy.Load()
}
