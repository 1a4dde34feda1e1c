package wire

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/transport/peer"
)

// DefaultRelayFanout is how many members a sender of a relayed message
// hands it to, each passing it on to a share of the rest: with 4, the
// order of 1,000 members goes out of the leader 4 times, not 999, and
// reaches everyone in 5 hops. A hop passes the whole message on once it
// has it, so each hop takes fanout times the message's time on a link:
// at 1,000 peers an order of 1.28 M samples (11 MB) reaches the last one
// after 74 ms of links with 4, 118 ms with 8, 177 ms with 16 (shadectl
// scale --relay-fanout, test/results/scale.md).
const DefaultRelayFanout = 4

// RelayMsg is a message (an encoded PublishMsg: Method is MethodPublish)
// for the member that receives it and for the members in To, to whom that
// member passes it on (RelayGroups, RelayParts).
type RelayMsg struct {
	To     []string           `msgpack:"t"`
	Method uint16             `msgpack:"m"`
	Body   msgpack.RawMessage `msgpack:"b"`
}

// RelayGroups cuts names into at most fanout groups of consecutive names,
// their sizes differing by one at most: the first name of each group is
// handed the message, with the rest of its group to pass it on to. fanout
// below 1 counts as 1.
func RelayGroups(names []string, fanout int) [][]string {
	k := min(max(fanout, 1), len(names))
	groups := make([][]string, 0, k)
	for i, start := 0, 0; i < k; i++ {
		end := start + len(names)/k
		if i < len(names)%k {
			end++
		}
		groups = append(groups, names[start:end:end])
		start = end
	}
	return groups
}

// RelayHops is how many hops a relayed message takes to reach n members
// at the fanout: the smallest h with fanout + fanout^2 + ... + fanout^h
// >= n (n itself at fanout 1).
func RelayHops(n, fanout int) int {
	fanout = max(fanout, 1)
	if fanout == 1 {
		return n
	}
	hops, reach, level := 0, 0, 1
	for reach < n {
		level *= fanout
		reach += level
		hops++
	}
	return hops
}

// RelayParts encodes a RelayMsg of body (a message of method m, encoded
// already) for the members to, as parts for peer.Node.Call: the small head
// on its own, then body as it is, never copied, however many members a
// sender hands it to.
func RelayParts(to []string, m peer.Method, body []byte) (peer.Encoded, error) {
	var head bytes.Buffer
	enc := msgpack.NewEncoder(&head)
	// Each call runs; writes to a bytes.Buffer do not fail, so the first
	// error, if any, is the one to report.
	for _, err := range []error{
		enc.EncodeMapLen(3),
		enc.EncodeString("t"), enc.Encode(to),
		enc.EncodeString("m"), enc.EncodeUint16(uint16(m)),
		enc.EncodeString("b"),
	} {
		if err != nil {
			return nil, err
		}
	}
	return peer.Encoded{head.Bytes(), body}, nil
}
