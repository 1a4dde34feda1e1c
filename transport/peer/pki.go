package peer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/shade-mesh/shade/internal/atomicfile"
)

// Files of a cluster CA folder, as DevTLS and "shadectl certs" write them. A
// node's certificate and key are NAME.pem and NAME-key.pem beside them.
const (
	CACertFile = "ca.pem"
	CAKeyFile  = "ca-key.pem"
)

// Validity of what DevTLS creates.
const (
	devCAValidity   = 10 * 365 * 24 * time.Hour
	devNodeValidity = 365 * 24 * time.Hour
)

// clockSkew backdates NotBefore so that a certificate is valid at once on
// nodes whose clocks lag a little.
const clockSkew = 5 * time.Minute

// TLSConfig is a node's identity in the mesh: the cluster CA that every peer
// certificate must chain to, and this node's certificate and key. Build it
// with LoadTLS or DevTLS. It is immutable and safe to share.
type TLSConfig struct {
	name  string
	cert  tls.Certificate
	roots *x509.CertPool
	// resetKey seeds QUIC stateless resets. It is derived from the node's
	// private key, so that a restarted node can reset the connections of
	// its previous run and peers notice at once rather than at idle timeout.
	resetKey [32]byte
}

// Name is this node's name: its certificate's CN.
func (t *TLSConfig) Name() string { return t.name }

// NotAfter is when this node's certificate expires.
func (t *TLSConfig) NotAfter() time.Time { return t.cert.Leaf.NotAfter }

// serverConfig accepts any node whose certificate chains to the cluster CA.
func (t *TLSConfig) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{t.cert},
		ClientAuth:             tls.RequireAndVerifyClientCert,
		ClientCAs:              t.roots,
		NextProtos:             []string{ALPN},
		SessionTicketsDisabled: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := peerName(cs)
			return err
		},
	}
}

// clientConfig accepts only the node named want. crypto/tls verifies the
// chain to the cluster CA, the ServerAuth usage and that want is one of the
// certificate's DNS names; VerifyConnection then requires the CN, which is
// the identity handlers see, to be want too.
func (t *TLSConfig) clientConfig(want string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{t.cert},
		RootCAs:      t.roots,
		ServerName:   want,
		NextProtos:   []string{ALPN},
		VerifyConnection: func(cs tls.ConnectionState) error {
			name, err := peerName(cs)
			if err != nil {
				return err
			}
			if name != want {
				return fmt.Errorf("%w: certificate is for %q, want %q", ErrWrongPeer, name, want)
			}
			return nil
		},
	}
}

// peerName is the node name of a verified peer: the CN of its leaf
// certificate, which must be a valid node name and also one of its DNS names.
func peerName(cs tls.ConnectionState) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", errors.New("peer: no peer certificate")
	}
	leaf := cs.PeerCertificates[0]
	name := leaf.Subject.CommonName
	if err := checkNodeName(name); err != nil {
		return "", err
	}
	if !slices.Contains(leaf.DNSNames, name) {
		return "", fmt.Errorf("peer: certificate CN %q is not among its DNS names", name)
	}
	return name, nil
}

// checkNodeName accepts names that are also valid certificate DNS names:
// dot-separated labels of letters, digits, '-' and '_', not an IP address.
func checkNodeName(name string) error {
	bad := func(why string) error { return fmt.Errorf("peer: bad node name %q: %s", name, why) }
	if name == "" {
		return bad("empty")
	}
	if len(name) > 253 {
		return bad("longer than 253 bytes")
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return bad("an IP address")
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return bad("labels must be 1 to 63 bytes")
		}
		if label[0] == '-' {
			return bad("a label starts with '-'")
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return bad("only letters, digits, '-', '_' and '.' are allowed")
			}
		}
	}
	return nil
}

// NewCA creates a self-signed cluster CA named name, valid from now (less a
// few minutes for clock skew) for validFor, with an ECDSA P-256 key. It
// returns the certificate and the PKCS #8 key in PEM.
func NewCA(name string, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	if name == "" {
		return nil, nil, errors.New("peer: empty CA name")
	}
	if validFor <= 0 {
		return nil, nil, fmt.Errorf("peer: CA validity %v is not positive", validFor)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Shade"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("peer: create CA certificate: %w", err)
	}
	return encodePair(der, key)
}

