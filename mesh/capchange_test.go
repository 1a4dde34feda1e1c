package mesh

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/shade-mesh/shade/mesh/ring"
)

// TestLogCapChange: a membership change that moves a ring's bounded load
// where peers sit at it is logged, as a warning with the flag to set where
// they outnumber a fifth of the change's share; one that keeps it, or
// where none sat at it, is not.
func TestLogCapChange(t *testing.T) {
	for _, tc := range []struct {
		from, to, partitions int
		level                string // "" for no line
	}{
		{64, 65, 1031, "warn"}, // cap 20 -> 19, a quarter of the peers at it
		{65, 64, 1031, "warn"}, // 19 -> 20
		{64, 65, 4099, "info"}, // 80 -> 79, 3 at it against a share of 63
		{10, 11, 271, "info"},  // 34 -> 30, 1 at it
		{64, 65, 1049, ""},     // 20 -> 20
		{1, 2, 271, ""},        // 339 -> 169, none at it
		{0, 10, 271, ""},       // the first ring
		{10, 0, 271, ""},       // the last member gone
	} {
		was, now := ringChange(t, tc.from, tc.to, tc.partitions)
		var logs bytes.Buffer
		logCapChange(zerolog.New(&logs), "ds", was, now)
		line := logged(t, &logs, tc.level != "", fmt.Sprintf("%d -> %d peers, %d partitions", tc.from, tc.to, tc.partitions))
		if line == nil {
			continue
		}
		if line["level"] != tc.level || line["dataset"] != "ds" || line["cap"] != float64(now.Cap()) ||
			line["was"] != float64(was.Cap()) || line["at_cap"] != float64(was.AtCap()) {
			t.Errorf("%d -> %d peers, %d partitions: logged %s; want level %s, cap %d, was %d, %d at it",
				tc.from, tc.to, tc.partitions, logs.String(), tc.level, now.Cap(), was.Cap(), was.AtCap())
		}
		if advised, ok := line["advised"]; ok != (tc.level == "warn") || (ok && advised != float64(ring.Advised(tc.to))) {
			t.Errorf("%d -> %d peers: advised %v in the line, want %d in a warning alone: %s", tc.from, tc.to, advised, ring.Advised(tc.to), logs.String())
		}
		if hasFlag := bytes.Contains(logs.Bytes(), []byte("--ring-partitions")); hasFlag != (tc.level == "warn") {
			t.Errorf("%d -> %d peers: the advice is in the line %v, want %v: %s", tc.from, tc.to, hasFlag, tc.level == "warn", logs.String())
		}
	}
}

// logged returns the one JSON line in logs where want, and checks that
// there is none where not (nil then).
func logged(t *testing.T, logs *bytes.Buffer, want bool, what string) map[string]any {
	t.Helper()
	if !want {
		if logs.Len() != 0 {
			t.Errorf("%s: logged %s", what, logs.String())
		}
		return nil
	}
	var line map[string]any
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
		t.Fatalf("%s: %v in %q", what, err, logs.String())
	}
	return line
}

// ringChange returns the rings of peers "peer-0000"... before and after a
// change from from to to peers, was nil where from is 0 (the first ring).
func ringChange(t *testing.T, from, to, partitions int) (was, now *ring.Ring) {
	t.Helper()
	names := func(n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("peer-%04d", i)
		}
		return s
	}
	was, err := ring.New(ring.Config{Partitions: partitions}, names(from))
	if err != nil {
		t.Fatal(err)
	}
	if now, err = was.Update(names(to)); err != nil {
		t.Fatal(err)
	}
	if from == 0 {
		was = nil
	}
	return was, now
}

// TestLogFewPartitions: a ring that grows to 8 peers or more with under a
// quarter of the advised partitions warns once, with the count to set; one
// that stays there, or has enough, does not.
func TestLogFewPartitions(t *testing.T) {
	for _, tc := range []struct {
		from, to, partitions int
		warn                 bool
	}{
		{7, 8, 271, true},        // grows into it
		{0, 10, 271, true},       // the first ring
		{8, 9, 271, false},       // already there: said once
		{9, 8, 271, false},       // a leave
		{8, 7, 271, false},       // leaves it
		{3, 4, 271, false},       // few peers
		{9, 10, 16381, false},    // the advice
		{9, 10, 4099, false},     // a quarter of it
		{999, 1000, 16111, true}, // 4 x 16,111 is under the 64,513 of 1,000 peers, not the 64,439 of 999
		{1000, 1001, 16111, false},
		{200, 300, 4099, true}, // 300 peers want 19,373
	} {
		was, now := ringChange(t, tc.from, tc.to, tc.partitions)
		var logs bytes.Buffer
		logFewPartitions(zerolog.New(&logs), "ds", was, now)
		line := logged(t, &logs, tc.warn, fmt.Sprintf("%d -> %d peers, %d partitions", tc.from, tc.to, tc.partitions))
		if line == nil {
			continue
		}
		if line["level"] != "warn" || line["dataset"] != "ds" || line["partitions"] != float64(tc.partitions) ||
			line["peers"] != float64(tc.to) || line["advised"] != float64(ring.Advised(tc.to)) ||
			!strings.Contains(logs.String(), "--ring-partitions") {
			t.Errorf("%d -> %d peers, %d partitions: logged %s; want a warning with the advised %d", tc.from, tc.to, tc.partitions, logs.String(), ring.Advised(tc.to))
		}
	}
}
