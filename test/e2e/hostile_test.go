package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// The hostile-input suite: a real shade-peer process, raw socket writes of
// every shape of input that sizes an allocation, a loop or a wait. After
// each shape the peer must answer PING on a new connection, serve exact
// bytes, and its peak RSS (VmHWM, from /proc) must stay below the cache
// size + --max-client-memory + 200 MiB.

const (
	hostileCache   = 32 << 20
	hostileClients = 64 << 20
	hostileValue   = 8 << 20
	hostileSamples = 200
	hostileSize    = 4096
)

// hostilePeer is a peer under attack and the bytes of its dataset.
type hostilePeer struct {
	*testsupport.Peer
	ds *testsupport.Dataset
}

func startHostilePeer(t *testing.T) *hostilePeer {
	t.Helper()
	ds := testsupport.WriteDataset(t, testsupport.DatasetSpec{Classes: []string{"c0", "c1", "c2", "c3"},
		Samples: hostileSamples, MinSize: hostileSize, MaxSize: hostileSize, Seed: 1})
	p := startPeer(t, "--dataset", "ds="+ds.Dir,
		"--cache-size", strconv.Itoa(hostileCache), "--max-client-memory", strconv.Itoa(hostileClients),
		"--max-value", strconv.Itoa(hostileValue), "--client-write-timeout", "3s", "--max-world", "1024",
		"--admin-addr", "off", "--join-wait", "100ms")
	return &hostilePeer{Peer: p, ds: ds}
}

// rssBound is what the peer's peak RSS must stay under.
const rssBound = hostileCache + hostileClients + 200<<20

// procStatus reads a "Name: N kB" line of /proc/PID/status, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", field, line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// assertHealthy: the peer answers PING on a new connection, serves every
// sample of a batch byte-exact with GET and MGET, and its peak RSS stays
// within rssBound.
func (h *hostilePeer) assertHealthy(t *testing.T, after string) {
	t.Helper()
	select {
	case <-h.Exited():
		t.Fatalf("after %s: shade-peer exited: %v", after, h.Err())
	default:
	}
	c := redisClient(h.Socket)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if pong, err := c.Ping(ctx).Result(); err != nil || pong != "PONG" {
		t.Fatalf("after %s: PING: %q %v", after, pong, err)
	}
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "ds/" + strconv.Itoa((i*37)%hostileSamples)
	}
	vals, err := c.MGet(ctx, keys...).Result()
	if err != nil {
		t.Fatalf("after %s: MGET: %v", after, err)
	}
	for i, v := range vals {
		if err := h.ds.CheckValue((i*37)%hostileSamples, v); err != nil {
			t.Fatalf("after %s: MGET %s: %v", after, keys[i], err)
		}
	}
	got, err := c.Get(ctx, "ds/7").Bytes()
	if err != nil {
		t.Fatalf("after %s: GET ds/7: %v", after, err)
	}
	if err := h.ds.Check(7, got); err != nil {
		t.Fatalf("after %s: GET ds/7: %v", after, err)
	}
	pid := h.PID()
	rss, peak := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmHWM")
	t.Logf("after %s: RSS %d MiB, peak %d MiB (bound %d MiB)", after, rss>>20, peak>>20, int64(rssBound)>>20)
	if peak > rssBound {
		t.Fatalf("after %s: peak RSS %d MiB over the bound of %d MiB (cache + --max-client-memory + 200 MiB)",
			after, peak>>20, int64(rssBound)>>20)
	}
}

