package client

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsNoServerPackage: the client and the protocol leaf packages it
// builds on import no server package (store, mesh, transport, dataset,
// policy, sampling...): of this module, only protocol/... packages.
func TestImportsNoServerPackage(t *testing.T) {
	const module = "github.com/shade-mesh/shade/"
	dirs := []string{"."}
	protos, err := filepath.Glob(filepath.Join("..", "protocol", "*"))
	if err != nil {
		t.Fatal(err)
	}
	dirs = append(dirs, protos...)
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range file.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if strings.HasPrefix(path, module) && !strings.HasPrefix(path, module+"protocol/") {
					t.Errorf("%s imports %s", f, path)
				}
			}
		}
	}
}
