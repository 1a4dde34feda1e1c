// Package member is gossip membership for Shade peers, an adapter over
// hashicorp/memberlist: who is in the mesh, each peer's metadata (QUIC
// address, cache capacity, build), and join, leave and failure events.
//
// memberlist types never leave the package. A List is the local node's
// view; every peer runs one. Two Lists in one process are independent.
package member

import (
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// Errors, wrapped with detail; test with errors.Is.
var (
	ErrConfig       = errors.New("member: invalid config")
	ErrMeta         = errors.New("member: invalid meta")
	ErrMetaVersion  = fmt.Errorf("%w: unknown version", ErrMeta)
	ErrKey          = errors.New("member: invalid gossip key")
	ErrNoEncryption = errors.New("member: gossip is not encrypted")
	ErrJoin         = errors.New("member: no seed answered")
	ErrBroadcast    = errors.New("member: broadcast not confirmed")
	ErrClosed       = errors.New("member: list closed")
)

// State is a member's liveness as this node sees it.
type State uint8

const (
	Alive State = iota
	// Suspect is part of the model but never reported: memberlist v0.7.0
	// does not expose suspicion (its Node.State is never set, see
	// hashicorp/memberlist#293), so a suspect member is listed Alive until
	// it is declared dead.
	Suspect
	Dead
	Left
)

func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	case Left:
		return "left"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Member is one node of the mesh.
type Member struct {
	Name  string
	Addr  string // gossip address, host:port
	Meta  Meta
	State State
}

// EventKind says what happened to a member. (The names carry an Event
// prefix because Join is the package's constructor.)
type EventKind uint8

const (
	EventJoin   EventKind = iota // joined, or came back after Dead or Left
	EventLeave                   // left gracefully (List.Leave)
	EventFail                    // declared dead by failure detection
	EventUpdate                  // its Meta changed
)

func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventFail:
		return "fail"
	case EventUpdate:
		return "update"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is a membership change. Member is the member as of the event.
type Event struct {
	Kind   EventKind
	Member Member
}

// Config configures a List. The zero value of every field but Name means
// its default; Join fills defaults on a copy.
type Config struct {
	// Name is the node's stable name, unique in the mesh; required. A
	// node restarted under the same name takes its place again.
	Name string
	// BindAddr is the gossip address, ip:port, UDP and TCP; "" means
	// ":7946". Port 0 picks a free port (List.Addr reports it). An
	// unspecified host binds every interface and advertises a private IP.
	BindAddr string
	// Seeds are host:port addresses of other peers. They may include this
	// node's own address; none (or only itself) starts a new cluster.
	Seeds []string
	// Key is the gossip encryption key, 16, 24 or 32 bytes (AES-128/192/
	// 256); empty leaves gossip unencrypted (logged as a warning) and the
	// key cannot be rotated in later. See DecodeKey. The slice is copied.
	Key []byte
	// Meta is the node's initial metadata; it must encode within
	// MaxMetaSize.
	Meta Meta
	// Profile tunes failure detection: "lan" (default) or "local" for
	// loopback clusters and tests. See the profile table in profile.go.
	Profile string
	// Logger receives this package's events; memberlist's own log lines go
	// through it at debug level. The zero Logger is silent.
	Logger zerolog.Logger
}

// defaultLeaveTimeout bounds Leave when it is given no timeout.
const defaultLeaveTimeout = 5 * time.Second
