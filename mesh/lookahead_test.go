package mesh

import (
	"testing"

	"github.com/redis/go-redis/v9"

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
