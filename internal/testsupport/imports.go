package testsupport

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// CheckImports fails tb for every import, beyond the standard library, of
// the non-test Go files in the test's package directory that is not in
// allowed: the test form of a package doc's "must not import".
func CheckImports(tb testing.TB, allowed ...string) {
	tb.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			tb.Fatal(err)
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") && !slices.Contains(allowed, path) {
				tb.Errorf("%s imports %s; the package may import only %v beyond the standard library", f, path, allowed)
			}
		}
	}
}
