package mesh

import (
	"context"
	"fmt"

	"github.com/shade-mesh/shade/transport"
)

// PeerConfig is everything a shade-peer daemon runs with.
type PeerConfig struct {
	Node   Config
	Socket transport.SocketConfig
}

// PeerRequestMemory returns the bytes the requests this node serves for
// other peers hold now, their bound, and the requests refused for want of
// room; zeros for a standalone node.
func (n *Node) PeerRequestMemory() (used, limit int64, refused uint64) {
	if n.cluster == nil {
		return 0, 0, 0
	}
	return n.cluster.wire.RequestMemory()
}

// Run serves a node on the trainer socket until ctx ends, then stops
// accepting, closes trainer connections and releases the cache. ready, if
// not nil, is called once the socket accepts connections, with the node
// (for listeners beside the socket, such as the admin server) and the
// socket; it runs on Run's goroutine and must return promptly. The node is
// closed when Run returns.
func Run(ctx context.Context, cfg PeerConfig, ready func(*Node, *transport.SocketServer)) error {
	node, err := New(cfg.Node)
	if err != nil {
		return err
	}
	defer node.Close()
	sock, err := transport.ListenSocket(cfg.Socket, node)
	if err != nil {
		return fmt.Errorf("mesh: trainer socket: %w", err)
	}
	log := cfg.Node.Logger
	log.Info().Str("node", node.Name()).Str("socket", sock.Path()).Str("policy", node.pol.Name()).
		Bool("pads", !node.cfg.Uniform).Int64("cache_bytes", node.cfg.CacheSize).Msg("serving")
	if ready != nil {
		ready(node, sock)
	}
	<-ctx.Done()
	log.Info().Int("connections", sock.Connections()).Msg("stopping")
	if err := sock.Close(); err != nil {
		log.Warn().Err(err).Msg("closing trainer socket")
	}
	return nil
}
