// Package samplekey is the codec of sample keys, "<dataset>/<index>": the
// one place that builds and parses them, and the rule for dataset names.
// The peer, its tools and the Go client all use it; it imports no server
// package.
//
// A dataset name is 1 to MaxNameLen characters, each an ASCII letter,
// digit, '.', '_' or '-', and neither "." nor "..". The index is decimal
// digits only, no sign, no leading zeros except "0" itself, at most
// MaxIndex. So each sample has exactly one key.
package samplekey

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

var (
	// ErrBadKey is wrapped by every Parse error.
	ErrBadKey = errors.New("samplekey: bad key")
	// ErrBadName is wrapped by every ValidName error.
	ErrBadName = errors.New("samplekey: bad name")
)

// MaxNameLen is the longest dataset name ValidName accepts.
const MaxNameLen = 64

// MaxIndex is the largest sample index a key may carry.
const MaxIndex = math.MaxInt32

// ValidName reports whether name may name a dataset: 1 to 64 characters,
// each an ASCII letter, digit, '.', '_' or '-', and not "." or ".." (a
// name may become a folder's name). The error wraps ErrBadName.
func ValidName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrBadName)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d characters, at most %d allowed", ErrBadName, len(name), MaxNameLen)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%w: %q", ErrBadName, name)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return fmt.Errorf("%w: %q: byte %d (%q) is not one of A-Z a-z 0-9 . _ -", ErrBadName, name, i, name[i])
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

// Format returns the key of sample index of dataset name, "<name>/<index>".
// It does not validate; Parse(Format(n, i)) returns n, i for every valid
// name and index in [0, MaxIndex].
func Format(name string, index int) string {
	return string(Append(make([]byte, 0, len(name)+11), name, index))
}

// Append appends the key of sample index of dataset name to dst, as
// Format returns it, and returns the result.
func Append(dst []byte, name string, index int) []byte {
	dst = append(dst, name...)
	dst = append(dst, '/')
	return strconv.AppendInt(dst, int64(index), 10)
}

// Parse splits a sample key "<dataset>/<index>" into the dataset's name
// (see ValidName) and the sample index (see ParseIndex). Errors wrap
// ErrBadKey and quote at most the first 80 bytes of key.
func Parse(key string) (dataset string, index int, err error) {
	name, num, ok := Split(key)
	if !ok {
		return "", 0, fmt.Errorf("%w: %s: want <dataset>/<index>", ErrBadKey, quoteKey(key))
	}
	if err := ValidName(name); err != nil {
		return "", 0, fmt.Errorf("%w: %s: %w", ErrBadKey, quoteKey(key), err)
	}
	index, ok = ParseIndex(num)
	if !ok {
		return "", 0, fmt.Errorf("%w: %s: index must be a decimal integer in 0..%d without sign or leading zeros", ErrBadKey, quoteKey(key), MaxIndex)
	}
	return name, index, nil
}

// Split cuts key at its last '/' into the dataset part and the index part,
// validating neither, without allocating; ok is false when key has no '/'
// or nothing before it. A valid dataset name holds no '/', so the parts of
// a valid key are its name and its index.
func Split[K string | []byte](key K) (dataset, index K, ok bool) {
	for i := len(key) - 1; i > 0; i-- {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return key[:0], key[:0], false
}

// ParseIndex reads a canonical sample index: decimal digits only, no sign,
// no leading zeros except "0" itself, at most MaxIndex. ok is false for
// anything else.
func ParseIndex[S string | []byte](s S) (index int, ok bool) {
	if len(s) == 0 || len(s) > 10 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	var v int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if v > MaxIndex {
		return 0, false
	}
	return int(v), true
}

// quoteKey quotes key for an error message, cut to 80 bytes: keys come off
// the wire and may be huge.
func quoteKey(key string) string {
	const limit = 80
	if len(key) > limit {
		return strconv.Quote(key[:limit]) + "..."
	}
	return strconv.Quote(key)
}
