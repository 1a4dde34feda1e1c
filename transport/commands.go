package transport

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/shade-mesh/shade/internal/redcon"
	"github.com/shade-mesh/shade/protocol/samplekey"
)

// handler is one command of the trainer socket. min and max bound the
// argument count including the command name; max < 0 means no upper bound.
// fast, where set, answers the command on an event loop if it can without
// waiting, and reports whether it did (see SocketServer.fast); nil: the
// command always goes to a goroutine. A fast that reports false has
// written nothing, or has left in connState where run goes on from (an
// MGET's mgetFrom).
type handler struct {
	min, max int
	run      func(s *SocketServer, conn redcon.Conn, st *connState, args [][]byte)
	fast     func(s *SocketServer, conn redcon.Conn, st *connState, args [][]byte) bool
}

// takes reports whether the command takes argc arguments, its name
// counted.
func (h handler) takes(argc int) bool {
	return argc >= h.min && (h.max < 0 || argc <= h.max)
}

// never waits: run answers on the loop as it stands.
func never(h handler) handler {
	run := h.run
	h.fast = func(s *SocketServer, c redcon.Conn, st *connState, a [][]byte) bool {
		run(s, c, st, a)
		return true
	}
	return h
}

// commandTable lists every command the socket answers. It is built once per
// server and never changed.
func commandTable() map[string]handler {
	t := map[string]handler{
		"ping":           {1, 2, cmdPing, nil},
		"echo":           {2, 2, func(_ *SocketServer, c redcon.Conn, _ *connState, a [][]byte) { c.WriteBulk(a[1]) }, nil},
		"quit":           {1, 1, cmdQuit, nil},
		"auth":           {2, 3, cmdAuth, nil},
		"hello":          {1, -1, cmdHello, nil},
		"select":         {2, 2, cmdSelect, nil},
		"client":         {2, -1, cmdClient, nil},
		"command":        {1, -1, cmdCommand, nil},
		"config":         {2, -1, cmdConfig, nil},
		"info":           {1, 2, cmdInfo, nil},
		"dbsize":         {1, 1, func(s *SocketServer, c redcon.Conn, _ *connState, _ [][]byte) { c.WriteInt(s.backend.DBSize()) }, nil},
		"get":            {2, 2, cmdGet, fastGet},
		"mget":           {2, -1, cmdMGet, fastMGet},
		"set":            {3, 3, cmdSet, fastSet},
		"exists":         {2, -1, cmdExists, nil},
		"del":            {2, -1, cmdDel, nil},
		"unlink":         {2, -1, cmdDel, nil},
		"shade.manifest": {2, 2, cmdManifest, nil},
		"shade.report":   {5, -1, cmdReport, nil},
		"shade.done":     {4, 6, cmdDone, nil},
		"shade.order":    {5, 10, cmdOrder, nil},
		"shade.reset":    {2, 4, cmdReset, nil},
		"shade.job":      {2, 2, cmdJob, nil},
		"shade.warm":     {2, 2, cmdWarm, nil},
		"shade.stats":    {1, 2, cmdStats, nil},
		"shade.map":      {1, 1, cmdMap, nil},
		"shade.locate":   {2, -1, cmdLocate, nil},
	}
	// What an event loop answers itself: commands that never wait.
	for _, name := range []string{"ping", "echo", "dbsize", "exists", "del", "unlink", "shade.job", "shade.locate"} {
		t[name] = never(t[name])
	}
	return t
}

func cmdPing(_ *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	if len(a) == 2 {
		c.WriteBulk(a[1])
		return
	}
	c.WriteString("PONG")
}

func cmdQuit(_ *SocketServer, c redcon.Conn, _ *connState, _ [][]byte) {
	c.WriteString("OK")
	c.Close()
}

func cmdAuth(s *SocketServer, c redcon.Conn, st *connState, a [][]byte) {
	if s.cfg.RequirePass == "" {
		c.WriteError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return
	}
	pass := a[len(a)-1]
	if len(a) == 3 && string(a[1]) != "default" {
		st.authed = false
		c.WriteError("WRONGPASS invalid username-password pair or user is disabled.")
		return
	}
	if subtle.ConstantTimeCompare(pass, []byte(s.cfg.RequirePass)) != 1 {
		st.authed = false
		c.WriteError("WRONGPASS invalid username-password pair or user is disabled.")
		return
	}
	st.authed = true
	c.WriteString("OK")
}

