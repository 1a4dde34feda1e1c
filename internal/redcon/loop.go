package redcon

// shade: event loops (see PATCHES.md). A connection served by a goroutine
// of its own costs, per pipeline, a park when it waits for input and a
// wake-up, often of another thread, when the input comes. An event loop
// serves many connections from one thread: it waits for all of them at
// once, reads what is ready, answers the commands it can without waiting,
// and writes the replies out, without handing anything to the scheduler.
// A command that may wait (a read from elsewhere, a blocking call) goes,
// with the rest of its pipeline, to a worker: the loop's goroutine becomes
// the worker and the loop goes on in another, kept from an earlier
// hand-off (loop.goOn). The connection comes back
// to the loop once its pipeline is answered. A worker writes its replies
// to the socket itself while the socket takes them, and hands the rest to
// the loop to write, waiting, when it does not: no connection's
// descriptor is in the runtime's poller, whose wake-ups are the cost the
// loop removes.

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shade-mesh/shade/internal/workers"
)

// SetLoops makes n event loops serve the server's connections, each from
// one epoll set, instead of a goroutine per connection (shade). n <= 0
// turns them off (the default). fast answers a command on the loop, and
// reports whether it did: it must not wait (no I/O, no blocking call, no
// lock held for long), must not call Flush, Close, Detach or NetConn, and
// must return false, having written nothing, for a command it cannot
// answer so; that command and the rest of its pipeline then run through
// the handler on a worker goroutine, as without loops. A nil fast sends
// every command to a worker. Call it before Serve. Event loops need a
// listener whose connections are file descriptors (TCP, Unix).
func (s *Server) SetLoops(n int, fast func(conn Conn, cmd Command) bool) {
	s.mu.Lock()
	s.nloops, s.fast = n, fast
	s.mu.Unlock()
}

// loops is a server's event loops; accepted connections are dealt to them
// in turn.
type loops struct {
	all  []*loop
	deal int // only serve's goroutine deals
}

func startLoops(s *Server, n int) (*loops, error) {
	ls := &loops{}
	for range n {
		l, err := newLoop(s)
		if err != nil {
			ls.shutdown()
			return nil, err
		}
		ls.all = append(ls.all, l)
		l.goOn.Go(l.run)
	}
	return ls, nil
}

// add gives c, just accepted and not yet served, to the next loop.
func (ls *loops) add(c *conn) {
	l := ls.all[ls.deal%len(ls.all)]
	ls.deal++
	l.adopt(c)
}

// shutdown closes every connection the loops serve, and the net.Conns of
// those out with workers (which end them when done), and waits for the
// loops to end.
func (ls *loops) shutdown() {
	for _, l := range ls.all {
		l.mu.Lock()
		l.closing = true
		for c := range l.netConns {
			c.conn.Close()
		}
		l.mu.Unlock()
		l.signal()
	}
	for _, l := range ls.all {
		<-l.done
	}
}

// loop is one event loop: an epoll set of the connections it serves, and
// an eventfd that wakes it when connections come to it.
type loop struct {
	s         *Server
	ep, wake  int
	idleClose time.Duration
	slots     []*conn // by slot, the connections in the epoll set
	gens      []int32 // by slot, its generation: events of a slot's earlier connection are ignored
	free      []int32
	evs       []unix.EpollEvent
	batch     []unix.EpollEvent // of evs, being served from next on
	next      int
	iov       []unix.Iovec
	writing   int       // connections waiting to write
	spare     []byte    // a reply buffer no connection holds (lendSpare)
	now       time.Time // as of the last wake, where a deadline needs it
	swept     time.Time
	done      chan struct{}
	// goOn are the goroutines the loop goes on in when its own becomes a
	// worker (run): each served a worker's commands before, so its
	// stack has grown to what they take (shade). A new goroutine's
	// would grow, and be copied, on the way down every time.
	goOn workers.Pool

	mu       sync.Mutex
	queue    []request          // for the loop to take up when it wakes
	netConns map[*conn]struct{} // out with a worker that made c.conn (NetConn)
	closing  bool
}

// request is what a loop is given to do: serve a connection just
// accepted, write a worker's replies, free the slot of a connection its
// worker ended, or close one given back whose socket is not in the set.
type request struct {
	c    *conn
	kind uint8
	slot int32 // for freeSlot
	err  error // for closeConn
}

