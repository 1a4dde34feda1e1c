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

// Run serves a node on the trainer socket until ctx ends, then stops
// accepting, closes trainer connections and releases the cache. ready, if
// not nil, is called once the socket accepts connections, with the node
// (for listeners beside the socket, such as the admin server); it runs on
// Run's goroutine and must return promptly. The node is closed when Run
// returns.
func Run(ctx context.Context, cfg PeerConfig, ready func(*Node)) error {
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
		ready(node)
	}
	<-ctx.Done()
	log.Info().Int("connections", sock.Connections()).Msg("stopping")
	if err := sock.Close(); err != nil {
		log.Warn().Err(err).Msg("closing trainer socket")
	}
	return nil
}