// cmdHello answers only for protocol 2 (or none): the socket speaks RESP2.
// Clients such as go-redis fall back to RESP2 on this error.
func cmdHello(_ *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	if len(a) > 1 && string(a[1]) != "2" {
		c.WriteError("NOPROTO unsupported protocol version")
		return
	}
	c.WriteError("ERR unknown command 'HELLO'")
}

func cmdSelect(_ *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	if string(a[1]) != "0" {
		c.WriteError("ERR DB index is out of range")
		return
	}
	c.WriteString("OK")
}

// cmdClient accepts the CLIENT subcommands that client libraries send on
// connect (SETNAME, SETINFO) so they work unmodified.
func cmdClient(_ *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	switch strings.ToLower(string(a[1])) {
	case "setname", "setinfo":
		c.WriteString("OK")
	case "getname":
		c.WriteNull()
	case "id":
		c.WriteInt(1)
	default:
		c.WriteError(fmt.Sprintf("ERR unknown subcommand '%s'", truncate(a[1], 32)))
	}
}

// cmdCommand answers COMMAND, COMMAND COUNT and COMMAND DOCS with no
// documentation, enough for redis-cli and redis-benchmark.
func cmdCommand(s *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	if len(a) > 1 && strings.EqualFold(string(a[1]), "count") {
		c.WriteInt(len(s.handlers))
		return
	}
	c.WriteArray(0)
}

// cmdConfig answers CONFIG GET for the parameters redis-benchmark reads.
func cmdConfig(_ *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	if !strings.EqualFold(string(a[1]), "get") || len(a) != 3 {
		c.WriteError("ERR CONFIG supports only GET <parameter> on this server")
		return
	}
	switch strings.ToLower(string(a[2])) {
	case "save":
		c.WriteArray(2)
		c.WriteBulkString("save")
		c.WriteBulkString("")
	case "appendonly":
		c.WriteArray(2)
		c.WriteBulkString("appendonly")
		c.WriteBulkString("no")
	default:
		c.WriteArray(0)
	}
}

func cmdInfo(s *SocketServer, c redcon.Conn, _ *connState, _ [][]byte) {
	var b strings.Builder
	b.WriteString("# Server\r\nredis_version:7.0.0\r\nshade_server:shade-peer\r\n")
	fmt.Fprintf(&b, "uptime_in_seconds:%d\r\n", int(time.Since(s.started).Seconds()))
	s.mu.Lock()
	fmt.Fprintf(&b, "\r\n# Clients\r\nconnected_clients:%d\r\ntotal_connections_received:%d\r\n", s.conns, s.total)
	s.mu.Unlock()
	b.WriteString("\r\n# Shade\r\n")
	for _, line := range s.backend.Info() {
		b.WriteString(line)
		b.WriteString("\r\n")
	}
	fmt.Fprintf(&b, "\r\n# Keyspace\r\ndb0:keys=%d,expires=0,avg_ttl=0\r\n", s.backend.DBSize())
	c.WriteBulkString(b.String())
}

// cmdGet writes a value held in memory out from where the backend holds
// it, lent (the kernel copies it from the cache to the socket), and any
// other value appended straight into the reply.
func cmdGet(s *SocketServer, c redcon.Conn, st *connState, a [][]byte) {
	b, loan, found, err := s.backend.LendGet(s.readCtx(st), a[1], c.Reply(), redcon.AppendBulkHeader)
	writeGot(s, c, b, loan, found, err)
}

// fastGet answers a GET on an event loop where the value is held in
// memory (or the answer needs no read at all).
func fastGet(s *SocketServer, c redcon.Conn, st *connState, a [][]byte) bool {
	b, loan, found, held, err := s.backend.LendHeld(s.readCtx(st), a[1], c.Reply(), redcon.AppendBulkHeader)
	if !held {
		return false
	}
	writeGot(s, c, b, loan, found, err)
	return true
}

