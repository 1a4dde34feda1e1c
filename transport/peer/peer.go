// Package peer is the request/response protocol between shade-peer nodes:
// one QUIC connection per peer pair, one stream per request, msgpack bodies,
// and mutual TLS with certificates from a cluster CA.
//
// A Node listens and dials on one UDP socket. Call sends a request and waits
// for its reply; a Handler serves the requests other nodes send. Every frame
// is length-checked before its bytes are allocated, and every msgpack body is
// walked by CheckMsgpack before it is decoded, so a peer cannot make a node
// allocate memory it has not been sent.
//
// Wire format, on each bidirectional stream (integers big-endian):
//
//	request: [u32 length of the rest][u16 method][msgpack body]
//	reply:   [u32 length of the rest][u16 code][msgpack body, or for an error the msgpack string message]
//	raw reply (code 0, see RawReply and CallRaw):
//	         [u32 length of the rest][u16 code][u32 head length][msgpack head][values]
//
// The client half-closes the stream after its request and the server after
// its reply.
package peer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// ALPN is the TLS application protocol both sides must offer. It names
// the version of the peer protocol: shade/2 packs the sample lists of
// reports, scores and orders (mesh/wire U32s, F64s, F32s) and relays
// orders, so a shade/1 peer fails the handshake instead of misreading them.
const ALPN = "shade/2"

// Defaults for the zero values of Config.
const (
	DefaultListenAddr       = ":7947"
	DefaultMaxFrame         = 64 << 20
	DefaultMaxRequestMemory = 256 << 20
	DefaultRequestTimeout   = 10 * time.Second
	DefaultIdleTimeout      = 5 * time.Second
)

// Method numbers a request. The mesh defines its methods (1..999); 0 is
// reserved and refused.
type Method uint16

// Handler serves the requests of other nodes.
type Handler interface {
	// ServePeer serves one request. from is the calling node's name (the
	// verified CN of its certificate). body is the request's msgpack payload;
	// it belongs to the Node and is valid only during the call (copy what you
	// keep). It has passed CheckMsgpack, so msgpack.Unmarshal on it sizes no
	// slice or map beyond the body's length in elements. The returned value
	// (which may point into body) is msgpack-encoded as the reply, unless it
	// is a *RawReply, whose values are sent as they are (see RawReply); an
	// error is sent instead: an *Error keeps its Code, any other error
	// travels as CodeInternal with its message.
	//
	// ServePeer is called concurrently, once per request, and must return
	// soon after ctx is done (the caller gave up, the request timed out, or
	// the Node is closing): Close waits for it.
	ServePeer(ctx context.Context, from string, m Method, body []byte) (any, error)
}

// Appender is a message that encodes itself: AppendMsgpack appends to dst
// exactly the bytes msgpack.Marshal makes of it, one whole value (with an
// error, what it returns is dropped). The
// Node encodes a request, a reply or a RawReply's head that is one with
// it instead of with msgpack's encoder: a fetch's request and its
// reply's head cross between peers for every read from another node's
// memory.
type Appender interface {
	AppendMsgpack(dst []byte) ([]byte, error)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, from string, m Method, body []byte) (any, error)

// ServePeer calls f.
func (f HandlerFunc) ServePeer(ctx context.Context, from string, m Method, body []byte) (any, error) {
	return f(ctx, from, m, body)
}

// Code is a reply's status on the wire.
type Code uint16

// Wire codes. Values are part of the protocol: never renumber.
const (
	CodeOK          Code = 0
	CodeBadRequest  Code = 1
	CodeNotFound    Code = 2
	CodeNotOwner    Code = 3
	CodeNotLeader   Code = 4
	CodeUnavailable Code = 5
	CodeTooLarge    Code = 6
	CodeInternal    Code = 7
	CodeStale       Code = 8
)

var codeNames = [...]string{
	CodeOK:          "ok",
	CodeBadRequest:  "bad request",
	CodeNotFound:    "not found",
	CodeNotOwner:    "not owner",
	CodeNotLeader:   "not leader",
	CodeUnavailable: "unavailable",
	CodeTooLarge:    "too large",
	CodeInternal:    "internal error",
	CodeStale:       "stale",
}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("code %d", uint16(c))
}

