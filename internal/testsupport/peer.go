package testsupport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// PeerOptions describe one shade-peer process. Bin is required; the zero
// value of every other field means its default.
type PeerOptions struct {
	// Bin is the shade-peer executable (Binaries.Path("shade-peer")).
	Bin string
	// Socket is the trainer socket, passed as --socket before Args. ""
	// means shade.sock in a new short temporary folder (a Unix socket
	// path has at most 108 bytes); Launch requires it.
	Socket string
	// Args follow --socket on the command line.
	Args []string
	// Prefix runs the peer behind a command, such as ip netns exec NS.
	Prefix []string
	// Env is added to the test's environment.
	Env []string
	// Log receives the process's stdout and stderr; nil keeps them in
	// memory (Peer.Log), and StartPeer prints them if the test failed.
	Log io.Writer
	// ReadyTimeout bounds the wait for the socket to answer; 0 means 30s.
	ReadyTimeout time.Duration
}

// Peer is one running shade-peer process. Its methods may be called from
// any goroutine.
type Peer struct {
	Socket string

	cmd    *exec.Cmd
	buf    *Buffer       // nil when PeerOptions.Log was given
	exited chan struct{} // closed once the process has been waited for
	err    error         // the exit status; read after exited is closed
}

// StartPeer runs shade-peer and returns once its socket answers. Test
// cleanup kills it (SIGKILL) if it still runs and removes a socket folder
// StartPeer made.
func StartPeer(tb testing.TB, o PeerOptions) *Peer {
	tb.Helper()
	if o.Socket == "" {
		dir, err := os.MkdirTemp("", "shade-sock-")
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { os.RemoveAll(dir) })
		o.Socket = filepath.Join(dir, "shade.sock")
	}
	p, err := Launch(context.Background(), o)
	if p != nil {
		tb.Cleanup(func() {
			p.Kill()
			if tb.Failed() && p.buf != nil {
				tb.Logf("shade-peer %s log:\n%s", p.Socket, p.Log())
			}
		})
	}
	if err != nil {
		if p != nil && p.buf != nil {
			tb.Fatalf("%v\n%s", err, p.Log())
		}
		tb.Fatal(err)
	}
	return p
}

// Launch runs shade-peer and waits until its socket answers, ctx ends, the
// process exits or ReadyTimeout passes. On an error after the process
// started it returns the (killed) Peer too, so that its log can be read.
// The caller owns the returned Peer: Stop or Kill it.
func Launch(ctx context.Context, o PeerOptions) (*Peer, error) {
	if o.Bin == "" || o.Socket == "" {
		return nil, errors.New("testsupport: PeerOptions need Bin and Socket")
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	p := &Peer{Socket: o.Socket, exited: make(chan struct{})}
	argv := append(append(append([]string(nil), o.Prefix...), o.Bin, "--socket", o.Socket), o.Args...)
	p.cmd = exec.Command(argv[0], argv[1:]...)
	out := o.Log
	if out == nil {
		p.buf = new(Buffer)
		out = p.buf
	}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if o.Env != nil {
		p.cmd.Env = append(os.Environ(), o.Env...)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { // owned by p: ends when the process does
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	ctx, cancel := context.WithTimeout(ctx, o.ReadyTimeout)
	defer cancel()
	if err := WaitSocket(ctx, o.Socket, p.exited); err != nil {
		p.Kill()
		return p, fmt.Errorf("shade-peer (pid %d) on %s: %w", p.cmd.Process.Pid, o.Socket, err)
	}
	return p, nil
}

// ErrExited says that a process exited before its socket answered.
var ErrExited = errors.New("testsupport: exited before its socket answered")

// WaitSocket waits until a RESP server answers PING on the Unix socket
// (any reply counts: an error such as NOAUTH is an answer), or ctx ends,
// or exited is closed. It polls every PollInterval.
func WaitSocket(ctx context.Context, socket string, exited <-chan struct{}) error {
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	var last error
	for {
		if last = ping(ctx, socket); last == nil {
			return nil
		}
		select {
		case <-exited:
			return ErrExited
		case <-ctx.Done():
			return fmt.Errorf("no answer on %s: %w (last: %v)", socket, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func ping(ctx context.Context, socket string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if len(line) == 0 || (line[0] != '+' && line[0] != '-') {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// PID returns the process's id.
func (p *Peer) PID() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited and been waited for.
func (p *Peer) Exited() <-chan struct{} { return p.exited }

// Err returns the process's exit error (nil for status 0); call it after
// Exited is closed.
func (p *Peer) Err() error { return p.err }

// Signal sends sig to the process by its PID.
func (p *Peer) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits up to d for the process to exit; after d
// it kills it. It returns the exit error, or an error if d passed.
func (p *Peer) Stop(d time.Duration) error {
	select {
	case <-p.exited:
		return p.err
	default:
	}
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.err
	case <-time.After(d):
		p.Kill()
		return fmt.Errorf("testsupport: pid %d still running %v after SIGTERM (killed)", p.PID(), d)
	}
}

// Kill sends SIGKILL (unless the process has exited) and waits until it
// has exited.
func (p *Peer) Kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.Signal(syscall.SIGKILL)
	<-p.exited
}

// Log returns what the process wrote so far, when PeerOptions.Log was nil.
func (p *Peer) Log() string {
	if p.buf == nil {
		return ""
	}
	return p.buf.String()
}

// Buffer is a bytes.Buffer safe for concurrent use: a process's stdout
// and stderr written while a test reads them.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