// PrefetchAhead is how many reads ahead of a pipeline of GETs, or of the
// keys of an MGET, their keys are hinted to Backend.Prefetch: far enough
// that a value's load from memory overlaps the reads before it, near
// enough that what it loads is still in the CPU's caches when read. 16 is
// what store.BenchmarkLendBatch measures (batches of 16: 28% less time out
// of the CPU's caches); other depths were not tried.
const PrefetchAhead = 16

// hintAhead hints the keys of the GETs ahead in c's pipeline to
// Backend.Prefetch, for a command about to be answered on an event loop:
// on the pipeline's first command the next PrefetchAhead, on each later
// one the command PrefetchAhead after it, so that in a pipeline answered
// on the loop each GET's key is hinted once, about PrefetchAhead commands
// before it runs.
func hintAhead(s *SocketServer, c redcon.Conn, st *connState) {
	rest := c.PeekPipeline()
	from := PrefetchAhead - 1
	if st.fresh {
		from = 0
	}
	for i := from; i < min(PrefetchAhead, len(rest)); i++ {
		if a := rest[i].Args; len(a) == 2 && isGet(a[0]) {
			s.backend.Prefetch(a[1])
		}
	}
}

// isGet reports whether name is GET, in any case.
func isGet(name []byte) bool {
	return len(name) == 3 && name[0]|0x20 == 'g' && name[1]|0x20 == 'e' && name[2]|0x20 == 't'
}

// writeGot completes a GET's reply: the value lent, if it is, then as
// writeAppended.
func writeGot(s *SocketServer, c redcon.Conn, b []byte, loan Loan, found bool, err error) {
	if loan.Value != nil {
		c.SetReply(b)
		c.WriteLent(loan.Value, s.giveBack, loan.Token)
		b = c.Reply()
	}
	writeAppended(c, b, found, err)
}

// writeAppended completes a reply appended by the backend: the bulk's
// closing CRLF, or nil, or the error.
func writeAppended(c redcon.Conn, b []byte, found bool, err error) {
	switch {
	case err != nil:
		c.SetReply(b)
		writeErr(c, err)
	case !found:
		c.SetReply(b)
		c.WriteNull()
	default:
		c.SetReply(append(b, '\r', '\n'))
	}
}

// tooManyKeys answers a command with more keys than MaxKeys, and reports
// whether it did.
func tooManyKeys(s *SocketServer, c redcon.Conn, n int) bool {
	return overMaxKeys(s, c, n, "keys", "command")
}

// overMaxKeys answers a command with n things, more than MaxKeys (keys,
// a report's pairs), and reports whether it did.
func overMaxKeys(s *SocketServer, c redcon.Conn, n int, things, command string) bool {
	if n <= s.cfg.MaxKeys {
		return false
	}
	s.refused.add(refusedKeys)
	c.WriteError(fmt.Sprintf("ERR too many %s: %d, at most %d in one %s (--max-keys)", things, n, s.cfg.MaxKeys, command))
	return true
}