// maxAbsorb is the most input a connection whose replies wait for room
// holds unanswered (see absorb).
const maxAbsorb = 4 << 20

const (
	serveConn = iota
	writeReplies
	freeSlot
	closeConn // given back, but its socket could not join the set
)

// loopState is a connection's state in its loop.
type loopState struct {
	fd   int
	slot int32 // -1: none yet
	gen  int32 // the slot's generation when c took it, which its events carry
	// back: a worker gave c back, its socket in the epoll set again, and
	// the loop has not taken it up yet (see giveBack).
	back     atomic.Bool
	events   uint32      // what the epoll set waits for: EPOLLIN; EPOLLOUT while out or a worker's replies are pending (with EPOLLIN while it takes input in, see takeInput); 0 while out of the set
	out      net.Buffers // replies being written, nil when none
	deadline time.Time   // for out
	active   time.Time   // last input, for the idle close
	gone     bool        // closed: its resources are given back
	// A worker's: its scratch for writev; where it waits while the loop
	// writes its replies; forWorker while the loop does (the loop's).
	iov       []unix.Iovec
	written   chan error
	forWorker bool
}

// wakeSlot marks the eventfd's events.
const wakeSlot = -1

func newLoop(s *Server) (*loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		return nil, os.NewSyscallError("eventfd", err)
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeSlot}); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	s.mu.Lock()
	idle := s.idleClose
	s.mu.Unlock()
	return &loop{
		s: s, ep: ep, wake: wake, idleClose: idle,
		evs: make([]unix.EpollEvent, 256), done: make(chan struct{}),
		netConns: make(map[*conn]struct{}),
	}, nil
}

// adopt takes c, just accepted, from serve's goroutine: its socket leaves
// the runtime's poller for this loop's.
func (l *loop) adopt(c *conn) {
	fd, err := dupFd(c.conn)
	c.conn.Close() // the duplicate keeps the socket open
	c.conn = nil
	c.lp = l
	c.ls.fd, c.ls.slot = -1, -1
	c.rd.rd, c.rd.poll = nil, true
	c.wr.w = nil
	if err != nil {
		l.s.closedConn(c, err)
		return
	}
	c.ls.fd = fd
	c.ls.written = make(chan error, 1)
	l.ask(request{c: c, kind: serveConn})
}

// ask queues r for the loop and wakes it. The connection must not be
// touched after, but where the loop answers (writeReplies). Where the
// loop is closing, r is answered here: the connection ended, the replies
// not written.
func (l *loop) ask(r request) {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		l.refused(r)
		return
	}
	l.queue = append(l.queue, r)
	l.mu.Unlock()
	l.signal()
}

// refused answers a request of a closing loop.
func (l *loop) refused(r request) {
	switch r.kind {
	case serveConn:
		l.end(r.c, nil)
	case writeReplies:
		r.c.ls.written <- net.ErrClosed
	}
}

func (l *loop) signal() {
	one := uint64(1)
	unix.Write(l.wake, (*[8]byte)(unsafe.Pointer(&one))[:])
}

// run is the loop: it waits for events and serves them until shutdown.
// Where a connection goes to a worker, the loop goes on in another
// goroutine (goOn's) and this one becomes the worker: the commands that
// wait start at once, on this thread, and it is the loop that is
// scheduled anew.
func (l *loop) run() {
	for {
		if l.next == len(l.batch) {
			if l.await() {
				l.goOn.Close()
				close(l.done)
				return
			}
		}
		for l.next < len(l.batch) {
			ev := l.batch[l.next]
			l.next++
			if ev.Fd == wakeSlot {
				var b [8]byte
				unix.Read(l.wake, b[:])
				if l.arm() {
					l.stop(nil)
					l.goOn.Close()
					close(l.done)
					return
				}
				continue
			}
			c := l.slots[ev.Fd]
			if c == nil || l.gens[ev.Fd] != ev.Pad || !l.own(c) {
				continue // closed earlier in this batch, or out
			}
			if l.serve(c, ev.Events) {
				l.goOn.Go(l.run)
				l.work(c)
				return
			}
		}
	}
}

