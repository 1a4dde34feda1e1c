package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// netLab is a set of network namespaces made by one test: a switch
// namespace with a bridge, and one namespace per host joined to it by a
// veth pair, on a private /24 that exists only inside them.
type netLab struct {
	t      testing.TB
	tag    string
	subnet string
	hosts  []string // namespace names
	links  []string // switch-side veth names, by host
}

// newNetLab makes k hosts, or skips the test where namespaces cannot be
// made (not root, no iproute2, a sandbox without the capability).
func newNetLab(t testing.TB, k int) *netLab {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("partition test skipped: iproute2 'ip' not installed")
	}
	b := make([]byte, 2)
	rand.Read(b)
	lab := &netLab{t: t, tag: hex.EncodeToString(b), subnet: fmt.Sprintf("10.%d.%d", 200+int(b[0])%50, b[1])}
	sw := "shd" + lab.tag + "sw"
	if err := testsupport.IP("netns", "add", sw); err != nil {
		t.Skipf("partition test skipped: cannot make network namespaces here: %v", err)
	}
	t.Cleanup(lab.close)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, br := range []string{"br0", "br1"} {
		must(testsupport.IP("-n", sw, "link", "add", br, "type", "bridge"))
		must(testsupport.IP("-n", sw, "link", "set", br, "up"))
	}
	for i := 0; i < k; i++ {
		ns := fmt.Sprintf("shd%sh%d", lab.tag, i)
		host, sws := fmt.Sprintf("s%s%dh", lab.tag, i), fmt.Sprintf("s%s%ds", lab.tag, i)
		must(testsupport.IP("netns", "add", ns))
		lab.hosts = append(lab.hosts, ns)
		lab.links = append(lab.links, sws)
		must(testsupport.IP("link", "add", host, "netns", ns, "type", "veth", "peer", "name", sws, "netns", sw))
		must(testsupport.IP("-n", ns, "addr", "add", lab.addr(i)+"/24", "dev", host))
		must(testsupport.IP("-n", ns, "link", "set", host, "up"))
		must(testsupport.IP("-n", ns, "link", "set", "lo", "up"))
		must(testsupport.IP("-n", sw, "link", "set", sws, "master", "br0"))
		must(testsupport.IP("-n", sw, "link", "set", sws, "up"))
	}
	return lab
}

func (l *netLab) addr(i int) string { return fmt.Sprintf("%s.%d", l.subnet, i+1) }

// cut moves hosts to a second bridge: they reach each other but not the
// rest. heal moves them back.
func (l *netLab) cut(hosts ...int)  { l.attach("br1", hosts) }
func (l *netLab) heal(hosts ...int) { l.attach("br0", hosts) }

func (l *netLab) attach(bridge string, hosts []int) {
	for _, i := range hosts {
		if err := testsupport.IP("-n", "shd"+l.tag+"sw", "link", "set", l.links[i], "master", bridge); err != nil {
			l.t.Fatal(err)
		}
	}
}

func (l *netLab) close() {
	for _, ns := range append(l.hosts, "shd"+l.tag+"sw") {
		testsupport.IP("netns", "del", ns)
	}
}

// startPeerIn runs shade-peer inside a namespace (its socket file is on
// the shared filesystem, so the test reaches it from outside).
func startPeerIn(t testing.TB, ns string, args ...string) *testsupport.Peer {
	t.Helper()
	return startPeerCmd(t, []string{"ip", "netns", "exec", ns}, args...)
}