// cmdMGet answers a batch in parts, so that neither the values read
// through nor the reply is ever the whole batch. Values held in memory are
// lent (lendPrefix) about replyFlush bytes at a time, and each chunk goes
// to the socket as far as it takes it at once (FlushSome): the client
// reads the reply's start while the rest is lent and checked. While
// replyPart bytes wait, the reply is written out before the next chunk is
// lent, so a connection holds at most replyPart bytes and one chunk of
// loans. A chunk with a value not held in memory starts a part of about
// replyPart bytes of values read through: the part first takes room in the
// clients' budget for its values and for the reply it writes (written out
// whenever replyFlush bytes wait, so at most replyFlush and one value),
// and is written out before the next part is read. A part that finds no
// room within maxReplyWait answers its keys with errors; the array stays
// whole and no value is ever wrong. An MGET an event loop began (fastMGet)
// goes on from where the loop stopped.
func cmdMGet(s *SocketServer, c redcon.Conn, st *connState, a [][]byte) {
	keys := a[1:]
	start := st.mgetFrom
	st.mgetFrom = 0
	if start == 0 {
		if tooManyKeys(s, c, len(keys)) {
			return
		}
		c.WriteArray(len(keys))
	}
	limit := s.clients.Limit()
	for start < len(keys) {
		if c.Buffered() >= replyPart && c.Flush() != nil {
			return // the connection is closed
		}
		if n, ok := lendPrefix(s, c, st, keys[start:], -1); ok {
			// Every value of the chunk held in memory: lent, not copied.
			if start += n; start < len(keys) && c.FlushSome() != nil {
				return // the connection is closed
			}
			continue
		}
		end, bytes, largest := nextPart(s, keys, start, replyPart)
		need := min(bytes+min(bytes, replyFlush+largest), limit)
		ctx, cancel := context.WithTimeout(s.ctx, maxReplyWait)
		err := s.clients.Reserve(ctx, need)
		cancel()
		if err != nil {
			for range keys[start:end] {
				c.WriteError("ERR client memory limit reached (--max-client-memory): no room for this value now; retry")
			}
			for range end - start {
				s.refused.add(refusedReplyMemory)
			}
		} else if !writePart(s, c, st, keys[start:end], end < len(keys)) {
			s.clients.Release(need)
			return // the connection is closed
		}
		var ferr error
		if end < len(keys) {
			ferr = c.Flush()
		}
		if err == nil {
			s.clients.Release(need)
		}
		if ferr != nil {
			return // the connection is closed
		}
		start = end
	}
}

// nextPart returns where the part of keys from start ends: it takes keys
// while their values add up to at most limit bytes, and at least one. It
// returns the values' bytes and the largest's.
func nextPart(s *SocketServer, keys [][]byte, start int, limit int64) (end int, bytes, largest int64) {
	for end = start; end < len(keys); end++ {
		n := int64(s.backend.ValueSize(keys[end]))
		if end > start && bytes+n > limit {
			break
		}
		bytes += n
		largest = max(largest, n)
	}
	return end, bytes, largest
}

// writePart appends the values of one part of an MGET to the reply,
// writing the reply out whenever replyFlush bytes of it wait and more
// follows (more: parts after this one). It reports false if the
// connection was closed.
func writePart(s *SocketServer, c redcon.Conn, st *connState, keys [][]byte, more bool) bool {
	batch := s.backend.MGet(s.readCtx(st), keys)
	defer batch.Close()
	for i := range keys {
		b, found, err := batch.Append(i, c.Reply(), redcon.AppendBulkHeader)
		writeAppended(c, b, found, err)
		if c.Buffered() >= replyFlush && (more || i < len(keys)-1) {
			if c.Flush() != nil {
				return false
			}
		}
	}
	return true
}

// fastMGet answers an MGET on an event loop, as far as its values are
// held in memory (or need no read at all) and the client keeps up: it
// lends them replyFlush bytes at a time, as cmdMGet does, and hands each
// chunk to the socket as far as it takes it at once, so the client reads
// the reply's start while the rest is lent and checked. Where the first
// chunk has a value to read elsewhere, or the clients' memory has no room
// for what it may copy, it answers nothing and cmdMGet answers the MGET on
// a goroutine. Where a later chunk has, or replyPart bytes wait for the
// client, cmdMGet goes on from there (connState.mgetFrom): the loop never
// waits.
func fastMGet(s *SocketServer, c redcon.Conn, st *connState, a [][]byte) bool {
	keys := a[1:]
	if len(keys) > s.cfg.MaxKeys {
		return false // cmdMGet refuses it
	}
	done, ok := lendPrefix(s, c, st, keys, len(keys))
	if !ok {
		return false
	}
	for done < len(keys) {
		if c.FlushSome() != nil {
			return true // the connection is closed
		}
		if c.Buffered() >= replyPart {
			break
		}
		n, ok := lendPrefix(s, c, st, keys[done:], -1)
		if !ok {
			break
		}
		done += n
	}
	if done < len(keys) {
		st.mgetFrom = done
		return false
	}
	return true
}

