package mesh

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport"
)

// TestOrderPolicyUsesThePublishedOrder trains the same job against a node
// with APP and a node with the order policy, both at a 10% cache, and
// checks that knowing each epoch's order before it runs pays: the order
// node hits more once importance sampling has begun.
func TestOrderPolicyUsesThePublishedOrder(t *testing.T) {
	const n, world, epochs = 2000, 2, 3
	dir, files := makeDataset(t, n, 100, 100)
	hits := map[string]int64{}
	for _, pol := range []string{"app", "order"} {
		// 10% of the samples' charged bytes: 200 entries of 100-byte values.
		p := startPeer(t, Config{CacheSize: 200 * 176, Policy: pol, Seed: 3,
			Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}, Cluster: ClusterConfig{Prefetch: -1}}, transport.SocketConfig{})
		trainEpochs(t, epochs, world, files, func(int) *redis.Client { return p.client(t) },
			func(id int64) float64 { return float64(id%13) / 13 })
		for _, es := range p.node.ordered[0].stats().Epochs {
			if es.Epoch > 0 {
				hits[pol] += es.Hits
			}
		}
	}
	t.Logf("hits in epochs 1..%d at a 10%% cache: app %d, order %d", epochs-1, hits["app"], hits["order"])
	if hits["order"] <= hits["app"] {
		t.Errorf("the order policy (%d hits) did not beat APP (%d) with the order known in advance", hits["order"], hits["app"])
	}
}

// TestMergePace checks how many jobs the order policy is told read its
// order side by side when a job's order comes (mergePace): a job drawn
// when due with a short tail left does not count, a job whose orders run
// ahead always does, and a job's own reads ahead of its new order count
// as one more.
func TestMergePace(t *testing.T) {
	order := func(epoch, ahead int) *wire.PublishMsg { return &wire.PublishMsg{Epoch: epoch, Ahead: ahead} }
	cases := []struct {
		name     string
		p        *wire.PublishMsg
		appendTo bool
		others   []*wire.PublishMsg
		want     int
	}{
		{"alone", order(3, 0), false, nil, 0},
		{"others without orders", order(3, 0), false, []*wire.PublishMsg{nil, order(-1, 0)}, 0},
		{"due, all in the epoch", order(3, 0), false, []*wire.PublishMsg{order(3, 0), order(4, 0)}, 2},
		{"due, one finishing the epoch before", order(3, 0), false, []*wire.PublishMsg{order(3, 0), order(2, 0)}, 1},
		{"due, all finishing the epoch before", order(3, 0), false, []*wire.PublishMsg{order(2, 0), order(2, 0)}, 1},
		{"ahead, a first order beside jobs ahead", order(0, 1), false, []*wire.PublishMsg{order(1, 1), order(4, 1)}, 2},
		{"ahead, behind its own reads", order(5, 1), true, []*wire.PublishMsg{order(5, 1), order(4, 1)}, 3},
		{"ahead, alone", order(5, 1), true, nil, 0},
		{"ahead, beside a due job's tail", order(5, 1), true, []*wire.PublishMsg{order(3, 0)}, 1},
		{"ahead, beside a due job reading its epoch", order(5, 1), true, []*wire.PublishMsg{order(4, 0)}, 2},
	}
	for _, c := range cases {
		if got := mergePace(c.p, c.appendTo, c.others); got != c.want {
			t.Errorf("%s: %d jobs, want %d", c.name, got, c.want)
		}
	}
}