func TestPartitionMinorityPublishesNoOrders(t *testing.T) {
	lab := newNetLab(t, 5)
	ds := testsupport.WriteDataset(t, testsupport.DatasetSpec{Samples: 500, Seed: 5})
	tls := t.TempDir()
	var peers []*testsupport.Peer
	names := []string{"n0", "n1", "n2", "n3", "n4"}
	for i, name := range names {
		peers = append(peers, startPeerIn(t, lab.hosts[i], "--name", name, "--dataset", "ds="+ds.Dir, "--cache-size", "16MiB",
			"--gossip-addr", lab.addr(i)+":7946", "--peer-addr", lab.addr(i)+":7947", "--seeds", lab.addr(0)+":7946",
			"--dev-tls-dir", tls, "--gossip-profile", "local", "--expect", "5", "--join-wait", "1s"))
	}
	m := &procMesh{peers: peers, names: names, ds: ds}
	m.waitMembers(t, peers, 30*time.Second)
	ctx := context.Background()
	client := func(i int) *redis.Client {
		c := redisClient(peers[i].Socket)
		t.Cleanup(func() { c.Close() })
		return c
	}
	// A job of 2 ranks on the majority side (n1, n2) finishes epoch 0.
	for r, node := range []int{1, 2} {
		if err := client(node).Do(ctx, "SHADE.ORDER", "ds", 0, r, 2, 10000).Err(); err != nil {
			t.Fatalf("rank %d epoch 0: %v", r, err)
		}
	}
	lab.cut(3, 4)
	majority, minority := peers[:3], peers[3:]
	mt := m.waitMembers(t, majority, 10*time.Second)
	m.waitMembers(t, minority, 10*time.Second)
	t.Logf("partition {n3,n4} | {n0,n1,n2}: both sides see their own members after %v", mt)
	for _, p := range minority {
		st, err := peerStats(p.Socket)
		if err != nil {
			t.Fatal(err)
		}
		if st.Datasets[0].Job.Leader != "" {
			t.Errorf("%s in the minority follows leader %q; a minority must have none", p.Socket, st.Datasets[0].Job.Leader)
		}
	}
	for _, p := range majority {
		if st, _ := peerStats(p.Socket); st.Datasets[0].Job.Leader != "n0" {
			t.Errorf("%s in the majority follows %q, want n0", p.Socket, st.Datasets[0].Job.Leader)
		}
	}
	// The majority goes on: epoch 1 is published.
	for r, node := range []int{1, 2} {
		if err := client(node).Do(ctx, "SHADE.DONE", "ds", 0, r).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := client(1).Do(ctx, "SHADE.ORDER", "ds", 1, 0, 2, 10000).Err(); err != nil {
		t.Fatalf("the majority published no epoch 1: %v", err)
	}
	// The minority publishes nothing, and still serves reads (from
	// memory or the source), every byte right.
	err := client(3).Do(ctx, "SHADE.ORDER", "ds", 5, 0, 2, 1500).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "TIMEOUT") {
		t.Errorf("the minority answered an order for an unpublished epoch: %v", err)
	}
	for i := 0; i < ds.Len(); i += 7 {
		v, err := client(4).Get(ctx, testsupport.Key("ds", i)).Bytes()
		if err != nil {
			t.Fatalf("minority read of ds/%d: %v", i, err)
		}
		if err := ds.Check(i, v); err != nil {
			t.Fatalf("minority read: %v", err)
		}
	}
	// Healed: one mesh, one leader, and epoch 1 identical everywhere.
	lab.heal(3, 4)
	ht := m.waitMembers(t, peers, 20*time.Second)
	t.Logf("healed: all 5 see each other again after %v", ht)
	var (
		want     []int64
		leader   string
		orderErr error
	)
	defer func() {
		if t.Failed() {
			t.Logf("last view: leader %q, epoch 1 order: %v", leader, orderErr)
		}
	}()
	for i, p := range peers {
		testsupport.WaitFor(t, 10*time.Second, p.Socket+" follows n0 and holds epoch 1's order", func() bool {
			st, _ := peerStats(p.Socket)
			var got []int64
			got, orderErr = client(i).Do(ctx, "SHADE.ORDER", "ds", 1, 0, 2, 2000).Int64Slice()
			if len(st.Datasets) > 0 {
				leader = st.Datasets[0].Job.Leader
			}
			if orderErr != nil || leader != "n0" {
				return false
			}
			if want == nil {
				want = got
			} else if !slices.Equal(got, want) {
				t.Fatalf("%s holds a different epoch 1 order after healing", p.Socket)
			}
			return true
		})
	}
}