// lendPrefix answers a prefix of keys, an MGET's or the rest of one,
// where every value of the prefix is held in memory (or needs no read at
// all): the longest whose values take at most replyFlush bytes, and at
// least one key (Backend.LendHeldPrefix). Each value of at least MinLent
// bytes is lent in place, as a GET's, the shorter ones copied. With array
// at least 0 the reply's array header of that length goes first. It
// returns how many keys it answered; it reports false, having written
// nothing, where it cannot: a value to read elsewhere, or no room in the
// clients' memory for what it may copy.
func lendPrefix(s *SocketServer, c redcon.Conn, st *connState, keys [][]byte, array int) (int, bool) {
	// redcon counts the reply's buffer in the clients' memory once the
	// command is answered; the room is held until then.
	copied := int64(min(len(keys)*MinLent, replyFlush))
	if !s.clients.TryReserve(copied) {
		return 0, false
	}
	defer s.clients.Release(copied)
	held, ok := s.backend.LendHeldPrefix(s.readCtx(st), keys, replyFlush, st.held[:0])
	if !ok {
		return 0, false
	}
	if array >= 0 {
		c.WriteArray(array)
	}
	// Room for the values copied, so that a long reply's buffer comes
	// from the ones kept for long replies, not from append.
	c.Grow(replyRoom(held))
	for i := range held {
		h := &held[i]
		switch v := h.Loan.Value; {
		case h.Err != nil:
			writeErr(c, h.Err)
		case !h.Found:
			c.WriteNull()
		case len(v) < MinLent:
			c.SetReply(redcon.AppendBulk(c.Reply(), v))
			s.giveBack(h.Loan.Token)
		default:
			writeGot(s, c, redcon.AppendBulkHeader(c.Reply(), len(v)), h.Loan, true, nil)
		}
		*h = Held{}
	}
	st.held = held[:0]
	return len(held), true
}

// replyRoom is about the bytes lendPrefix appends to the reply for held:
// each value under MinLent copied, and 64 a key for its bulk header and
// CRLF, a nil or an error (a longer error grows the reply as append does).
func replyRoom(held []Held) int {
	n := 0
	for i := range held {
		if v := held[i].Loan.Value; len(v) < MinLent {
			n += len(v)
		}
		n += 64 // a bulk header and CRLF, or a nil or an error's start
	}
	return n
}

// fastSet answers a SET on an event loop where the value is at most
// maxLoopSet bytes (storing it never waits); a longer one goes to cmdSet
// on a goroutine.
func fastSet(s *SocketServer, c redcon.Conn, st *connState, a [][]byte) bool {
	if len(a[2]) > maxLoopSet {
		return false
	}
	cmdSet(s, c, st, a)
	return true
}

// cmdSet stores a free-form value. A value over MaxValue never gets here:
// the connection is refused as the value is announced.
func cmdSet(s *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	if _, err := s.backend.Set(a[1], a[2]); err != nil {
		writeErr(c, err)
		return
	}
	// A value the admission policy declined is answered OK all the same, as
	// a cache may drop any entry at any time; SHADE.STATS counts it.
	c.WriteString("OK")
}

func cmdExists(s *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	if tooManyKeys(s, c, len(a)-1) {
		return
	}
	n := 0
	for _, k := range a[1:] {
		if s.backend.Exists(k) {
			n++
		}
	}
	c.WriteInt(n)
}

func cmdDel(s *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	if tooManyKeys(s, c, len(a)-1) {
		return
	}
	n := 0
	for _, k := range a[1:] {
		if s.backend.Delete(k) {
			n++
		}
	}
	c.WriteInt(n)
}

func cmdManifest(s *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	names, err := s.backend.Manifest(string(a[1]))
	if err != nil {
		writeErr(c, err)
		return
	}
	c.WriteArray(names.Len())
	for _, name := range names.AllBytes() {
		c.WriteBulk(name)
	}
}

// ReportArgs is a parsed SHADE.REPORT: dataset, epoch, then id/loss
// pairs, then the job if one was named.
type ReportArgs struct {
	Dataset string
	Epoch   int
	IDs     []uint32
	Losses  []float64
	Job     string // "" where none was named
}

