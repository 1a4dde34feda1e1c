package transport

import (
	"fmt"
	"net"

	"github.com/tidwall/redcon"
	"golang.org/x/sys/unix"
)

// The zero-copy path. A trainer on this node sends SHADE.MAP on a
// connection of its own; the reply, an array [size, id], carries a
// read-only descriptor of the memory that holds the cached samples as
// SCM_RIGHTS ancillary data, which the trainer maps. SHADE.LOCATE key...
// then answers [id, entry...], one entry per key:
//
//   - a sample held in that memory: an array of five integers [gen,
//     gen_offset, offset, length, xxhash64 (as a signed 64-bit integer)].
//     The trainer loads the 8-byte little-endian word at gen_offset, copies
//     length bytes at offset, loads the word again, and keeps the copy only
//     if both loads equal gen (see store.Location); otherwise the sample
//     moved and it asks again (GET or MGET).
//   - any other sample: its bytes, as MGET would answer.
//   - nil for an unknown key, an error reply for a failed read.
//
// id names the memory; a trainer whose mapping has another id (the peer
// restarted) maps again.

func cmdMap(s *SocketServer, c redcon.Conn, st *connState, _ [][]byte) {
	if !st.fresh {
		// Replies to earlier commands of the pipeline are still in
		// redcon's buffer; this one would overtake them.
		c.WriteError("ERR SHADE.MAP must be the first command of its pipeline")
		return
	}
	uc, ok := c.NetConn().(*net.UnixConn)
	if !ok {
		c.WriteError("ERR SHADE.MAP needs a Unix socket connection")
		return
	}
	fd, size, id, err := s.backend.SharedArena()
	if err != nil {
		writeErr(c, err)
		return
	}
	defer unix.Close(fd)
	reply := redcon.AppendInt(redcon.AppendInt(redcon.AppendArray(nil, 2), size), int64(id))
	n, _, err := uc.WriteMsgUnix(reply, unix.UnixRights(fd), nil)
	if err == nil && n < len(reply) {
		_, err = uc.Write(reply[n:])
	}
	if err != nil {
		s.cfg.Logger.Debug().Err(err).Msg("SHADE.MAP reply not sent")
		c.Close()
	}
}

func cmdLocate(s *SocketServer, c redcon.Conn, _ *connState, a [][]byte) {
	keys := a[1:]
	if len(keys) > s.cfg.MaxKeys {
		c.WriteError(fmt.Sprintf("ERR too many keys: %d, at most %d in one command", len(keys), s.cfg.MaxKeys))
		return
	}
	id, res := s.backend.Locate(s.ctx, keys)
	c.WriteArray(len(res) + 1)
	c.WriteInt64(int64(id))
	for _, r := range res {
		switch {
		case r.Err != nil:
			writeErr(c, r.Err)
		case !r.Found:
			c.WriteNull()
		case r.Located:
			l := r.Loc
			c.WriteArray(5)
			c.WriteInt64(int64(l.Gen))
			c.WriteInt64(int64(l.GenOff))
			c.WriteInt64(int64(l.Off))
			c.WriteInt64(int64(l.Len))
			c.WriteInt64(int64(l.Sum))
		default:
			c.WriteBulk(r.Value)
		}
	}
}
