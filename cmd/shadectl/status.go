package main

// Cluster introspection: "shadectl status", "members" and "ring" read
// SHADE.STATS from peers' trainer sockets. Ring ownership is not in
// SHADE.STATS: it is computed here with the daemons' own ring package from
// the members a peer reports, under the daemons' defaults (271 partitions,
// --replicas 2). It matches the daemons' rings when --replicas (and
// --partitions) match theirs and every member serves the same dataset
// versions (a daemon builds one ring per dataset, over the members that
// serve its version).

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/mesh/ring"
	"github.com/shade-mesh/shade/protocol/stats"
)

// defaultSocket is shade-peer's default --socket.
const defaultSocket = "/run/shade/shade.sock"

// clusterFlags are the flags status, members and ring share.
type clusterFlags struct {
	socket     string
	sockets    string // status only
	password   string
	timeout    time.Duration
	replicas   int
	partitions int
	json       bool
}

func (f *clusterFlags) register(fs *flag.FlagSet, many bool) {
	fs.StringVar(&f.socket, "socket", defaultSocket, "a peer's trainer socket")
	if many {
		fs.StringVar(&f.sockets, "sockets", "", "several peers' trainer sockets, comma-separated (instead of --socket)")
	}
	fs.StringVar(&f.password, "password", os.Getenv("SHADE_REQUIREPASS"), "the peers' --requirepass (default $SHADE_REQUIREPASS)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "how long to wait for each peer")
	fs.IntVar(&f.replicas, "replicas", 0, "owners of each sample (R), the daemons' --replicas (default: as the peer reports, 2 for a peer that reports none)")
	fs.IntVar(&f.partitions, "partitions", 0, "ring partitions, the daemons' --ring-partitions (default: as the peer reports, 271 for a peer that reports none)")
	fs.BoolVar(&f.json, "json", false, "print one JSON object")
}

func (f *clusterFlags) socketList() []string {
	if f.sockets == "" {
		return []string{f.socket}
	}
	var out []string
	for _, s := range strings.Split(f.sockets, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// fetchStats runs SHADE.STATS on the peer at socket.
func fetchStats(socket, password string, timeout time.Duration) (stats.Node, error) {
	var st stats.Node
	// Dial here, once: go-redis would retry a missing socket and log each
	// failure on its own logger.
	conn, err := net.DialTimeout("unix", socket, timeout)
	if err != nil {
		return st, err
	}
	first := make(chan net.Conn, 1)
	first <- conn
	c := redis.NewClient(&redis.Options{
		Network: "unix", Addr: socket, Password: password, Protocol: 2, DisableIdentity: true,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			select {
			case conn := <-first:
				return conn, nil
			default:
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}
		},
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	doc, err := c.Do(ctx, "SHADE.STATS").Text()
	if err != nil {
		return st, fmt.Errorf("%s: %w", socket, err)
	}
	if err := json.Unmarshal([]byte(doc), &st); err != nil {
		return st, fmt.Errorf("%s: SHADE.STATS: %w", socket, err)
	}
	return st, nil
}

// ringOf builds the ring the peer with stats st routes by: of the shape
// it reports, or --partitions and --replicas where given. A peer of an
// earlier build reports none; it took 271 and 2 unless configured
// otherwise.
func (f *clusterFlags) ringOf(st stats.Node) (*ring.Ring, error) {
	if f.partitions < 0 || f.replicas < 0 {
		return nil, fmt.Errorf("--partitions %d, --replicas %d: want at least 1, or 0 for the peer's", f.partitions, f.replicas)
	}
	cfg := ring.Config{Partitions: cmp.Or(f.partitions, st.RingPartitions), Replicas: cmp.Or(f.replicas, st.RingReplicas)}
	return ring.New(cfg, st.Members) // 0s: ring's defaults, 271 and 2
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// statusReport is the --json output of "shadectl status".
type statusReport struct {
	Partitions int            `json:"partitions"`
	Replicas   int            `json:"replicas"`
	Peers      []peerStatus   `json:"peers"`
	Members    []memberStatus `json:"members"`
}

// peerStatus is one queried peer; Error is set, and the rest empty, when
// it did not answer.
type peerStatus struct {
	Socket  string `json:"socket"`
	Error   string `json:"error,omitempty"`
	Node    string `json:"node,omitempty"`
	Leader  string `json:"leader,omitempty"`
	Leading bool   `json:"leading"`
	Term    uint64 `json:"term"`
	// Members are the alive members in this peer's view, itself included.
	Members []string `json:"members"`
	// OwnedPartitions: partitions this peer owns as primary in the ring of
	// its view.
	OwnedPartitions int             `json:"owned_partitions"`
	CacheUsed       int64           `json:"cache_used"`
	CacheCapacity   int64           `json:"cache_capacity"`
	CacheEntries    int             `json:"cache_entries"`
	Policy          string          `json:"policy,omitempty"`
	PADS            bool            `json:"pads"`
	Datasets        []datasetStatus `json:"datasets"`
}

// datasetStatus is one dataset on one peer. Reads split by where they were
// served: Local (this node's memory), Peer (another node's memory) and
// Source (misses, read from the backing store).
type datasetStatus struct {
	Dataset  string `json:"dataset"`
	Samples  int    `json:"samples"`
	Resident int64  `json:"resident"`
	// Epoch is the newest published epoch of the job (-1: none yet);
	// CountedEpoch the one this peer's reads are counted against.
	Epoch         int     `json:"epoch"`
	CountedEpoch  int     `json:"counted_epoch"`
	EpochHitRatio float64 `json:"epoch_hit_ratio"`
	TotalHitRatio float64 `json:"total_hit_ratio"`
	Reads         int64   `json:"reads"`
	Local         int64   `json:"local"`
	Peer          int64   `json:"peer"`
	Source        int64   `json:"source"`
	World         int     `json:"world"`
	PendingRanks  []int   `json:"pending_ranks"`
	// Jobs are the dataset's training jobs, the default job first (Epoch,
	// World and PendingRanks above are the default job's).
	Jobs []jobStatus `json:"jobs"`
}

// jobStatus is one training job of a dataset on one peer. Its reads are
// those of the job's trainers on this peer: Hits served from memory (this
// node's, a peer's or the read-ahead's), SourceReads from the source.
type jobStatus struct {
	Name string `json:"name"` // "default" for the dataset's default job
	// Epoch is the job's newest published epoch (-1: none yet).
	Epoch         int     `json:"epoch"`
	World         int     `json:"world"`
	HitRatio      float64 `json:"hit_ratio"` // Hits / Reads; 0 with no reads
	Reads         int64   `json:"reads"`
	Hits          int64   `json:"hits"`
	SourceReads   int64   `json:"source_reads"`
	SourceBytes   int64   `json:"source_bytes"`
	IdleSeconds   float64 `json:"idle_seconds"` // since its last join, done, report or order here
	Reports       int64   `json:"reports"`
	ScoredSamples int     `json:"scored_samples"`
	PendingRanks  []int   `json:"pending_ranks"`
	// Starts of an epoch held for the dataset's other jobs, and their
	// wait: HeldEpochs by the peer as the job's leader (orders drawn when
	// due), HeldStarts by the peer for its ranks (orders drawn ahead).
	HeldEpochs       int     `json:"held_epochs"`
	HeldEpochSeconds float64 `json:"held_epoch_seconds"`
	HeldStarts       int64   `json:"held_starts"`
	HeldStartSeconds float64 `json:"held_start_seconds"`
	// OrderParts counts the orders the peer received as its part of
	// them, from a relay.
	OrderParts int64 `json:"order_parts"`
}

func newJobStatus(j stats.Job) jobStatus {
	js := jobStatus{
		Name: j.Name, Epoch: j.LatestEpoch, World: j.World, HitRatio: j.HitRatio,
		Reads: j.Reads, Hits: j.Hits, SourceReads: j.SourceReads, SourceBytes: j.SourceBytes,
		IdleSeconds: j.IdleSeconds, Reports: j.Reports, ScoredSamples: j.ScoredSamples, PendingRanks: j.PendingRanks,
		HeldEpochs: j.HeldEpochs, HeldEpochSeconds: j.HeldEpochSeconds, HeldStarts: j.HeldStarts, HeldStartSeconds: j.HeldStartSeconds,
		OrderParts: j.OrderParts,
	}
	if js.Name == "" {
		js.Name = "default" // a peer from before named jobs
	}
	if js.PendingRanks == nil {
		js.PendingRanks = []int{}
	}
	return js
}

// memberStatus is one member as each queried peer sees it.
type memberStatus struct {
	Name string `json:"name"`
	// AliveIn names the queried peers that see it alive.
	AliveIn []string `json:"alive_in"`
	// Partitions it owns as primary in each of those peers' rings.
	Partitions map[string]int `json:"partitions"`
}

func newPeerStatus(socket string, st stats.Node, owned int) peerStatus {
	p := peerStatus{
		Socket: socket, Node: st.Node, Leader: st.Leader, Leading: st.Leading, Term: st.Term,
		Members: st.Members, OwnedPartitions: owned,
		CacheUsed: st.CacheUsed, CacheCapacity: st.CacheCapacity, CacheEntries: st.CacheEntries,
		Policy: st.Policy, PADS: st.PADS, Datasets: []datasetStatus{},
	}
	for _, d := range st.Datasets {
		t := d.Total
		ds := datasetStatus{
			Dataset: d.Dataset, Samples: d.Samples, Resident: d.Resident,
			Epoch: d.Job.LatestEpoch, CountedEpoch: d.Epoch, TotalHitRatio: t.HitRatio,
			Local: t.LocalHits, Peer: t.PeerHits, Source: t.ColdMisses + t.CapacityMisses,
			World: d.Job.World, PendingRanks: d.Job.PendingRanks,
		}
		ds.Reads = ds.Local + ds.Peer + ds.Source
		if n := len(d.Epochs); n > 0 {
			ds.EpochHitRatio = d.Epochs[n-1].HitRatio
		}
		if ds.PendingRanks == nil {
			ds.PendingRanks = []int{}
		}
		jobs := d.Jobs
		if len(jobs) == 0 {
			jobs = []stats.Job{d.Job} // a peer from before named jobs
		}
		ds.Jobs = make([]jobStatus, 0, len(jobs))
		for _, j := range jobs {
			ds.Jobs = append(ds.Jobs, newJobStatus(j))
		}
		p.Datasets = append(p.Datasets, ds)
	}
	return p
}

// runStatus runs "shadectl status": what one or more peers report, side by
// side. It prints what it could gather and fails if a peer did not answer.
func runStatus(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shadectl status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f clusterFlags
	f.register(fs, true)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: shadectl status [--socket PATH | --sockets A,B,...] [--replicas R] [--json]")
		fmt.Fprintln(fs.Output(), "Members, leader, ring shares, cache use, and hit ratios per dataset and per job, as each peer reports them.")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(err)
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q", pos[0])
	}
	sockets := f.socketList()
	if len(sockets) == 0 {
		return errors.New("--sockets names no socket")
	}

	rep := statusReport{Peers: []peerStatus{}, Members: []memberStatus{}}
	members := map[string]*memberStatus{}
	var failed []error
	for _, sock := range sockets {
		st, err := fetchStats(sock, f.password, f.timeout)
		if err != nil {
			failed = append(failed, err)
			rep.Peers = append(rep.Peers, peerStatus{Socket: sock, Error: err.Error(), Members: []string{}, Datasets: []datasetStatus{}})
			continue
		}
		r, err := f.ringOf(st)
		if err != nil {
			return fmt.Errorf("%s: ring of %v: %w", sock, st.Members, err)
		}
		if rep.Partitions == 0 { // the first peer that answers names the shape
			rep.Partitions, rep.Replicas = r.Config().Partitions, r.Config().Replicas
		}
		load := r.Load()
		rep.Peers = append(rep.Peers, newPeerStatus(sock, st, load[st.Node]))
		for _, m := range st.Members {
			ms := members[m]
			if ms == nil {
				ms = &memberStatus{Name: m, AliveIn: []string{}, Partitions: map[string]int{}}
				members[m] = ms
			}
			ms.AliveIn = append(ms.AliveIn, st.Node)
			ms.Partitions[st.Node] = load[m]
		}
	}
	names := make([]string, 0, len(members))
	for m := range members {
		names = append(names, m)
	}
	slices.Sort(names)
	for _, m := range names {
		rep.Members = append(rep.Members, *members[m])
	}

	if f.json {
		if err := writeJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		printStatus(stdout, rep)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d peers did not answer: %w", len(failed), len(sockets), errors.Join(failed...))
	}
	return nil
}

func printStatus(w io.Writer, rep statusReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tSOCKET\tLEADER\tTERM\tMEMBERS\tRING SHARE\tCACHE USED\tENTRIES\tPOLICY")
	var answered []string // node names, in socket order
	for _, p := range rep.Peers {
		if p.Error != "" {
			fmt.Fprintf(tw, "?\t%s\tunreachable: %s\n", p.Socket, p.Error)
			continue
		}
		answered = append(answered, p.Node)
		leader := p.Leader
		if leader == "" {
			leader = "(none)"
		}
		policy := p.Policy
		if !p.PADS {
			policy += ", uniform"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t%s\n", p.Node, p.Socket, leader, p.Term, len(p.Members),
			share(p.OwnedPartitions, rep.Partitions), cacheUsage(p.CacheUsed, p.CacheCapacity), p.CacheEntries, policy)
	}
	tw.Flush()

	if len(rep.Members) > 0 {
		fmt.Fprintf(w, "\nMembers as each peer sees them (partitions owned as primary, of %d; R=%d):\n", rep.Partitions, rep.Replicas)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprint(tw, "MEMBER")
		for _, n := range answered {
			fmt.Fprintf(tw, "\t%s", strings.ToUpper(n))
		}
		fmt.Fprintln(tw)
		for _, m := range rep.Members {
			fmt.Fprint(tw, m.Name)
			for _, n := range answered {
				if slices.Contains(m.AliveIn, n) {
					fmt.Fprintf(tw, "\talive %s", share(m.Partitions[n], rep.Partitions))
				} else {
					fmt.Fprint(tw, "\tnot alive")
				}
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}

	var rows int
	for _, p := range rep.Peers {
		rows += len(p.Datasets)
	}
	if rows == 0 {
		return
	}
	fmt.Fprintln(w, "\nDatasets (reads served from local memory, a peer's memory, the source):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tDATASET\tEPOCH\tHIT RATIO (EPOCH)\tHIT RATIO (TOTAL)\tREADS\tLOCAL\tPEER\tSOURCE\tRESIDENT\tPENDING RANKS")
	for _, p := range rep.Peers {
		for _, d := range p.Datasets {
			epoch := "-"
			if d.Epoch >= 0 {
				epoch = fmt.Sprint(d.Epoch)
			}
			pending := "-"
			if len(d.PendingRanks) > 0 {
				pending = strings.Trim(fmt.Sprint(d.PendingRanks), "[]")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d/%d\t%s\n", p.Node, d.Dataset, epoch,
				percent(d.EpochHitRatio), percent(d.TotalHitRatio), d.Reads,
				fraction(d.Local, d.Reads), fraction(d.Peer, d.Reads), fraction(d.Source, d.Reads),
				d.Resident, d.Samples, pending)
		}
	}
	tw.Flush()

	fmt.Fprintln(w, "\nJobs (reads by each job's trainers on that peer; hit ratio: those served from memory; held: epoch starts held for the dataset's other jobs, and their wait):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tDATASET\tJOB\tEPOCH\tWORLD\tHIT RATIO\tREADS\tSOURCE READS\tSOURCE BYTES\tIDLE\tHELD\tPENDING RANKS")
	for _, p := range rep.Peers {
		for _, d := range p.Datasets {
			for _, j := range d.Jobs {
				epoch, world, pending := "-", "-", "-"
				if j.Epoch >= 0 {
					epoch = fmt.Sprint(j.Epoch)
				}
				if j.World > 0 {
					world = fmt.Sprint(j.World)
				}
				if len(j.PendingRanks) > 0 {
					pending = strings.Trim(fmt.Sprint(j.PendingRanks), "[]")
				}
				idle := time.Duration(j.IdleSeconds * float64(time.Second)).Round(time.Second)
				held := "-"
				if n := int64(j.HeldEpochs) + j.HeldStarts; n > 0 {
					waited := time.Duration((j.HeldEpochSeconds + j.HeldStartSeconds) * float64(time.Second))
					held = fmt.Sprintf("%d, %s", n, waited.Round(time.Millisecond))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", p.Node, d.Dataset, j.Name, epoch, world,
					fraction(j.Hits, j.Reads), j.Reads, j.SourceReads, humanBytes(j.SourceBytes), idle, held, pending)
			}
		}
	}
	tw.Flush()
}

func percent(r float64) string { return fmt.Sprintf("%.1f%%", 100*r) }

func fraction(n, of int64) string {
	if of == 0 {
		return "-"
	}
	return percent(float64(n) / float64(of))
}

func share(owned, partitions int) string {
	return fmt.Sprintf("%d (%s)", owned, fraction(int64(owned), int64(partitions)))
}

func cacheUsage(used, capacity int64) string {
	return fmt.Sprintf("%s / %s (%s)", humanBytes(used), humanBytes(capacity), fraction(used, capacity))
}

// membersReport is the --json output of "shadectl members".
type membersReport struct {
	Node       string        `json:"node"`
	Leader     string        `json:"leader"`
	Term       uint64        `json:"term"`
	Partitions int           `json:"partitions"`
	Replicas   int           `json:"replicas"`
	Members    []memberEntry `json:"members"`
	boundedLoad
}

// boundedLoad is a ring's bounded load, the most partitions a member may
// own as primary (ring.Ring.Cap); AtCap how many own that many; CapJoin
// and CapLeave what one member more or fewer would make it. A join or
// leave that changes it moves about a partition for each member at the
// cap besides its share. Advised is the partition count the README
// advises for the ring's members (ring.Advised); Few, that the ring has
// under a quarter of it from 8 members (ring.FewPartitions), where a dead
// member's data goes unevenly to the survivors.
type boundedLoad struct {
	Cap      int  `json:"cap"`
	AtCap    int  `json:"at_cap"`
	CapJoin  int  `json:"cap_join"`
	CapLeave int  `json:"cap_leave"`
	Advised  int  `json:"advised_partitions"`
	Few      bool `json:"few_partitions"`
}

func boundedLoadOf(r *ring.Ring) boundedLoad {
	b := boundedLoad{Cap: r.Cap(), AtCap: r.AtCap()}
	// r's Config is one New accepted, so CapFor cannot fail on it.
	n := len(r.Members())
	b.CapJoin, _ = ring.CapFor(r.Config(), n+1)
	b.CapLeave, _ = ring.CapFor(r.Config(), n-1)
	b.Advised, b.Few = ring.Advised(n), ring.FewPartitions(r.Config().Partitions, n)
	return b
}

// fewNote is the line shadectl prints where a ring has few partitions for
// its members (boundedLoad.Few).
func fewNote(partitions, members, advised int) string {
	return fmt.Sprintf("few partitions: %d for %d members, where %d are advised (every peer's --ring-partitions; README, \"Ownership\"): a dead member's data goes unevenly to the survivors, and a join can move several times its share",
		partitions, members, advised)
}

type memberEntry struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Leader bool   `json:"leader"`
	// Partitions it owns as primary; Share is that over all partitions.
	Partitions int     `json:"partitions"`
	Share      float64 `json:"share"`
}

// runMembers runs "shadectl members": the members one peer sees alive,
// with the leader and each member's share of the ring.
func runMembers(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shadectl members", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f clusterFlags
	f.register(fs, false)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: shadectl members [--socket PATH] [--replicas R] [--json]")
		fmt.Fprintln(fs.Output(), "The members a peer sees alive, the leader, and each member's share of the ring.")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(err)
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q", pos[0])
	}
	st, err := fetchStats(f.socket, f.password, f.timeout)
	if err != nil {
		return err
	}
	r, err := f.ringOf(st)
	if err != nil {
		return fmt.Errorf("ring of %v: %w", st.Members, err)
	}
	load := r.Load()
	parts, reps := r.Config().Partitions, r.Config().Replicas
	rep := membersReport{Node: st.Node, Leader: st.Leader, Term: st.Term, Partitions: parts, Replicas: reps, Members: []memberEntry{},
		boundedLoad: boundedLoadOf(r)}
	for _, m := range r.Members() {
		rep.Members = append(rep.Members, memberEntry{
			Name: m, State: "alive", Leader: m == st.Leader,
			Partitions: load[m], Share: float64(load[m]) / float64(parts),
		})
	}
	if f.json {
		return writeJSON(stdout, rep)
	}
	leader := st.Leader
	if leader == "" {
		leader = "(none: no majority)"
	}
	fmt.Fprintf(stdout, "as seen by %s; leader %s, term %d; %d partitions, R=%d\n", st.Node, leader, st.Term, parts, reps)
	fmt.Fprintf(stdout, "bounded load: a member may be primary of at most %d partitions, and %d are; one more member makes it %d, one fewer %d\n",
		rep.Cap, rep.AtCap, rep.CapJoin, rep.CapLeave)
	if rep.CapJoin != rep.Cap || rep.CapLeave != rep.Cap {
		fmt.Fprintln(stdout, "(a change of it moves about a partition for each member at it, besides the change's share)")
	}
	if rep.Few {
		fmt.Fprintln(stdout, fewNote(parts, len(rep.Members), rep.Advised))
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tSTATE\tROLE\tPARTITIONS")
	for _, m := range rep.Members {
		role := "-"
		if m.Leader {
			role = "leader"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Name, m.State, role, share(m.Partitions, parts))
	}
	return tw.Flush()
}

// ringReport is the --json output of "shadectl ring".
type ringReport struct {
	Node       string      `json:"node"`
	Members    []string    `json:"members"`
	Partitions int         `json:"partitions"`
	Replicas   int         `json:"replicas"`
	Keys       []keyOwners `json:"keys"`
}

type keyOwners struct {
	Key       string `json:"key"`
	Partition int    `json:"partition"`
	// Owners, primary first.
	Owners []string `json:"owners"`
}

// runRing runs "shadectl ring": the owners of keys in the ring of the
// members one peer sees.
func runRing(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shadectl ring", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f clusterFlags
	f.register(fs, false)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: shadectl ring [--socket PATH] [--replicas R] [--json] KEY...")
		fmt.Fprintln(fs.Output(), "The owners (primary first) of sample keys such as fmnist-train/123, in the ring of the members")
		fmt.Fprintln(fs.Output(), "the peer sees alive. The ring is computed here as the daemons compute theirs: pass their --replicas.")
		fs.PrintDefaults()
	}
	keys, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(err)
	}
	if len(keys) == 0 {
		fs.Usage()
		return errors.New("want at least one KEY")
	}
	st, err := fetchStats(f.socket, f.password, f.timeout)
	if err != nil {
		return err
	}
	r, err := f.ringOf(st)
	if err != nil {
		return fmt.Errorf("ring of %v: %w", st.Members, err)
	}
	rep := ringReport{Node: st.Node, Members: r.Members(), Partitions: r.Config().Partitions, Replicas: r.Config().Replicas}
	for _, k := range keys {
		owners := r.Owners([]byte(k))
		if owners == nil {
			owners = []string{}
		}
		rep.Keys = append(rep.Keys, keyOwners{Key: k, Partition: r.Partition([]byte(k)), Owners: owners})
	}
	if f.json {
		return writeJSON(stdout, rep)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tPARTITION\tPRIMARY\tREPLICAS")
	for _, k := range rep.Keys {
		primary, replicas := "(none)", "-"
		if len(k.Owners) > 0 {
			primary = k.Owners[0]
		}
		if len(k.Owners) > 1 {
			replicas = strings.Join(k.Owners[1:], ",")
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", k.Key, k.Partition, primary, replicas)
	}
	return tw.Flush()
}
