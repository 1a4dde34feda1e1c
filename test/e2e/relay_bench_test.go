package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// BenchmarkRelayOverShapedLinks measures how long an epoch's order takes
// to reach every peer over links of limited bandwidth, relayed whole and
// in pieces. Seven shade-peer processes, each in a network namespace of
// its own, are joined by a bridge; each host's link sends at most
// relayRate (tc's token bucket), as a node's network link would. The
// leader (n0) relays with --relay-fanout 2: two relays, each passing the
// order on to two more (2 hops). A job of 7 ranks, one on each peer, asks
// for epoch 0 of a new job each time (the jobs isolated, so that none
// waits for another); the order (about half a megabyte for 100,000
// samples: the ids and the sampler's state) is published once all have
// asked. The figure is the time from the leader's own rank getting its
// slice to the last rank getting its slice, in ms an order. Whole, each
// hop waits for the whole order: about 2 hops x 2 copies of the order's
// time on a link; in pieces of 64 KiB, the hops overlap. The epoch-1
// cases time the job's second order instead, from the first rank to
// have it to the last (every rank waits for it: it is drawn once every
// rank sent SHADE.DONE for epoch 0; orders not drawn ahead): the relays
// hand the four peers below them their parts (their rank's slice, the
// reads of their samples, about 30% of the order), cut once they hold
// the whole. Gossip keeps its default
// (LAN) timing: the links' queues hold up to 200 ms.
//
// It needs root and iproute2 (ip, tc), and skips without them:
//
//	go test ./test/e2e -run xxx -bench RelayOverShapedLinks -benchtime 8x
func BenchmarkRelayOverShapedLinks(b *testing.B) {
	const hosts, samples, relayRate = 7, 100_000, "50mbit"
	if _, err := exec.LookPath("tc"); err != nil {
		b.Skip("tc (iproute2) not installed")
	}
	ds := testsupport.WriteDataset(b, testsupport.DatasetSpec{Samples: samples, MinSize: 1, MaxSize: 1, Seed: 3})
	for _, c := range []struct {
		name, piece string
		epoch       int
	}{{"whole", "32MiB", 0}, {"pieces", "64KiB", 0}, {"epoch-1-whole", "32MiB", 1}, {"epoch-1-pieces", "64KiB", 1}} {
		b.Run(c.name, func(b *testing.B) {
			lab := newNetLab(b, hosts)
			tls := b.TempDir()
			m := &procMesh{ds: ds}
			for i := range hosts {
				name := fmt.Sprintf("n%d", i)
				m.peers = append(m.peers, startPeerIn(b, lab.hosts[i], "--name", name, "--dataset", "ds="+ds.Dir, "--cache-size", "16MiB",
					"--gossip-addr", lab.addr(i)+":7946", "--peer-addr", lab.addr(i)+":7947", "--seeds", lab.addr(0)+":7946",
					"--dev-tls-dir", tls, "--expect", strconv.Itoa(hosts), "--join-wait", "30s",
					"--relay-fanout", "2", "--relay-piece", c.piece, "--max-jobs", "64", "--warm", "off", "--isolate-jobs", "--order-ahead-at", "0"))
				m.names = append(m.names, name)
			}
			m.waitMembers(b, m.peers, 60*time.Second)
			for i, ns := range lab.hosts {
				dev := fmt.Sprintf("s%s%dh", lab.tag, i)
				if out, err := exec.Command("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf",
					"rate", relayRate, "burst", "64kb", "latency", "200ms").CombinedOutput(); err != nil {
					b.Skipf("tc cannot shape the links here: %v: %s", err, out)
				}
			}
			clients := make([]*redis.Client, hosts)
			for i, p := range m.peers {
				clients[i] = redis.NewClient(&redis.Options{Network: "unix", Addr: p.Socket, Protocol: 2, MaxRetries: -1, ReadTimeout: 70 * time.Second})
				defer clients[i].Close()
			}
			job := 0
			order := func() time.Duration {
				job++
				name := "j" + strconv.Itoa(job)
				done := make([]time.Time, hosts)
				var wg sync.WaitGroup
				ask := func(epoch, r int) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					ids, err := clients[r].Do(ctx, "SHADE.ORDER", "ds", epoch, r, hosts, 60000, "JOB", name).Slice()
					done[r] = time.Now()
					if err != nil || len(ids) != (samples+hosts-1)/hosts {
						b.Errorf("job %d rank %d epoch %d: %d ids, %v", job, r, epoch, len(ids), err)
					}
				}
				if c.epoch == 1 {
					for r := range hosts {
						wg.Go(func() {
							ask(0, r)
							if err := clients[r].Do(context.Background(), "SHADE.DONE", "ds", 0, r, "JOB", name).Err(); err != nil {
								b.Errorf("job %d rank %d: done: %v", job, r, err)
							}
						})
					}
					wg.Wait()
				}
				for r := range hosts {
					wg.Go(func() { ask(c.epoch, r) })
				}
				wg.Wait()
				b.Logf("job %d: ranks done after %v", job, func() (d []time.Duration) {
					for _, t := range done {
						d = append(d, t.Sub(done[0]).Round(time.Millisecond))
					}
					return d
				}())
				if c.epoch == 1 {
					// Every rank waits for it: from the first to have it.
					return slices.MaxFunc(done, time.Time.Compare).Sub(slices.MinFunc(done, time.Time.Compare))
				}
				return slices.MaxFunc(done, time.Time.Compare).Sub(done[0])
			}
			order() // the relays' connections are set up by the first order
			var total time.Duration
			for b.Loop() {
				total += order()
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/order")
		})
	}
}
