package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh"
	"github.com/shade-mesh/shade/mesh/meshtest"
	"github.com/shade-mesh/shade/mesh/ring"
)

func runCmd(t *testing.T, run func([]string, io.Writer, io.Writer) error, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// readTwice reads samples [0, n) of p twice: n misses read from the
// source, then n local hits.
func readTwice(t *testing.T, p *meshtest.Peer, n int) {
	t.Helper()
	c := p.Client(t)
	for i := range n {
		for range 2 {
			if got, err := c.Get(context.Background(), p.Key(i)).Bytes(); err != nil || !bytes.Equal(got, p.Data.Files[i]) {
				t.Fatalf("GET %s: %d bytes, %v", p.Key(i), len(got), err)
			}
		}
	}
}

func TestStatusOfAStandaloneNode(t *testing.T) {
	p := meshtest.Start(t, meshtest.Options{Node: "node-a", Dataset: "toy", Data: testsupport.DatasetSpec{Samples: 40}, CacheSize: 8 << 20})
	readTwice(t, p, 10)

	stdout, stderr, err := runCmd(t, runStatus, "--socket", p.Socket, "--json")
	if err != nil {
		t.Fatalf("status --json: %v\n%s", err, stderr)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("status --json does not parse: %v\n%s", err, stdout)
	}
	if rep.Partitions != 271 || rep.Replicas != 2 || len(rep.Peers) != 1 || len(rep.Members) != 1 {
		t.Fatalf("report: %+v", rep)
	}
	ps := rep.Peers[0]
	if ps.Node != "node-a" || ps.Socket != p.Socket || !slices.Equal(ps.Members, []string{"node-a"}) ||
		ps.OwnedPartitions != 271 || ps.CacheCapacity != 8<<20 || ps.CacheEntries != 10 || ps.Error != "" {
		t.Errorf("peer: %+v", ps)
	}
	if len(ps.Datasets) != 1 {
		t.Fatalf("datasets: %+v", ps.Datasets)
	}
	d := ps.Datasets[0]
	if d.Dataset != "toy" || d.Samples != 40 || d.Resident != 10 || d.Reads != 20 || d.Local != 10 || d.Peer != 0 ||
		d.Source != 10 || d.EpochHitRatio != 0.5 || d.TotalHitRatio != 0.5 || d.Epoch != -1 {
		t.Errorf("dataset: %+v", d)
	}
	if len(d.Jobs) != 1 || d.Jobs[0].Name != "default" || d.Jobs[0].Reads != 20 || d.Jobs[0].Hits != 10 || d.Jobs[0].Epoch != -1 {
		t.Errorf("jobs: %+v", d.Jobs)
	}
	if m := rep.Members[0]; m.Name != "node-a" || !slices.Equal(m.AliveIn, []string{"node-a"}) || m.Partitions["node-a"] != 271 {
		t.Errorf("member: %+v", m)
	}

	stdout, _, err = runCmd(t, runStatus, "--socket", p.Socket)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"PEER    SOCKET", "node-a  " + p.Socket, "271 (100.0%)", "alive 271 (100.0%)",
		"HIT RATIO (EPOCH)", "toy", "50.0%", "10/40",
		"SOURCE READS  SOURCE BYTES  IDLE  HELD  PENDING RANKS", "toy      default",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, stdout)
		}
	}
	t.Logf("status:\n%s", stdout)
}

