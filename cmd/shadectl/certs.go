package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/shade-mesh/shade/internal/atomicfile"
	"github.com/shade-mesh/shade/transport/peer"
)

// runCerts runs "shadectl certs <subcommand> ...".
func runCerts(args []string, stdout, stderr io.Writer) error {
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "usage: shadectl certs <subcommand> [flags]")
		fmt.Fprintln(w, "\nsubcommands:")
		fmt.Fprintln(w, "  init --dir DIR [--valid 87600h] [--force]          make a cluster CA: DIR/ca.pem, DIR/ca-key.pem")
		fmt.Fprintln(w, "  issue NAME... --dir DIR [--valid 8760h] [--force]  issue node certificates signed by it: DIR/NAME.pem, DIR/NAME-key.pem")
	}
	if len(args) == 0 {
		usage(stderr)
		return errors.New("missing subcommand")
	}
	switch args[0] {
	case "init":
		return runCertsInit(args[1:], stdout, stderr)
	case "issue":
		return runCertsIssue(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		usage(stdout)
		return nil
	default:
		usage(stderr)
		return fmt.Errorf("unknown subcommand %q", args[0])
	}
}

func runCertsInit(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shadectl certs init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "folder to write ca.pem and ca-key.pem into (required; created with mode 0700)")
	valid := fs.Duration("valid", 87600*time.Hour, "how long the CA is valid")
	name := fs.String("name", "Shade cluster CA", "the CA's common name")
	force := fs.Bool("force", false, "replace an existing CA (nodes holding certificates from the old one are no longer trusted)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: shadectl certs init --dir DIR [--valid 87600h] [--name NAME] [--force]")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(err)
	}
	if len(pos) > 0 {
		return fmt.Errorf("init: unexpected argument %q", pos[0])
	}
	if *dir == "" {
		fs.Usage()
		return errors.New("init: --dir is required")
	}
	certFile, keyFile := filepath.Join(*dir, peer.CACertFile), filepath.Join(*dir, peer.CAKeyFile)
	if !*force {
		if err := refuseExisting(certFile, keyFile); err != nil {
			return fmt.Errorf("init: %w", err)
		}
	}
	certPEM, keyPEM, err := peer.NewCA(*name, *valid)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	// The key first: a ca.pem is never there without its key.
	if err := writePEMFile(keyFile, keyPEM, 0o600, *force); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if err := writePEMFile(certFile, certPEM, 0o644, *force); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s and %s: CA %q, valid until %s\n", certFile, keyFile, *name, notAfter(certPEM))
	return nil
}

func runCertsIssue(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shadectl certs issue", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "folder holding the CA (ca.pem, ca-key.pem); the node files go there too (required)")
	valid := fs.Duration("valid", 8760*time.Hour, "how long each certificate is valid (never past the CA)")
	force := fs.Bool("force", false, "replace a node's existing certificate and key")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: shadectl certs issue NAME... --dir DIR [--valid 8760h] [--force]")
		fmt.Fprintln(fs.Output(), "NAME is the node's name (its certificate's CN and DNS name): letters, digits, '-', '_', '.'.")
		fs.PrintDefaults()
	}
	names, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(err)
	}
	if *dir == "" || len(names) == 0 {
		fs.Usage()
		if *dir == "" {
			return errors.New("issue: --dir is required")
		}
		return errors.New("issue: missing node NAME")
	}
	caPEM, err := os.ReadFile(filepath.Join(*dir, peer.CACertFile))
	if err != nil {
		return fmt.Errorf("issue: CA certificate (run 'shadectl certs init --dir %s' first?): %w", *dir, err)
	}
	caKeyPEM, err := os.ReadFile(filepath.Join(*dir, peer.CAKeyFile))
	if err != nil {
		return fmt.Errorf("issue: CA key: %w", err)
	}
	nodeFiles := func(name string) (certFile, keyFile string) {
		return filepath.Join(*dir, name+".pem"), filepath.Join(*dir, name+"-key.pem")
	}
	// Issue every certificate before writing any, so that a bad name or an
	// existing file leaves the folder as it was.
	certs := make([][2][]byte, len(names))
	for i, name := range names {
		if !*force {
			if err := refuseExisting(nodeFiles(name)); err != nil {
				return fmt.Errorf("issue: %w", err)
			}
		}
		certPEM, keyPEM, err := peer.IssueNode(caPEM, caKeyPEM, name, *valid)
		if err != nil {
			return fmt.Errorf("issue: %w", err)
		}
		certs[i] = [2][]byte{certPEM, keyPEM}
	}
	for i, name := range names {
		certFile, keyFile := nodeFiles(name)
		certPEM, keyPEM := certs[i][0], certs[i][1]
		if err := writePEMFile(keyFile, keyPEM, 0o600, *force); err != nil {
			return fmt.Errorf("issue: %w", err)
		}
		if err := writePEMFile(certFile, certPEM, 0o644, *force); err != nil {
			return fmt.Errorf("issue: %w", err)
		}
		fmt.Fprintf(stdout, "wrote %s and %s: node %q, valid until %s\n", certFile, keyFile, name, notAfter(certPEM))
	}
	return nil
}

// refuseExisting fails if any of paths exists.
func refuseExisting(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s exists (use --force to replace it)", p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// writePEMFile writes data to path with mode perm. Without replace it
// creates the file exclusively; with replace it writes a temporary file and
// renames it over path, so that path never holds half a key.
func writePEMFile(path string, data []byte, perm os.FileMode, replace bool) error {
	if !replace {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists (use --force to replace it)", path)
		}
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
		}
		return err
	}
	return atomicfile.Write(path, data, perm)
}

// notAfter formats the expiry of the certificate in certPEM.
func notAfter(certPEM []byte) string {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return "?"
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "?"
	}
	return c.NotAfter.UTC().Format(time.RFC3339)
}
