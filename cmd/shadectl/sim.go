package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/shade-mesh/shade/policy"
)

const (
	simDefaultSizes    = "0.05,0.1,0.2,0.5"
	simDefaultPolicies = "app,lru,fifo,lfu,minio,min"
)

// runSim replays an access trace (policy.ReadTrace's format) through cache
// policies at several cache sizes and prints a table of hit ratios: one row
// per size, one column per policy, and app/lru where both ran.
func runSim(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shadectl sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tracePath := fs.String("trace", "", "access trace `file` (\"r <id> <size>\" and \"s <id> <score>\" lines); required")
	sizesFlag := fs.String("sizes", simDefaultSizes, "cache sizes as fractions of the trace's working set bytes, comma separated")
	policiesFlag := fs.String("policies", simDefaultPolicies, "policies to compare, comma separated")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: shadectl sim --trace FILE [--sizes 0.05,0.1] [--policies app,lru,min]")
		fmt.Fprintln(stderr, "\nReplays a trace through cache policies and prints hit ratios.")
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil // the usage is printed
		}
		return fmt.Errorf("bad arguments: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *tracePath == "" {
		return errors.New("--trace is required")
	}
	fracs, err := parseSimSizes(*sizesFlag)
	if err != nil {
		return err
	}
	names, err := parseSimPolicies(*policiesFlag)
	if err != nil {
		return err
	}

	f, err := os.Open(*tracePath)
	if err != nil {
		return err
	}
	trace, err := policy.ReadTrace(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", *tracePath, err)
	}
	ids, ws := policy.WorkingSet(trace)
	reads := policy.Reads(trace)
	if len(reads) == 0 {
		return fmt.Errorf("%s: the trace has no reads", *tracePath)
	}
	fmt.Fprintf(stdout, "trace %s: %d reads of %d samples, %d score updates, working set %d bytes\n\n",
		*tracePath, len(reads), ids, len(trace)-len(reads), ws)

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "size\tbytes\t")
	for _, n := range names {
		fmt.Fprintf(tw, "%s\t", n)
	}
	withRatio := slices.Contains(names, "app") && slices.Contains(names, "lru")
	if withRatio {
		fmt.Fprint(tw, "app/lru\t")
	}
	fmt.Fprintln(tw)
	for _, frac := range fracs {
		capacity := int64(frac * float64(ws))
		fmt.Fprintf(tw, "%s\t%d\t", simFraction(frac), capacity)
		ratios := make(map[string]float64, len(names))
		for _, n := range names {
			var p policy.Policy
			if n == "min" {
				p = policy.NewMIN(reads)
			} else if p, err = policy.New(n, policy.Options{}); err != nil {
				return err
			}
			r := policy.Replay(p, trace, capacity)
			if m, ok := p.(interface{ Err() error }); ok && m.Err() != nil {
				return m.Err()
			}
			ratios[n] = r.HitRatio
			fmt.Fprintf(tw, "%.2f%%\t", 100*r.HitRatio)
		}
		if withRatio {
			fmt.Fprintf(tw, "%s\t", simRatio(ratios["app"], ratios["lru"]))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// parseSimSizes parses a comma list of positive fractions.
func parseSimSizes(s string) ([]float64, error) {
	var out []float64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		v, err := strconv.ParseFloat(part, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("--sizes: %q is not a positive fraction of the working set", part)
		}
		out = append(out, v)
	}
	return out, nil
}

// parseSimPolicies parses a comma list of policy names, "min" included.
func parseSimPolicies(s string) ([]string, error) {
	known := append(policy.Names(), "min")
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if !slices.Contains(known, part) {
			return nil, fmt.Errorf("--policies: unknown policy %q (known: %s)", part, strings.Join(known, ","))
		}
		if slices.Contains(out, part) {
			return nil, fmt.Errorf("--policies: %q listed twice", part)
		}
		out = append(out, part)
	}
	return out, nil
}

// simFraction writes 0.05 as "5%".
func simFraction(f float64) string {
	return strconv.FormatFloat(math.Round(f*1e6)/1e4, 'f', -1, 64) + "%"
}

// simRatio writes app's hit ratio over lru's: "2.50x", "inf" when only
// lru's is zero, "-" when both are.
func simRatio(app, lru float64) string {
	switch {
	case lru > 0:
		return fmt.Sprintf("%.2fx", app/lru)
	case app > 0:
		return "inf"
	}
	return "-"
}