// cutJob takes an optional trailing JOB <name> off a command's
// arguments: the arguments before it, and the name ("" for none). A
// name that could not name a job is an error.
func cutJob(args [][]byte, command string) ([][]byte, string, error) {
	n := len(args)
	if n < 2 || !strings.EqualFold(string(args[n-2]), "JOB") {
		return args, "", nil
	}
	job, err := jobName(args[n-1], command)
	if err != nil {
		return nil, "", err
	}
	return args[:n-2], job, nil
}

// jobName checks the name a command's JOB option gives.
func jobName(name []byte, command string) (string, error) {
	if err := samplekey.ValidName(string(name)); err != nil {
		return "", fmt.Errorf("%s: bad job name: %w", command, err)
	}
	return string(name), nil
}

// ParseReport parses SHADE.REPORT's arguments (after the command name):
// <dataset> <epoch> <id> <loss> [<id> <loss> ...] [JOB <name>], or
// <dataset> <epoch> PACKED <ids> <losses> [JOB <name>] with the ids as
// little-endian uint32 and the losses as little-endian IEEE 754 float64,
// the same number of each. It checks shape and syntax only; the node
// checks ids against the dataset and refuses non-finite losses.
func ParseReport(args [][]byte) (ReportArgs, error) {
	var r ReportArgs
	args, job, err := cutJob(args, "SHADE.REPORT")
	if err != nil {
		return r, err
	}
	r.Job = job
	packed := len(args) == 5 && strings.EqualFold(string(args[2]), "PACKED")
	if !packed && (len(args) < 4 || (len(args)-2)%2 != 0) {
		return r, fmt.Errorf("SHADE.REPORT needs <dataset> <epoch> and one or more <id> <loss> pairs, or PACKED <ids> <losses> [JOB <name>]")
	}
	r.Dataset = string(args[0])
	epoch, err := parseInt(args[1], "epoch")
	if err != nil {
		return r, err
	}
	r.Epoch = epoch
	if packed {
		ids, losses := args[3], args[4]
		if len(ids)%4 != 0 || len(losses)%8 != 0 || len(ids)/4 != len(losses)/8 || len(ids) == 0 {
			return r, fmt.Errorf("SHADE.REPORT PACKED needs 4 bytes an id and 8 a loss, as many of each, got %d and %d bytes", len(ids), len(losses))
		}
		r.IDs = make([]uint32, len(ids)/4)
		r.Losses = make([]float64, len(r.IDs))
		for i := range r.IDs {
			r.IDs[i] = binary.LittleEndian.Uint32(ids[4*i:])
			r.Losses[i] = math.Float64frombits(binary.LittleEndian.Uint64(losses[8*i:]))
		}
		return r, nil
	}
	pairs := (len(args) - 2) / 2
	r.IDs = make([]uint32, pairs)
	r.Losses = make([]float64, pairs)
	for i := 0; i < pairs; i++ {
		id, err := strconv.ParseUint(string(args[2+2*i]), 10, 32)
		if err != nil {
			return r, fmt.Errorf("sample id must be a non-negative integer, got '%s'", truncate(args[2+2*i], 32))
		}
		loss, err := strconv.ParseFloat(string(args[3+2*i]), 64)
		if err != nil {
			return r, fmt.Errorf("loss must be a number, got '%s'", truncate(args[3+2*i], 32))
		}
		r.IDs[i] = uint32(id)
		r.Losses[i] = loss
	}
	return r, nil
}

func cmdReport(s *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	if overMaxKeys(s, c, (len(a)-3)/2, "id/loss pairs", "report") { // before parsing each pair
		return
	}
	r, err := ParseReport(a[1:])
	if err != nil {
		c.WriteError("ERR " + err.Error())
		return
	}
	if overMaxKeys(s, c, len(r.IDs), "id/loss pairs", "report") { // a PACKED report
		return
	}
	if err := s.backend.Report(r.Dataset, r.Job, r.Epoch, r.IDs, r.Losses); err != nil {
		writeErr(c, err)
		return
	}
	c.WriteInt(len(r.IDs))
}

