package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/shade-mesh/shade/internal/bytesize"
	meshleader "github.com/shade-mesh/shade/mesh/leader"
	"github.com/shade-mesh/shade/mesh/ring"
	"github.com/shade-mesh/shade/mesh/wire"
)

// scaleOptions are shadectl scale's flags.
type scaleOptions struct {
	peers, samples, replicas, partitions int
	load                                 float64
	world, batch, trials                 int
	seed                                 uint64
	dataset                              string
	rankRate                             float64
	linkGbps, cached                     float64
	budget                               string
	encodes, fanout, piece               int
	only                                 string
	cpuProfile                           string
	names                                string
}

// runScale simulates a large mesh in one process, with no network: the
// ring a node builds from its members (mesh/ring), the samples that move
// when one peer joins or leaves, the load spread after a failure, and the
// leader's work for one epoch (merging every rank's reports, sending the
// merged scores, replicating the table, drawing, splitting and encoding
// the next order). Each figure is printed beside its ideal or budget and
// the ratio.
func runScale(args []string, stdout, stderr io.Writer) error {
	var o scaleOptions
	fs := pflag.NewFlagSet("shadectl scale", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.peers, "peers", 1000, "peers in the mesh")
	fs.IntVar(&o.samples, "samples", 1_280_000, "samples in the dataset (1.28 M: ImageNet-1k's training set)")
	fs.IntVar(&o.replicas, "replicas", ring.DefaultReplicas, "owners of each sample (R), as shade-peer --replicas")
	fs.IntVar(&o.partitions, "partitions", ring.DefaultPartitions, "ring partitions (the default is what peers of earlier builds use; a new mesh takes 16381, and 64513 are advised for 1,000 peers)")
	fs.Float64Var(&o.load, "load", ring.DefaultLoad, "bounded-load factor of the ring (a node uses the default)")
	fs.IntVar(&o.world, "world", 8, "ranks of the training job")
	fs.IntVar(&o.batch, "batch", 256, "minibatch size of each report")
	fs.IntVar(&o.trials, "trials", 5, "peers that join, and peers that leave, one at a time")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the leavers' choice, the losses and the job")
	fs.StringVar(&o.dataset, "dataset", "imagenet", "dataset name in sample keys")
	fs.Float64Var(&o.rankRate, "rank-rate", 2500, "samples per second one rank trains (2500: ResNet-50 on one A100, mixed precision); the epoch budget is samples/(world*rank-rate)")
	fs.Float64Var(&o.linkGbps, "link-gbps", 25, "the leader's network link, Gbit/s, for the egress budget")
	fs.StringVar(&o.budget, "replicate-budget", "64MiB", "per second: the leader's score-table replication budget, as shade-peer --replicate-budget")
	fs.IntVar(&o.encodes, "encodes", 8, "frames of each broadcast encoded to measure one; the cost is scaled to every peer")
	fs.IntVar(&o.fanout, "relay-fanout", wire.DefaultRelayFanout, "members the leader hands an order to past that many, as shade-peer --relay-fanout")
	fs.IntVar(&o.piece, "relay-piece", wire.DefaultRelayPiece, "bytes of the pieces a relayed order goes in, as shade-peer relays it")
	fs.Float64Var(&o.cached, "cached", 0.5, "share of the dataset the mesh caches, whose samples the leader's draws prefer (shade-peer --boost)")
	fs.StringVar(&o.only, "only", "all", "what to simulate: ring, leader or all")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the leader's epoch to `FILE`")
	fs.StringVar(&o.names, "names", defaultPeerNames, "the peers' names: a fmt format of the peer's number (the ring hashes names, so where a dead peer's data goes depends on them)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: shadectl scale [--peers 1000] [--samples 1280000] [--replicas 2] [--world 8] [--trials 5]")
		fmt.Fprintln(stderr, "\nSimulates a mesh in one process through the node's own ring and sampling code: the")
		fmt.Fprintln(stderr, "share of samples that move when one peer joins or leaves (ideal 1/N), the load spread")
		fmt.Fprintln(stderr, "over peers before and after a failure, the leader's work for one epoch, and what another")
		fmt.Fprintln(stderr, "member does with the epoch's order (one that holds it whole, one that gets its part), each beside")
		fmt.Fprintln(stderr, "its ideal or budget and the ratio. The transport's work for the leader's requests and")
		fmt.Fprintln(stderr, "the member's order is measured by real calls between two nodes in this process over")
		fmt.Fprintln(stderr, "loopback QUIC.")
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("bad arguments: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case o.peers < 2:
		return fmt.Errorf("--peers %d: want at least 2", o.peers)
	case o.samples < 1 || o.samples > 1<<31:
		return fmt.Errorf("--samples %d out of range", o.samples)
	case o.replicas < 1, o.world < 1, o.batch < 1, o.trials < 1, o.encodes < 1, o.fanout < 1, o.piece < 1:
		return errors.New("--replicas, --world, --batch, --trials, --encodes, --relay-fanout and --relay-piece must be positive")
	case o.rankRate <= 0 || o.linkGbps <= 0:
		return errors.New("--rank-rate and --link-gbps must be positive")
	case !(o.cached >= 0 && o.cached <= 1):
		return fmt.Errorf("--cached %g: want a share from 0 to 1", o.cached)
	case !slices.Contains([]string{"ring", "leader", "all"}, o.only):
		return fmt.Errorf("--only %q: want ring, leader or all", o.only)
	}
	name, err := peerNamer(o.names)
	if err != nil {
		return err
	}
	budget, err := bytesize.Parse(o.budget)
	if err != nil || budget <= 0 {
		return fmt.Errorf("--replicate-budget %q: want a positive size per second", o.budget)
	}
	progress := func(format string, args ...any) { fmt.Fprintf(stderr, "scale: "+format+"\n", args...) }
	cfg := ring.Config{Partitions: o.partitions, Replicas: o.replicas, Load: o.load}

	fmt.Fprintf(stdout, "shadectl scale: %d peers, %d samples of %q, R=%d, %d partitions, load factor %g; %s, GOMAXPROCS %d\n",
		o.peers, o.samples, o.dataset, o.replicas, o.partitions, o.load, runtime.Version(), runtime.GOMAXPROCS(0))

	var base *ring.Ring
	if o.only != "leader" {
		res, err := simulateRing(cfg, o.peers, o.samples, o.trials, o.dataset, o.seed, name, progress)
		if err != nil {
			return err
		}
		printRing(stdout, res)
		base = res.Ring
	}
	if o.only == "ring" {
		return nil
	}
	if base == nil {
		names := make([]string, o.peers)
		for i := range names {
			names[i] = name(i)
		}
		var err error
		if base, err = ring.New(cfg, names); err != nil {
			return err
		}
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	job := scaleJob{dataset: o.dataset, samples: o.samples, world: o.world, batch: o.batch, rankRate: o.rankRate, seed: o.seed, encodes: o.encodes,
		budget: float64(budget), fanout: o.fanout, piece: o.piece, cached: o.cached}
	res, err := simulateMerge(job, base, progress)
	if err != nil {
		return err
	}
	printMerge(stdout, res, o)
	return nil
}

func pct(f float64) string { return fmt.Sprintf("%.3f%%", 100*f) }

func ratio(measured, ideal float64) string {
	if ideal == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", measured/ideal)
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(100 * time.Nanosecond)
}

// capNote says whether the trials' joins and leaves change the ring's
// bounded load, which makes them move more than their share.
func capNote(res *ringResult) string {
	var changed []string
	if len(res.Joins) > 0 && res.CapJoin != res.Cap {
		changed = append(changed, fmt.Sprintf("a join makes it %d", res.CapJoin))
	}
	if len(res.Leaves) > 0 && res.CapLeave != res.Cap {
		changed = append(changed, fmt.Sprintf("a leave makes it %d", res.CapLeave))
	}
	if len(changed) == 0 {
		return "the trials' joins and leaves keep it"
	}
	return strings.Join(changed, ", ") + ": such a change moves about one more copy for each peer at the cap than its share (mesh/ring Ring.Cap)"
}

func printRing(w io.Writer, res *ringResult) {
	cfg := res.Config
	fmt.Fprintf(w, "\n== ring: mesh/ring (primaries by buraksezer/consistent, replicas by rendezvous hashing), built from %d member names as a node builds it\n", res.Peers)
	var upd []time.Duration
	for _, c := range append(slices.Clone(res.Joins), res.Leaves...) {
		upd = append(upd, c.Update)
	}
	fmt.Fprintf(w, "ring.New of %d peers: %s; ring.Update by one peer: mean %s, worst %s (%d updates)\n",
		res.Peers, round(res.Build), round(meanDur(upd)), round(slices.Max(upd)), len(upd))
	if res.Peers > cfg.Partitions {
		fmt.Fprintf(w, "note: %d peers > %d partitions: at most %d peers can be primary of anything\n",
			res.Peers, cfg.Partitions, cfg.Partitions)
	}
	fmt.Fprintf(w, "bounded load: a peer is primary of at most %d partitions, and %d of %d peers are; %s\n",
		res.Cap, res.AtCap, res.Peers, capNote(res))
	if res.Few {
		fmt.Fprintln(w, fewNote(cfg.Partitions, res.Peers, res.Advised))
	}

	fmt.Fprintf(w, "\nsamples moved (%d samples, keys \"<dataset>/<index>\"; mean and worst of %d trials each)\n", res.Samples, len(res.Joins))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "event\tfigure\tmean\tworst\tideal\tmean/ideal\tworst/ideal\t")
	type fig struct {
		name  string
		get   func(churn) float64
		ideal float64
	}
	for _, ev := range []struct {
		name string
		cs   []churn
		n    int
	}{{"join", res.Joins, res.Peers + 1}, {"leave", res.Leaves, res.Peers}} {
		r := float64(min(cfg.Replicas, ev.n))
		for _, f := range []fig{
			{"primary moved", func(c churn) float64 { return c.Primary }, 1 / float64(ev.n)},
			{"copies moved", func(c churn) float64 { return c.Copies }, 1 / float64(ev.n)},
			{"owner set changed", func(c churn) float64 { return c.Owners }, r / float64(ev.n)},
		} {
			var sum, worst float64
			for _, c := range ev.cs {
				v := f.get(c)
				sum += v
				worst = max(worst, v)
			}
			mean := sum / float64(len(ev.cs))
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", ev.name, f.name, pct(mean), pct(worst), pct(f.ideal),
				ratio(mean, f.ideal), ratio(worst, f.ideal))
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "ideal: 1/N of primaries and of copies (N = %d after a join, %d before a leave); R/N of owner sets\n",
		res.Peers+1, res.Peers)

	fmt.Fprintf(w, "\nload per peer, relative to the mean (ideal 1.00 for max, p99; 0.00 for stddev; 0 empty peers)\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "view\tcounted\tpeers\tmean\tmax/mean\tp99/mean\tstddev/mean\tempty\t")
	row := func(view, counted string, s spread) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%d\t\n", view, counted, s.Peers, s.Mean, s.Max, s.P99, s.StdDev, s.Empty)
	}
	row("all peers", "copies (R owners)", res.Before)
	row("all peers", "primaries", res.BeforePrimary)
	worst := 0
	for i, c := range res.Leaves {
		if c.After.Max > res.Leaves[worst].After.Max {
			worst = i
		}
	}
	if len(res.Leaves) > 0 {
		c := res.Leaves[worst]
		row("after "+c.Peer+" failed", "copies (R owners)", c.After)
		row("after "+c.Peer+" failed", "primaries", c.AfterPrimary)
	}
	tw.Flush()
	if len(res.Leaves) > 0 {
		fmt.Fprintln(w, "(after a failure: the trial with the highest max/mean)")
	}

	fmt.Fprintln(w, "\nwhere a failed peer's copies go (ideal: over many survivors, largest share near 1/(N-1))")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "failed\tcopies held\tpartitions\tsurvivors receiving\tlargest share\tcopies moved\tupdate\t")
	for _, c := range res.Leaves {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t\n", c.Peer, c.Held, c.Partitions, c.Recipients, pct(c.Largest), pct(c.Copies), round(c.Update))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nwhat a joining peer takes")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "joined\tcopies held\tpartitions\tcopies moved\tprimary moved\tupdate\t")
	for _, c := range res.Joins {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t\n", c.Peer, c.Held, c.Partitions, pct(c.Copies), pct(c.Primary), round(c.Update))
	}
	tw.Flush()
}