// IssueNode issues the certificate of the node named node, signed by the CA
// given in PEM: CN and DNS name node, usable to serve and to dial (ServerAuth
// and ClientAuth), valid for validFor but not past the CA, with a fresh ECDSA
// P-256 key. It returns the certificate and the PKCS #8 key in PEM.
func IssueNode(caCertPEM, caKeyPEM []byte, node string, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	ca, caKey, err := parseCA(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, err
	}
	if validFor <= 0 {
		return nil, nil, fmt.Errorf("peer: certificate validity %v is not positive", validFor)
	}
	now := time.Now()
	if now.After(ca.NotAfter) {
		return nil, nil, fmt.Errorf("peer: CA %q expired at %s", ca.Subject.CommonName, ca.NotAfter.Format(time.RFC3339))
	}
	notAfter := now.Add(validFor)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	return issueNode(ca, caKey, node, now.Add(-clockSkew), notAfter)
}

func issueNode(ca *x509.Certificate, caKey crypto.Signer, node string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	if err := checkNodeName(node); err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: node, Organization: []string{"Shade"}},
		DNSNames:              []string{node},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("peer: issue certificate for %q: %w", node, err)
	}
	return encodePair(der, key)
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

func encodePair(der []byte, key *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM, nil
}

// parseCA parses a CA certificate and its key, and checks that they match
// and that the certificate is a CA.
func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	certs, err := parseCerts(certPEM, "CA certificate")
	if err != nil {
		return nil, nil, err
	}
	ca := certs[0]
	if !ca.IsCA {
		return nil, nil, fmt.Errorf("peer: certificate %q is not a CA", ca.Subject.CommonName)
	}
	key, err := parseKey(keyPEM, "CA key")
	if err != nil {
		return nil, nil, err
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(ca.PublicKey) {
		return nil, nil, errors.New("peer: CA key does not match the CA certificate")
	}
	return ca, key, nil
}

// parseCerts parses every CERTIFICATE block of b; what names b in errors.
func parseCerts(b []byte, what string) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("peer: %s: %w", what, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("peer: %s: not PEM (no CERTIFICATE block)", what)
	}
	return certs, nil
}

func parseKey(b []byte, what string) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, fmt.Errorf("peer: %s: not PEM (no PRIVATE KEY block)", what)
		}
		var key any
		var err error
		switch block.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("peer: %s: %w", what, err)
		}
		s, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("peer: %s: unsupported key type %T", what, key)
		}
		return s, nil
	}
}

// LoadTLS reads a node's identity from PEM files: the cluster CA
// certificate(s), the node's certificate (optionally followed by
// intermediates) and its key. It checks that the key matches, that the
// certificate is within its validity, chains to the CA for both serving and
// dialing, and carries a valid node name as CN and DNS name.
func LoadTLS(caFile, certFile, keyFile string) (*TLSConfig, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("peer: CA certificate: %w", err)
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("peer: node certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("peer: node key: %w", err)
	}
	return newTLSConfig(caPEM, certPEM, keyPEM, [3]string{caFile, certFile, keyFile}, time.Now())
}

