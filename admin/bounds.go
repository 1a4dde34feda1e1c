package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shade-mesh/shade/transport"
)

// ClientSource is the trainer socket's view of its input bounds.
// *transport.SocketServer implements it. ClientStats is called at every
// scrape and must not block.
type ClientSource interface {
	ClientStats() transport.ClientStats
}

var _ ClientSource = (*transport.SocketServer)(nil)

// peerMemorySource is implemented by a node in a mesh: the memory the
// requests it serves for other peers hold, its bound, and the requests
// refused for want of it.
type peerMemorySource interface {
	PeerRequestMemory() (used, limit int64, refused uint64)
}

// boundsCollector exports what the bounds on untrusted input hold and
// refuse: the trainer socket's client memory and refusals by bound, and
// the peer transport's request memory.
type boundsCollector struct {
	clients ClientSource     // nil: no socket metrics
	peers   peerMemorySource // nil: no peer metrics

	clientMemory, clientMemoryPeak, clientMemoryLimit, clientRefusals *prometheus.Desc
	peerMemory, peerMemoryLimit, peerRefusals                         *prometheus.Desc
}

var _ prometheus.Collector = (*boundsCollector)(nil)

func newBoundsCollector(clients ClientSource, src Source) *boundsCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("shade_"+name, help, labels, nil)
	}
	c := &boundsCollector{
		clients:           clients,
		clientMemory:      d("client_memory_bytes", "Bytes the trainer socket holds for all connections now: their input buffers and replies waiting to be written."),
		clientMemoryPeak:  d("client_memory_peak_bytes", "The most bytes the trainer socket has held for its connections at once."),
		clientMemoryLimit: d("client_memory_limit_bytes", "The bound on the trainer socket's client memory (--max-client-memory)."),
		clientRefusals: d("client_refusals_total",
			"Trainer input refused by the bound it went past: inline, max-value, args, client-memory (connection closed), write-timeout (a client that did not read its replies, closed), max-keys, max-world (command refused), reply-memory (MGET keys answered with an error for want of room), max-clients (connection refused).",
			"bound"),
		peerMemory:      d("peer_request_memory_bytes", "Bytes the requests this peer serves for other peers hold now (frames, their decoding, replies)."),
		peerMemoryLimit: d("peer_request_memory_limit_bytes", "The bound on the peer requests' memory (--max-peer-memory)."),
		peerRefusals:    d("peer_requests_refused_total", "Requests from other peers refused because they did not fit in --max-peer-memory."),
	}
	c.peers, _ = src.(peerMemorySource)
	return c
}

func (c *boundsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.clientMemory, c.clientMemoryPeak, c.clientMemoryLimit, c.clientRefusals,
		c.peerMemory, c.peerMemoryLimit, c.peerRefusals,
	} {
		ch <- d
	}
}

func (c *boundsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.clients != nil {
		st := c.clients.ClientStats()
		send(ch, c.clientMemory, prometheus.GaugeValue, float64(st.MemoryBytes))
		send(ch, c.clientMemoryPeak, prometheus.GaugeValue, float64(st.MemoryPeak))
		send(ch, c.clientMemoryLimit, prometheus.GaugeValue, float64(st.MemoryLimit))
		for bound, n := range st.Refused {
			send(ch, c.clientRefusals, prometheus.CounterValue, float64(n), bound)
		}
	}
	if c.peers != nil {
		used, limit, refused := c.peers.PeerRequestMemory()
		if limit > 0 {
			send(ch, c.peerMemory, prometheus.GaugeValue, float64(used))
			send(ch, c.peerMemoryLimit, prometheus.GaugeValue, float64(limit))
			send(ch, c.peerRefusals, prometheus.CounterValue, float64(refused))
		}
	}
}
