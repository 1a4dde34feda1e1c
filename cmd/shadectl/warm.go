package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/shade-mesh/shade/client"
)

// runWarm asks peers to preload a dataset into their caches, the most
// important samples first (SHADE.WARM), and prints what each loaded.
func runWarm(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sockets := fs.String("sockets", defaultSocket, "peers' trainer sockets, comma-separated")
	password := fs.String("password", os.Getenv("SHADE_REQUIREPASS"), "the peers' --requirepass (default $SHADE_REQUIREPASS)")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long each peer may take")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: shadectl warm [--sockets a.sock,b.sock] DATASET\n\n"+
			"Preloads DATASET into each peer's share of the cache, the most important samples\n"+
			"first (by the merged scores the peer holds), until the cache is full.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("want one DATASET")
	}
	dataset := fs.Arg(0)
	var failed error
	for _, sock := range strings.Split(*sockets, ",") {
		sock = strings.TrimSpace(sock)
		c, err := client.New(client.Options{Socket: sock, Password: *password, RetryFor: time.Second})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		start := time.Now()
		n, err := c.Warm(ctx, dataset)
		cancel()
		c.Close()
		if err != nil {
			fmt.Fprintf(stdout, "%s: %v\n", sock, err)
			failed = errors.Join(failed, err)
			continue
		}
		fmt.Fprintf(stdout, "%s: %d samples of %s preloaded in %s\n", sock, n, dataset, time.Since(start).Round(time.Millisecond))
	}
	return failed
}
