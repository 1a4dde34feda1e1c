package leader

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsNoNetwork: the package imports, beyond the standard library,
// only mesh/wire, sampling and zerolog; so no memberlist, QUIC or store
// can reach it.
func TestImportsNoNetwork(t *testing.T) {
	allowed := map[string]bool{
		"github.com/shade-mesh/shade/mesh/wire": true,
		"github.com/shade-mesh/shade/sampling":  true,
		"github.com/rs/zerolog":                 true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") && !allowed[path] {
				t.Errorf("%s imports %s", f, path)
			}
		}
	}
}
