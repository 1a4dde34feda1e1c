package transport

import (
	"errors"
	"os"
	"sync/atomic"

	"github.com/shade-mesh/shade/internal/redcon"
)

// refusal names a bound of SocketConfig that a client's input went past.
type refusal int

const (
	refusedNone         refusal = iota
	refusedInline               // an inline command line over MaxInline
	refusedValue                // a bulk argument over MaxValue
	refusedArgs                 // a command with more arguments than any command takes
	refusedClientMemory         // input past MaxClientMemory
	refusedWriteTimeout         // replies not read within WriteTimeout
	refusedKeys                 // a command with more keys or pairs than MaxKeys
	refusedWorld                // SHADE.ORDER with a world over MaxWorld
	refusedReplyMemory          // MGET keys answered with an error: no room for their reply
	refusedConnections          // a connection past MaxConnections
	numRefusals
)

var refusalNames = [numRefusals]string{
	refusedNone:         "",
	refusedInline:       "inline",
	refusedValue:        "max-value",
	refusedArgs:         "args",
	refusedClientMemory: "client-memory",
	refusedWriteTimeout: "write-timeout",
	refusedKeys:         "max-keys",
	refusedWorld:        "max-world",
	refusedReplyMemory:  "reply-memory",
	refusedConnections:  "max-clients",
}

func (r refusal) String() string { return refusalNames[r] }

// refusalOf classifies the error a connection was closed with.
func refusalOf(err error) refusal {
	switch redcon.LimitOf(err) {
	case redcon.LimitInline:
		return refusedInline
	case redcon.LimitBulk:
		return refusedValue
	case redcon.LimitArgs:
		return refusedArgs
	case redcon.LimitClientMemory:
		return refusedClientMemory
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return refusedWriteTimeout
	}
	return refusedNone
}

// refusals counts refusals by bound.
type refusals [numRefusals]atomic.Uint64

func (r *refusals) add(k refusal) { r[k].Add(1) }

// ClientStats are the trainer socket's bounds on client input and what
// they held back, for metrics.
type ClientStats struct {
	// MemoryBytes is the input and reply memory held for all connections
	// now; MemoryPeak the most held at once; MemoryLimit the bound
	// (SocketConfig.MaxClientMemory).
	MemoryBytes, MemoryPeak, MemoryLimit int64
	// Refused counts refusals by the bound they hit: "inline",
	// "max-value", "args" and "client-memory" closed a connection;
	// "write-timeout" closed one that did not read its replies;
	// "max-keys" and "max-world" refused a command; "reply-memory"
	// counts MGET keys answered with an error for want of room;
	// "max-clients" connections refused past MaxConnections.
	Refused map[string]uint64
}

// ClientStats returns the socket's client-memory figures and refusals.
func (s *SocketServer) ClientStats() ClientStats {
	st := ClientStats{
		MemoryBytes: s.clients.Used(),
		MemoryPeak:  s.clients.Peak(),
		MemoryLimit: s.clients.Limit(),
		Refused:     make(map[string]uint64, numRefusals-1),
	}
	for k := refusedNone + 1; k < numRefusals; k++ {
		st.Refused[k.String()] = s.refused[k].Load()
	}
	return st
}
