package member

import (
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// profile is a failure-detection tuning.
type profile struct {
	name string

	probeInterval   time.Duration // PI: each node probes one peer per PI
	probeTimeout    time.Duration // wait for a direct ack before indirect probes
	suspicionMult   int           // SM: suspicion lasts SM·PI·max(1, log10 n)
	suspicionMaxMul int           // without confirmations it lasts this times longer
	indirectChecks  int
	gossipInterval  time.Duration
	gossipNodes     int
	retransmitMult  int
	pushPull        time.Duration // full state sync (anti-entropy)
	tcpTimeout      time.Duration
	deadKeep        time.Duration // GossipToTheDeadTime: dead members are forgotten after it
	reclaim         time.Duration // DeadNodeReclaimTime
	reconnect       time.Duration // how often seeds and dead members are re-joined
	broadcast       time.Duration // how long UpdateMeta waits for its gossip
	joinBackoff     time.Duration // longest pause between join attempts
}

// How long failure detection takes. A peer that stops answering is
// noticed in four steps, for n members (log10 n <= 1 up to 9 members):
//
//	wait   until some survivor probes it: each survivor probes its peers
//	       round robin, one per PI, in its own random order, so the first
//	       probe comes within PI·(n-1) and usually within about one PI;
//	probe  the probe fails at the end of its interval: PI (direct ack
//	       within probeTimeout, then indirect pings and a TCP ping until PI);
//	suspect the prober gossips "suspect"; every node that hears it starts a
//	       timer of SM·PI·max(1, log10 n), cut short from max to min by
//	       independent confirmations;
//	dead   the first timer to expire gossips "dead"; GossipInterval per hop.
//
// "local" (loopback): PI 200 ms, SM 3, SuspicionMaxTimeoutMult 1 (the
// timer is always the minimum: confirmations mean nothing when every peer
// shares one host). For 3 to 5 members the worst case is
// 200·(n-1) + 200 + 600 + ~50 ms = 1.25 to 1.65 s, typically about 1 s:
// within the 2 s every peer must notice a SIGKILLed peer. A peer must
// stall for PI + 600 ms before it is wrongly declared dead; a shorter
// stall makes it suspect and it refutes.
//
// "lan": PI 250 ms, SM 3, SuspicionMaxTimeoutMult 4. Expected detection in
// a cluster of up to 9 is 250 (first probe) + 250 (probe) + 750 (suspicion,
// one confirmation) + 100 ms (gossip) ≈ 1.35 s, "about a second"; 2.1 s
// with 100 members (suspicion ×2). A lone accuser waits 3 s, which absorbs
// a single overloaded prober's false alarms.
var profiles = map[string]profile{
	"lan": {
		name:            "lan",
		probeInterval:   250 * time.Millisecond,
		probeTimeout:    125 * time.Millisecond,
		suspicionMult:   3,
		suspicionMaxMul: 4,
		indirectChecks:  3,
		gossipInterval:  100 * time.Millisecond,
		gossipNodes:     3,
		retransmitMult:  4,
		pushPull:        30 * time.Second,
		tcpTimeout:      5 * time.Second,
		deadKeep:        30 * time.Second,
		reclaim:         3 * time.Second,
		reconnect:       5 * time.Second,
		broadcast:       5 * time.Second,
		joinBackoff:     2 * time.Second,
	},
	"local": {
		name:            "local",
		probeInterval:   200 * time.Millisecond,
		probeTimeout:    100 * time.Millisecond,
		suspicionMult:   3,
		suspicionMaxMul: 1,
		indirectChecks:  2,
		gossipInterval:  50 * time.Millisecond,
		gossipNodes:     3,
		retransmitMult:  3,
		pushPull:        5 * time.Second,
		tcpTimeout:      time.Second,
		deadKeep:        15 * time.Second,
		reclaim:         500 * time.Millisecond,
		reconnect:       time.Second,
		broadcast:       2 * time.Second,
		joinBackoff:     500 * time.Millisecond,
	},
}

func lookupProfile(name string) (profile, error) {
	if name == "" {
		name = "lan"
	}
	p, ok := profiles[name]
	if !ok {
		return profile{}, fmt.Errorf("%w: profile %q, want lan or local", ErrConfig, name)
	}
	return p, nil
}

// apply sets p's timings on c.
func (p profile) apply(c *memberlist.Config) {
	c.ProbeInterval = p.probeInterval
	c.ProbeTimeout = p.probeTimeout
	c.SuspicionMult = p.suspicionMult
	c.SuspicionMaxTimeoutMult = p.suspicionMaxMul
	c.IndirectChecks = p.indirectChecks
	c.GossipInterval = p.gossipInterval
	c.GossipNodes = p.gossipNodes
	c.RetransmitMult = p.retransmitMult
	c.PushPullInterval = p.pushPull
	c.TCPTimeout = p.tcpTimeout
	c.GossipToTheDeadTime = p.deadKeep
	c.DeadNodeReclaimTime = p.reclaim
}