// OrderArgs is a parsed SHADE.ORDER.
type OrderArgs struct {
	Dataset            string
	Epoch, Rank, World int
	Wait               time.Duration // 0: the server's limit
	// WithWeights asks for the ids' importance weights beside them.
	WithWeights bool
	// Packed asks for the ids (and weights) as little-endian binary in
	// one bulk string each, instead of one RESP element per id.
	Packed bool
	// Job is the job named, "" for none (the dataset's default job).
	Job string
}

const orderUsage = "SHADE.ORDER needs <dataset> <epoch> <rank> <world> [timeout-ms] [WITHWEIGHTS] [PACKED] [JOB <name>]"

// ParseOrder parses SHADE.ORDER's arguments (after the command name):
// <dataset> <epoch> <rank> <world> [timeout-ms] followed, in any order,
// by [WITHWEIGHTS], [PACKED] and [JOB <name>], each at most once.
func ParseOrder(args [][]byte) (OrderArgs, error) {
	var o OrderArgs
	if len(args) < 4 {
		return o, errors.New(orderUsage)
	}
	o.Dataset = string(args[0])
	var err error
	if o.Epoch, err = parseInt(args[1], "epoch"); err != nil {
		return o, err
	}
	if o.Rank, err = parseInt(args[2], "rank"); err != nil {
		return o, err
	}
	if o.World, err = parseInt(args[3], "world"); err != nil {
		return o, err
	}
	if o.World < 1 || o.Rank >= o.World {
		return o, fmt.Errorf("rank must be in [0, world) and world at least 1, got rank %d world %d", o.Rank, o.World)
	}
	rest := args[4:]
	if len(rest) > 0 && !isOrderOption(rest[0]) {
		ms, err := parseInt(rest[0], "timeout-ms")
		if err != nil {
			return o, err
		}
		o.Wait = time.Duration(ms) * time.Millisecond
		rest = rest[1:]
	}
	for len(rest) > 0 {
		opt := rest[0]
		switch {
		case strings.EqualFold(string(opt), "WITHWEIGHTS") && !o.WithWeights:
			o.WithWeights = true
		case strings.EqualFold(string(opt), "PACKED") && !o.Packed:
			o.Packed = true
		case strings.EqualFold(string(opt), "JOB") && o.Job == "" && len(rest) > 1:
			var err error
			if o.Job, err = jobName(rest[1], "SHADE.ORDER"); err != nil {
				return o, err
			}
			rest = rest[1:]
		default:
			return o, fmt.Errorf("%s; got %q", orderUsage, opt)
		}
		rest = rest[1:]
	}
	return o, nil
}

// isOrderOption reports whether a is one of SHADE.ORDER's option words.
func isOrderOption(a []byte) bool {
	for _, w := range []string{"WITHWEIGHTS", "PACKED", "JOB"} {
		if strings.EqualFold(string(a), w) {
			return true
		}
	}
	return false
}

func cmdOrder(s *SocketServer, c redcon.Conn, st *connState, a [][]byte) {
	o, err := ParseOrder(a[1:])
	if err != nil {
		c.WriteError("ERR " + err.Error())
		return
	}
	s.setJob(st, o.Job)
	if o.World > s.cfg.MaxWorld {
		s.refused.add(refusedWorld)
		c.WriteError(fmt.Sprintf("ERR world %d is over the limit of %d ranks (--max-world)", o.World, s.cfg.MaxWorld))
		return
	}
	wait := s.cfg.MaxOrderWait
	if o.Wait > 0 && o.Wait < wait {
		wait = o.Wait
	}
	ctx, cancel := context.WithTimeout(s.ctx, wait)
	defer cancel()
	ids, weights, err := s.backend.Order(ctx, o.Dataset, o.Job, o.Epoch, o.Rank, o.World)
	if err != nil {
		writeErr(c, err)
		return
	}
	if o.WithWeights {
		c.WriteArray(2)
	}
	if o.Packed {
		writePackedOrder(c, ids, weights, o.WithWeights)
		return
	}
	c.WriteArray(len(ids))
	for _, id := range ids {
		c.WriteInt64(int64(id))
	}
	if !o.WithWeights {
		return
	}
	// Weights as Redis writes doubles in RESP2: decimal bulk strings,
	// with the fewest digits that read back as the same float32.
	c.WriteArray(len(ids))
	var buf [24]byte
	for i := range ids {
		c.WriteBulk(strconv.AppendFloat(buf[:0], float64(weightAt(weights, i)), 'g', -1, 32))
	}
}

