package peer

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestNewCAAndIssueNode(t *testing.T) {
	caPEM, caKeyPEM, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := IssueNode(caPEM, caKeyPEM, "node-1", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Subject.CommonName != "node-1" || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "node-1" || leaf.IsCA {
		t.Fatalf("leaf: CN %q, DNS %q, CA %v", leaf.Subject.CommonName, leaf.DNSNames, leaf.IsCA)
	}
	if len(leaf.ExtKeyUsage) != 2 {
		t.Fatalf("ext key usage %v, want server and client auth", leaf.ExtKeyUsage)
	}
	// Capped at the CA's expiry.
	block, _ = pem.Decode(caPEM)
	ca, _ := x509.ParseCertificate(block.Bytes)
	if leaf.NotAfter.After(ca.NotAfter) {
		t.Fatalf("node certificate outlives its CA: %v > %v", leaf.NotAfter, ca.NotAfter)
	}
	if !strings.Contains(string(keyPEM), "PRIVATE KEY") {
		t.Fatal("key is not PEM")
	}
	for _, bad := range []string{"", "a/b", "../x", "127.0.0.1", "::1", "-x", "a..b", "a b", strings.Repeat("x", 64)} {
		if _, _, err := IssueNode(caPEM, caKeyPEM, bad, time.Hour); err == nil {
			t.Errorf("IssueNode accepted the name %q", bad)
		}
	}
	if _, _, err := IssueNode(certPEM, keyPEM, "node-2", time.Hour); err == nil {
		t.Error("a node certificate issued another")
	}
	_, otherKey, _ := NewCA("other", time.Hour)
	if _, _, err := IssueNode(caPEM, otherKey, "node-2", time.Hour); err == nil {
		t.Error("IssueNode accepted a key that is not the CA's")
	}
}

// writeNode writes a node's certificate and key issued by the CA in dir
// with the given validity, and returns their paths.
func writeNode(t *testing.T, dir, node string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	caPEM, caKeyPEM := readCA(t, dir)
	ca, caKey, err := parseCA(caPEM, caKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := issueNode(ca, caKey, node, notBefore, notAfter)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(t.TempDir(), node+".pem"), filepath.Join(t.TempDir(), node+"-key.pem")
	os.WriteFile(certFile, certPEM, 0o644)
	os.WriteFile(keyFile, keyPEM, 0o600)
	return certFile, keyFile
}

func TestLoadTLS(t *testing.T) {
	dir, otherDir := t.TempDir(), t.TempDir()
	if _, err := DevTLS(dir, "node-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := DevTLS(otherDir, "node-o"); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, CACertFile)
	node := func(d, n string) (string, string) { return filepath.Join(d, n+".pem"), filepath.Join(d, n+"-key.pem") }

	cert, key := node(dir, "node-a")
	tc, err := LoadTLS(ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if tc.Name() != "node-a" || time.Until(tc.NotAfter()) < 300*24*time.Hour {
		t.Fatalf("name %q, expires %v", tc.Name(), tc.NotAfter())
	}

	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	os.WriteFile(garbage, []byte("not a certificate\n"), 0o644)
	now := time.Now()
	expiredCert, expiredKey := writeNode(t, dir, "node-x", now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	futureCert, futureKey := writeNode(t, dir, "node-f", now.Add(24*time.Hour), now.Add(48*time.Hour))
	otherCert, otherKey := node(otherDir, "node-o")
	_, keyB := node(otherDir, "node-o")

	for _, tc := range []struct {
		name          string
		ca, cert, key string
		want          string
		wantNotExist  bool
	}{
		{name: "missing CA", ca: filepath.Join(dir, "nope.pem"), cert: cert, key: key, want: "nope.pem", wantNotExist: true},
		{name: "missing cert", ca: ca, cert: filepath.Join(dir, "nope.pem"), key: key, want: "nope.pem", wantNotExist: true},
		{name: "missing key", ca: ca, cert: cert, key: filepath.Join(dir, "nope.pem"), want: "nope.pem", wantNotExist: true},
		{name: "CA not PEM", ca: garbage, cert: cert, key: key, want: "not PEM"},
		{name: "cert not PEM", ca: ca, cert: garbage, key: key, want: "not PEM"},
		{name: "key not PEM", ca: ca, cert: cert, key: garbage, want: "not PEM"},
		{name: "other CA", ca: ca, cert: otherCert, key: otherKey, want: "not signed by the cluster CA"},
		{name: "expired", ca: ca, cert: expiredCert, key: expiredKey, want: "expired"},
		{name: "not yet valid", ca: ca, cert: futureCert, key: futureKey, want: "not valid before"},
		{name: "key of another node", ca: ca, cert: cert, key: keyB, want: "private key does not match"},
		{name: "CA file holds a node certificate", ca: cert, cert: cert, key: key, want: "not a CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadTLS(tc.ca, tc.cert, tc.key)
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if tc.wantNotExist != errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("err = %v; errors.Is(fs.ErrNotExist) = %v", err, !tc.wantNotExist)
			}
		})
	}
}

func TestDevTLSConcurrentPeersAgreeOnOneCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	const peers = 8
	tcs := make([]*TLSConfig, peers)
	errs := make([]error, peers)
	var wg sync.WaitGroup
	for i := range peers {
		wg.Go(func() { tcs[i], errs[i] = DevTLS(dir, fmt.Sprintf("node-%d", i)) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("DevTLS %d: %v", i, err)
		}
	}
	for i, tc := range tcs[1:] {
		if !tc.roots.Equal(tcs[0].roots) {
			t.Fatalf("peer %d got another CA", i+1)
		}
	}
	for _, f := range []string{CAKeyFile, "node-3-key.pem"} {
		info, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %v, want 0600", f, info.Mode().Perm())
		}
	}
	// A restarted peer reuses its certificate (and so its reset key).
	again, err := DevTLS(dir, "node-3")
	if err != nil {
		t.Fatal(err)
	}
	if again.cert.Leaf.SerialNumber.Cmp(tcs[3].cert.Leaf.SerialNumber) != 0 || again.resetKey != tcs[3].resetKey {
		t.Fatal("DevTLS reissued a valid certificate")
	}
	if _, err := DevTLS(dir, "bad/name"); err == nil {
		t.Fatal("DevTLS accepted a bad name")
	}
}
