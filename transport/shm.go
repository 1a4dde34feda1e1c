package transport

import (
	"encoding/binary"
	"net"

	"github.com/shade-mesh/shade/internal/redcon"
	"golang.org/x/sys/unix"
)

// The zero-copy path. A trainer on this node sends SHADE.MAP on a
// connection of its own; the reply, an array [size, id], carries a
// read-only descriptor of the memory that holds the cached samples as
// SCM_RIGHTS ancillary data, which the trainer maps.
//
// SHADE.LOCATE key [key ...] then answers an array [id, locations]: id
// names the memory (a trainer whose mapping has another id maps again: the
// peer restarted), and locations is a bulk string of LocationSize bytes per
// key, five little-endian uint64 each: gen, gen_offset, offset, length,
// checksum (store.Checksum, CRC-32C). gen 0 means the sample is not held
// here; the trainer reads those with MGET. For the others it loads the
// 8-byte word at gen_offset, copies length bytes at offset, loads the word
// again, and keeps the copy only if both loads equal gen (see
// store.Location); otherwise the sample moved, and it too is read with
// MGET.

// LocationSize is the bytes of one key's location in a SHADE.LOCATE reply.
const LocationSize = 40

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
	if tooManyKeys(s, c, len(keys)) {
		return
	}
	id, locs := s.backend.Locate(keys)
	b := make([]byte, 0, LocationSize*len(locs))
	for _, l := range locs {
		b = binary.LittleEndian.AppendUint64(b, l.Gen)
		b = binary.LittleEndian.AppendUint64(b, l.GenOff)
		b = binary.LittleEndian.AppendUint64(b, l.Off)
		b = binary.LittleEndian.AppendUint64(b, l.Len)
		b = binary.LittleEndian.AppendUint64(b, l.Sum)
	}
	c.WriteArray(2)
	c.WriteInt64(int64(id))
	c.WriteBulk(b)
}