// writePackedOrder writes an order as SHADE.ORDER ... PACKED answers it:
// a bulk string of the ids as little-endian uint32, and with weights a
// second of the weights as little-endian IEEE 754 float32, one for each
// id. A client reads each in one call (Python's array.frombytes, numpy's
// frombuffer) where parsing an element per id takes it about a
// microsecond each.
func writePackedOrder(c redcon.Conn, ids []uint32, weights []float32, withWeights bool) {
	b := redcon.AppendBulkHeader(c.Reply(), 4*len(ids))
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	b = append(b, '\r', '\n')
	if withWeights {
		b = redcon.AppendBulkHeader(b, 4*len(ids))
		for i := range ids {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(weightAt(weights, i)))
		}
		b = append(b, '\r', '\n')
	}
	c.SetReply(b)
}

// weightAt is the weight of an order's i-th id: 1 where the order has
// none (a uniform order).
func weightAt(weights []float32, i int) float32 {
	if i < len(weights) {
		return weights[i]
	}
	return 1
}

// ParseDone parses SHADE.DONE's arguments (after the command name):
// <dataset> <epoch> <rank> [JOB <name>].
func ParseDone(args [][]byte) (dataset, job string, epoch, rank int, err error) {
	args, job, err = cutJob(args, "SHADE.DONE")
	if err != nil {
		return "", "", 0, 0, err
	}
	if len(args) != 3 {
		return "", "", 0, 0, fmt.Errorf("SHADE.DONE needs <dataset> <epoch> <rank> [JOB <name>]")
	}
	if epoch, err = parseInt(args[1], "epoch"); err != nil {
		return "", "", 0, 0, err
	}
	if rank, err = parseInt(args[2], "rank"); err != nil {
		return "", "", 0, 0, err
	}
	return string(args[0]), job, epoch, rank, nil
}

func cmdDone(s *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	ds, job, epoch, rank, err := ParseDone(a[1:])
	if err != nil {
		c.WriteError("ERR " + err.Error())
		return
	}
	if err := s.backend.Done(s.ctx, ds, job, epoch, rank); err != nil {
		writeErr(c, err)
		return
	}
	c.WriteString("OK")
}

func cmdReset(s *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	args, job, err := cutJob(a[1:], "SHADE.RESET")
	if err == nil && len(args) != 1 {
		err = fmt.Errorf("SHADE.RESET needs <dataset> [JOB <name>]")
	}
	if err != nil {
		c.WriteError("ERR " + err.Error())
		return
	}
	if err := s.backend.Reset(string(args[0]), job); err != nil {
		writeErr(c, err)
		return
	}
	c.WriteString("OK")
}

// cmdJob names the job the connection's reads are for (SHADE.JOB
// <name>), so the node counts each job's hits and source reads apart;
// "default" names the dataset's default job. SHADE.ORDER with JOB names
// it too.
func cmdJob(s *SocketServer, c redcon.Conn, st *connState, a [][]byte) {
	job := string(a[1])
	if err := samplekey.ValidName(job); err != nil {
		c.WriteError("ERR SHADE.JOB: bad job name: " + err.Error())
		return
	}
	s.setJob(st, job)
	c.WriteString("OK")
}

func cmdWarm(s *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	n, err := s.backend.Warm(s.ctx, string(a[1]))
	if err != nil {
		writeErr(c, err)
		return
	}
	c.WriteInt(n)
}

func cmdStats(s *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	ds := ""
	if len(a) == 2 {
		ds = string(a[1])
	}
	js, err := s.backend.Stats(ds)
	if err != nil {
		writeErr(c, err)
		return
	}
	c.WriteBulk(js)
}
