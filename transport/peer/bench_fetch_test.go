package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/internal/cputime"
	"github.com/shade-mesh/shade/internal/nozero"
	"github.com/shade-mesh/shade/protocol/crc32c"
	"github.com/shade-mesh/shade/protocol/shm"
)

// The batch fetch benchmark moves what a mesh fetch of many samples moves:
// a request naming ids and a reply of the samples' bytes with a checksum
// each, between two nodes on loopback, in the mesh's two layouts (package
// mesh/wire is their reference; this package cannot import it): the
// stream layout of wire.MethodFetchStream (a RawReply: a msgpack head of
// each sample's found, hit, checksum and length, then the bytes as they
// are, read into one buffer) and the msgpack layout of wire.MethodFetch
// (every value encoded into one frame). Beside the real transport (QUIC
// with mutual TLS) it sends the same batches over TCP, with the same
// frames and layouts, with and without TLS 1.3, and raw, so the gap is
// split into its parts. BENCH_FETCH_SAMPLES and BENCH_FETCH_SIZE change the
// batch (default 256 samples of 100 KiB). BENCH_FETCH_MTU (Linux, root)
// puts the two ends in two network namespaces joined by a veth pair of
// that MTU instead of on loopback: with 9000, a jumbo-frame link between
// two hosts, where QUIC's packets stay at 8,952 bytes.

const (
	mBatch       Method = 20 // msgpack layout
	mBatchStream Method = 21 // stream layout
)

type benchFetchReq struct {
	Dataset string   `msgpack:"d"`
	Version string   `msgpack:"v"`
	IDs     []uint32 `msgpack:"i"`
}

type benchFetchItem struct {
	Found bool   `msgpack:"f"`
	Hit   bool   `msgpack:"h"`
	Sum   uint64 `msgpack:"s"`
	Value []byte `msgpack:"b"`
	Err   string `msgpack:"e"`
}

type benchFetchResp struct {
	Items []benchFetchItem `msgpack:"i"`
}

// benchFetchHead and benchFetchMeta are wire.FetchHead and wire.FetchMeta.
type benchFetchHead struct {
	Items []benchFetchMeta `msgpack:"i"`
}

type benchFetchMeta struct {
	Found bool   `msgpack:"f"`
	Hit   bool   `msgpack:"h"`
	Sum   uint64 `msgpack:"s"`
	Len   uint32 `msgpack:"n"`
	Err   string `msgpack:"e,omitempty"`
}

