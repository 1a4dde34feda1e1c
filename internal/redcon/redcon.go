// Package redcon implements a Redis compatible server framework
package redcon

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tidwall/btree"
	"github.com/tidwall/match"
	"golang.org/x/sys/unix"

	"github.com/shade-mesh/shade/internal/budget"
)

var (
	errUnbalancedQuotes       = &errProtocol{msg: "unbalanced quotes in request"}
	errInvalidBulkLength      = &errProtocol{msg: "invalid bulk length"}
	errInvalidMultiBulkLength = &errProtocol{msg: "invalid multibulk length"}
	errDetached               = errors.New("detached")
	errIncompleteCommand      = errors.New("incomplete command")
	errTooMuchData            = errors.New("too much data")
	// shade: input bounds (see Limits).
	errInlineTooBig     = &errProtocol{msg: "too big inline request", limit: LimitInline}
	errMultiBulkTooBig  = &errProtocol{msg: "too big mbulk count string", limit: LimitInline}
	errBulkCountTooBig  = &errProtocol{msg: "too big bulk count string", limit: LimitInline}
	errTooManyArgs      = &errProtocol{msg: "invalid multibulk length: too many arguments", limit: LimitArgs}
	errClientMemoryFull = &errProtocol{msg: "client memory limit reached: the server holds as much client input and output as it may; closing the connection", limit: LimitClientMemory}
)

// The bounds of Limits, as LimitOf names them (shade).
const (
	LimitInline       = "inline"
	LimitBulk         = "bulk"
	LimitArgs         = "args"
	LimitClientMemory = "client-memory"
)

// LimitOf returns the bound of Limits that err (as passed to the closed
// callback) reports going past, or "" for any other error (shade).
func LimitOf(err error) string {
	if e, ok := err.(*errProtocol); ok {
		return e.limit
	}
	return ""
}

// ErrClientMemory is the error a connection is closed with when its input
// would take the server's client memory past Limits.Budget (shade).
var ErrClientMemory error = errClientMemoryFull

// IsProtocolError reports whether err, as passed to the closed callback,
// is a protocol error the client caused (shade).
func IsProtocolError(err error) bool {
	_, ok := err.(*errProtocol)
	return ok
}

// Limits bound what clients can make a server hold (shade). The zero value
// of each field means its default.
type Limits struct {
	// MaxInline bounds an inline (telnet-style) command line in bytes, and
	// the count line of a multibulk command; default 64 KiB, as Redis.
	MaxInline int
	// MaxBulk bounds one bulk argument in bytes; default 512 MiB, Redis's
	// proto-max-bulk-len.
	MaxBulk int
	// MaxArgs bounds the arguments of one command; default 1,048,576.
	MaxArgs int
	// Budget, when set, is shared by every connection of the server and
	// charged with each connection's read buffer, argument slabs and write
	// buffer. A connection whose input would take it past the limit gets
	// ErrClientMemory and is closed; write buffers already filled are
	// counted even past the limit, and written out at once while it is
	// exceeded.
	Budget *budget.Budget
	// WriteTimeout closes a connection whose replies cannot be written
	// for this long (a client that stops reading); 0 means never.
	WriteTimeout time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxInline <= 0 {
		l.MaxInline = 64 << 10
	}
	if l.MaxBulk <= 0 || l.MaxBulk > maxBulkLen {
		l.MaxBulk = maxBulkLen
	}
	if l.MaxArgs <= 0 {
		l.MaxArgs = 1 << 20
	}
	return l
}

// SetLimits sets the bounds on what clients can make the server hold
// (shade). Call it before Serve.
func (s *Server) SetLimits(l Limits) {
	s.mu.Lock()
	s.limits = l.withDefaults()
	s.mu.Unlock()
}

const maxBufferCap = 262144

// shade: limits of the patched reader and writer (see PATCHES.md).
const (
	// maxBulkLen bounds one bulk argument, as Redis's proto-max-bulk-len
	// does by default. A longer length is a protocol error (upstream
	// overflowed on lengths near 2^63 and panicked).
	maxBulkLen = 512 << 20
	// maxReadKeep: a drained read buffer up to this size is kept for the
	// next pipeline; a larger one is given back.
	maxReadKeep = 1 << 20
	// maxReadPregrow bounds how far the read buffer grows ahead of the
	// bytes that have arrived, on the word of a bulk length alone.
	maxReadPregrow = 256 << 10
	// maxReadAhead bounds how far the read buffer of a client that fills
	// it between two reads grows (Reader.filled): a pipeline of 16 SETs of
	// 4 KiB is 66 KB, which a buffer of 16 KiB took in 6 reads, each
	// answered by a write of its own.
	maxReadAhead = 128 << 10
	// maxWriteKeep: a write buffer up to this size is kept after Flush
	// (upstream dropped any above maxBufferCap, so every pipeline of large
	// replies reallocated it).
	maxWriteKeep = 1 << 20
	// maxBigKept bounds the bytes of longer write buffers the server
	// keeps for the next long reply (bigBuffers).
	maxBigKept = 16 << 20
)

type errProtocol struct {
	msg   string
	limit string // shade: the bound of Limits it reports, or ""
}

func (err *errProtocol) Error() string {
	return "Protocol error: " + err.msg
}

// Conn represents a client connection
type Conn interface {
	// RemoteAddr returns the remote address of the client connection.
	RemoteAddr() string
	// Flush writes out the replies written so far (shade); an error closes
	// the connection. Handlers call it between the parts of a long reply.
	Flush() error
	// FlushSome writes out as much of the replies written so far as the
	// socket takes now, without waiting (shade), and gives back the lent
	// values it wrote; the rest waits for the next flush. A handler
	// writing a long reply calls it as the reply grows, so that the client
	// reads the reply's start while the rest is made. An error closes the
	// connection.
	FlushSome() error
	// Buffered returns the bytes of replies written and not yet flushed
	// (shade).
	Buffered() int
	// Reply returns the buffer of replies written and not yet flushed, for
	// a handler that appends a reply to it in place (shade): it appends as
	// append does and hands the result back with SetReply before it
	// writes, flushes or closes again. The slice stays the connection's;
	// the handler must not keep it. After a write error Reply returns nil
	// and SetReply does nothing.
	Reply() []byte
	// SetReply makes b, the result of appending to Reply(), the buffer of
	// replies not yet flushed (shade).
	SetReply(b []byte)
	// Grow makes room for n more bytes of replies before a handler appends
	// them to Reply (shade): where the buffer must grow, it takes a buffer
	// a long reply of any connection let go (see bigBuffers) if one is
	// long enough, instead of a new one.
	Grow(n int)
	// WriteLent writes b after the replies written so far without copying
	// it (shade): the connection borrows b and writes it out in place,
	// with the replies around it in one writev, then calls release(token).
	// It calls release exactly once, also where b will never be written
	// (a write error, the connection closing); the caller must not change
	// b until then. Replies written or appended to Reply afterwards follow
	// b. Buffered counts b.
	WriteLent(b []byte, release func(uint64), token uint64)
	// Close closes the connection.
	Close() error
	// WriteError writes an error to the client.
	WriteError(msg string)
	// WriteString writes a string to the client.
	WriteString(str string)
	// WriteBulk writes bulk bytes to the client.
	WriteBulk(bulk []byte)
	// WriteBulkString writes a bulk string to the client.
	WriteBulkString(bulk string)
	// WriteInt writes an integer to the client.
	WriteInt(num int)
	// WriteInt64 writes a 64-bit signed integer to the client.
	WriteInt64(num int64)
	// WriteUint64 writes a 64-bit unsigned integer to the client.
	WriteUint64(num uint64)
	// WriteArray writes an array header. You must then write additional
	// sub-responses to the client to complete the response.
	// For example to write two strings:
	//
	//   c.WriteArray(2)
	//   c.WriteBulkString("item 1")
	//   c.WriteBulkString("item 2")
	WriteArray(count int)
	// WriteNull writes a null to the client
	WriteNull()
	// WriteRaw writes raw data to the client.
	WriteRaw(data []byte)
	// WriteAny writes any type to the client.
	//   nil             -> null
	//   error           -> error (adds "ERR " when first word is not uppercase)
	//   string          -> bulk-string
	//   numbers         -> bulk-string
	//   []byte          -> bulk-string
	//   bool            -> bulk-string ("0" or "1")
	//   slice           -> array
	//   map             -> array with key/value pairs
	//   SimpleString    -> string
	//   SimpleInt       -> integer
	//   everything-else -> bulk-string representation using fmt.Sprint()
	WriteAny(any interface{})
	// Context returns a user-defined context
	Context() interface{}
	// SetContext sets a user-defined context
	SetContext(v interface{})
	// SetReadBuffer updates the buffer read size for the connection
	SetReadBuffer(bytes int)
	// Detach return a connection that is detached from the server.
	// Useful for operations like PubSub.
	//
	//   dconn := conn.Detach()
	//   go func(){
	//       defer dconn.Close()
	//       cmd, err := dconn.ReadCommand()
	//       if err != nil{
	//           fmt.Printf("read failed: %v\n", err)
	//	         return
	//       }
	//       fmt.Printf("received command: %v", cmd)
	//       hconn.WriteString("OK")
	//       if err := dconn.Flush(); err != nil{
	//           fmt.Printf("write failed: %v\n", err)
	//	         return
	//       }
	//   }()
	Detach() DetachedConn
	// ReadPipeline returns all commands in current pipeline, if any
	// The commands are removed from the pipeline.
	ReadPipeline() []Command
	// PeekPipeline returns all commands in current pipeline, if any.
	// The commands remain in the pipeline.
	PeekPipeline() []Command
	// NetConn returns the base net.Conn connection
	NetConn() net.Conn
}