func TestStatusOfSeveralPeersReportsTheUnreachable(t *testing.T) {
	a := meshtest.Start(t, meshtest.Options{Node: "node-a", Dataset: "toy", Data: testsupport.DatasetSpec{Samples: 40}, CacheSize: 8 << 20})
	b := meshtest.Start(t, meshtest.Options{Node: "node-b", Dataset: "toy", Data: testsupport.DatasetSpec{Samples: 40}, CacheSize: 8 << 20})
	gone := filepath.Join(t.TempDir(), "gone.sock")
	sockets := strings.Join([]string{a.Socket, b.Socket, gone}, ",")

	stdout, _, err := runCmd(t, runStatus, "--sockets", sockets, "--json")
	if err == nil || !strings.Contains(err.Error(), "1 of 3 peers did not answer") {
		t.Fatalf("status of a missing peer: %v", err)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("status --json does not parse: %v\n%s", err, stdout)
	}
	if len(rep.Peers) != 3 || rep.Peers[2].Error == "" || rep.Peers[2].Socket != gone || rep.Peers[1].Node != "node-b" {
		t.Fatalf("peers: %+v", rep.Peers)
	}
	// Two standalone nodes: each sees only itself.
	if len(rep.Members) != 2 || !slices.Equal(rep.Members[1].AliveIn, []string{"node-b"}) {
		t.Fatalf("members: %+v", rep.Members)
	}

	stdout, _, err = runCmd(t, runStatus, "--sockets", sockets)
	if err == nil {
		t.Fatal("no error for a missing peer")
	}
	for _, want := range []string{"unreachable", "NODE-A", "NODE-B", "not alive"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestMembersAndRingOfAStandaloneNode(t *testing.T) {
	p := meshtest.Start(t, meshtest.Options{Node: "node-a", Dataset: "toy", Data: testsupport.DatasetSpec{Samples: 40}, CacheSize: 8 << 20})
	stdout, _, err := runCmd(t, runMembers, "--socket", p.Socket, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var mr membersReport
	if err := json.Unmarshal([]byte(stdout), &mr); err != nil {
		t.Fatalf("members --json: %v\n%s", err, stdout)
	}
	if mr.Node != "node-a" || len(mr.Members) != 1 || mr.Members[0].Name != "node-a" || mr.Members[0].State != "alive" ||
		mr.Members[0].Partitions != 271 || mr.Members[0].Share != 1 {
		t.Errorf("members: %+v", mr)
	}
	// One member of 271 partitions may own ceil(271·1.25) = 339, and owns
	// 271; two, ceil(135·1.25) = 169 each.
	// One member is too few to be told of few partitions; 16,381 are advised.
	if mr.Cap != 339 || mr.AtCap != 0 || mr.CapJoin != 169 || mr.CapLeave != 0 || mr.Advised != 16381 || mr.Few {
		t.Errorf("members: bounded load %d, %d at it, %d after a join, %d after a leave, %d advised (few %v); want 339, 0, 169, 0, 16381 (false)",
			mr.Cap, mr.AtCap, mr.CapJoin, mr.CapLeave, mr.Advised, mr.Few)
	}
	if stdout, _, err = runCmd(t, runMembers, "--socket", p.Socket); err != nil || !strings.Contains(stdout, "node-a  alive") ||
		!strings.Contains(stdout, "at most 339 partitions, and 0 are; one more member makes it 169") || strings.Contains(stdout, "few partitions") {
		t.Errorf("members: %v\n%s", err, stdout)
	}

	// Flags after the key, as "dataset index DIR --json" allows.
	stdout, _, err = runCmd(t, runRing, "toy/7", "toy/8", "--socket", p.Socket, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rr ringReport
	if err := json.Unmarshal([]byte(stdout), &rr); err != nil {
		t.Fatalf("ring --json: %v\n%s", err, stdout)
	}
	r, _ := ring.New(ring.Config{}, []string{"node-a"})
	if len(rr.Keys) != 2 || rr.Keys[0].Key != "toy/7" || !slices.Equal(rr.Keys[0].Owners, []string{"node-a"}) ||
		rr.Keys[1].Partition != r.Partition([]byte("toy/8")) {
		t.Errorf("ring: %+v", rr)
	}
	if _, _, err := runCmd(t, runRing, "--socket", p.Socket); err == nil {
		t.Error("ring without a key succeeded")
	}
	if _, _, err := runCmd(t, runRing, "--socket", p.Socket, "--replicas", "-1", "k"); err == nil {
		t.Error("--replicas -1 accepted")
	}
	if _, _, err := runCmd(t, runMembers, "--socket", filepath.Join(t.TempDir(), "none.sock")); err == nil {
		t.Error("members of a missing socket succeeded")
	}
}

func TestStatusWithAPassword(t *testing.T) {
	p := meshtest.Start(t, meshtest.Options{Node: "node-a", Dataset: "toy", Data: testsupport.DatasetSpec{Samples: 40}, CacheSize: 8 << 20, RequirePass: "s3cret"})
	if _, _, err := runCmd(t, runStatus, "--socket", p.Socket, "--password", "wrong"); err == nil {
		t.Error("status with a wrong password succeeded")
	}
	t.Setenv("SHADE_REQUIREPASS", "s3cret")
	if stdout, stderr, err := runCmd(t, runMembers, "--socket", p.Socket); err != nil || !strings.Contains(stdout, "node-a") {
		t.Errorf("members with $SHADE_REQUIREPASS: %v %s\n%s", err, stderr, stdout)
	}
}

// In a mesh, the ring shadectl computes is the one the daemons route by: a
// sample read through the member that does not own it is cached by an
// owner and not by the reader.
func TestRingMatchesTheMeshsRouting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node mesh")
	}
	peers := meshtest.StartMesh(t, 3, meshtest.Options{Node: "n-", Dataset: "toy", Data: testsupport.DatasetSpec{Samples: 60}, CacheSize: 8 << 20, Replicas: 2}).Peers
	bySock := map[string]*meshtest.Peer{}
	var sockets []string
	for _, p := range peers {
		bySock[p.Node.Name()] = p
		sockets = append(sockets, p.Socket)
	}

	var keys []string
	for i := range 30 {
		keys = append(keys, peers[0].Key(i))
	}
	stdout, stderr, err := runCmd(t, runRing, append([]string{"--socket", peers[1].Socket, "--json"}, keys...)...)
	if err != nil {
		t.Fatalf("ring: %v\n%s", err, stderr)
	}
	var rr ringReport
	if err := json.Unmarshal([]byte(stdout), &rr); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rr.Members, []string{"n-0", "n-1", "n-2"}) {
		t.Fatalf("ring members %v", rr.Members)
	}
	ctx := context.Background()
	for _, k := range rr.Keys {
		if len(k.Owners) != 2 {
			t.Fatalf("%s: owners %v", k.Key, k.Owners)
		}
		var reader *meshtest.Peer
		for _, p := range peers {
			if !slices.Contains(k.Owners, p.Node.Name()) {
				reader = p
			}
		}
		c := reader.Client(t)
		if _, err := c.Get(ctx, k.Key).Bytes(); err != nil {
			t.Fatalf("GET %s via %s: %v", k.Key, reader.Node.Name(), err)
		}
		if n, _ := c.Exists(ctx, k.Key).Result(); n != 0 {
			t.Errorf("%s: cached by %s, which does not own it (owners %v)", k.Key, reader.Node.Name(), k.Owners)
		}
		var cached int64
		for _, o := range k.Owners {
			n, err := bySock[o].Client(t).Exists(ctx, k.Key).Result()
			if err != nil {
				t.Fatal(err)
			}
			cached += n
		}
		if cached == 0 {
			t.Errorf("%s: read via %s, cached by neither owner %v", k.Key, reader.Node.Name(), k.Owners)
		}
	}

	stdout, stderr, err = runCmd(t, runStatus, "--sockets", strings.Join(sockets, ","), "--json")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, stderr)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	owned := 0
	for _, p := range rep.Peers {
		if len(p.Members) != 3 || p.Leader == "" || p.Leader != rep.Peers[0].Leader {
			t.Errorf("peer %s: members %v, leader %q", p.Node, p.Members, p.Leader)
		}
		owned += p.OwnedPartitions
	}
	// The peers took a new mesh's count, and shadectl theirs.
	if owned != mesh.NewMeshPartitions || rep.Partitions != mesh.NewMeshPartitions || rep.Replicas != 2 {
		t.Errorf("ring shares sum to %d partitions, report of %d x %d, want %d x 2", owned, rep.Partitions, rep.Replicas, mesh.NewMeshPartitions)
	}
	for _, m := range rep.Members {
		if len(m.AliveIn) != 3 {
			t.Errorf("member %s alive in %v", m.Name, m.AliveIn)
		}
	}
	stdout, _, err = runCmd(t, runStatus, "--sockets", strings.Join(sockets, ","))
	if err != nil || !strings.Contains(stdout, "N-2") || strings.Contains(stdout, "not alive") {
		t.Errorf("status: %v\n%s", err, stdout)
	}
	t.Logf("status:\n%s", stdout)
	stdout, _, _ = runCmd(t, runMembers, "--socket", peers[2].Socket)
	t.Logf("members:\n%s", stdout)
	stdout, _, _ = runCmd(t, runRing, "--socket", peers[2].Socket, keys[0], keys[1])
	t.Logf("ring:\n%s", stdout)
}

