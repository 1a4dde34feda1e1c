package testsupport

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BinDirEnv names the environment variable that points at binaries built
// beforehand (make build puts them in bin/); when it is set, Build builds
// nothing and uses them.
const BinDirEnv = "SHADE_BIN_DIR"

// Commands are the module's commands that Build builds by default.
var defaultCommands = []string{"shade-peer", "shadectl"}

// BuildOptions say what Build builds. The zero value builds shade-peer and
// shadectl without the race detector.
type BuildOptions struct {
	// Commands are names under cmd/; nil means shade-peer and shadectl.
	Commands []string
	// Race builds with -race (ignored when SHADE_BIN_DIR is set).
	Race bool
}

// Binaries are the commands built once for one test process. Build them in
// TestMain and Close them after m.Run.
type Binaries struct {
	// Dir holds one executable a command, named as the command.
	Dir   string
	owned bool // Dir is ours to remove
}

// Build builds the commands into a new temporary directory with go build,
// or, when SHADE_BIN_DIR is set, checks that they are there and uses them.
// It may take a minute; it writes the compiler's output to stderr.
func Build(o BuildOptions) (*Binaries, error) {
	cmds := o.Commands
	if cmds == nil {
		cmds = defaultCommands
	}
	if dir := os.Getenv(BinDirEnv); dir != "" {
		for _, c := range cmds {
			if _, err := os.Stat(filepath.Join(dir, c)); err != nil {
				return nil, fmt.Errorf("testsupport: %s=%s: %w", BinDirEnv, dir, err)
			}
		}
		return &Binaries{Dir: dir}, nil
	}
	dir, err := os.MkdirTemp("", "shade-test-bin-")
	if err != nil {
		return nil, err
	}
	args := []string{"build", "-o", dir + "/"}
	if o.Race {
		args = append(args, "-race")
	}
	for _, c := range cmds {
		args = append(args, "github.com/shade-mesh/shade/cmd/"+c)
	}
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testsupport: go build %v: %w", cmds, err)
	}
	return &Binaries{Dir: dir, owned: true}, nil
}

// MustBuild is Build for TestMain: on failure it prints the error and
// exits the test process with status 1.
func MustBuild(o BuildOptions) *Binaries {
	b, err := Build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return b
}

// Path returns the path of the named command's executable.
func (b *Binaries) Path(command string) string { return filepath.Join(b.Dir, command) }

// Close removes the binaries if Build built them (never SHADE_BIN_DIR).
func (b *Binaries) Close() error {
	if !b.owned {
		return nil
	}
	return os.RemoveAll(b.Dir)
}

// Main is a whole TestMain: it builds the binaries (MustBuild), stores
// them in *bins, runs the tests, removes what it built and exits with the
// tests' status.
func Main(m *testing.M, o BuildOptions, bins **Binaries) {
	b := MustBuild(o)
	*bins = b
	code := m.Run()
	b.Close()
	os.Exit(code)
}