// NewServer returns a new Redcon server configured on "tcp" network net.
func NewServer(addr string,
	handler func(conn Conn, cmd Command),
	accept func(conn Conn) bool,
	closed func(conn Conn, err error),
) *Server {
	return NewServerNetwork("tcp", addr, handler, accept, closed)
}

// NewServerTLS returns a new Redcon TLS server configured on "tcp" network net.
func NewServerTLS(addr string,
	handler func(conn Conn, cmd Command),
	accept func(conn Conn) bool,
	closed func(conn Conn, err error),
	config *tls.Config,
) *TLSServer {
	return NewServerNetworkTLS("tcp", addr, handler, accept, closed, config)
}

// NewServerNetwork returns a new Redcon server. The network net must be
// a stream-oriented network: "tcp", "tcp4", "tcp6", "unix" or "unixpacket"
func NewServerNetwork(
	net, laddr string,
	handler func(conn Conn, cmd Command),
	accept func(conn Conn) bool,
	closed func(conn Conn, err error),
) *Server {
	if handler == nil {
		panic("handler is nil")
	}
	s := newServer()
	s.net = net
	s.laddr = laddr
	s.handler = handler
	s.accept = accept
	s.closed = closed
	return s
}

// NewServerNetworkTLS returns a new TLS Redcon server. The network net must be
// a stream-oriented network: "tcp", "tcp4", "tcp6", "unix" or "unixpacket"
func NewServerNetworkTLS(
	net, laddr string,
	handler func(conn Conn, cmd Command),
	accept func(conn Conn) bool,
	closed func(conn Conn, err error),
	config *tls.Config,
) *TLSServer {
	if handler == nil {
		panic("handler is nil")
	}
	s := Server{
		net:     net,
		laddr:   laddr,
		handler: handler,
		accept:  accept,
		closed:  closed,
		conns:   make(map[*conn]bool),
	}

	tls := &TLSServer{
		config: config,
		Server: &s,
	}
	return tls
}

// Close stops listening on the TCP address.
// Already Accepted connections will be closed.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return errors.New("not serving")
	}
	s.done = true
	return s.ln.Close()
}

// ListenAndServe serves incoming connections.
func (s *Server) ListenAndServe() error {
	return s.ListenServeAndSignal(nil)
}

// Addr returns server's listen address
func (s *Server) Addr() net.Addr {
	return s.ln.Addr()
}

// Close stops listening on the TCP address.
// Already Accepted connections will be closed.
func (s *TLSServer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return errors.New("not serving")
	}
	s.done = true
	return s.ln.Close()
}

// ListenAndServe serves incoming connections.
func (s *TLSServer) ListenAndServe() error {
	return s.ListenServeAndSignal(nil)
}

func newServer() *Server { // shade: limits default in serve
	s := &Server{
		conns: make(map[*conn]bool),
	}
	return s
}

// Serve creates a new server and serves with the given net.Listener.
func Serve(ln net.Listener,
	handler func(conn Conn, cmd Command),
	accept func(conn Conn) bool,
	closed func(conn Conn, err error),
) error {
	s := newServer()
	s.mu.Lock()
	s.net = ln.Addr().Network()
	s.laddr = ln.Addr().String()
	s.ln = ln
	s.handler = handler
	s.accept = accept
	s.closed = closed
	s.mu.Unlock()
	return serve(s)
}

// ListenAndServe creates a new server and binds to addr configured on "tcp" network net.
func ListenAndServe(addr string,
	handler func(conn Conn, cmd Command),
	accept func(conn Conn) bool,
	closed func(conn Conn, err error),
) error {
	return ListenAndServeNetwork("tcp", addr, handler, accept, closed)
}

// ListenAndServeTLS creates a new TLS server and binds to addr configured on "tcp" network net.
func ListenAndServeTLS(addr string,
	handler func(conn Conn, cmd Command),
	accept func(conn Conn) bool,
	closed func(conn Conn, err error),
	config *tls.Config,
) error {
	return ListenAndServeNetworkTLS("tcp", addr, handler, accept, closed, config)
}

// ListenAndServeNetwork creates a new server and binds to addr. The network net must be
// a stream-oriented network: "tcp", "tcp4", "tcp6", "unix" or "unixpacket"
func ListenAndServeNetwork(
	net, laddr string,
	handler func(conn Conn, cmd Command),
	accept func(conn Conn) bool,
	closed func(conn Conn, err error),
) error {
	return NewServerNetwork(net, laddr, handler, accept, closed).ListenAndServe()
}

// ListenAndServeNetworkTLS creates a new TLS server and binds to addr. The network net must be
// a stream-oriented network: "tcp", "tcp4", "tcp6", "unix" or "unixpacket"
func ListenAndServeNetworkTLS(
	net, laddr string,
	handler func(conn Conn, cmd Command),
	accept func(conn Conn) bool,
	closed func(conn Conn, err error),
	config *tls.Config,
) error {
	return NewServerNetworkTLS(net, laddr, handler, accept, closed, config).ListenAndServe()
}

// ListenServeAndSignal serves incoming connections and passes nil or error
// when listening. signal can be nil.
func (s *Server) ListenServeAndSignal(signal chan error) error {
	ln, err := net.Listen(s.net, s.laddr)
	if err != nil {
		if signal != nil {
			signal <- err
		}
		return err
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	if signal != nil {
		signal <- nil
	}
	return serve(s)
}

// Serve serves incoming connections with the given net.Listener.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.ln = ln
	s.net = ln.Addr().Network()
	s.laddr = ln.Addr().String()
	s.mu.Unlock()
	return serve(s)
}

