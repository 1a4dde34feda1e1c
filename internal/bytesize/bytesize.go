// Package bytesize parses and prints byte counts with units, as operators
// write them in flags: "2GiB", "512MiB", "1.5GB", "4096".
package bytesize

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrSyntax reports a byte size that cannot be parsed.
var ErrSyntax = errors.New("bytesize: invalid size")

var units = []struct {
	suffix string
	scale  float64
}{
	// Longest suffixes first so "KiB" is not read as "B".
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// Parse reads a non-negative byte count. Binary units (KiB, MiB, GiB, TiB,
// and the bare K, M, G, T) are powers of 1024; decimal units (KB, MB, GB,
// TB) powers of 1000. Case is ignored; a fraction is allowed ("1.5GiB").
func Parse(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	scale := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			scale = u.scale
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || v < 0 {
		return 0, fmt.Errorf("%w: %q", ErrSyntax, s)
	}
	n := v * scale
	if n >= math.MaxInt64 {
		return 0, fmt.Errorf("%w: %q is too large", ErrSyntax, s)
	}
	return int64(n), nil
}

// Format prints n with the largest binary unit that keeps it at or above 1,
// to at most two decimals: 1536 -> "1.5KiB".
func Format(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + "B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 3; m /= unit {
		div *= unit
		exp++
	}
	v := strconv.FormatFloat(float64(n)/float64(div), 'f', 2, 64)
	v = strings.TrimRight(strings.TrimRight(v, "0"), ".")
	return v + []string{"KiB", "MiB", "GiB", "TiB"}[exp]
}
