package main

import (
	"bufio"
	"compress/gzip"
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
	simDefaultPolicies = "app,order,min,lru,fifo,lfu,minio"
)

// runSim replays an access trace (policy.ReadTrace's format, plain or
// gzip'd) through cache policies at several cache sizes and prints a table
// of hit ratios: one row per size, one column per policy, then app/lru where
// both ran and "gap closed", (order-app)/(min-app), where all three ran.
// Every policy, MIN included, is replayed by policy.Replay over a Budget of
// the same capacity charging each read the size the trace gives it.
func runSim(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shadectl sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tracePath := fs.String("trace", "", "access trace `file`, plain or gzip'd (\"e <epoch>\", \"r <id> <size>\" and \"s <id> <score>\" lines); required")
	sizesFlag := fs.String("sizes", simDefaultSizes, "cache sizes as fractions of the trace's working set bytes, comma separated")
	policiesFlag := fs.String("policies", simDefaultPolicies, "policies to compare, comma separated")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: shadectl sim --trace FILE[.gz] [--sizes 0.05,0.1] [--policies app,order,min]")
		fmt.Fprintln(stderr, "\nReplays a trace through cache policies and prints hit ratios, and the share")
		fmt.Fprintln(stderr, "of the gap between app and min that order closes: (order-app)/(min-app).")
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

	trace, err := readSimTrace(*tracePath)
	if err != nil {
		return err
	}
	ids, ws := policy.WorkingSet(trace)
	reads := policy.Reads(trace)
	if len(reads) == 0 {
		return fmt.Errorf("%s: the trace has no reads", *tracePath)
	}
	epochs := 0
	for _, a := range trace {
		if a.IsEpoch {
			epochs++
		}
	}
	fmt.Fprintf(stdout, "trace %s: %d reads of %d samples, %d score updates, %d epoch orders, working set %d bytes\n\n",
		*tracePath, len(reads), ids, len(trace)-len(reads)-epochs, epochs, ws)

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "size\tbytes\t")
	for _, n := range names {
		fmt.Fprintf(tw, "%s\t", n)
	}
	withRatio := slices.Contains(names, "app") && slices.Contains(names, "lru")
	if withRatio {
		fmt.Fprint(tw, "app/lru\t")
	}
	withGap := slices.Contains(names, "app") && slices.Contains(names, "order") && slices.Contains(names, "min")
	if withGap {
		fmt.Fprint(tw, "gap closed\t")
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
		if withGap {
			fmt.Fprintf(tw, "%s\t", simGapClosed(ratios["app"], ratios["order"], ratios["min"]))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// readSimTrace reads the trace at path, gunzipping it if it starts with
// gzip's magic bytes.
func readSimTrace(path string) ([]policy.Access, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: reading gzip: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	trace, err := policy.ReadTrace(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return trace, nil
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

// simGapClosed writes the share of the gap between app's hit ratio and
// min's that order's closes, (order-app)/(min-app), as a percentage; "-"
// when there is no gap.
func simGapClosed(app, order, min float64) string {
	if !(min > app) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*(order-app)/(min-app))
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