// ListenServeAndSignal serves incoming connections and passes nil or error
// when listening. signal can be nil.
func (s *TLSServer) ListenServeAndSignal(signal chan error) error {
	ln, err := tls.Listen(s.net, s.laddr, s.config)
	if err != nil {
		if signal != nil {
			signal <- err
		}
		return err
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	if signal != nil {
		signal <- nil
	}
	return serve(s.Server)
}

func serve(s *Server) error {
	// shade: event loops, where SetLoops asked for them.
	s.mu.Lock()
	n := s.nloops
	s.mu.Unlock()
	if n > 0 {
		ls, err := startLoops(s, n)
		if err != nil {
			s.ln.Close()
			return err
		}
		s.mu.Lock()
		s.loops = ls
		s.mu.Unlock()
	}
	defer func() {
		s.ln.Close()
		func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			for c := range s.conns {
				c.conn.Close()
			}
			s.conns = nil
		}()
		if s.loops != nil {
			s.loops.shutdown()
		}
	}()
	for {
		lnconn, err := s.ln.Accept()
		if err != nil {
			s.mu.Lock()
			done := s.done
			s.mu.Unlock()
			if done {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				// see https://github.com/tidwall/redcon/issues/46
				return nil
			}
			if s.AcceptError != nil {
				s.AcceptError(err)
			}
			continue
		}
		c := &conn{
			conn: lnconn,
			addr: lnconn.RemoteAddr().String(),
			wr:   NewWriter(lnconn),
			rd:   NewReader(lnconn),
		}
		// shade: the loop in handle runs a whole pipeline before it reads
		// again, so its commands may alias the read buffer (see lend).
		c.rd.lend = true
		s.mu.Lock()
		loops := s.loops
		lim := s.limits.withDefaults()
		c.rd.limits = lim
		c.rd.share = budget.NewShare(lim.Budget)
		c.rd.share.Force(int64(len(c.rd.buf)))
		c.wshare = budget.NewShare(lim.Budget)
		if s.big == nil {
			s.big = &bigBuffers{share: budget.NewShare(lim.Budget)}
		}
		c.wr.big = s.big
		c.writeTimeout = lim.WriteTimeout
		c.idleClose = s.idleClose
		s.conns[c] = true
		s.mu.Unlock()
		if s.accept != nil && !s.accept(c) {
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
			continue
		}
		if loops != nil {
			// shade: an event loop serves it (see loop.go).
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			loops.add(c)
			continue
		}
		go handle(s, c)
	}
}

// handle manages the server connection.
func handle(s *Server, c *conn) {
	var err error
	defer func() {
		if err != errDetached {
			// do not close the connection when a detach is detected.
			c.conn.Close()
			c.release() // shade
		}
		func() {
			// remove the conn from the server
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(s.conns, c)
			s.closedCallback(c, err)
		}()
	}()

	err = func() error {
		// read commands and feed back to the client
		for {
			// read pipeline commands
			if c.idleClose != 0 {
				c.conn.SetReadDeadline(time.Now().Add(c.idleClose))
			}
			cmds, err := c.rd.readCommands(nil)
			if err != nil {
				if c.answerProtocolError(err) {
					c.flush() // write errors are ignored
				}
				return err
			}
			c.cmds = cmds
			if err := c.runPipeline(s); err != nil {
				return err
			}
			if c.detached {
				// client has been detached
				return errDetached
			}
			if c.closed {
				return nil
			}
			if err := c.flush(); err != nil {
				return err
			}
		}
	}()
}

