package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shade-mesh/shade/protocol/shm"
)

// shared is the client's view of the peer's cache memory, mapped through
// SHADE.MAP, and the state of the zero-copy path.
type shared struct {
	mu       sync.RWMutex // write-held to replace m; read-held while copying
	m        *shm.Mapping // nil: not mapped (yet, or any more)
	off      bool         // disabled, or the peer cannot share its memory
	retryAt  time.Time    // earliest next SHADE.MAP after a failure
	password string
	socket   string
	timeout  time.Duration

	copied atomic.Int64 // samples copied out of the peer's memory
	moved  atomic.Int64 // located samples that moved before their copy
}

// sharedSupported: the copy validation relies on stores becoming visible
// in program order (shm.Location), which amd64 guarantees.
const sharedSupported = runtime.GOARCH == "amd64"

// mapRetry is how long the client waits before asking again for the memory
// after SHADE.MAP failed (a peer restarting, a peer that cannot share).
const mapRetry = 5 * time.Second

// mapping returns the current mapping, mapping the memory first if the
// path is on and it is not mapped yet. nil means: use plain MGET.
func (s *shared) mapping() *shm.Mapping {
	s.mu.RLock()
	m, off, retryAt := s.m, s.off, s.retryAt
	s.mu.RUnlock()
	if m != nil || off || time.Now().Before(retryAt) {
		return m
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil && !s.off && !time.Now().Before(s.retryAt) {
		m, err := mapPeerMemory(s.socket, s.password, s.timeout)
		if err != nil {
			var se *ServerError
			if errors.As(err, &se) && se.Code != "NOAUTH" {
				s.off = true // the peer cannot share: plain MGET for good
			}
			s.retryAt = time.Now().Add(mapRetry)
			return nil
		}
		s.m = m
	}
	return s.m
}

// drop unmaps m if it is still the current mapping (the peer restarted
// with new memory); the next call maps again.
func (s *shared) drop(m *shm.Mapping) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == m {
		s.m.Close()
		s.m = nil
	}
}

func (s *shared) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m != nil {
		s.m.Close()
		s.m = nil
	}
	s.off = true
}

// mapPeerMemory runs SHADE.MAP on a connection of its own and maps the
// descriptor that comes with the reply.
func mapPeerMemory(socket, password string, timeout time.Duration) (*shm.Mapping, error) {
	conn, err := net.DialTimeout("unix", socket, timeout)
	if err != nil {
		return nil, err
	}
	uc := conn.(*net.UnixConn)
	defer uc.Close()
	uc.SetDeadline(time.Now().Add(timeout))
	rd := bufio.NewReader(uc)
	if password != "" {
		fmt.Fprintf(uc, "*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(password), password)
		line, err := rd.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if len(line) > 0 && line[0] == '-' {
			return nil, parseServerError(trimCRLF(line[1:]))
		}
	}
	if _, err := uc.Write([]byte("*1\r\n$9\r\nSHADE.MAP\r\n")); err != nil {
		return nil, err
	}
	// The reply is a few dozen bytes; the descriptor rides with its first.
	buf := make([]byte, 256)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, msg := range msgs {
			if got, err := unix.ParseUnixRights(&msg); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	reply := buf[:n]
	if n > 0 && reply[0] == '-' {
		return nil, parseServerError(trimCRLF(string(reply[1:])))
	}
	// The whole reply may not have come in the first read.
	for !complete(reply) && len(reply) < len(buf) {
		m, err := uc.Read(buf[len(reply):])
		if err != nil {
			return nil, err
		}
		reply = buf[:len(reply)+m]
	}
	size, id, err := parseMapReply(reply)
	if err != nil {
		return nil, err
	}
	if len(fds) != 1 {
		return nil, fmt.Errorf("client: SHADE.MAP: %d descriptors came with the reply, want 1", len(fds))
	}
	return shm.MapShared(fds[0], size, id)
}

func trimCRLF(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}

// complete reports whether b holds a whole "*2\r\n:<n>\r\n:<n>\r\n".
func complete(b []byte) bool {
	lines := 0
	for _, c := range b {
		if c == '\n' {
			lines++
		}
	}
	return lines >= 3
}

func parseMapReply(b []byte) (size int64, id uint64, err error) {
	var s, i int64
	if _, err := fmt.Sscanf(string(b), "*2\r\n:%d\r\n:%d\r\n", &s, &i); err != nil || s <= 0 || i < 0 {
		return 0, 0, fmt.Errorf("client: SHADE.MAP: malformed reply %q", b)
	}
	return s, uint64(i), nil
}

// locate reads samples through SHADE.LOCATE and the mapping m into out's
// slots of the same indexes (appended to their [:0]): held samples are
// copied out of the peer's memory; the others, and those that moved while
// being copied, are read with one MGET. It returns errStale if the peer's
// memory is no longer the one mapped.
func (c *Client) locate(ctx context.Context, m *shm.Mapping, keys []string, out [][]byte) error {
	v, err := c.do(ctx, c.rdb, 0, command("SHADE.LOCATE", keys)...)
	if err != nil {
		return err
	}
	elems, ok := v.([]any)
	if !ok || len(elems) != 2 {
		return unexpected("SHADE.LOCATE", v)
	}
	id, ok1 := elems[0].(int64)
	blob, ok2 := elems[1].(string)
	if !ok1 || !ok2 || len(blob) != shm.LocationSize*len(keys) {
		return fmt.Errorf("client: SHADE.LOCATE: malformed reply for %d keys", len(keys))
	}
	if uint64(id) != m.ID() {
		return errStale
	}
	locs := []byte(blob)
	var rest []int // not held, or moved: read with MGET
	c.shm.mu.RLock()
	if c.shm.m != m { // another call found the memory stale and unmapped it
		c.shm.mu.RUnlock()
		return errStale
	}
	for i := range keys {
		loc := shm.DecodeLocation(locs[i*shm.LocationSize:])
		if loc.Gen == 0 {
			rest = append(rest, i)
			continue
		}
		b, err := m.Copy(out[i][:0], loc)
		out[i] = b
		if errors.Is(err, shm.ErrMoved) {
			c.shm.moved.Add(1)
			rest = append(rest, i)
			continue
		}
		if err != nil {
			c.shm.mu.RUnlock()
			return &SampleError{Key: keys[i], Err: err}
		}
		c.shm.copied.Add(1)
	}
	c.shm.mu.RUnlock()
	if len(rest) > 0 {
		again := make([]string, len(rest))
		vals := make([][]byte, len(rest))
		for j, i := range rest {
			again[j], vals[j] = keys[i], out[i]
		}
		if err := c.mgetKeys(ctx, again, vals); err != nil {
			return err
		}
		for j, i := range rest {
			out[i] = vals[j]
		}
	}
	return nil
}

var errStale = errors.New("client: the peer's memory is not the one mapped")
