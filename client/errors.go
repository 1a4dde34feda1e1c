package client

import (
	"errors"
	"strings"
)

var (
	// ErrNotFound: the peer answered nil for a sample, because its index is
	// past the end of the dataset or the dataset is unknown. Returned
	// wrapped in a *SampleError that names the key.
	ErrNotFound = errors.New("client: no such sample (index out of range or unknown dataset)")
	// ErrOrderTimeout: SHADE.ORDER's wait (or the peer's own limit, 10
	// minutes) passed before the epoch's order was published. The error is
	// also a *ServerError with code TIMEOUT whose message names the ranks
	// still training.
	ErrOrderTimeout = errors.New("client: order not published in time")
	// ErrUnavailable: no peer answered on the socket within
	// Options.RetryFor. The error names the socket and wraps the last
	// connection error.
	ErrUnavailable = errors.New("client: peer unavailable")
)

// ServerError is an error reply from the peer: bad input, a refused
// request, a failed authentication. It is never retried. Code is the
// reply's first word (ERR, TIMEOUT, READONLY, NOAUTH, WRONGPASS, ...), Msg
// the rest.
type ServerError struct {
	Code string
	Msg  string
}

// Error returns the reply as the peer sent it.
func (e *ServerError) Error() string {
	if e.Msg == "" {
		return e.Code
	}
	return e.Code + " " + e.Msg
}

// Is makes a TIMEOUT reply match ErrOrderTimeout.
func (e *ServerError) Is(target error) bool {
	return target == ErrOrderTimeout && e.Code == "TIMEOUT"
}

// parseServerError splits an error reply "CODE message". A reply whose
// first word is not an upper-case code is an ERR with the whole line as
// its message.
func parseServerError(reply string) *ServerError {
	code, msg, _ := strings.Cut(reply, " ")
	if !isCode(code) {
		return &ServerError{Code: "ERR", Msg: reply}
	}
	return &ServerError{Code: code, Msg: msg}
}

func isCode(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// SampleError is a sample that could not be read: Err is ErrNotFound for a
// nil reply, or the *ServerError the peer answered for that key.
type SampleError struct {
	Key string // "<dataset>/<index>"
	Err error
}

func (e *SampleError) Error() string {
	return "client: sample " + e.Key + ": " + strings.TrimPrefix(e.Err.Error(), "client: ")
}

func (e *SampleError) Unwrap() error { return e.Err }