// raw sends b on a new connection and returns what comes back until it
// ends with until, the peer closes the connection, or nothing comes for
// a few seconds.
func (h *hostilePeer) raw(t *testing.T, b []byte, until string) string {
	t.Helper()
	conn, err := net.Dial("unix", h.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go conn.Write(b)
	var out bytes.Buffer
	buf := make([]byte, 64<<10)
	for {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := conn.Read(buf)
		out.Write(buf[:n])
		if err != nil || (until != "" && strings.HasSuffix(out.String(), until)) {
			return out.String()
		}
	}
}

func resp(args ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.Bytes()
}

func TestHostileInput(t *testing.T) {
	h := startHostilePeer(t)
	h.assertHealthy(t, "start")

	t.Run("numbers", func(t *testing.T) {
		// Every number that sizes an allocation, a loop or a wait, at its
		// extremes. Each gets one reply (an error, or for a valid command
		// its normal one) and the connection goes on.
		huge := []string{"2147483647", "2147483648", "99999999999999999999", "-1", "-2147483648", "0", "1e9", "x"}
		send := func(c []byte) string {
			out := h.raw(t, append(append([]byte{}, c...), resp("PING")...), "+PONG\r\n")
			if !strings.HasSuffix(out, "+PONG\r\n") {
				t.Fatalf("%q: the connection did not go on: %q", c, out)
			}
			return out
		}
		// First the world and rank sizes alone: every one is refused and
		// none starts a job, so a job of world 1 starts after them.
		for _, v := range append(huge, "1025") { // 1025: over --max-world
			for _, c := range [][]byte{
				resp("SHADE.ORDER", "ds", "0", "0", v, "10"),
				resp("SHADE.ORDER", "ds", "0", v, "1", "10"),
			} {
				if out := send(c); v != "0" && !strings.HasPrefix(out, "-") {
					t.Errorf("%q was not refused: %q", c, out)
				}
			}
		}
		c := redisClient(h.Socket)
		defer c.Close()
		ctx := context.Background()
		ids, err := c.Do(ctx, "SHADE.ORDER", "ds", "0", "0", "1", "5000").Int64Slice()
		if err != nil || len(ids) != hostileSamples {
			t.Fatalf("a job after the refusals: %d ids, %v", len(ids), err)
		}
		// Then every other number, in every command that takes one.
		for _, v := range huge {
			for _, c := range [][]byte{
				resp("SHADE.ORDER", "ds", v, "0", "1", "10"),
				resp("SHADE.ORDER", "ds", "1", "0", "1", v),
				resp("SHADE.DONE", "ds", v, "0"),
				resp("SHADE.DONE", "ds", "0", v),
				resp("SHADE.REPORT", "ds", v, "1", "0.5"),
				resp("SHADE.REPORT", "ds", "0", v, "0.5"),
				resp("SHADE.REPORT", "ds", "0", "1", v),
				resp("GET", "ds/"+v),
				resp("MGET", "ds/"+v, "ds/1"),
			} {
				send(c)
			}
		}
		if _, err := c.Do(ctx, "SHADE.RESET", "ds").Result(); err != nil {
			t.Fatal(err)
		}
		h.assertHealthy(t, "extreme numbers")
	})

	t.Run("endless lines", func(t *testing.T) {
		for _, tc := range []struct {
			name, prefix, want string
		}{
			{"inline", "", "too big inline request"},
			{"count", "*", "too big mbulk count string"},
			{"bulk length", "*1\r\n$", "too big bulk count string"},
		} {
			junk := append([]byte(tc.prefix), bytes.Repeat([]byte("1"), 8<<20)...)
			if out := h.raw(t, junk, ""); !strings.Contains(out, tc.want) {
				t.Errorf("endless %s: %q, want %q", tc.name, out, tc.want)
			}
		}
		if out := h.raw(t, []byte("*2\r\n$3\r\nGET\r\n$9999999\r\n"), ""); !strings.Contains(out, "over the limit") {
			t.Errorf("a bulk over --max-value: %q", out)
		}
		h.assertHealthy(t, "endless lines")
	})

	t.Run("1000 partial maximal bulks", func(t *testing.T) {
		// 1,000 connections each announce a value of --max-value and send
		// 256 KiB of it: 250 MiB in all against 64 MiB of client memory.
		// Those past the bound are closed with an error; the peer, and
		// the connections within it, go on.
		const n = 1000
		conns := make([]net.Conn, 0, n)
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		head := []byte(fmt.Sprintf("*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$%d\r\n", hostileValue))
		part := make([]byte, 256<<10)
		var wg sync.WaitGroup
		var mu sync.Mutex
		refused := 0
		for i := 0; i < n; i++ {
			c, err := net.Dial("unix", h.Socket)
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			conns = append(conns, c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				c.Write(head)
				if _, err := c.Write(part); err != nil {
					// Closed by the peer while writing: read why.
				}
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				line, _ := bufio.NewReader(c).ReadString('\n')
				if strings.Contains(line, "client memory limit") {
					mu.Lock()
					refused++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		t.Logf("%d of %d connections refused for client memory", refused, n)
		if refused == 0 {
			t.Fatalf("no connection was refused although %d MiB were announced against %d MiB", n*hostileValue>>20, hostileClients>>20)
		}
		// The connections still open hold their part; the peer serves.
		h.assertHealthy(t, "1000 partial bulks (held)")
		for _, c := range conns {
			c.Close()
		}
		conns = nil
		h.assertHealthy(t, "1000 partial bulks (closed)")
	})

	t.Run("maximal MGETs never read", func(t *testing.T) {
		// A pipeline of MGETs of 65,536 keys (256 MiB of replies each)
		// from a client that never reads.
		keys := make([]string, 65536)
		for i := range keys {
			keys[i] = "ds/" + strconv.Itoa(i%hostileSamples)
		}
		mget := resp(append([]string{"MGET"}, keys...)...)
		conn, err := net.Dial("unix", h.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetWriteDeadline(time.Now().Add(20 * time.Second))
		for i := 0; i < 8; i++ {
			if _, err := conn.Write(mget); err != nil {
				break // the peer stopped reading: its pipeline is full
			}
		}
		h.assertHealthy(t, "maximal MGETs unread (held)")
		// The peer closes the connection once its replies have waited
		// longer than --client-write-timeout: only the asking client is
		// left.
		c := redisClient(h.Socket)
		defer c.Close()
		var info string
		var infoErr error
		defer func() {
			if t.Failed() {
				t.Logf("last INFO clients: %q %v", info, infoErr)
			}
		}()
		testsupport.WaitFor(t, 60*time.Second, "the unread connection is closed (--client-write-timeout 3s)", func() bool {
			info, infoErr = c.Info(context.Background(), "clients").Result()
			return infoErr == nil && strings.Contains(info, "connected_clients:1\r\n")
		})
		h.assertHealthy(t, "maximal MGETs unread (closed)")
	})

	t.Run("short MGETs of small values never read", func(t *testing.T) {
		// Values shorter than a lent one are copied into the reply: 400
		// connections each send MGETs of 4,096 values of 1,000 bytes (4
		// MB of replies, short enough for an event loop to answer) and
		// never read: 3.2 GB against 64 MiB of client memory.
		c := redisClient(h.Socket)
		defer c.Close()
		ctx := context.Background()
		small := bytes.Repeat([]byte("s"), 1000)
		for i := range 1000 {
			if err := c.Set(ctx, "small:"+strconv.Itoa(i), small, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		keys := make([]string, 4096)
		for i := range keys {
			keys[i] = "small:" + strconv.Itoa(i%1000)
		}
		mget := resp(append([]string{"MGET"}, keys...)...)
		const n = 400
		conns := make([]net.Conn, 0, n)
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for i := 0; i < n; i++ {
			conn, err := net.Dial("unix", h.Socket)
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			conns = append(conns, conn)
			conn.SetWriteDeadline(time.Now().Add(20 * time.Second))
			conn.Write(mget)
			conn.Write(mget)
		}
		h.assertHealthy(t, "short MGETs unread (held)")
		for _, c := range conns {
			c.Close()
		}
		conns = nil
		h.assertHealthy(t, "short MGETs unread (closed)")
	})
}
