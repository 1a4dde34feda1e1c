package mesh_test

import (
	"testing"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh"
	"github.com/shade-mesh/shade/mesh/meshtest"
	"github.com/shade-mesh/shade/transport"
)

// The shared in-process harness serves package mesh's own tests too (see
// StartMeshForTest in cluster_test.go).
func init() {
	mesh.StartMeshForTest = func(tb testing.TB, k int, data testsupport.DatasetSpec, replicas int,
		configure func(i int, c *mesh.Config)) (*testsupport.Dataset, []mesh.HarnessPeer, func(testing.TB, func(*mesh.Config)) mesh.HarnessPeer) {
		tb.Helper()
		m := meshtest.StartMesh(tb, k, meshtest.Options{Data: data, Replicas: replicas,
			Configure: func(i int, c *mesh.Config, _ *transport.SocketConfig) { configure(i, c) }})
		peers := make([]mesh.HarnessPeer, len(m.Peers))
		for i, p := range m.Peers {
			peers[i] = mesh.HarnessPeer{Node: p.Node, Server: p.Server, Socket: p.Socket}
		}
		add := func(tb testing.TB, configure func(c *mesh.Config)) mesh.HarnessPeer {
			p := m.Add(tb, func(c *mesh.Config, _ *transport.SocketConfig) {
				if configure != nil {
					configure(c)
				}
			})
			return mesh.HarnessPeer{Node: p.Node, Server: p.Server, Socket: p.Socket}
		}
		return m.Data, peers, add
	}
}
