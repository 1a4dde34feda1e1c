package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shade-mesh/shade/transport/peer"
)

func certsRun(args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	err = runCerts(args, &o, &e)
	return o.String(), e.String(), err
}

func TestCertsInitAndIssue(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	out, _, err := certsRun("init", "--dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "ca.pem") {
		t.Fatalf("init printed %q", out)
	}
	info, err := os.Stat(filepath.Join(dir, peer.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("ca-key.pem has mode %v", info.Mode().Perm())
	}
	ca1, _ := os.ReadFile(filepath.Join(dir, peer.CACertFile))

	// An existing CA is kept unless --force.
	if _, _, err := certsRun("init", "--dir", dir); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second init: %v", err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, peer.CACertFile)); !bytes.Equal(again, ca1) {
		t.Fatal("refused init changed ca.pem")
	}
	if _, _, err := certsRun("init", "--dir", dir, "--force", "--valid", "1000h"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, peer.CACertFile)); bytes.Equal(again, ca1) {
		t.Fatal("init --force kept the old CA")
	}

	// NAME before or after the flags.
	if _, _, err := certsRun("issue", "node-1", "--dir", dir, "--valid", "2h"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := certsRun("issue", "--dir", dir, "node-2", "node-3"); err != nil {
		t.Fatal(err)
	}
	tc, err := peer.LoadTLS(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "node-1.pem"), filepath.Join(dir, "node-1-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if tc.Name() != "node-1" || time.Until(tc.NotAfter()) > 2*time.Hour {
		t.Fatalf("node-1: name %q, expires %v", tc.Name(), tc.NotAfter())
	}
	if _, err := peer.LoadTLS(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "node-3.pem"), filepath.Join(dir, "node-3-key.pem")); err != nil {
		t.Fatal(err)
	}
	info, err = os.Stat(filepath.Join(dir, "node-2-key.pem"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("node-2-key.pem: %v, %v", info, err)
	}
	if _, _, err := certsRun("issue", "node-1", "--dir", dir); err == nil {
		t.Fatal("issue overwrote node-1 without --force")
	}
	if _, _, err := certsRun("issue", "node-1", "--dir", dir, "--force"); err != nil {
		t.Fatal(err)
	}
}

func TestCertsErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{},
		{"bogus"},
		{"init"},
		{"init", "--dir", dir, "extra"},
		{"init", "--dir", dir, "--valid", "-1h"},
		{"issue", "node-1"},
		{"issue", "--dir", dir},
		{"issue", "node-1", "--dir", dir}, // no CA there
	} {
		if _, _, err := certsRun(args...); err == nil {
			t.Errorf("certs %q succeeded", args)
		}
	}
	if _, _, err := certsRun("init", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	if _, _, err := certsRun("issue", "good", "bad/name", "--dir", dir); err == nil {
		t.Fatal("issue accepted a bad name")
	}
	if _, err := os.Stat(filepath.Join(dir, "good.pem")); err == nil {
		t.Fatal("a failed issue wrote files")
	}
	if out, _, err := certsRun("help"); err != nil || !strings.Contains(out, "issue") {
		t.Fatalf("help: %q, %v", out, err)
	}
	if _, _, err := certsRun("init", "--help"); err != nil {
		t.Fatalf("init --help: %v", err)
	}
}