// await sweeps when due and waits for the next batch of events; it reports
// whether the loop has stopped.
func (l *loop) await() (stopped bool) {
	timeout := -1
	if l.idleClose > 0 || l.writing > 0 {
		timeout = 1000 // ms: deadlines are kept to about a second
		if l.now.Sub(l.swept) >= time.Second {
			l.sweep()
		}
	}
	n, err := pollNow(l.ep, l.evs)
	if n == 0 && err == nil { // nothing ready: wait, telling the scheduler
		n, err = unix.EpollWait(l.ep, l.evs, timeout)
	}
	if err != nil && err != unix.EINTR {
		// Cannot happen with a valid epoll set; end every connection
		// rather than spin.
		l.stop(os.NewSyscallError("epoll_wait", err))
		return true
	}
	if timeout >= 0 {
		l.now = time.Now()
	}
	l.batch, l.next = l.evs[:max(n, 0)], 0
	return false
}

// pollNow takes the events ready now, without waiting.
//
// The loop's system calls are raw where they cannot block: this poll, and
// the reads and writes of its non-blocking sockets (readFd, writev). A
// call through syscall.Syscall tells the scheduler that the thread may
// block, and the runtime's monitor thread then watches the loop's P, and
// may hand it to another thread, for every read and write the loop makes.
// Only a wait with nothing ready goes through the scheduler (await), so
// that the loop's P serves other goroutines while it sleeps.
func pollNow(ep int, evs []unix.EpollEvent) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// arm takes up the requests queued; it reports whether the loop is to
// stop.
func (l *loop) arm() (closing bool) {
	l.mu.Lock()
	q := l.queue
	l.queue = nil
	closing = l.closing
	l.mu.Unlock()
	for _, r := range q {
		c := r.c
		switch {
		case closing:
			l.refused(r)
		case r.kind == freeSlot:
			l.unslotIndex(r.slot)
		case r.kind == closeConn:
			l.own(c)
			l.close(c, r.err)
		case r.kind == writeReplies:
			// A worker's replies, which the socket did not take; its
			// input meanwhile (absorbForWorker), unless the worker made a
			// net.Conn of the socket, whose reads must see every byte.
			events := uint32(unix.EPOLLOUT | unix.EPOLLIN)
			if c.conn != nil {
				events = unix.EPOLLOUT
			}
			if err := l.add(c, events); err != nil {
				c.ls.written <- err
				continue
			}
			c.ls.forWorker = true
			l.waitingToWrite(c)
		default:
			if c.ls.slot < 0 {
				l.slot(c)
			}
			c.ls.active = l.now
			if err := l.add(c, unix.EPOLLIN); err != nil {
				l.unslot(c)
				l.end(c, err)
			}
		}
	}
	return closing
}

// epollEvent is what c's socket waits for in the epoll set, marked with
// c's slot and its generation.
func (c *conn) epollEvent(events uint32) *unix.EpollEvent {
	return &unix.EpollEvent{Events: events, Fd: c.ls.slot, Pad: c.ls.gen}
}

// add puts c's socket in the epoll set, waiting for events.
func (l *loop) add(c *conn, events uint32) error {
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, c.ls.fd, c.epollEvent(events)); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	c.ls.events = events
	return nil
}

// remove takes c's socket out of the epoll set.
func (l *loop) remove(c *conn) {
	if c.ls.events != 0 {
		unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.ls.fd, nil)
		c.ls.events = 0
	}
}

// slot gives c a slot, a freed one first, under a new generation.
func (l *loop) slot(c *conn) int32 {
	var i int32
	if n := len(l.free); n > 0 {
		i = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		i = int32(len(l.slots))
		l.slots = append(l.slots, nil)
		l.gens = append(l.gens, 0)
	}
	l.slots[i] = c
	l.gens[i]++
	c.ls.slot, c.ls.gen = i, l.gens[i]
	return i
}

func (l *loop) unslot(c *conn) {
	if c.ls.slot >= 0 {
		l.unslotIndex(c.ls.slot)
		c.ls.slot = -1
	}
}

func (l *loop) unslotIndex(i int32) {
	l.slots[i] = nil
	l.gens[i]++
	l.free = append(l.free, i)
}