// runPipeline runs the commands of c's pipeline in turn (shade: split out
// of handle for the event loop's workers). It stops early where a command
// detaches or closes the connection.
func (c *conn) runPipeline(s *Server) error {
	for len(c.cmds) > 0 && !c.detached && !c.closed {
		cmd := c.cmds[0]
		if len(c.cmds) == 1 {
			c.cmds = nil
		} else {
			c.cmds = c.cmds[1:]
		}
		s.handler(c, cmd)
		// shade: write out a large reply buffer between commands
		// rather than let a pipeline of large values grow it, and
		// any reply at once while the clients' budget is spent.
		if !c.detached && !c.closed {
			c.wshare.Set(int64(cap(c.wr.b)))
			if c.flushDue() {
				if err := c.flush(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// answerProtocolError writes the reply to a protocol error, as every
// protocol error gets one, and reports whether err is one.
func (c *conn) answerProtocolError(err error) bool {
	perr, ok := err.(*errProtocol)
	if ok {
		c.wr.WriteError("ERR " + perr.Error())
	}
	return ok
}

// flushDue reports whether the replies waiting should be written out
// before the next command (shade): a large reply buffer, or any reply
// while the clients' budget is spent.
func (c *conn) flushDue() bool {
	n := c.Buffered()
	return n >= maxBufferCap || (n > 0 && c.overBudget())
}

// conn represents a client connection
type conn struct {
	conn      net.Conn
	wr        *Writer
	rd        *Reader
	addr      string
	ctx       interface{}
	detached  bool
	closed    bool
	cmds      []Command
	idleClose time.Duration

	// shade: the write buffer's part of the clients' budget, and how long
	// a flush may block on a client that does not read.
	wshare       *budget.Share
	writeTimeout time.Duration

	// shade: a connection an event loop serves (see loop.go); conn is
	// then nil but while a worker goroutine holds it.
	lp *loop
	ls loopState
}

// flush writes the reply buffer out within the write timeout, and then
// gives its memory back to the budget if the budget is spent (shade).
func (c *conn) flush() error {
	if c.lp != nil && !c.detached { // shade: a worker of an event loop
		return c.lp.flushWorker(c)
	}
	if c.writeTimeout > 0 && c.Buffered() > 0 && c.conn != nil { // shade: nil: a detach that failed
		c.conn.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	}
	err := c.wr.Flush()
	c.flushed()
	return err
}

// flushed lets the write buffer go while the clients' budget is spent,
// and charges what it keeps (shade).
func (c *conn) flushed() {
	if c.overBudget() {
		c.wr.b = nil
	}
	c.wshare.Set(int64(cap(c.wr.b)))
}

// overBudget reports whether the clients' budget is spent (shade).
func (c *conn) overBudget() bool {
	b := c.rd.limits.Budget
	return b != nil && b.Limit() > 0 && b.Used() >= b.Limit()
}

// Flush writes out the replies written so far (shade), within the write
// timeout; a handler that writes a long reply in parts calls it between
// parts so that the reply need not be held whole.
func (c *conn) Flush() error {
	return c.closeOn(c.flush())
}

// closeOn closes c after a failed write (shade): err, where not nil.
func (c *conn) closeOn(err error) error {
	if err != nil {
		c.closed = true
		if c.conn != nil { // shade: an event loop's worker then ends c
			c.conn.Close()
		}
	}
	return err
}

// FlushSome writes out as much of the replies written so far as the
// socket takes now, without waiting (shade); what it does not take stays
// for the next flush. An error closes the connection, as Flush's does.
func (c *conn) FlushSome() error {
	if c.wr.err != nil || c.Buffered() == 0 {
		return c.wr.err
	}
	out := c.wr.vector()
	var n int
	var err error
	switch {
	case c.lp != nil && !c.detached:
		n, err = writevFd(c.ls.fd, &out, &c.ls.iov)
	case c.conn != nil:
		var ok bool
		if n, ok, err = c.writeSomeConn(out); !ok {
			return nil // a TLS connection: its next Flush writes it all
		}
	default:
		return nil
	}
	c.wr.advance(n)
	clear(c.wr.iov) // hold no reply
	if err == unix.EAGAIN {
		err = nil
	}
	if err != nil {
		c.wr.written(err)
	}
	return c.closeOn(err)
}

// writeSomeConn writes as much of out as a goroutine's connection takes
// in one try (shade): no loop uses c.ls's scratch then. ok is false where
// the connection gives no descriptor to write (TLS). Apart from FlushSome
// so that the closure's variables escape to the heap here alone, not on
// an event loop's FlushSome.
func (c *conn) writeSomeConn(out net.Buffers) (n int, ok bool, err error) {
	sc, ok := c.conn.(syscall.Conn)
	if !ok {
		return 0, false, nil
	}
	rc, rerr := sc.SyscallConn()
	if rerr != nil {
		return 0, false, nil
	}
	if werr := rc.Write(func(fd uintptr) bool {
		n, err = writevFd(int(fd), &out, &c.ls.iov)
		return true // one try: never wait
	}); werr != nil {
		err = werr
	}
	return n, true, err
}

func (c *conn) Buffered() int { return len(c.wr.b) - c.wr.sent + c.wr.lentLen }

func (c *conn) Reply() []byte {
	if c.wr.err != nil {
		return nil
	}
	return c.wr.b
}

func (c *conn) SetReply(b []byte) {
	if c.wr.err == nil {
		c.wr.b = b
	}
}

func (c *conn) Grow(n int) { c.wr.grow(n) }

func (c *conn) WriteLent(b []byte, release func(uint64), token uint64) {
	c.wr.WriteLent(b, release, token)
}

func (c *conn) Close() error {
	if c.lp != nil && !c.detached { // shade: the loop's worker ends c
		c.flush()
		c.closed = true
		return nil
	}
	c.flush()
	c.closed = true
	if c.conn == nil { // shade: a detach that failed
		return nil
	}
	return c.conn.Close()
}
func (c *conn) Context() interface{}        { return c.ctx }
func (c *conn) SetContext(v interface{})    { c.ctx = v }
func (c *conn) SetReadBuffer(n int)         {}
func (c *conn) WriteString(str string)      { c.wr.WriteString(str) }
func (c *conn) WriteBulk(bulk []byte)       { c.wr.WriteBulk(bulk) }
func (c *conn) WriteBulkString(bulk string) { c.wr.WriteBulkString(bulk) }
func (c *conn) WriteInt(num int)            { c.wr.WriteInt(num) }
func (c *conn) WriteInt64(num int64)        { c.wr.WriteInt64(num) }
func (c *conn) WriteUint64(num uint64)      { c.wr.WriteUint64(num) }
func (c *conn) WriteError(msg string)       { c.wr.WriteError(msg) }
func (c *conn) WriteArray(count int)        { c.wr.WriteArray(count) }
func (c *conn) WriteNull()                  { c.wr.WriteNull() }
func (c *conn) WriteRaw(data []byte)        { c.wr.WriteRaw(data) }
func (c *conn) WriteAny(v interface{})      { c.wr.WriteAny(v) }
func (c *conn) RemoteAddr() string          { return c.addr }
func (c *conn) ReadPipeline() []Command {
	cmds := c.cmds
	c.cmds = nil
	return cmds
}
func (c *conn) PeekPipeline() []Command {
	return c.cmds
}
func (c *conn) NetConn() net.Conn {
	if c.lp != nil && c.conn == nil { // shade: see loop.netConn
		c.lp.netConn(c)
	}
	return c.conn
}

// BaseWriter returns the underlying connection writer, if any
func BaseWriter(c Conn) *Writer {
	if c, ok := c.(*conn); ok {
		return c.wr
	}
	return nil
}

// DetachedConn represents a connection that is detached from the server
type DetachedConn interface {
	// Conn is the original connection
	Conn
	// ReadCommand reads the next client command.
	ReadCommand() (Command, error)
	// Flush flushes any writes to the network.
	Flush() error
}

// Detach removes the current connection from the server loop and returns
// a detached connection. This is useful for operations such as PubSub.
// The detached connection must be closed by calling Close() when done.
// All writes such as WriteString() will not be written to the client
// until Flush() is called.
func (c *conn) Detach() DetachedConn {
	c.detached = true
	// shade: the rest of the pipeline aliases the read buffer, which the
	// detached connection reads into again: copy it, and copy from now on.
	cmds := copyCommands(c.cmds)
	c.cmds = nil
	c.rd.lend = false
	if c.lp != nil {
		// shade: from an event loop's worker: the detached connection
		// reads and writes a net.Conn of its own.
		var rw io.ReadWriter = failedIO{errDetachFailed}
		if nc := c.NetConn(); nc != nil {
			rw = nc
		}
		c.rd.rd = bufio.NewReader(rw)
		c.rd.poll = false
		c.wr.w = rw
	}
	return &detachedConn{conn: c, cmds: cmds}
}

// copyCommands returns cmds with Raw and Args copied out of the read
// buffer (shade).
func copyCommands(cmds []Command) []Command {
	if len(cmds) == 0 {
		return nil
	}
	out := make([]Command, len(cmds))
	for i, cmd := range cmds {
		raw := append([]byte(nil), cmd.Raw...)
		out[i] = Command{Raw: raw, Args: make([][]byte, len(cmd.Args))}
		for j, arg := range cmd.Args {
			out[i].Args[j] = append([]byte(nil), arg...)
		}
	}
	return out
}

type detachedConn struct {
	*conn
	cmds []Command
}

// Flush writes and Write* calls to the client.
func (dc *detachedConn) Flush() error {
	return dc.conn.wr.Flush()
}

// ReadCommand read the next command from the client.
func (dc *detachedConn) ReadCommand() (Command, error) {
	if len(dc.cmds) > 0 {
		cmd := dc.cmds[0]
		if len(dc.cmds) == 1 {
			dc.cmds = nil
		} else {
			dc.cmds = dc.cmds[1:]
		}
		return cmd, nil
	}
	cmd, err := dc.rd.ReadCommand()
	if err != nil {
		return Command{}, err
	}
	return cmd, nil
}

// Command represent a command
type Command struct {
	// Raw is a encoded RESP message.
	Raw []byte
	// Args is a series of arguments that make up the command.
	Args [][]byte
}

// Server defines a server for clients for managing client connections.
type Server struct {
	mu        sync.Mutex
	net       string
	laddr     string
	handler   func(conn Conn, cmd Command)
	accept    func(conn Conn) bool
	closed    func(conn Conn, err error)
	conns     map[*conn]bool
	ln        net.Listener
	done      bool
	idleClose time.Duration
	limits    Limits // shade
	// shade: event loops (SetLoops); loops is nil where there are none.
	nloops int
	fast   func(conn Conn, cmd Command) bool
	loops  *loops
	// shade: write buffers longer than maxWriteKeep kept for the next
	// long reply; made with the first connection, under the limits.
	big *bigBuffers

	// AcceptError is an optional function used to handle Accept errors.
	AcceptError func(err error)
}

// TLSServer defines a server for clients for managing client connections.
type TLSServer struct {
	*Server
	config *tls.Config
}

// Writer allows for writing RESP messages.
type Writer struct {
	w   io.Writer
	b   []byte
	err error

	// shade: values lent to the writer (WriteLent), in order, their bytes
	// in all, and the vector Flush writes them out with; sent: the bytes
	// of b a FlushSome wrote (its lent values written in whole are given
	// back, one written in part is cut to its rest).
	lent    []lentValue
	lentLen int
	iov     net.Buffers
	sent    int
	// shade: where a buffer longer than maxWriteKeep goes once written,
	// and where grow looks first; nil: nowhere.
	big *bigBuffers
}

// lentValue is a value lent to a Writer, to go out after b[:at] (shade).
type lentValue struct {
	at      int
	b       []byte
	release func(uint64)
	token   uint64
}

// NewWriter creates a new RESP writer.
func NewWriter(wr io.Writer) *Writer {
	return &Writer{
		w: wr,
	}
}

// WriteNull writes a null to the client
func (w *Writer) WriteNull() {
	if w.err != nil {
		return
	}
	w.b = AppendNull(w.b)
}

// WriteArray writes an array header. You must then write additional
// sub-responses to the client to complete the response.
// For example to write two strings:
//
//	c.WriteArray(2)
//	c.WriteBulkString("item 1")
//	c.WriteBulkString("item 2")
func (w *Writer) WriteArray(count int) {
	if w.err != nil {
		return
	}
	w.b = AppendArray(w.b, count)
}

// WriteBulk writes bulk bytes to the client.
func (w *Writer) WriteBulk(bulk []byte) {
	if w.err != nil {
		return
	}
	w.b = AppendBulk(w.b, bulk)
}

// WriteBulkString writes a bulk string to the client.
func (w *Writer) WriteBulkString(bulk string) {
	if w.err != nil {
		return
	}
	w.b = AppendBulkString(w.b, bulk)
}

// Buffer returns the unflushed buffer. This is a copy so changes
// to the resulting []byte will not affect the writer.
func (w *Writer) Buffer() []byte {
	if w.err != nil {
		return nil
	}
	return append([]byte(nil), w.b[w.sent:]...)
}

// SetBuffer replaces the unflushed buffer with new bytes.
func (w *Writer) SetBuffer(raw []byte) {
	if w.err != nil {
		return
	}
	w.b, w.sent = w.b[:0], 0
	w.b = append(w.b, raw...)
}

// Flush writes all unflushed Write* calls to the underlying writer.
func (w *Writer) Flush() error {
	if w.err != nil {
		w.releaseLent()
		return w.err
	}
	var err error
	if len(w.lent) == 0 {
		_, err = w.w.Write(w.b[w.sent:])
	} else {
		iov := w.vector()
		_, err = iov.WriteTo(w.w) // consumes iov, a copy of w.iov
	}
	w.written(err)
	return w.err
}

// written resets the writer once a write of everything waiting ended with
// err (shade): the vector cleared (it holds neither the values nor the
// buffer), the lent values given back, the buffer kept for more replies
// (shade: up to maxWriteKeep, upstream maxBufferCap) or let go after an
// error, which the writer keeps.
func (w *Writer) written(err error) {
	clear(w.iov)
	w.iov = w.iov[:0]
	w.releaseLent()
	if err != nil {
		w.err = err
	}
	w.sent = 0
	if cap(w.b) > maxWriteKeep || w.err != nil {
		if w.err == nil {
			w.big.put(w.b)
		}
		w.b = nil
	} else {
		w.b = w.b[:0]
	}
}

// advance drops the first n bytes of what waits to be written, which a
// write took (shade): the lent values among them are given back, and once
// nothing waits the buffer starts again from its beginning.
func (w *Writer) advance(n int) {
	prev, done := min(w.sent, len(w.b)), 0
	for _, l := range w.lent {
		if at := min(l.at, len(w.b)); at > prev {
			d := min(n, at-prev)
			prev, n = prev+d, n-d
		}
		if n == 0 && len(l.b) > 0 {
			break
		}
		d := min(n, len(l.b))
		w.lent[done].b = l.b[d:]
		w.lentLen -= d
		n -= d
		if d < len(l.b) {
			break // written in part
		}
		l.release(l.token)
		w.lent[done] = lentValue{}
		done++
	}
	w.lent = w.lent[:copy(w.lent, w.lent[done:])]
	clear(w.lent[len(w.lent):cap(w.lent)][:done])
	w.sent = min(prev+n, len(w.b))
	if len(w.lent) == 0 && w.sent == len(w.b) {
		w.b, w.sent = w.b[:0], 0
	}
}

// grow makes room for n more bytes in the buffer (shade): in a buffer a
// long reply let go (bigBuffers) where one is long enough, otherwise as
// append grows it. What waits to be written, lent values' places and the
// bytes sent included, moves with it; the old buffer is left to the
// garbage collector, as append leaves it, since a write may still use it.
func (w *Writer) grow(n int) {
	if w.err != nil || cap(w.b)-len(w.b) >= n {
		return
	}
	if b := w.big.take(len(w.b) + n); b != nil {
		w.b = append(b, w.b...)
		return
	}
	w.b = slices.Grow(w.b, n)
}

// bigBuffers keeps write buffers longer than maxWriteKeep once their
// replies are written, up to maxBigKept bytes in all, for the next long
// reply of any connection to take (shade). Without it every MGET reply
// longer than maxWriteKeep (256 values of 4 KiB, copied into the reply)
// grew a new buffer, 8 KiB, 16 KiB, ... to 2 MiB, and let it go: the
// garbage made the peer's small Go heap collect every few replies, and the
// collector's work held up the loop that answers the replies (the MGET's
// latency past 4 ms in one call of ten). The kept buffers are charged to
// the clients' budget, and none is kept while it is spent. Safe for
// concurrent use: loops and worker goroutines share it.
type bigBuffers struct {
	mu    sync.Mutex
	bufs  [][]byte // each empty, of capacity above maxWriteKeep
	held  int      // their capacities added up
	share *budget.Share
}

// put keeps b, if it fits within maxBigKept and the clients' budget;
// b must no longer be used.
func (k *bigBuffers) put(b []byte) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.held+cap(b) > maxBigKept || !k.share.Grow(int64(cap(b))) {
		return
	}
	k.bufs = append(k.bufs, b[:0])
	k.held += cap(b)
}

// take returns the shortest kept buffer with room for n bytes, empty, and
// no longer kept; nil if there is none.
func (k *bigBuffers) take(n int) []byte {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	best := -1
	for i, b := range k.bufs {
		if cap(b) >= n && (best < 0 || cap(b) < cap(k.bufs[best])) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	b := k.bufs[best]
	last := len(k.bufs) - 1
	k.bufs[best] = k.bufs[last]
	k.bufs[last] = nil
	k.bufs = k.bufs[:last]
	k.held -= cap(b)
	k.share.Shrink(int64(cap(b)))
	return b
}

// WriteLent writes b without copying it (shade): the writer borrows b
// until the next Flush has written it out in place, then calls
// release(token), as Conn.WriteLent describes. After a write error it
// calls release at once.
func (w *Writer) WriteLent(b []byte, release func(uint64), token uint64) {
	if w.err != nil {
		release(token)
		return
	}
	w.lent = append(w.lent, lentValue{at: len(w.b), b: b, release: release, token: token})
	w.lentLen += len(b)
}

// vector returns the buffer with the lent values in their places, as the
// parts of one vectored write, in w.iov (shade): a net.Conn writes them
// with one writev.
func (w *Writer) vector() net.Buffers {
	iov, prev := w.iov[:0], min(w.sent, len(w.b))
	for _, l := range w.lent {
		at := min(l.at, len(w.b)) // a reply cut back below a lent value
		if at > prev {
			iov = append(iov, w.b[prev:at])
			prev = at
		}
		if len(l.b) > 0 {
			iov = append(iov, l.b)
		}
	}
	if prev < len(w.b) {
		iov = append(iov, w.b[prev:])
	}
	w.iov = iov
	return iov
}

// releaseLent gives back every value lent and not yet given back (shade).
func (w *Writer) releaseLent() {
	for i, l := range w.lent {
		l.release(l.token)
		w.lent[i] = lentValue{}
	}
	w.lent, w.lentLen = w.lent[:0], 0
}

// WriteError writes an error to the client.
func (w *Writer) WriteError(msg string) {
	if w.err != nil {
		return
	}
	w.b = AppendError(w.b, msg)
}

// WriteString writes a string to the client.
func (w *Writer) WriteString(msg string) {
	if w.err != nil {
		return
	}
	w.b = AppendString(w.b, msg)
}

// WriteInt writes an integer to the client.
func (w *Writer) WriteInt(num int) {
	if w.err != nil {
		return
	}
	w.WriteInt64(int64(num))
}

// WriteInt64 writes a 64-bit signed integer to the client.
func (w *Writer) WriteInt64(num int64) {
	if w.err != nil {
		return
	}
	w.b = AppendInt(w.b, num)
}

// WriteUint64 writes a 64-bit unsigned integer to the client.
func (w *Writer) WriteUint64(num uint64) {
	if w.err != nil {
		return
	}
	w.b = AppendUint(w.b, num)
}

// WriteRaw writes raw data to the client.
func (w *Writer) WriteRaw(data []byte) {
	if w.err != nil {
		return
	}
	w.b = append(w.b, data...)
}

// WriteAny writes any type to client.
//
//	nil             -> null
//	error           -> error (adds "ERR " when first word is not uppercase)
//	string          -> bulk-string
//	numbers         -> bulk-string
//	[]byte          -> bulk-string
//	bool            -> bulk-string ("0" or "1")
//	slice           -> array
//	map             -> array with key/value pairs
//	SimpleString    -> string
//	SimpleInt       -> integer
//	everything-else -> bulk-string representation using fmt.Sprint()
func (w *Writer) WriteAny(v interface{}) {
	if w.err != nil {
		return
	}
	w.b = AppendAny(w.b, v)
}

// Reader represent a reader for RESP or telnet commands.
type Reader struct {
	rd    *bufio.Reader
	buf   []byte
	start int
	end   int
	cmds  []Command

	// shade: with lend set, readCommands returns commands whose Raw and
	// Args alias buf, in a slice and Args backed by the reused list and
	// args, instead of copies. They stay valid until the next read, so
	// only a caller that is done with a batch before it reads the next
	// may set it (the server's connection loop does).
	lend bool
	list []Command
	args [][]byte
	// shade: need is the length of the incomplete command at start, once
	// its header has told; 0 while unknown.
	need int
	// shade: the bounds on input, the reused marks of a multibulk parse,
	// and this reader's part of the clients' budget (its buffer, and its
	// slabs as slabBytes).
	limits    Limits
	marks     []int
	share     *budget.Share
	slabBytes int64
	// shade: with poll set, readCommands only parses what buf holds and
	// never reads: an event loop reads for it (see loop.go).
	poll bool
	// shade: retained is the size of an earlier buffer that commands
	// parsed and still to run alias, charged to share until the next
	// parse (makeRoom).
	retained int
	// shade: filled is set by an event loop whose read filled all the
	// room buf had: the client sends more between two reads than buf
	// holds, and makeRoom doubles it, up to maxReadAhead.
	filled bool
}

// NewReader returns a command reader which will read RESP or telnet commands.
func NewReader(rd io.Reader) *Reader {
	return &Reader{
		rd:     bufio.NewReader(rd),
		buf:    make([]byte, 4096),
		limits: Limits{}.withDefaults(),
	}
}

func parseInt(b []byte) (int, bool) {
	if len(b) == 1 && b[0] >= '0' && b[0] <= '9' {
		return int(b[0] - '0'), true
	}
	var n int
	var sign bool
	var i int
	if len(b) > 0 && b[0] == '-' {
		sign = true
		i++
	}
	for ; i < len(b); i++ {
		if b[i] < '0' || b[i] > '9' {
			return 0, false
		}
		n = n*10 + int(b[i]-'0')
	}
	if sign {
		n *= -1
	}
	return n, true
}

func (rd *Reader) readCommands(leftover *int) ([]Command, error) {
	// shade: a loop (goto top after each read) where upstream recursed,
	// one level per read, so that a command trickling in a byte at a time
	// could not grow the stack without bound.
	if rd.limits.MaxInline == 0 { // shade: a Reader made without NewReader
		rd.limits = rd.limits.withDefaults()
	}
	if rd.retained > 0 { // shade: the commands of the last parse are done
		rd.share.Shrink(int64(rd.retained))
		rd.retained = 0
	}
top:
	var cmds []Command
	// shade: a drained buffer is rewound and kept whole (upstream cut it
	// back to 4 KiB, so that the next pipeline of large commands grew it
	// again by reallocation); only one past maxReadKeep is given back.
	if (rd.rd != nil || rd.poll) && rd.end == rd.start {
		rd.start, rd.end = 0, 0
		if len(rd.buf) > maxReadKeep || (len(rd.buf) > 4096 && rd.overBudget()) {
			rd.share.Shrink(int64(len(rd.buf) - 4096))
			rd.buf = make([]byte, 4096)
		}
	}
	if rd.lend {
		cmds = rd.list[:0]
		rd.args = rd.args[:0]
	}
	need := 0
	b := rd.buf[rd.start:rd.end]
	if len(b) > 0 {
		// we have data, yay!
		// but is this enough data for a complete command? or multiple?
	next:
		switch b[0] {
		default:
			// just a plain text command
			// shade: a line is bounded, as Redis bounds it.
			if nl := indexNewline(b, rd.limits.MaxInline); nl < 0 && len(b) > rd.limits.MaxInline {
				return nil, errInlineTooBig
			}
			for i := 0; i < len(b); i++ {
				if b[i] == '\n' {
					var line []byte
					if i > 0 && b[i-1] == '\r' {
						line = b[:i-1]
					} else {
						line = b[:i]
					}
					var cmd Command
					var quote bool
					var quotech byte
					var escape bool
				outer:
					for {
						nline := make([]byte, 0, len(line))
						for i := 0; i < len(line); i++ {
							c := line[i]
							if !quote {
								if c == ' ' {
									if len(nline) > 0 {
										cmd.Args = append(cmd.Args, nline)
									}
									line = line[i+1:]
									continue outer
								}
								if c == '"' || c == '\'' {
									if i != 0 {
										return nil, errUnbalancedQuotes
									}
									quotech = c
									quote = true
									line = line[i+1:]
									continue outer
								}
							} else {
								if escape {
									escape = false
									switch c {
									case 'n':
										c = '\n'
									case 'r':
										c = '\r'
									case 't':
										c = '\t'
									}
								} else if c == quotech {
									quote = false
									quotech = 0
									cmd.Args = append(cmd.Args, nline)
									line = line[i+1:]
									if len(line) > 0 && line[0] != ' ' {
										return nil, errUnbalancedQuotes
									}
									continue outer
								} else if c == '\\' {
									escape = true
									continue
								}
							}
							nline = append(nline, c)
						}
						if quote {
							return nil, errUnbalancedQuotes
						}
						if len(line) > 0 {
							cmd.Args = append(cmd.Args, line)
						}
						break
					}
					if len(cmd.Args) > 0 {
						// convert this to resp command syntax
						var wr Writer
						wr.WriteArray(len(cmd.Args))
						for i := range cmd.Args {
							wr.WriteBulk(cmd.Args[i])
							cmd.Args[i] = append([]byte(nil), cmd.Args[i]...)
						}
						cmd.Raw = wr.b
						cmds = append(cmds, cmd)
					}
					b = b[i+1:]
					if len(b) > 0 {
						goto next
					} else {
						goto done
					}
				}
			}
		case '*':
			// resp formatted command
			marks := rd.marks[:0] // shade: reused
			if nl := indexNewline(b, rd.limits.MaxInline); nl < 0 && len(b) > rd.limits.MaxInline {
				return nil, errMultiBulkTooBig
			}
		outer2:
			for i := 1; i < len(b); i++ {
				if b[i] == '\n' {
					if b[i-1] != '\r' {
						return nil, errInvalidMultiBulkLength
					}
					count, ok := parseInt(b[1 : i-1])
					if !ok || count <= 0 || i > 24 { // shade: bounded
						return nil, errInvalidMultiBulkLength
					}
					if count > rd.limits.MaxArgs { // shade
						return nil, errTooManyArgs
					}
					marks = marks[:0]
					for j := 0; j < count; j++ {
						// read bulk length
						i++
						if i >= len(b) {
							// shade: not ready. Upstream went on
							// counting j up to count, a long spin for
							// a count such as *99999999999.
							break outer2
						}
						{
							if b[i] != '$' {
								return nil, &errProtocol{msg: "expected '$', got '" +
									string(b[i]) + "'"}
							}
							si := i
							for ; i < len(b); i++ {
								if i-si > 24 { // shade: no length has more digits
									return nil, errBulkCountTooBig
								}
								if b[i] == '\n' {
									if b[i-1] != '\r' {
										return nil, errInvalidBulkLength
									}
									size, ok := parseInt(b[si+1 : i-1])
									if !ok || size < 0 || size > maxBulkLen { // shade: bounded
										return nil, errInvalidBulkLength
									}
									if size > rd.limits.MaxBulk { // shade
										return nil, &errProtocol{msg: fmt.Sprintf("bulk argument of %d bytes is over the limit of %d", size, rd.limits.MaxBulk), limit: LimitBulk}
									}
									if i+size+2 >= len(b) {
										// not ready
										need = i + size + 3 // shade
										break outer2
									}
									if b[i+size+2] != '\n' ||
										b[i+size+1] != '\r' {
										return nil, errInvalidBulkLength
									}
									i++
									marks = append(marks, i, i+size)
									rd.marks = marks // shade: keep what it grew to
									i += size + 1
									break
								}
							}
						}
					}
					if len(marks) == count*2 {
						var cmd Command
						if rd.rd != nil && !rd.lend { // shade: no copy when lending
							// make a raw copy of the entire command when
							// there's a underlying reader.
							cmd.Raw = append([]byte(nil), b[:i+1]...)
						} else {
							// just assign the slice
							cmd.Raw = b[:i+1]
						}
						if rd.lend {
							cmd.Args = rd.lendArgs(len(marks) / 2)
						} else {
							cmd.Args = make([][]byte, len(marks)/2)
						}
						// slice up the raw command into the args based on
						// the recorded marks.
						for h := 0; h < len(marks); h += 2 {
							cmd.Args[h/2] = cmd.Raw[marks[h]:marks[h+1]]
						}
						cmds = append(cmds, cmd)
						b = b[i+1:]
						if len(b) > 0 {
							goto next
						} else {
							goto done
						}
					}
				}
			}
		}
	done:
		rd.start = rd.end - len(b)
	}
	rd.need = need
	if rd.lend {
		rd.list = cmds[:0]
	}
	// shade: the slabs are counted (they cannot be refused: they are
	// bounded by the bytes in the buffer, which were).
	if slabs := int64(cap(rd.args))*24 + int64(cap(rd.marks))*8 + int64(cap(rd.list))*56; slabs != rd.slabBytes {
		if slabs > rd.slabBytes {
			rd.share.Force(slabs - rd.slabBytes)
		} else {
			rd.share.Shrink(rd.slabBytes - slabs)
		}
		rd.slabBytes = slabs
	}
	if leftover != nil {
		*leftover = rd.end - rd.start
	}
	if len(cmds) > 0 {
		return cmds, nil
	}
	if rd.rd == nil || rd.poll {
		return nil, errIncompleteCommand
	}
	if err := rd.makeRoom(false); err != nil {
		return nil, err
	}
	n, err := rd.rd.Read(rd.buf[rd.end:])
	if err != nil {
		return nil, err
	}
	rd.end += n
	goto top
}

// makeRoom makes room after end for more of the incomplete command at
// start (shade). It moves the command to the front of the buffer when the
// rest will not fit where it lies, and grows the buffer only when it will
// not fit at all. Upstream doubled the buffer whenever it was full, copying
// everything, and never moved the command.
//
// With keep set, commands parsed already are still to run and their
// arguments lie in buf, so nothing is moved within it: where the command
// would be moved, a new buffer of the same size takes it instead. The
// first buffer so replaced is the one the commands alias: it stays
// charged to the budget (retained) until the next parse, when they are
// done; a later one held only input, and goes.
//
// After a read that filled all the room there was (filled), the buffer
// doubles, up to maxReadAhead, where the budget allows; where it does
// not, the reader goes on with the buffer it has.
//
// shade: growth is charged to the reader's share of the clients' budget
// first; ErrClientMemory when it does not fit.
func (rd *Reader) makeRoom(keep bool) error {
	pending := rd.end - rd.start
	want := pending + 1
	if rd.need > want {
		// A bulk length is trusted only so far ahead of the bytes that
		// have arrived.
		want = rd.need
		if want > pending+maxReadPregrow {
			want = pending + maxReadPregrow
		}
	}
	ahead := rd.filled && 2*len(rd.buf) <= maxReadAhead && want <= len(rd.buf)
	rd.filled = false
	if !ahead && rd.start+want <= len(rd.buf) {
		return nil
	}
	size := len(rd.buf)
	switch {
	case ahead || want > len(rd.buf):
		// Room for twice what is wanted, so that moving the tail of a
		// pipeline to the front copies little.
		size *= 2
		for size < 2*want {
			size *= 2
		}
	case !keep:
		copy(rd.buf, rd.buf[rd.start:rd.end])
		rd.start, rd.end = 0, pending
		return nil
	}
	grow, retain := size-len(rd.buf), keep && rd.retained == 0
	if retain {
		grow = size
	}
	if !rd.share.Grow(int64(grow)) {
		if ahead {
			return rd.makeRoom(keep) // the clients' memory is short: read in what there is
		}
		return errClientMemoryFull
	}
	if retain {
		rd.retained = len(rd.buf)
	}
	newbuf := make([]byte, size)
	copy(newbuf, rd.buf[rd.start:rd.end])
	rd.buf = newbuf
	rd.start, rd.end = 0, pending
	return nil
}

// overBudget reports whether the clients' budget is spent (shade).
func (rd *Reader) overBudget() bool {
	b := rd.limits.Budget
	return b != nil && b.Limit() > 0 && b.Used() >= b.Limit()
}

// indexNewline returns the index of the first '\n' among the first limit+1
// bytes of b, or -1 (shade).
func indexNewline(b []byte, limit int) int {
	if len(b) > limit+1 {
		b = b[:limit+1]
	}
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

// lendArgs returns n argument slots from the reused args slab (shade).
func (rd *Reader) lendArgs(n int) [][]byte {
	if cap(rd.args)-len(rd.args) < n {
		// Commands already returned keep the old slab.
		size := 2 * cap(rd.args)
		if size < len(rd.args)+n {
			size = len(rd.args) + n
		}
		if size < 64 {
			size = 64
		}
		rd.args = make([][]byte, 0, size)
	}
	k := len(rd.args)
	rd.args = rd.args[:k+n]
	return rd.args[k : k+n : k+n]
}

// ReadCommands reads the next pipeline commands.
func (rd *Reader) ReadCommands() ([]Command, error) {
	for {
		if len(rd.cmds) > 0 {
			cmds := rd.cmds
			rd.cmds = nil
			return cmds, nil
		}
		cmds, err := rd.readCommands(nil)
		if err != nil {
			return []Command{}, err
		}
		rd.cmds = cmds
	}
}

// ReadCommand reads the next command.
func (rd *Reader) ReadCommand() (Command, error) {
	if len(rd.cmds) > 0 {
		cmd := rd.cmds[0]
		rd.cmds = rd.cmds[1:]
		return cmd, nil
	}
	cmds, err := rd.readCommands(nil)
	if err != nil {
		return Command{}, err
	}
	rd.cmds = cmds
	return rd.ReadCommand()
}

// Parse parses a raw RESP message and returns a command.
func Parse(raw []byte) (Command, error) {
	rd := Reader{buf: raw, end: len(raw)}
	var leftover int
	cmds, err := rd.readCommands(&leftover)
	if err != nil {
		return Command{}, err
	}
	if leftover > 0 {
		return Command{}, errTooMuchData
	}
	return cmds[0], nil

}

// A Handler responds to an RESP request.
type Handler interface {
	ServeRESP(conn Conn, cmd Command)
}

// The HandlerFunc type is an adapter to allow the use of
// ordinary functions as RESP handlers. If f is a function
// with the appropriate signature, HandlerFunc(f) is a
// Handler that calls f.
type HandlerFunc func(conn Conn, cmd Command)

// ServeRESP calls f(w, r)
func (f HandlerFunc) ServeRESP(conn Conn, cmd Command) {
	f(conn, cmd)
}

// ServeMux is an RESP command multiplexer.
type ServeMux struct {
	handlers map[string]Handler
}

// NewServeMux allocates and returns a new ServeMux.
func NewServeMux() *ServeMux {
	return &ServeMux{
		handlers: make(map[string]Handler),
	}
}

// HandleFunc registers the handler function for the given command.
func (m *ServeMux) HandleFunc(command string, handler func(conn Conn, cmd Command)) {
	if handler == nil {
		panic("redcon: nil handler")
	}
	m.Handle(command, HandlerFunc(handler))
}

// Handle registers the handler for the given command.
// If a handler already exists for command, Handle panics.
func (m *ServeMux) Handle(command string, handler Handler) {
	if command == "" {
		panic("redcon: invalid command")
	}
	if handler == nil {
		panic("redcon: nil handler")
	}
	if _, exist := m.handlers[command]; exist {
		panic("redcon: multiple registrations for " + command)
	}

	m.handlers[command] = handler
}

// ServeRESP dispatches the command to the handler.
func (m *ServeMux) ServeRESP(conn Conn, cmd Command) {
	command := strings.ToLower(string(cmd.Args[0]))

	if handler, ok := m.handlers[command]; ok {
		handler.ServeRESP(conn, cmd)
	} else {
		conn.WriteError("ERR unknown command '" + command + "'")
	}
}

// PubSub is a Redis compatible pub/sub server
type PubSub struct {
	mu     sync.RWMutex
	nextid uint64
	initd  bool
	chans  *btree.BTree
	conns  map[Conn]*pubSubConn
}

// Subscribe a connection to PubSub
func (ps *PubSub) Subscribe(conn Conn, channel string) {
	ps.subscribe(conn, false, channel)
}

// Psubscribe a connection to PubSub
func (ps *PubSub) Psubscribe(conn Conn, channel string) {
	ps.subscribe(conn, true, channel)
}

// Publish a message to subscribers
func (ps *PubSub) Publish(channel, message string) int {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	if !ps.initd {
		return 0
	}
	var sent int
	// write messages to all clients that are subscribed on the channel
	pivot := &pubSubEntry{pattern: false, channel: channel}
	ps.chans.Ascend(pivot, func(item interface{}) bool {
		entry := item.(*pubSubEntry)
		if entry.channel != pivot.channel || entry.pattern != pivot.pattern {
			return false
		}
		entry.sconn.writeMessage(entry.pattern, "", channel, message)
		sent++
		return true
	})

	// match on and write all psubscribe clients
	pivot = &pubSubEntry{pattern: true}
	ps.chans.Ascend(pivot, func(item interface{}) bool {
		entry := item.(*pubSubEntry)
		if match.Match(channel, entry.channel) {
			entry.sconn.writeMessage(entry.pattern, entry.channel, channel,
				message)
		}
		sent++
		return true
	})

	return sent
}

type pubSubConn struct {
	id      uint64
	mu      sync.Mutex
	conn    Conn
	dconn   DetachedConn
	entries map[*pubSubEntry]bool
}

type pubSubEntry struct {
	pattern bool
	sconn   *pubSubConn
	channel string
}

func (sconn *pubSubConn) writeMessage(pat bool, pchan, channel, msg string) {
	sconn.mu.Lock()
	defer sconn.mu.Unlock()
	if pat {
		sconn.dconn.WriteArray(4)
		sconn.dconn.WriteBulkString("pmessage")
		sconn.dconn.WriteBulkString(pchan)
		sconn.dconn.WriteBulkString(channel)
		sconn.dconn.WriteBulkString(msg)
	} else {
		sconn.dconn.WriteArray(3)
		sconn.dconn.WriteBulkString("message")
		sconn.dconn.WriteBulkString(channel)
		sconn.dconn.WriteBulkString(msg)
	}
	sconn.dconn.Flush()
}

// bgrunner runs in the background and reads incoming commands from the
// detached client.
func (sconn *pubSubConn) bgrunner(ps *PubSub) {
	defer func() {
		// client connection has ended, disconnect from the PubSub instances
		// and close the network connection.
		ps.mu.Lock()
		defer ps.mu.Unlock()
		for entry := range sconn.entries {
			ps.chans.Delete(entry)
		}
		delete(ps.conns, sconn.conn)
		sconn.mu.Lock()
		defer sconn.mu.Unlock()
		sconn.dconn.Close()
	}()
	for {
		cmd, err := sconn.dconn.ReadCommand()
		if err != nil {
			return
		}
		if len(cmd.Args) == 0 {
			continue
		}
		switch strings.ToLower(string(cmd.Args[0])) {
		case "psubscribe", "subscribe":
			if len(cmd.Args) < 2 {
				func() {
					sconn.mu.Lock()
					defer sconn.mu.Unlock()
					sconn.dconn.WriteError(fmt.Sprintf("ERR wrong number of "+
						"arguments for '%s'", cmd.Args[0]))
					sconn.dconn.Flush()
				}()
				continue
			}
			command := strings.ToLower(string(cmd.Args[0]))
			for i := 1; i < len(cmd.Args); i++ {
				if command == "psubscribe" {
					ps.Psubscribe(sconn.conn, string(cmd.Args[i]))
				} else {
					ps.Subscribe(sconn.conn, string(cmd.Args[i]))
				}
			}
		case "unsubscribe", "punsubscribe":
			pattern := strings.ToLower(string(cmd.Args[0])) == "punsubscribe"
			if len(cmd.Args) == 1 {
				ps.unsubscribe(sconn.conn, pattern, true, "")
			} else {
				for i := 1; i < len(cmd.Args); i++ {
					channel := string(cmd.Args[i])
					ps.unsubscribe(sconn.conn, pattern, false, channel)
				}
			}
		case "quit":
			func() {
				sconn.mu.Lock()
				defer sconn.mu.Unlock()
				sconn.dconn.WriteString("OK")
				sconn.dconn.Flush()
				sconn.dconn.Close()
			}()
			return
		case "ping":
			var msg string
			switch len(cmd.Args) {
			case 1:
			case 2:
				msg = string(cmd.Args[1])
			default:
				func() {
					sconn.mu.Lock()
					defer sconn.mu.Unlock()
					sconn.dconn.WriteError(fmt.Sprintf("ERR wrong number of "+
						"arguments for '%s'", cmd.Args[0]))
					sconn.dconn.Flush()
				}()
				continue
			}
			func() {
				sconn.mu.Lock()
				defer sconn.mu.Unlock()
				sconn.dconn.WriteArray(2)
				sconn.dconn.WriteBulkString("pong")
				sconn.dconn.WriteBulkString(msg)
				sconn.dconn.Flush()
			}()
		default:
			func() {
				sconn.mu.Lock()
				defer sconn.mu.Unlock()
				sconn.dconn.WriteError(fmt.Sprintf("ERR Can't execute '%s': "+
					"only (P)SUBSCRIBE / (P)UNSUBSCRIBE / PING / QUIT are "+
					"allowed in this context", cmd.Args[0]))
				sconn.dconn.Flush()
			}()
		}
	}
}

// byEntry is a "less" function that sorts the entries in a btree. The tree
// is sorted be (pattern, channel, conn.id). All pattern=true entries are at
// the end (right) of the tree.
func byEntry(a, b interface{}) bool {
	aa := a.(*pubSubEntry)
	bb := b.(*pubSubEntry)
	if !aa.pattern && bb.pattern {
		return true
	}
	if aa.pattern && !bb.pattern {
		return false
	}
	if aa.channel < bb.channel {
		return true
	}
	if aa.channel > bb.channel {
		return false
	}
	var aid uint64
	var bid uint64
	if aa.sconn != nil {
		aid = aa.sconn.id
	}
	if bb.sconn != nil {
		bid = bb.sconn.id
	}
	return aid < bid
}

func (ps *PubSub) subscribe(conn Conn, pattern bool, channel string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()

	// initialize the PubSub instance
	if !ps.initd {
		ps.conns = make(map[Conn]*pubSubConn)
		ps.chans = btree.New(byEntry)
		ps.initd = true
	}

	// fetch the pubSubConn
	sconn, ok := ps.conns[conn]
	if !ok {
		// initialize a new pubSubConn, which runs on a detached connection,
		// and attach it to the PubSub channels/conn btree
		ps.nextid++
		dconn := conn.Detach()
		sconn = &pubSubConn{
			id:      ps.nextid,
			conn:    conn,
			dconn:   dconn,
			entries: make(map[*pubSubEntry]bool),
		}
		ps.conns[conn] = sconn
	}
	sconn.mu.Lock()
	defer sconn.mu.Unlock()

	// add an entry to the pubsub btree
	entry := &pubSubEntry{
		pattern: pattern,
		channel: channel,
		sconn:   sconn,
	}
	ps.chans.Set(entry)
	sconn.entries[entry] = true

	// send a message to the client
	sconn.dconn.WriteArray(3)
	if pattern {
		sconn.dconn.WriteBulkString("psubscribe")
	} else {
		sconn.dconn.WriteBulkString("subscribe")
	}
	sconn.dconn.WriteBulkString(channel)
	var count int
	for entry := range sconn.entries {
		if entry.pattern == pattern {
			count++
		}
	}
	sconn.dconn.WriteInt(count)
	sconn.dconn.Flush()

	// start the background client operation
	if !ok {
		go sconn.bgrunner(ps)
	}
}

func (ps *PubSub) unsubscribe(conn Conn, pattern, all bool, channel string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	// fetch the pubSubConn. This must exist
	sconn := ps.conns[conn]
	sconn.mu.Lock()
	defer sconn.mu.Unlock()

	removeEntry := func(entry *pubSubEntry) {
		if entry != nil {
			ps.chans.Delete(entry)
			delete(sconn.entries, entry)
		}
		sconn.dconn.WriteArray(3)
		if pattern {
			sconn.dconn.WriteBulkString("punsubscribe")
		} else {
			sconn.dconn.WriteBulkString("unsubscribe")
		}
		if entry != nil {
			sconn.dconn.WriteBulkString(entry.channel)
		} else {
			sconn.dconn.WriteNull()
		}
		var count int
		for entry := range sconn.entries {
			if entry.pattern == pattern {
				count++
			}
		}
		sconn.dconn.WriteInt(count)
	}
	if all {
		// unsubscribe from all (p)subscribe entries
		var entries []*pubSubEntry
		for entry := range sconn.entries {
			if entry.pattern == pattern {
				entries = append(entries, entry)
			}
		}
		if len(entries) == 0 {
			removeEntry(nil)
		} else {
			for _, entry := range entries {
				removeEntry(entry)
			}
		}
	} else {
		// unsubscribe single channel from (p)subscribe.
		for entry := range sconn.entries {
			if entry.pattern == pattern && entry.channel == channel {
				removeEntry(entry)
				break
			}
		}
	}
	sconn.dconn.Flush()
}

// SetIdleClose will automatically close idle connections after the specified
// duration. Use zero to disable this feature.
func (s *Server) SetIdleClose(dur time.Duration) {
	s.mu.Lock()
	s.idleClose = dur
	s.mu.Unlock()
}
