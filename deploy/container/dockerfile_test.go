package container

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dockerfile returns the Dockerfile's instructions, continuation lines
// joined and comments dropped.
func dockerfile(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	cur := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if cur == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		out = append(out, cur+line)
		cur = ""
	}
	return out
}

// No Docker engine here: the test checks the Dockerfile's text, then runs
// its go build line's flags on this machine.
func TestDockerfile(t *testing.T) {
	lines := dockerfile(t)
	var build string
	for _, l := range lines {
		if strings.HasPrefix(l, "RUN ") && strings.Contains(l, "go build") && strings.Contains(l, "./cmd/shade-peer") {
			build = l
		}
	}
	if build == "" {
		t.Fatalf("no RUN ... go build ... ./cmd/shade-peer line in %q", lines)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-s -w", "-X main.version="} {
		if !strings.Contains(build, want) {
			t.Errorf("the build line lacks %s: %s", want, build)
		}
	}

	var froms []string
	var user, expose string
	for _, l := range lines {
		switch f := strings.Fields(l); f[0] {
		case "FROM":
			froms = append(froms, f[1])
		case "USER":
			user = f[1]
		case "EXPOSE":
			expose = strings.Join(f[1:], " ")
		}
	}
	if len(froms) < 2 || !strings.HasPrefix(froms[0], "golang:1.26") {
		t.Errorf("stages %v: want a golang:1.26 build stage, then the image", froms)
	}
	if last := froms[len(froms)-1]; last != "scratch" && !strings.Contains(last, "distroless/static") {
		t.Errorf("final image %s: want distroless/static or scratch", last)
	}
	if user == "" || user == "root" || strings.HasPrefix(user, "0") {
		t.Errorf("USER %q: want a non-root user", user)
	}
	for _, p := range []string{"7946/tcp", "7946/udp", "7947/udp", "9746/tcp"} {
		if !strings.Contains(" "+expose+" ", " "+p+" ") {
			t.Errorf("EXPOSE %s lacks %s", expose, p)
		}
	}
}

// The static build needs no cgo: with CGO_ENABLED=0 every package
// shade-peer imports still has Go files to build. (go list reads, it does
// not compile: a CGO_ENABLED=0 build recompiles everything.) And main has
// the version variable -X sets.
func TestBuildsWithoutCgo(t *testing.T) {
	cmd := exec.Command("go", "list", "-e", "-deps",
		"-f", "{{.ImportPath}}{{if .Error}}: {{.Error}}{{end}}", "github.com/shade-mesh/shade/cmd/shade-peer")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("CGO_ENABLED=0 go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(line, ": ") {
			t.Errorf("without cgo: %s", line)
		}
	}

	main := filepath.Join("..", "..", "cmd", "shade-peer", "main.go")
	f, err := parser.ParseFile(token.NewFileSet(), main, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					found = found || n.Name == "version"
				}
			}
		}
	}
	if !found {
		t.Errorf("%s has no package-level var version for -X main.version", main)
	}
}