// measureCPU reports the CPU both ends (both run in this process) spent per batch, and the bytes moved
// per CPU second: figures that a busy machine disturbs less than MB/s; and the process's thread
// switches per batch (threads woken at hand-offs between goroutines, and put back to sleep).
func measureCPU(b *testing.B, batchBytes int64) func() {
	start, switches := cputime.Process(), cputime.Switches()
	return func() {
		cpu := cputime.Process() - start
		b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
		b.ReportMetric(float64(batchBytes)*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
		b.ReportMetric(float64(cputime.Switches()-switches)/float64(b.N), "switches/op")
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchSamples are the samples a server holds, and their checksums.
type benchSamples struct {
	values [][]byte
	sums   []uint64
	raw    []byte // every value, back to back: the raw TCP reply body
}

func newBenchSamples(n, size int) *benchSamples {
	s := &benchSamples{raw: make([]byte, 0, n*size)}
	for i := range n {
		v := make([]byte, size)
		for j := range v {
			v[j] = byte(i*31 + j)
		}
		s.values = append(s.values, v)
		s.sums = append(s.sums, shm.Checksum(v))
		s.raw = append(s.raw, v...)
	}
	return s
}

// appendValue is how a mesh owner copies a value out of its memory
// (store.CopyTo): appended to dst with its checksum computed as it is
// copied, and checked; a value that fails the check is not found.
func (s *benchSamples) appendValue(dst []byte, id uint32) (out []byte, sum uint64, found bool) {
	i := int(id) % len(s.values)
	out, c := crc32c.Append(dst, s.values[i])
	if uint64(c) != s.sums[i] {
		return dst, 0, false
	}
	return out, s.sums[i], true
}

// reply is what a mesh owner answers: a copy of each value out of its
// memory, with the value's checksum.
func (s *benchSamples) reply(req *benchFetchReq) *benchFetchResp {
	resp := &benchFetchResp{Items: make([]benchFetchItem, len(req.IDs))}
	for i, id := range req.IDs {
		v, sum, found := s.appendValue(nil, id)
		resp.Items[i] = benchFetchItem{Found: found, Hit: found, Sum: sum, Value: v}
	}
	return resp
}

// streamReply is what a mesh owner answers to a streamed fetch: each
// value copied out of its memory (appendValue) into one buffer, back to
// back, and a head of their checksums and lengths; the buffer is the
// reply's own (as the mesh's answerFetch and wire.FetchRawReply build it).
func (s *benchSamples) streamReply(req *benchFetchReq) *RawReply {
	size := 0
	for _, id := range req.IDs {
		size += len(s.values[int(id)%len(s.values)])
	}
	vals := nozero.Bytes(size) // as the mesh's copyBuffer
	head := &benchFetchHead{Items: make([]benchFetchMeta, len(req.IDs))}
	values := make([][]byte, len(req.IDs))
	for i, id := range req.IDs {
		start := len(vals)
		var sum uint64
		var found bool
		vals, sum, found = s.appendValue(vals, id)
		values[i] = vals[start:len(vals)]
		head.Items[i] = benchFetchMeta{Found: found, Hit: found, Sum: sum, Len: uint32(len(vals) - start)}
	}
	return &RawReply{Head: head, Values: values, Owned: true}
}

// readStreamValues reads a streamed reply's values as the mesh's
// wire.ReadFetchValues does (lengths checked against what was asked, one
// buffer, a value cut from it per item, each summed as it is read by
// ReadSummed), and checks every checksum as fetchFrom does.
func readStreamValues(b *testing.B, req *benchFetchReq, head *benchFetchHead, want int) func(io.Reader, int) error {
	return func(r io.Reader, size int) error {
		if len(head.Items) != len(req.IDs) {
			return fmt.Errorf("%d items for %d ids", len(head.Items), len(req.IDs))
		}
		total := 0
		for _, m := range head.Items {
			if int(m.Len) > want {
				return fmt.Errorf("item of %d bytes, at most %d expected", m.Len, want)
			}
			total += int(m.Len)
		}
		if total != size {
			return fmt.Errorf("items of %d bytes, %d follow", total, size)
		}
		buf := nozero.Bytes(size)[:size]
		lens := make([]uint32, len(head.Items))
		for i, m := range head.Items {
			lens[i] = m.Len
		}
		sums := make([]uint32, len(lens))
		if err := ReadSummed(r, buf, lens, sums); err != nil {
			return err
		}
		for i, m := range head.Items {
			if !m.Found || uint64(sums[i]) != m.Sum { // shm.Checksum's
				b.Fatal("bad item")
			}
		}
		return nil
	}
}

// verify checks a reply as the mesh's fetchFrom does.
func verify(b *testing.B, req *benchFetchReq, resp *benchFetchResp) {
	if len(resp.Items) != len(req.IDs) {
		b.Fatalf("%d items for %d ids", len(resp.Items), len(req.IDs))
	}
	for _, it := range resp.Items {
		if !it.Found || shm.Checksum(it.Value) != it.Sum {
			b.Fatal("bad item")
		}
	}
}

func BenchmarkBatchFetch(b *testing.B) {
	n := envInt("BENCH_FETCH_SAMPLES", 256)
	size := envInt("BENCH_FETCH_SIZE", 100<<10)
	samples := newBenchSamples(n, size)
	req := &benchFetchReq{Dataset: "ds", Version: "v1"}
	for i := range n {
		req.IDs = append(req.IDs, uint32(i))
	}
	batchBytes := int64(n * size)
	dir := b.TempDir()
	name := fmt.Sprintf("%dx%dKiB", n, size>>10)
	path := newBenchPath(b, envInt("BENCH_FETCH_MTU", 0))

	b.Run("quic-stream/"+name, func(b *testing.B) {
		srv := path.node(b, 1, dir, "node-b", fetchHandler(samples.streamReply))
		cli := path.node(b, 0, dir, "node-a", newTestHandler())
		ctx := context.Background()
		call := func() {
			var head benchFetchHead
			if err := cli.CallRaw(ctx, srv.Addr(), "node-b", mBatchStream, req, &head, readStreamValues(b, req, &head, size)); err != nil {
				b.Fatal(err)
			}
		}
		call() // the connection, dialled once
		b.SetBytes(batchBytes)
		defer measureCPU(b, batchBytes)()
		for b.Loop() {
			call()
		}
	})

	b.Run("quic-msgpack/"+name, func(b *testing.B) {
		srv := path.node(b, 1, dir, "node-b", fetchHandler(samples.reply))
		cli := path.node(b, 0, dir, "node-a", newTestHandler())
		ctx := context.Background()
		var resp benchFetchResp
		if err := cli.Call(ctx, srv.Addr(), "node-b", mBatch, req, &resp); err != nil {
			b.Fatal(err) // the connection, dialled once
		}
		b.SetBytes(batchBytes)
		defer measureCPU(b, batchBytes)()
		for b.Loop() {
			var resp benchFetchResp
			if err := cli.Call(ctx, srv.Addr(), "node-b", mBatch, req, &resp); err != nil {
				b.Fatal(err)
			}
			verify(b, req, &resp)
		}
	})

	serverTLS, clientTLS := benchTLS(b, dir)
	for _, v := range []struct {
		name   string
		layout string // "stream", "msgpack" or "raw"
		tls    bool
	}{
		{"tcp-tls-stream", "stream", true},
		{"tcp-tls-msgpack", "msgpack", true},
		{"tcp-stream", "stream", false},
		{"tcp-msgpack", "msgpack", false},
		{"tcp-raw", "raw", false},
	} {
		b.Run(v.name+"/"+name, func(b *testing.B) {
			var st, ct *tls.Config
			if v.tls {
				st, ct = serverTLS, clientTLS
			}
			addr := tcpBatchServer(b, path, samples, v.layout, st)
			var conn net.Conn
			if err := path.in(0, func() (err error) {
				conn, err = net.Dial("tcp", addr)
				return err
			}); err != nil {
				b.Fatal(err)
			}
			if ct != nil {
				conn = tls.Client(conn, ct)
			}
			defer conn.Close()
			rw := bufio.NewReadWriter(bufio.NewReaderSize(conn, 64<<10), bufio.NewWriter(conn))
			var buf []byte
			b.SetBytes(batchBytes)
			defer measureCPU(b, batchBytes)()
			for b.Loop() {
				switch v.layout {
				case "stream":
					buf = tcpStreamCall(b, rw, req, buf, size)
				case "msgpack":
					buf = tcpMsgpackCall(b, rw, req, buf)
				default:
					buf = tcpRawCall(b, rw, req, buf, len(samples.raw))
				}
			}
		})
	}
}

// benchTLS is the nodes' mutual TLS 1.3, over TCP.
func benchTLS(b *testing.B, dir string) (server, client *tls.Config) {
	sc, err := DevTLS(dir, "node-b")
	if err != nil {
		b.Fatal(err)
	}
	cc, err := DevTLS(dir, "node-a")
	if err != nil {
		b.Fatal(err)
	}
	server, client = sc.serverConfig(), cc.clientConfig("node-b")
	server.NextProtos, client.NextProtos = []string{"bench"}, []string{"bench"}
	return server, client
}

// benchPath is where the benchmark's two ends talk: loopback, or two
// network namespaces joined by a veth pair (vethPair), as two hosts on
// one link of a given MTU. Side 0 is the client's, side 1 the server's.
type benchPath struct {
	ns, addr [2]string // "" and 127.0.0.1 on loopback
}

// newBenchPath returns loopback for mtu 0, or a veth pair of that MTU
// (skipping the benchmark where namespaces cannot be made).
func newBenchPath(b *testing.B, mtu int) benchPath {
	if mtu == 0 {
		return benchPath{addr: [2]string{"127.0.0.1", "127.0.0.1"}}
	}
	ns, addr := vethPair(b, mtu)
	return benchPath{ns: ns, addr: addr}
}

// in runs fn where side's sockets live.
func (p benchPath) in(side int, fn func() error) error {
	if p.ns[side] == "" {
		return fn()
	}
	return inNetns(p.ns[side], fn)
}

// node is a node of the peer transport on side's end.
func (p benchPath) node(b *testing.B, side int, dir, name string, h Handler) *Node {
	if p.ns[side] == "" {
		return testNode(b, dir, name, h)
	}
	return listenIn(b, p.ns[side], dir, name, p.addr[side], h)
}

// tcpBatchServer answers batch requests on a TCP listener at the server's
// end of path until the benchmark ends: with the peer protocol's frames
// in the stream or the msgpack layout, or (raw) with every sample's bytes
// in one length-prefixed frame.
func tcpBatchServer(b *testing.B, path benchPath, s *benchSamples, layout string, tc *tls.Config) string {
	var ln net.Listener
	if err := path.in(1, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(path.addr[1], "0"))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if tc != nil {
				conn = tls.Server(conn, tc)
			}
			wg.Go(func() {
				defer conn.Close()
				r := bufio.NewReaderSize(conn, 64<<10)
				var in, out []byte
				for {
					_, body, err := readFrame(r, DefaultMaxFrame, in, nil)
					keep(&in, body)
					if err != nil {
						return
					}
					if layout == "stream" {
						var req benchFetchReq
						if err := msgpack.Unmarshal(body, &req); err != nil {
							return
						}
						r := s.streamReply(&req)
						start, _, err := appendRawHead(out[:0], r)
						keep(&out, start)
						if err != nil {
							return
						}
						if _, err := conn.Write(start); err != nil {
							return
						}
						if _, err := writeValues(conn, r.Values); err != nil {
							return
						}
						continue
					}
					if layout == "msgpack" {
						var req benchFetchReq
						if err := msgpack.Unmarshal(body, &req); err != nil {
							return
						}
						frame, err := appendFrame(out[:0], uint16(CodeOK), s.reply(&req))
						keep(&out, frame)
						if err != nil {
							return
						}
						if _, err := conn.Write(frame); err != nil {
							return
						}
						continue
					}
					var hdr [headerLen]byte
					binary.BigEndian.PutUint32(hdr[:], uint32(len(s.raw)+2))
					if _, err := conn.Write(hdr[:]); err != nil {
						return
					}
					if _, err := conn.Write(s.raw); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// tcpMsgpackCall sends req in a frame and reads, checks and decodes the
// reply as Node.Call does.
func tcpMsgpackCall(b *testing.B, rw *bufio.ReadWriter, req *benchFetchReq, buf []byte) []byte {
	frame := sendFrame(b, rw, mBatch, req, buf)
	_, body, err := readFrame(rw, DefaultMaxFrame, frame, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := CheckMsgpack(body); err != nil {
		b.Fatal(err)
	}
	var resp benchFetchResp
	if err := msgpack.Unmarshal(body, &resp); err != nil {
		b.Fatal(err)
	}
	verify(b, req, &resp)
	return body
}

// tcpStreamCall sends req in a frame and reads the streamed reply as
// Node.CallRaw does: the head checked and decoded, then the values into one
// buffer.
func tcpStreamCall(b *testing.B, rw *bufio.ReadWriter, req *benchFetchReq, buf []byte, want int) []byte {
	frame := sendFrame(b, rw, mBatchStream, req, buf)
	_, size, err := readHeader(rw, DefaultMaxFrame, nil)
	if err != nil {
		b.Fatal(err)
	}
	var head benchFetchHead
	rest, body, err := readRawHead(rw, size, frame, &head)
	if err != nil {
		b.Fatal(err)
	}
	vr := &valueReader{r: rw, left: rest}
	if err := readStreamValues(b, req, &head, want)(vr, rest); err != nil || vr.left != 0 {
		b.Fatal(err, vr.left)
	}
	return body
}

// tcpRawCall sends req in a frame and reads the raw reply into buf.
func tcpRawCall(b *testing.B, rw *bufio.ReadWriter, req *benchFetchReq, buf []byte, want int) []byte {
	frame := sendFrame(b, rw, mBatch, req, buf)
	var hdr [headerLen]byte
	if _, err := io.ReadFull(rw, hdr[:]); err != nil {
		b.Fatal(err)
	}
	if got := int(binary.BigEndian.Uint32(hdr[:])) - 2; got != want {
		b.Fatalf("raw reply of %d bytes, want %d", got, want)
	}
	if cap(frame) < want {
		frame = make([]byte, want)
	}
	if _, err := io.ReadFull(rw, frame[:want]); err != nil {
		b.Fatal(err)
	}
	return frame[:0]
}

// fetchHandler serves a batch fetch: the request decoded, reply built by
// reply.
func fetchHandler[R any](reply func(*benchFetchReq) R) Handler {
	return HandlerFunc(func(ctx context.Context, from string, m Method, body []byte) (any, error) {
		var r benchFetchReq
		if err := msgpack.Unmarshal(body, &r); err != nil {
			return nil, err
		}
		return reply(&r), nil
	})
}

// sendFrame writes req to rw in a frame of method m, built in buf, and
// returns the frame.
func sendFrame(b *testing.B, rw *bufio.ReadWriter, m Method, req *benchFetchReq, buf []byte) []byte {
	frame, err := appendFrame(buf[:0], uint16(m), req)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := rw.Write(frame); err != nil {
		b.Fatal(err)
	}
	if err := rw.Flush(); err != nil {
		b.Fatal(err)
	}
	return frame
}