// Two jobs on one dataset: each has its row, with its own reads.
func TestStatusShowsEachJob(t *testing.T) {
	p := meshtest.Start(t, meshtest.Options{Node: "node-a", Dataset: "toy", Data: testsupport.DatasetSpec{Samples: 40}, CacheSize: 8 << 20})
	ctx := context.Background()
	// Job "b" on one connection: its order names the connection's job.
	conn := p.Client(t).Conn()
	defer conn.Close()
	if ids, err := conn.Do(ctx, "SHADE.ORDER", "toy", 0, 0, 1, 10000, "JOB", "b").Int64Slice(); err != nil || len(ids) != 40 {
		t.Fatalf("SHADE.ORDER ... JOB b: %d ids, %v", len(ids), err)
	}
	var bBytes, defBytes int64
	for i := range 5 {
		for range 2 {
			if _, err := conn.Get(ctx, p.Key(i)).Bytes(); err != nil {
				t.Fatal(err)
			}
		}
		bBytes += int64(len(p.Data.Files[i]))
	}
	// The default job: connections that name none, other samples.
	c := p.Client(t)
	for i := 10; i < 20; i++ {
		for range 2 {
			if _, err := c.Get(ctx, p.Key(i)).Bytes(); err != nil {
				t.Fatal(err)
			}
		}
		defBytes += int64(len(p.Data.Files[i]))
	}

	stdout, stderr, err := runCmd(t, runStatus, "--socket", p.Socket, "--json")
	if err != nil {
		t.Fatalf("status --json: %v\n%s", err, stderr)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("status --json does not parse: %v\n%s", err, stdout)
	}
	if len(rep.Peers) != 1 || len(rep.Peers[0].Datasets) != 1 {
		t.Fatalf("report: %+v", rep)
	}
	d := rep.Peers[0].Datasets[0]
	if d.Reads != 30 || len(d.Jobs) != 2 {
		t.Fatalf("dataset: %+v", d)
	}
	def, b := d.Jobs[0], d.Jobs[1]
	if def.Name != "default" || def.Epoch != -1 || def.World != 0 || def.Reads != 20 || def.Hits != 10 ||
		def.SourceReads != 10 || def.SourceBytes != defBytes || def.HitRatio != 0.5 || def.PendingRanks == nil {
		t.Errorf("default job: %+v", def)
	}
	if b.Name != "b" || b.Epoch != 0 || b.World != 1 || b.Reads != 10 || b.Hits != 5 ||
		b.SourceReads != 5 || b.SourceBytes != bBytes || b.HitRatio != 0.5 || b.IdleSeconds < 0 {
		t.Errorf("job b: %+v", b)
	}

	stdout, _, err = runCmd(t, runStatus, "--socket", p.Socket)
	if err != nil {
		t.Fatal(err)
	}
	_, jobs, ok := strings.Cut(stdout, "\nJobs")
	if !ok {
		t.Fatalf("no Jobs table:\n%s", stdout)
	}
	var rows []string
	for _, l := range strings.Split(strings.TrimSpace(jobs), "\n")[2:] {
		rows = append(rows, strings.Join(strings.Fields(l), " "))
	}
	want := []string{
		"node-a toy default - - 50.0% 20 10 " + humanBytes(defBytes),
		"node-a toy b 0 1 50.0% 10 5 " + humanBytes(bBytes),
	}
	if len(rows) != 2 || !strings.HasPrefix(rows[0], want[0]) || !strings.HasPrefix(rows[1], want[1]) {
		t.Errorf("Jobs rows %q, want prefixes %q", rows, want)
	}
	t.Logf("status:\n%s", stdout)
}