// serve handles an event of c's socket; it reports whether c is to go to
// a worker (see handOff).
func (l *loop) serve(c *conn, events uint32) (work bool) {
	if c.ls.forWorker {
		if events&unix.EPOLLIN != 0 && !l.absorbForWorker(c) {
			return false
		}
		l.writeForWorker(c)
		return false
	}
	if c.ls.out != nil {
		if events&unix.EPOLLIN != 0 && !l.absorb(c) {
			return false
		}
		if !l.write(c) {
			return false
		}
	} else if events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) != 0 && len(c.cmds) == 0 {
		if err := c.rd.makeRoom(false); err != nil {
			l.refuse(c, err)
			return
		}
		switch eof, err := l.read(c); {
		case err != nil:
			l.close(c, err)
			return
		case eof:
			l.close(c, nil)
			return
		}
	}
	return l.process(c)
}

// process answers c's commands until it needs input, a worker, or room to
// write; it reports whether c is to go to a worker.
func (l *loop) process(c *conn) (work bool) {
	l.lendSpare(c)
	for {
		for len(c.cmds) > 0 {
			rest := c.cmds
			c.cmds = rest[1:]
			if len(c.cmds) == 0 {
				c.cmds = nil
			}
			if l.s.fast == nil || !l.s.fast(c, rest[0]) {
				c.cmds = rest
				l.handOff(c)
				return true
			}
			if c.wr.err != nil { // a FlushSome failed
				l.close(c, c.wr.err)
				return false
			}
			c.wshare.Set(int64(cap(c.wr.b)))
			if c.flushDue() && !l.startWrite(c) {
				return
			}
		}
		cmds, err := c.rd.readCommands(nil)
		if err == errIncompleteCommand {
			break
		}
		if err != nil {
			l.refuse(c, err)
			return
		}
		c.cmds = cmds
	}
	if c.Buffered() == 0 || l.startWrite(c) {
		l.takeSpare(c)
	}
	return false
}

// lendSpare gives c the loop's spare reply buffer where c holds none,
// and takeSpare takes it back once c's replies are out. The loop answers
// its connections one at a time, so with replies that go out whole, they
// are all written into the one buffer: it stays in the CPU's caches, where
// a buffer of each connection's own would be out of them by the time that
// connection is answered again (50 connections with 16 GETs of 4 KiB in
// each pipeline: 3.2 MiB of buffers, written once a round).
func (l *loop) lendSpare(c *conn) {
	if c.wr.b == nil && l.spare != nil {
		c.wr.b, l.spare = l.spare, nil
	}
}

// takeSpare makes c's reply buffer the loop's spare, where c's replies
// are all out and the buffer is one a connection keeps (maxWriteKeep).
func (l *loop) takeSpare(c *conn) {
	if c.wr.err != nil || c.Buffered() > 0 || c.wr.b == nil || cap(c.wr.b) > maxWriteKeep {
		return
	}
	l.spare, c.wr.b = c.wr.b[:0], nil
	c.wshare.Set(0)
}

// refuse answers a protocol error, as far as the socket takes it at once,
// and closes c.
func (l *loop) refuse(c *conn, err error) {
	if c.answerProtocolError(err) {
		c.ls.out = c.wr.vector()
		writev(c, &l.iov)
	}
	l.close(c, err)
}

// startWrite writes c's replies out; it reports whether they went out
// whole. If not, c waits for room (EPOLLOUT), taking in only what absorb
// takes until then.
func (l *loop) startWrite(c *conn) bool {
	c.ls.out = c.wr.vector()
	return l.write(c)
}

// write goes on writing c's replies; it reports whether they are out, and
// the writer is ready for more.
func (l *loop) write(c *conn) bool {
	err := writev(c, &l.iov)
	if err == unix.EAGAIN {
		if c.ls.events&unix.EPOLLOUT == 0 {
			if !l.wait(c, unix.EPOLLOUT|unix.EPOLLIN) { // see absorb
				return false
			}
			l.waitingToWrite(c)
		}
		return false
	}
	if err != nil {
		l.close(c, err)
		return false
	}
	c.written(nil)
	if c.ls.events&unix.EPOLLOUT != 0 {
		l.writing--
		return l.wait(c, unix.EPOLLIN)
	}
	return true
}

// read reads what c's socket holds into c's reader, which has room for
// it; it reports the end of the input, or an error.
func (l *loop) read(c *conn) (eof bool, err error) {
	n, err := readFd(c.ls.fd, c.rd.buf[c.rd.end:])
	switch {
	case n > 0:
		c.rd.filled = n == len(c.rd.buf)-c.rd.end
		c.rd.end += n
		c.ls.active = l.now
	case err == syscall.EAGAIN || err == syscall.EINTR:
	case err == nil:
		return true, nil
	default:
		return false, err
	}
	return false, nil
}

