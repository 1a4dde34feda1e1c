package mesh

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/rs/zerolog"

	"github.com/shade-mesh/shade/mesh/ring"
)

// TestLogCapChange: a membership change that moves a ring's bounded load
// where peers sit at it is logged, as a warning with the flag to set where
// they outnumber a fifth of the change's share; one that keeps it, or
// where none sat at it, is not.
func TestLogCapChange(t *testing.T) {
	names := func(n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("peer-%04d", i)
		}
		return s
	}
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
		cfg := ring.Config{Partitions: tc.partitions}
		was, err := ring.New(cfg, names(tc.from))
		if err != nil {
			t.Fatal(err)
		}
		now, err := was.Update(names(tc.to))
		if err != nil {
			t.Fatal(err)
		}
		if tc.from == 0 {
			was = nil
		}
		var logs bytes.Buffer
		logCapChange(zerolog.New(&logs), "ds", was, now)
		if tc.level == "" {
			if logs.Len() != 0 {
				t.Errorf("%d -> %d peers, %d partitions: logged %s", tc.from, tc.to, tc.partitions, logs.String())
			}
			continue
		}
		var line map[string]any
		if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
			t.Fatalf("%d -> %d peers: %v in %q", tc.from, tc.to, err, logs.String())
		}
		if line["level"] != tc.level || line["dataset"] != "ds" || line["cap"] != float64(now.Cap()) ||
			line["was"] != float64(was.Cap()) || line["at_cap"] != float64(was.AtCap()) {
			t.Errorf("%d -> %d peers, %d partitions: logged %s; want level %s, cap %d, was %d, %d at it",
				tc.from, tc.to, tc.partitions, logs.String(), tc.level, now.Cap(), was.Cap(), was.AtCap())
		}
		if hasFlag := bytes.Contains(logs.Bytes(), []byte("--ring-partitions")); hasFlag != (tc.level == "warn") {
			t.Errorf("%d -> %d peers: the advice is in the line %v, want %v: %s", tc.from, tc.to, hasFlag, tc.level == "warn", logs.String())
		}
	}
}