// Error is an error with a wire code. Handlers return it to choose the code
// of their reply; Call returns it for a reply with a non-zero code, and
// reports transport failures (dial, handshake, connection lost) as errors
// that match CodeUnavailable.
//
// errors.Is(err, &Error{Code: c}) matches any *Error with code c, whatever
// its message.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return "peer: " + e.Code.String()
	}
	return "peer: " + e.Code.String() + ": " + e.Msg
}

// Is matches another *Error by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// CodeOf returns the wire code that err carries: CodeOK for nil, the code of
// an *Error in its chain, CodeUnavailable for a transport failure, and
// CodeInternal for anything else (a context error included).
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Sentinel errors, matched with errors.Is.
var (
	ErrFrameTooLarge = errors.New("peer: frame too large")
	ErrClosed        = errors.New("peer: closed")
	ErrBadFrame      = errors.New("peer: malformed frame")
	// ErrBusy reports a request refused because the requests this node
	// holds already take Config.MaxRequestMemory.
	ErrBusy = errors.New("peer: request memory full")
	// ErrWrongPeer: the node at an address is not the node the caller
	// named.
	ErrWrongPeer = errors.New("peer: wrong peer")
)

// unavailableError is a transport failure talking to addr. It matches
// &Error{Code: CodeUnavailable} for errors.Is and errors.As, and unwraps to
// its cause.
type unavailableError struct {
	addr string
	err  error
}

func (e *unavailableError) Error() string {
	return "peer: " + e.addr + " unavailable: " + e.err.Error()
}

func (e *unavailableError) Unwrap() error { return e.err }

func (e *unavailableError) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == CodeUnavailable
}

func (e *unavailableError) As(target any) bool {
	if p, ok := target.(**Error); ok {
		*p = &Error{Code: CodeUnavailable, Msg: e.addr + ": " + e.err.Error()}
		return true
	}
	return false
}

// Config configures a Node. The zero value of each field means its default;
// Listen fills defaults on a copy.
type Config struct {
	// Name is this node's name. It must equal the CN of the certificate in
	// TLS; empty means that CN.
	Name string
	// ListenAddr is the UDP address to listen and dial from, such as
	// "127.0.0.1:7947"; port 0 picks a free port (Addr reports it).
	// Default DefaultListenAddr.
	ListenAddr string
	// TLS holds the cluster CA and this node's certificate; required (see
	// LoadTLS and DevTLS).
	TLS *TLSConfig
	// MaxFrame is the largest frame, in bytes after the length prefix, that
	// this node sends or accepts. Default 64 MiB.
	MaxFrame int
	// MaxRequestMemory bounds the bytes that the requests this node serves
	// may hold at once, all peers together: each request's frame and a
	// bound on what decoding it takes (see MsgpackCost), and its reply
	// while it is sent. A request that does not fit is refused with
	// CodeUnavailable before its body is read. Default 256 MiB.
	MaxRequestMemory int64
	// RequestTimeout bounds a Call whose ctx has no deadline, and each
	// request this node serves. Default 10 s.
	RequestTimeout time.Duration
	// IdleTimeout closes a QUIC connection that hears nothing for this long;
	// keep-alives go at a third of it. Default 5 s.
	IdleTimeout time.Duration
	// Logger receives connection events; the zero value logs nothing.
	Logger zerolog.Logger
}

func (c Config) withDefaults() Config {
	if c.ListenAddr == "" {
		c.ListenAddr = DefaultListenAddr
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = DefaultMaxFrame
	}
	if c.MaxRequestMemory <= 0 {
		c.MaxRequestMemory = DefaultMaxRequestMemory
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.Name == "" && c.TLS != nil {
		c.Name = c.TLS.Name()
	}
	return c
}

// PeerStats are counters for one peer address, for metrics.
type PeerStats struct {
	// Name is the verified node name on the latest connection ("" before
	// the first one).
	Name string
	// Connected reports a live connection to the peer.
	Connected bool
	// Requests counts the calls this node made to the peer; Errors counts
	// those that failed, whatever the reason (a reply with a non-zero code
	// included).
	Requests, Errors uint64
	// Served counts the requests this node served for the peer.
	Served uint64
	// BytesOut and BytesIn count frame bytes (prefixes included) sent to and
	// received from the peer, for calls and served requests alike.
	BytesOut, BytesIn uint64
	// LastCall is the duration of the latest successful call, reply decoded.
	LastCall time.Duration
	// RTT is QUIC's smoothed round-trip estimate on the live connection
	// (zero when not connected).
	RTT time.Duration
}