// newTLSConfig checks a node's identity at time now; src names the three
// inputs in errors.
func newTLSConfig(caPEM, certPEM, keyPEM []byte, src [3]string, now time.Time) (*TLSConfig, error) {
	cas, err := parseCerts(caPEM, "CA certificate "+src[0])
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	valid := 0
	for _, ca := range cas {
		if !ca.IsCA {
			return nil, fmt.Errorf("peer: %s: certificate %q is not a CA", src[0], ca.Subject.CommonName)
		}
		if !now.After(ca.NotAfter) {
			valid++
		}
		roots.AddCert(ca)
	}
	if valid == 0 {
		return nil, fmt.Errorf("peer: %s: CA %q expired at %s", src[0], cas[0].Subject.CommonName, cas[0].NotAfter.Format(time.RFC3339))
	}
	chain, err := parseCerts(certPEM, "node certificate "+src[1])
	if err != nil {
		return nil, err
	}
	if _, err := parseKey(keyPEM, "node key "+src[2]); err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("peer: %s and %s: %w", src[1], src[2], err)
	}
	leaf := chain[0]
	cert.Leaf = leaf
	name := leaf.Subject.CommonName
	if now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("peer: %s: certificate for %q expired at %s", src[1], name, leaf.NotAfter.Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return nil, fmt.Errorf("peer: %s: certificate for %q is not valid before %s", src[1], name, leaf.NotBefore.Format(time.RFC3339))
	}
	if err := checkNodeName(name); err != nil {
		return nil, fmt.Errorf("peer: %s: %w", src[1], err)
	}
	if !slices.Contains(leaf.DNSNames, name) {
		return nil, fmt.Errorf("peer: %s: CN %q is not among the certificate's DNS names %q", src[1], name, leaf.DNSNames)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		_, err := leaf.Verify(x509.VerifyOptions{
			Roots:         roots,
			Intermediates: inter,
			CurrentTime:   now,
			KeyUsages:     []x509.ExtKeyUsage{usage},
		})
		var unknown x509.UnknownAuthorityError
		switch {
		case errors.As(err, &unknown):
			return nil, fmt.Errorf("peer: %s: certificate for %q is not signed by the cluster CA in %s", src[1], name, src[0])
		case err != nil:
			return nil, fmt.Errorf("peer: %s: certificate for %q does not verify against the CA in %s: %w", src[1], name, src[0], err)
		}
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("peer: %s: %w", src[2], err)
	}
	t := &TLSConfig{name: name, cert: cert, roots: roots}
	t.resetKey = sha256.Sum256(append([]byte("shade/1 stateless reset\x00"), keyDER...))
	return t, nil
}

// DevTLS sets up a node's identity for a cluster on one machine or a shared
// folder: it creates a CA in dir (ca.pem, and ca-key.pem with mode 0600) or
// reuses the one there, and issues node's certificate (NAME.pem,
// NAME-key.pem) or reuses it while it is valid and signed by that CA. A file
// lock makes concurrent callers (peers starting together) agree on one CA.
// Verification is never skipped: peers still check each other against the
// CA. The CA's key sits beside it, so this is for development only.
func DevTLS(dir, node string) (*TLSConfig, error) {
	if err := checkNodeName(node); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("peer: dev TLS: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("peer: dev TLS: lock %s: %w", dir, err)
	}
	defer unlock()

	caFile, caKeyFile := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certFile, keyFile := filepath.Join(dir, node+".pem"), filepath.Join(dir, node+"-key.pem")
	caPEM, err := os.ReadFile(caFile)
	var caKeyPEM []byte
	switch {
	case errors.Is(err, os.ErrNotExist):
		caPEM, caKeyPEM, err = NewCA("shade dev CA", devCAValidity)
		if err != nil {
			return nil, err
		}
		// The key first: a ca.pem always has its key beside it.
		if err := writeFileAtomic(caKeyFile, caKeyPEM, 0o600); err != nil {
			return nil, err
		}
		if err := writeFileAtomic(caFile, caPEM, 0o644); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("peer: dev TLS: %w", err)
	default:
		if caKeyPEM, err = os.ReadFile(caKeyFile); err != nil {
			return nil, fmt.Errorf("peer: dev TLS: CA key: %w", err)
		}
	}
	if _, _, err := parseCA(caPEM, caKeyPEM); err != nil {
		return nil, fmt.Errorf("peer: dev TLS in %s: %w", dir, err)
	}

	now := time.Now()
	src := [3]string{caFile, certFile, keyFile}
	certPEM, errC := os.ReadFile(certFile)
	keyPEM, errK := os.ReadFile(keyFile)
	if errC == nil && errK == nil {
		t, err := newTLSConfig(caPEM, certPEM, keyPEM, src, now)
		if err == nil && t.name == node && t.NotAfter().After(now.Add(24*time.Hour)) {
			return t, nil
		}
	}
	certPEM, keyPEM, err = IssueNode(caPEM, caKeyPEM, node, devNodeValidity)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(certFile, certPEM, 0o644); err != nil {
		return nil, err
	}
	return newTLSConfig(caPEM, certPEM, keyPEM, src, now)
}

// writeFileAtomic writes data to a temporary file beside path and renames it
// into place, so that readers see the old file or the new one, never a part.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := atomicfile.Write(path, data, perm); err != nil {
		return fmt.Errorf("peer: write %s: %w", path, err)
	}
	return nil
}