// absorb reads what c's client sent while c's replies wait for room,
// without answering it yet (takeInput). Where c is to take no more, it
// waits for room alone. It reports false where it closed c.
func (l *loop) absorb(c *conn) bool {
	more, err := l.takeInput(c, len(c.cmds) > 0)
	if err != nil {
		l.close(c, err)
		return false
	}
	if !more {
		return l.wait(c, unix.EPOLLOUT)
	}
	return true
}

// takeInput reads what c's client sent while c's replies, the loop's or
// a worker's, wait for room, up to maxAbsorb bytes waiting in all: a
// client that writes a whole pipeline before it reads the replies (as
// pipelining clients do) can then finish writing and go on to read them,
// where it would otherwise wait on the server and the server on it. It
// reports whether c may take more: not past maxAbsorb, where the clients'
// memory has no room, or at the end of the input (seen again once the
// replies are out). The commands read are answered once the replies are
// out. With live set, commands parsed earlier are still to run, and their
// arguments lie in the read buffer: it is then never moved in place.
func (l *loop) takeInput(c *conn, live bool) (more bool, err error) {
	if c.rd.end-c.rd.start >= maxAbsorb {
		return false, nil
	}
	if c.rd.makeRoom(live) != nil {
		return false, nil
	}
	eof, err := l.read(c)
	return !eof && err == nil, err
}

// waitingToWrite counts c among the connections whose replies wait for
// room, and starts their write timeout.
func (l *loop) waitingToWrite(c *conn) {
	l.writing++
	if c.writeTimeout > 0 {
		c.ls.deadline = time.Now().Add(c.writeTimeout)
	}
}

// wait makes c's socket wait for events; false where it could not (c is
// then closed).
func (l *loop) wait(c *conn, events uint32) bool {
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, c.ls.fd, c.epollEvent(events)); err != nil {
		l.close(c, os.NewSyscallError("epoll_ctl", err))
		return false
	}
	c.ls.events = events
	return true
}

// written resets c's writer once the write of its replies ended with err
// (nil: they are out), as a flush does.
func (c *conn) written(err error) {
	c.ls.out = nil
	c.wr.written(err)
	c.flushed()
}

// writev writes as much of c.ls.out as the socket takes now, with
// *scratch for the vector: nil when it is all out, EAGAIN when the rest
// must wait.
func writev(c *conn, scratch *[]unix.Iovec) error {
	_, err := writevFd(c.ls.fd, &c.ls.out, scratch)
	return err
}

// writevFd writes as much of *out as the non-blocking socket fd takes now,
// dropping what it wrote from *out, with *scratch for the vector, and
// returns how many bytes it wrote: err is nil when it is all out, EAGAIN
// when the rest must wait.
func writevFd(fd int, out *net.Buffers, scratch *[]unix.Iovec) (written int, err error) {
	for len(*out) > 0 {
		iov := (*scratch)[:0]
		for _, b := range *out {
			if len(iov) == 1024 { // IOV_MAX
				break
			}
			if len(b) == 0 {
				continue
			}
			v := unix.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			iov = append(iov, v)
		}
		*scratch = iov
		raceReleaseIO()
		if len(iov) == 0 {
			*out = (*out)[:0]
			break
		}
		r, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		clear(iov) // hold no reply
		switch {
		case e == unix.EINTR:
			continue
		case e != 0:
			return written, e
		}
		consume(out, int(r))
		written += int(r)
	}
	return written, nil
}

// consume drops the first n bytes of v.
func consume(v *net.Buffers, n int) {
	for len(*v) > 0 {
		if b := (*v)[0]; len(b) > n {
			(*v)[0] = b[n:]
			return
		} else {
			n -= len(b)
		}
		(*v)[0] = nil
		*v = (*v)[1:]
	}
}

// handOff takes c, whose next command the loop cannot answer, out of the
// epoll set for a worker (see run), which runs the handler on the rest of
// its pipeline and then gives c back. c keeps its slot meanwhile.
func (l *loop) handOff(c *conn) {
	l.remove(c)
}

