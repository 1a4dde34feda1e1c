package transport

import (
	"net"

	"github.com/shade-mesh/shade/internal/redcon"
	"github.com/shade-mesh/shade/protocol/shm"
	"golang.org/x/sys/unix"
)

// The zero-copy path: SHADE.MAP and SHADE.LOCATE, the peer's side of the
// shared-memory protocol that package protocol/shm defines (the exchange,
// the location record and its encoding are documented there).

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

func cmdLocate(s *SocketServer, c redcon.Conn, st *connState, a [][]byte) {
	keys := a[1:]
	if tooManyKeys(s, c, len(keys)) {
		return
	}
	id, locs := s.backend.Locate(s.readCtx(st), keys)
	b := make([]byte, 0, shm.LocationSize*len(locs))
	for _, l := range locs {
		b = shm.AppendLocation(b, l)
	}
	c.WriteArray(2)
	c.WriteInt64(int64(id))
	c.WriteBulk(b)
}