func meanDur(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func printMerge(w io.Writer, res *mergeResult, o scaleOptions) {
	fmt.Fprintf(w, "\n== leader: one epoch of %d samples, world %d, minibatches of %d, %d peers\n", res.Samples, res.World, res.Batch, res.Peers)
	fmt.Fprintf(w, "budget: one epoch at %d ranks x %.0f samples/s = %.0f samples/s: %s\n",
		res.World, o.rankRate, res.Throughput, round(res.Epoch))
	fmt.Fprintf(w, "measured: the time each step takes, the CPU it uses on all of the %d cores Go runs on (GOMAXPROCS), and the page faults it takes (first writes to memory the heap grew by, whose cost depends on the machine: far more in a virtual machine whose host maps its memory lazily than on a bare host)\n", runtime.GOMAXPROCS(0))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tmeasured\tcpu\tx\tper epoch\tallocs\talloc bytes\tpage faults\tframes\twire bytes\t")
	var total time.Duration
	var wire float64
	for _, s := range res.Steps {
		times := "1"
		if s.Times != 1 {
			times = fmt.Sprintf("%.0f", s.Times)
		}
		frames, bytes := "-", "-"
		if s.Messages > 0 {
			frames = fmt.Sprintf("%.0f", s.Messages)
			bytes = scaleBytes(s.WireBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t\n", s.Name, round(s.Dur), round(s.CPU), times, round(s.perEpoch()),
			int64(float64(s.Allocs)*s.Times), scaleBytes(float64(s.Bytes)*s.Times), int64(float64(s.Faults)*s.Times), frames, bytes)
		total += s.perEpoch()
		wire += s.WireBytes
	}
	for _, s := range slices.Concat(res.Prepared, res.FirstDraw, res.First) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t\n", s.Name, round(s.Dur), round(s.CPU), "once", "-",
			s.Allocs, scaleBytes(float64(s.Bytes)), s.Faults, fmt.Sprintf("%.0f", s.Messages), scaleBytes(s.WireBytes))
	}
	tw.Flush()
	for _, s := range slices.Concat(res.Steps, res.Prepared, res.FirstDraw, res.First) {
		if s.Note != "" {
			fmt.Fprintf(w, "  %s: %s\n", s.Name, s.Note)
		}
	}
	fmt.Fprintf(w, "  (split without locality, sampling.Split: %s)\n", round(res.PlainSplit))
	fmt.Fprintf(w, "  (samples hashed into their partitions once per dataset, ring.NewSamples: %s)\n", round(res.HashSamples))

	link := o.linkGbps * 1e9 / 8 // bytes per second
	// The steps' time, CPU (all cores) and bytes sent, per epoch.
	sum := func(keep func(*mergeStep) bool) (took, cpu time.Duration, wire float64) {
		for _, s := range res.Steps {
			if keep(s) {
				took += s.perEpoch()
				cpu += s.cpuPerEpoch()
				wire += s.WireBytes
			}
		}
		return took, cpu, wire
	}
	reportTime, _, _ := sum(func(s *mergeStep) bool { return !s.Between && !strings.HasPrefix(s.Name, "replicate") })
	repTime, _, repWire := sum(func(s *mergeStep) bool { return strings.HasPrefix(s.Name, "replicate") })
	pubTime, pubCPU, pubWire := sum(func(s *mergeStep) bool { return s.Between })
	epoch := res.Epoch.Seconds()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tmeasured\tbudget\tratio\t")
	fmt.Fprintf(tw, "reports: samples/s the leader absorbs (decode, merge, queue, send scores)\t%.0f/s\t%.0f/s (the job)\t%s\t\n",
		float64(res.Samples)/reportTime.Seconds(), res.Throughput, ratio(float64(res.Samples)/reportTime.Seconds(), res.Throughput))
	fmt.Fprintf(tw, "leader time per epoch, all steps\t%s\t%s (the epoch)\t%s\t\n", round(total), round(res.Epoch), ratio(total.Seconds(), epoch))
	fmt.Fprintf(tw, "  of which replication\t%s\t\t%s\t\n", round(repTime), ratio(repTime.Seconds(), epoch))
	fmt.Fprintf(tw, "  of which the next order (ranks wait)\t%s\t\t%s\t\n", round(pubTime), ratio(pubTime.Seconds(), epoch))
	fmt.Fprintf(tw, "  the next order's CPU, all cores\t%s\t\t%s\t\n", round(pubCPU), ratio(pubCPU.Seconds(), epoch))
	fmt.Fprintf(tw, "leader egress per epoch\t%s\t%s (%.0f Gbit/s)\t%s\t\n", scaleBytes(wire), scaleBytes(link*epoch), o.linkGbps, ratio(wire, link*epoch))
	fmt.Fprintf(tw, "  of which replication\t%s\t\t%s\t\n", scaleBytes(repWire), ratio(repWire, link*epoch))
	fmt.Fprintf(tw, "  of which the next order\t%s\t\t%s\t\n", scaleBytes(pubWire), ratio(pubWire, link*epoch))
	// Relayed, each hop's links carry at most the copies the leader's
	// does. Whole, the last member has the order after hops times that;
	// in P pieces, each passed on as soon as it is in, the hops work at
	// once and the last member has it after P + hops - 1 times a piece's
	// share of that.
	pieces := float64(max(res.PublishPieces, 1))
	onLink := pubWire / link * (pieces + float64(res.PublishHops) - 1) / pieces
	fmt.Fprintf(tw, "next order on the link (ranks wait; %d hops of %d copies, %.0f pieces)\t%s\t%s (the epoch)\t%s\t\n",
		res.PublishHops, res.PublishSends, pieces, round(time.Duration(onLink*float64(time.Second))), round(res.Epoch), ratio(onLink, epoch))
	if mo := res.Member; mo != nil && mo.Shape.Parts > 0 && mo.Shape.Hops > 1 {
		// A member that gets its part has it once the relay that cuts
		// it holds what it cuts from, has decoded and checked it and has
		// cut the parts (not piece by piece), and the parts crossed its
		// link: where groups' heads cut the parts, after a holder two
		// hops up did that with the whole and the groups' parts crossed
		// its link. Relays cut the parts of an order in pieces only
		// where it was drawn ahead (mesh's partsFit): no rank waits for
		// it.
		sh := mo.Shape
		took := func(steps []*mergeStep, names ...string) (d time.Duration) {
			for _, s := range steps {
				if slices.Contains(names, s.Name) {
					d += s.Dur
				}
			}
			return d
		}
		wholeHops := sh.Hops - 1
		var reach float64
		how := fmt.Sprintf("the whole %d hops, their relay's decode, check and cut, %d parts on its link", wholeHops, mo.Cut)
		if sh.Heads > 0 {
			wholeHops = sh.Hops - 2
			reach = took(mo.Group, groupDecodeStep, groupCutStep).Seconds() + float64(mo.GroupBytes*mo.GroupCut)/link
			how = fmt.Sprintf("the whole %d hops, a relay's decode, check and cut, %d groups' parts on its link, their heads' decode, check and cut, %d parts on each one's link", wholeHops, mo.GroupCut, mo.Cut)
		}
		relayHas := pubWire / link * (pieces + float64(wholeHops) - 1) / pieces
		reach += relayHas + took(mo.Whole, decodeStep, cutStep).Seconds() + float64(mo.PartBytes*mo.Cut)/link
		fmt.Fprintf(tw, "  drawn ahead, members with parts have theirs (%s; an order the ranks wait for goes whole, as above)\t%s\t%s (the epoch)\t%s\t\n",
			how, round(time.Duration(reach*float64(time.Second))), round(res.Epoch), ratio(reach, epoch))
	}
	// With --order-ahead 1 the next order is drawn once every rank
	// finished the epoch before the one being trained, and relayed while
	// the job trains: the ranks wait for what runs past that epoch. The
	// leader then merges the epoch's reports while it draws (a draw reads
	// a copy of the scores), so the steps' CPU must fit the cores' time.
	ahead := max(0, pubTime.Seconds()+onLink-epoch)
	fmt.Fprintf(tw, "next order drawn an epoch ahead (--order-ahead 1, or by default as below; ranks wait for what runs past the epoch)\t%s\t%s (the epoch)\t%s\t\n",
		round(time.Duration(ahead*float64(time.Second))), round(res.Epoch), ratio(ahead, epoch))
	// shade-peer draws orders ahead by itself once the order takes the
	// leader more than --order-ahead-at of the time from its drawing to
	// the epoch's end, and leader.MinAheadDraw or more, AheadAfter draws
	// in a row, where a speculation of the next epoch's order, drawn
	// while the epoch trains, counts as the last: epoch 0's order and
	// the speculation of epoch 1's (drawn while epoch 0 trains) make
	// AheadAfter (2), epoch 1's order is that speculation, and each
	// after it is drawn an epoch ahead: the ranks wait for epoch 0's
	// order alone.
	share := pubTime.Seconds() / (pubTime.Seconds() + onLink + epoch)
	verdict := "no"
	if pubTime >= meshleader.MinAheadDraw && share > meshleader.DefaultAheadAt {
		verdict = fmt.Sprintf("yes, from epoch %d (the ranks wait for the order of epoch 0)", meshleader.AheadAfter-1)
	}
	fmt.Fprintf(tw, "  drawn ahead by default? the order's share of the ranks' time (over --order-ahead-at, and %v or more)\t%.2f\t%v\t%s\t\n",
		meshleader.MinAheadDraw, share, meshleader.DefaultAheadAt, verdict)
	// Epoch 0 of a dataset of leader.DefaultDrawFirstAt samples or more
	// is drawn as the first rank joins, from the order its leader
	// aligned and grouped by partition as it started leading; where the
	// joins span the draw, the last rank to join waits for its own order
	// (every weight 1: none published) to be dealt among the ranks,
	// encoded, sent and relayed; ranks that ask together wait for the
	// draw too.
	if res.Samples >= meshleader.DefaultDrawFirstAt && len(res.First) > 0 {
		took := func(steps []*mergeStep) (d time.Duration, wire float64) {
			for _, s := range steps {
				d += s.perEpoch()
				wire += s.WireBytes
			}
			return d, wire
		}
		atJoin, wire0 := took(res.First)
		drawing, _ := took(res.FirstDraw)
		pieces0 := float64(max(res.FirstPieces, 1))
		onLink0 := wire0 / link * (pieces0 + float64(res.PublishHops) - 1) / pieces0
		spanning := atJoin.Seconds() + onLink0
		together := drawing.Seconds() + spanning
		fmt.Fprintf(tw, "epoch 0's order, drawn as the first rank joins: what the last rank to join waits (dealt to ranks, encoded, sent, on the link: %s)\t%s\t%s (the epoch)\t%s\t\n",
			scaleBytes(wire0), round(time.Duration(spanning*float64(time.Second))), round(res.Epoch), ratio(spanning, epoch))
		fmt.Fprintf(tw, "  ranks that ask together wait for its draw too (from the order prepared as the leader took over)\t%s\t%s (the epoch)\t%s\t\n",
			round(time.Duration(together*float64(time.Second))), round(res.Epoch), ratio(together, epoch))
		prepared, _ := took(res.Prepared)
		fmt.Fprintf(tw, "  the dataset's epoch 0 prepared as its leader starts leading (aligned, grouped), before any job asks\t%s\t%s (the epoch)\t%s\t\n",
			round(prepared), round(res.Epoch), ratio(prepared.Seconds(), epoch))
	}
	_, allCPU, _ := sum(func(*mergeStep) bool { return true })
	cores := runtime.GOMAXPROCS(0)
	fmt.Fprintf(tw, "leader CPU per epoch, all steps, all cores\t%s\t%s (%d cores x the epoch)\t%s\t\n",
		round(allCPU), round(time.Duration(cores)*res.Epoch), cores, ratio(allCPU.Seconds(), float64(cores)*epoch))
	tw.Flush()

	fmt.Fprintf(w, "leader heap in use after the epoch: %s; %d of %d samples scored\n", scaleBytes(float64(res.HeapInuse)), res.Scored, res.Samples)
	printMember(w, res.Member, res.Epoch)
}