// work runs c's pipeline on a worker goroutine, and every command already
// in its read buffer after it; then c goes back to its loop.
func (l *loop) work(c *conn) {
	err := c.runPipeline(l.s)
	for err == nil && !c.detached && !c.closed {
		if err = c.flush(); err != nil {
			break
		}
		cmds, perr := c.rd.readCommands(nil)
		if perr == errIncompleteCommand {
			break
		}
		if perr != nil {
			if c.answerProtocolError(perr) {
				c.flush()
			}
			err = perr
			break
		}
		c.cmds = cmds
		err = c.runPipeline(l.s)
	}
	nc := c.conn
	if nc != nil {
		l.mu.Lock()
		delete(l.netConns, c)
		if !c.detached {
			c.conn = nil
		}
		l.mu.Unlock()
	}
	if c.detached {
		// The detached connection keeps nc; the loop's descriptor and
		// slot go.
		l.ask(request{kind: freeSlot, slot: c.ls.slot})
		unix.Close(c.ls.fd)
		c.ls.fd = -1
		l.s.closedCallback(c, errDetached)
		return
	}
	if nc != nil {
		nc.Close()
	}
	if err != nil || c.closed {
		if c.closed {
			err = nil
		}
		l.ask(request{kind: freeSlot, slot: c.ls.slot})
		l.end(c, err)
		return
	}
	l.giveBack(c)
}

// giveBack puts c, whose worker is done, back in the epoll set, from the
// worker: the loop takes it up at its next event (own), without being
// woken for it. Under l.mu, so that a loop stopping sees either c back
// or its worker refused.
func (l *loop) giveBack(c *conn) {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		l.end(c, nil)
		return
	}
	// c is the loop's from the Store on, before its socket is in the set:
	// the loop never sees an event of c that it must pass over (passing
	// over one, level-triggered, the loop spun on it while the worker
	// waited for a P to make the Store).
	fd, ev := c.ls.fd, c.epollEvent(unix.EPOLLIN)
	c.ls.back.Store(true)
	err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, ev)
	l.mu.Unlock()
	if err != nil {
		l.ask(request{c: c, kind: closeConn, err: os.NewSyscallError("epoll_ctl", err)})
	}
}

// own reports whether the loop serves c, first taking up c where its
// worker gave it back; false while c is out with a worker.
func (l *loop) own(c *conn) bool {
	if c.ls.events != 0 {
		return true
	}
	if !c.ls.back.Load() {
		return false
	}
	c.ls.back.Store(false)
	c.ls.events = unix.EPOLLIN
	c.ls.active = l.now
	return true
}

// flushWorker writes out the replies of c, out with a worker: itself
// while the socket takes them, then through the loop, waiting.
func (l *loop) flushWorker(c *conn) error {
	if c.wr.err != nil {
		c.wr.releaseLent()
		return c.wr.err
	}
	if c.Buffered() == 0 {
		return nil
	}
	c.ls.out = c.wr.vector()
	err := writev(c, &c.ls.iov)
	if err == unix.EAGAIN {
		l.ask(request{c: c, kind: writeReplies})
		err = <-c.ls.written
	}
	c.written(err)
	return err
}

// absorbForWorker is absorb for a worker's connection, whose worker
// waits for the loop to write its replies (so the loop may read into its
// buffer), and whose commands may be mid-run (so the buffer is never moved
// in place). A read error stops the input; it is seen again when the loop
// next reads c. It reports false where the loop's write for the worker
// ended.
func (l *loop) absorbForWorker(c *conn) bool {
	if more, err := l.takeInput(c, true); more && err == nil {
		return true
	}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, c.ls.fd, c.epollEvent(unix.EPOLLOUT)); err != nil {
		l.doneForWorker(c, os.NewSyscallError("epoll_ctl", err))
		return false
	}
	c.ls.events = unix.EPOLLOUT
	return true
}

// writeForWorker goes on writing a worker's replies; once they are out,
// or cannot be, c leaves the epoll set and the worker goes on.
func (l *loop) writeForWorker(c *conn) {
	err := writev(c, &l.iov)
	if err == unix.EAGAIN {
		return
	}
	l.doneForWorker(c, err)
}

// doneForWorker ends the loop's write of a worker's replies with err (nil:
// they are out) and lets the worker go on.
func (l *loop) doneForWorker(c *conn, err error) {
	l.remove(c)
	l.writing--
	c.ls.forWorker = false
	c.ls.written <- err
}

