package leader

import (
	"testing"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// TestImportsNoNetwork: the package imports, beyond the standard library,
// only mesh/wire, sampling and zerolog; so no memberlist, QUIC or store
// can reach it.
func TestImportsNoNetwork(t *testing.T) {
	testsupport.CheckImports(t, "github.com/shade-mesh/shade/mesh/wire", "github.com/shade-mesh/shade/sampling", "github.com/rs/zerolog")
}
