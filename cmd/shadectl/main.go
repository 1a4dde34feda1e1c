// Command shadectl is the operator's tool for a Shade mesh: dataset
// preparation, cache-policy simulation and, later, cluster introspection.
package main

import (
	"fmt"
	"io"
	"os"
)

// command is one shadectl subcommand. run gets the arguments after the
// subcommand's name and writes its report to stdout, progress to stderr.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"certs", "make a cluster CA and node certificates: init, issue", runCerts},
		{"dataset", "prepare datasets: import-idx, index", runDataset},
		{"members", "list the mesh's members as a peer sees them", runMembers},
		{"ring", "show which peers own a key", runRing},
		{"scale", "simulate a large mesh in one process: moves on churn, load spread, leader cost", runScale},
		{"sim", "replay an access trace through every cache policy", runSim},
		{"status", "members, leader, ring shares, cache and hit ratios of peers", runStatus},
		{"warm", "preload a dataset into peers' caches, most important first", runWarm},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: shadectl <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'shadectl <command> --help' for a command's flags.")
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			if err := c.run(args[1:], stdout, stderr); err != nil {
				fmt.Fprintf(stderr, "shadectl %s: %v\n", c.name, err)
				return 1
			}
			return 0
		}
	}
	fmt.Fprintf(stderr, "shadectl: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}