// netConn makes c.conn, for a worker's NetConn: a net.Conn of its own over
// c's socket, in the runtime's poller, closed when the worker is done.
func (l *loop) netConn(c *conn) {
	nc, err := fileConn(c.ls.fd)
	if err != nil {
		return
	}
	l.mu.Lock()
	c.conn = nc
	l.netConns[c] = struct{}{}
	l.mu.Unlock()
}

// close takes c out of the loop and ends it.
func (l *loop) close(c *conn, err error) {
	if c.ls.gone {
		return
	}
	if c.ls.events&unix.EPOLLOUT != 0 {
		l.writing--
	}
	l.remove(c)
	l.unslot(c)
	l.end(c, err)
}

// end closes c's socket and gives back what c holds; c is in no epoll set.
func (l *loop) end(c *conn, err error) {
	if c.ls.gone {
		return
	}
	c.ls.gone = true
	c.closed = true
	if c.ls.fd >= 0 {
		unix.Close(c.ls.fd)
		c.ls.fd = -1
	}
	c.ls.out = nil
	clear(c.wr.iov)
	l.s.closedConn(c, err)
}

// stop ends every connection the loop serves and the loop itself.
func (l *loop) stop(err error) {
	l.mu.Lock()
	l.closing = true
	q := l.queue
	l.queue = nil
	l.mu.Unlock()
	for _, r := range q {
		l.refused(r)
	}
	for _, c := range l.slots {
		switch {
		case c == nil:
		case c.ls.forWorker:
			l.doneForWorker(c, net.ErrClosed)
		case !l.own(c):
			// A worker's: it ends c when it is done.
		default:
			l.close(c, err)
		}
	}
	unix.Close(l.ep)
	unix.Close(l.wake)
}

// sweep closes connections past their deadlines: a reply not written
// within the write timeout, no input within the idle close.
func (l *loop) sweep() {
	l.swept = l.now
	for _, c := range l.slots {
		switch {
		case c == nil:
		case c.ls.forWorker:
			if c.writeTimeout > 0 && l.now.After(c.ls.deadline) {
				l.doneForWorker(c, os.ErrDeadlineExceeded)
			}
		case !l.own(c):
			// out with a worker
		case c.ls.out != nil:
			if c.writeTimeout > 0 && l.now.After(c.ls.deadline) {
				l.close(c, os.ErrDeadlineExceeded)
			}
		case l.idleClose > 0 && len(c.cmds) == 0 && l.now.Sub(c.ls.active) > l.idleClose:
			l.close(c, os.ErrDeadlineExceeded)
		}
	}
}

// closedConn gives back what c holds and tells the server's closed
// callback; for a connection no goroutine of handle serves.
func (s *Server) closedConn(c *conn, err error) {
	c.release()
	s.closedCallback(c, err)
}

// release gives c's buffers back to the clients' budget and the values
// lent to its replies and never written back to their owner.
func (c *conn) release() {
	c.rd.share.Close()
	c.wshare.Close()
	c.wr.releaseLent()
}

// closedCallback tells the server's closed callback that c ended with err
// (nil for the end of its input).
func (s *Server) closedCallback(c *conn, err error) {
	if s.closed != nil {
		if err == io.EOF {
			err = nil
		}
		s.closed(c, err)
	}
}

// dupFd returns a duplicate of nc's descriptor (close-on-exec, and
// non-blocking as nc's is).
func dupFd(nc net.Conn) (int, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1, errors.New("redcon: event loops need connections with a file descriptor")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	cerr := rc.Control(func(s uintptr) {
		fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	})
	if cerr != nil {
		return -1, cerr
	}
	if err != nil {
		return -1, os.NewSyscallError("fcntl", err)
	}
	return fd, nil
}

// fileConn returns a net.Conn of its own over the socket fd, in the
// runtime's poller; closing it leaves fd open.
func fileConn(fd int) (net.Conn, error) {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(d), "")
	defer f.Close()
	return net.FileConn(f)
}

// errDetachFailed: a worker's connection could not be detached (no
// descriptor was left to make its net.Conn with).
var errDetachFailed = errors.New("redcon: connection could not be detached")

// failedIO fails every read and write with err.
type failedIO struct{ err error }

func (f failedIO) Read([]byte) (int, error)  { return 0, f.err }
func (f failedIO) Write([]byte) (int, error) { return 0, f.err }
