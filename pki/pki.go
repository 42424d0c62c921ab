// Package pki is llmgw's small certificate authority. Agents prove who they
// are with a client certificate whose common name is the node id; the
// control plane (and the mirror's management port) present a server
// certificate naming every address clients dial. A public CA cannot issue
// these (clientAuth is no longer offered), so llmgw runs its own.
//
// Keys are ECDSA P-256 and are written PKCS#8-encoded with mode 0600;
// certificates are written 0644. Every write goes to a temporary file in the
// same directory first and is renamed into place, so a reader never sees a
// half-written file.
//
// Files:
//
//	<ca dir>/ca.pem, ca-key.pem          InitCA
//	<out>/server.pem, server-key.pem     IssueServer (fixed names, whatever the server's name)
//	<out>/<node>.pem, <node>-key.pem     IssueNode
//
// The Sign* functions do the same in memory and return PEM bytes, for
// callers (the Terraform provider) that hold the CA without files.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// File names written by InitCA and IssueServer.
const (
	CACertFile      = "ca.pem"
	CAKeyFile       = "ca-key.pem"
	ServerCertFile  = "server.pem"
	ServerKeyFile   = "server-key.pem"
	nodeKeySuffix   = "-key.pem"
	certFileMode    = 0o644
	keyFileMode     = 0o600
	caDirMode       = 0o700
	outDirMode      = 0o755
	defaultCAName   = "llmgw CA"
	clockSkewMargin = 5 * time.Minute
)

// Default validities.
const (
	DefaultCAValidity     = 10 * 365 * 24 * time.Hour
	DefaultServerValidity = 365 * 24 * time.Hour
	DefaultNodeValidity   = 365 * 24 * time.Hour
)

// ErrCAExists is returned by InitCA when the directory already holds a CA
// and CAOptions.Force is not set.
var ErrCAExists = errors.New("a CA already exists")

// CAOptions configure InitCA and NewCA.
type CAOptions struct {
	// CommonName of the CA certificate; "llmgw CA" when empty.
	CommonName string
	// Validity of the CA certificate; DefaultCAValidity when zero.
	Validity time.Duration
	// Force replaces an existing CA. Every certificate the old CA issued
	// stops verifying against the new one.
	Force bool
}

// nodeNamePattern is what a node id (and so a certificate CN and a file
// name) may look like: hostname-like, at most 64 characters (the X.509
// upper bound for a common name).
var nodeNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidNodeName reports whether node can be a node id: letters, digits, '.',
// '_' and '-', starting with a letter or digit, at most 64 characters.
func ValidNodeName(node string) error {
	if !nodeNamePattern.MatchString(node) || strings.Contains(node, "..") {
		return fmt.Errorf("node id %q is not valid: use letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64 characters", node)
	}
	return nil
}

// NewCA creates a self-signed CA in memory and returns its certificate and
// key as PEM. opts.Force is ignored.
func NewCA(opts CAOptions) (certPEM, keyPEM []byte, err error) {
	if opts.Validity < 0 {
		return nil, nil, fmt.Errorf("creating CA: validity %s is negative", opts.Validity)
	}
	if opts.Validity == 0 {
		opts.Validity = DefaultCAValidity
	}
	if opts.CommonName == "" {
		opts.CommonName = defaultCAName
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("creating CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	skid, err := subjectKeyID(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: opts.CommonName, Organization: []string{"llmgw"}},
		NotBefore:             now.Add(-clockSkewMargin),
		NotAfter:              now.Add(opts.Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          skid,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing CA certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// InitCA creates a CA in dir (created 0700 if missing) as ca.pem and
// ca-key.pem (0600). It refuses, with an error wrapping ErrCAExists, when
// either file exists, unless opts.Force is set.
func InitCA(dir string, opts CAOptions) (certPath, keyPath string, err error) {
	certPath, keyPath = filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	if !opts.Force {
		for _, p := range []string{certPath, keyPath} {
			if _, err := os.Stat(p); err == nil {
				return "", "", fmt.Errorf("initialising CA in %s: %w (%s); refusing to overwrite it, because every certificate it issued would stop verifying; use force to replace it", dir, ErrCAExists, p)
			} else if !errors.Is(err, os.ErrNotExist) {
				return "", "", fmt.Errorf("initialising CA in %s: checking %s: %w", dir, p, err)
			}
		}
	}
	certPEM, keyPEM, err := NewCA(opts)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, caDirMode); err != nil {
		return "", "", fmt.Errorf("creating CA directory %s: %w", dir, err)
	}
	if err := writeFileAtomic(keyPath, keyPEM, keyFileMode); err != nil {
		return "", "", err
	}
	if err := writeFileAtomic(certPath, certPEM, certFileMode); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// LoadCA reads ca.pem and ca-key.pem from dir.
func LoadCA(dir string) (certPEM, keyPEM []byte, err error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	if certPEM, err = os.ReadFile(certPath); err != nil {
		return nil, nil, fmt.Errorf("reading CA certificate: %w", err)
	}
	if keyPEM, err = os.ReadFile(keyPath); err != nil {
		return nil, nil, fmt.Errorf("reading CA key: %w", err)
	}
	return certPEM, keyPEM, nil
}

// SignServer issues a server certificate signed by the CA. name becomes the
// common name; every host becomes a subject alternative name (IP addresses
// as IP SANs, everything else as DNS names), because TLS clients verify
// SANs only. The certificate carries the serverAuth usage. validity zero
// means DefaultServerValidity; it never extends past the CA's own expiry.
func SignServer(caCertPEM, caKeyPEM []byte, name string, hosts []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if strings.TrimSpace(name) == "" {
		return nil, nil, errors.New("issuing server certificate: the name is empty")
	}
	dnsNames, ips, err := splitHosts(hosts)
	if err != nil {
		return nil, nil, fmt.Errorf("issuing server certificate %q: %w", name, err)
	}
	if validity == 0 {
		validity = DefaultServerValidity
	}
	certPEM, keyPEM, err = sign(caCertPEM, caKeyPEM, leaf{
		cn:       name,
		dnsNames: dnsNames,
		ips:      ips,
		usage:    x509.ExtKeyUsageServerAuth,
		validity: validity,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("issuing server certificate %q: %w", name, err)
	}
	return certPEM, keyPEM, nil
}

// SignNode issues a node's client certificate signed by the CA: the common
// name is the node id and the certificate carries the clientAuth usage.
// validity zero means DefaultNodeValidity; it never extends past the CA's
// own expiry.
func SignNode(caCertPEM, caKeyPEM []byte, node string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if err := ValidNodeName(node); err != nil {
		return nil, nil, fmt.Errorf("issuing node certificate: %w", err)
	}
	if validity == 0 {
		validity = DefaultNodeValidity
	}
	certPEM, keyPEM, err = sign(caCertPEM, caKeyPEM, leaf{
		cn:       node,
		usage:    x509.ExtKeyUsageClientAuth,
		validity: validity,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("issuing node certificate %q: %w", node, err)
	}
	return certPEM, keyPEM, nil
}

// IssueServer signs a server certificate with the CA in caDir (see
// SignServer) and writes it to outDir as server.pem and server-key.pem
// (0600), replacing any previous ones. The file names are fixed so that a
// configuration naming them survives reissuing with another name.
func IssueServer(caDir, name string, hosts []string, outDir string, validity time.Duration) (certPath, keyPath string, err error) {
	caCert, caKey, err := LoadCA(caDir)
	if err != nil {
		return "", "", fmt.Errorf("issuing server certificate %q: %w", name, err)
	}
	certPEM, keyPEM, err := SignServer(caCert, caKey, name, hosts, validity)
	if err != nil {
		return "", "", err
	}
	return writePair(outDir, ServerCertFile, ServerKeyFile, certPEM, keyPEM)
}

// IssueNode signs a node certificate with the CA in caDir (see SignNode) and
// writes it to outDir as <node>.pem and <node>-key.pem (0600), replacing
// any previous ones.
func IssueNode(caDir, node string, outDir string, validity time.Duration) (certPath, keyPath string, err error) {
	if err := ValidNodeName(node); err != nil {
		return "", "", fmt.Errorf("issuing node certificate: %w", err)
	}
	caCert, caKey, err := LoadCA(caDir)
	if err != nil {
		return "", "", fmt.Errorf("issuing node certificate %q: %w", node, err)
	}
	certPEM, keyPEM, err := SignNode(caCert, caKey, node, validity)
	if err != nil {
		return "", "", err
	}
	return writePair(outDir, node+".pem", node+nodeKeySuffix, certPEM, keyPEM)
}

// leaf describes a certificate to issue.
type leaf struct {
	cn       string
	dnsNames []string
	ips      []net.IP
	usage    x509.ExtKeyUsage
	validity time.Duration
}

func sign(caCertPEM, caKeyPEM []byte, l leaf) (certPEM, keyPEM []byte, err error) {
	if l.validity < 0 {
		return nil, nil, fmt.Errorf("validity %s is negative", l.validity)
	}
	caCert, caKey, err := parseCA(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("creating key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	skid, err := subjectKeyID(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	notAfter := now.Add(l.validity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, nil, fmt.Errorf("the CA expired at %s; create a new one", caCert.NotAfter.Format(time.RFC3339))
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: l.cn, Organization: []string{"llmgw"}},
		NotBefore:             now.Add(-clockSkewMargin),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{l.usage},
		BasicConstraintsValid: true,
		DNSNames:              l.dnsNames,
		IPAddresses:           l.ips,
		SubjectKeyId:          skid,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// parseCA parses and checks a CA certificate and its key.
func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("reading CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, nil, fmt.Errorf("certificate %q is not a CA certificate", cert.Subject.CommonName)
	}
	key, err := ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("reading CA key: %w", err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, nil, fmt.Errorf("the CA key does not belong to CA certificate %q", cert.Subject.CommonName)
	}
	return cert, key, nil
}

// ParseCertificate parses the first CERTIFICATE block in PEM data.
func ParseCertificate(certPEM []byte) (*x509.Certificate, error) {
	rest := certPEM
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no CERTIFICATE PEM block found")
		}
		if block.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parsing certificate: %w", err)
			}
			return c, nil
		}
	}
}

// ParsePrivateKey parses a PEM private key: PKCS#8 ("PRIVATE KEY"), SEC 1
// ("EC PRIVATE KEY") or PKCS#1 ("RSA PRIVATE KEY").
func ParsePrivateKey(keyPEM []byte) (crypto.Signer, error) {
	rest := keyPEM
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no private key PEM block found")
		}
		var key any
		var err error
		switch block.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", strings.ToLower(block.Type), err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("a %T cannot sign", key)
		}
		switch signer.(type) {
		case *ecdsa.PrivateKey, *rsa.PrivateKey:
		default:
			return nil, fmt.Errorf("unsupported key type %T: use ECDSA or RSA", key)
		}
		return signer, nil
	}
}

// splitHosts sorts hosts into DNS names and IP addresses, dropping
// duplicates. At least one host is required.
func splitHosts(hosts []string) (dnsNames []string, ips []net.IP, err error) {
	seen := map[string]bool{}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, nil, errors.New("a host is empty")
		}
		if seen[strings.ToLower(h)] {
			continue
		}
		seen[strings.ToLower(h)] = true
		if ip := net.ParseIP(strings.Trim(h, "[]")); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if strings.ContainsAny(h, ":/ @") {
			return nil, nil, fmt.Errorf("host %q is not a bare DNS name or IP address (no scheme, port or path)", h)
		}
		dnsNames = append(dnsNames, h)
	}
	if len(dnsNames) == 0 && len(ips) == 0 {
		return nil, nil, errors.New("no hosts given: name every address clients dial (IPs included), since clients verify only subject alternative names")
	}
	return dnsNames, ips, nil
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("creating serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil // never zero
}

// subjectKeyID is the RFC 5280 method 1 key identifier.
func subjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encoding public key: %w", err)
	}
	sum := sha1.Sum(der) //nolint:gosec // RFC 5280 key identifier, not a security function
	return sum[:], nil
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func writePair(outDir, certName, keyName string, certPEM, keyPEM []byte) (certPath, keyPath string, err error) {
	if err := os.MkdirAll(outDir, outDirMode); err != nil {
		return "", "", fmt.Errorf("creating output directory %s: %w", outDir, err)
	}
	certPath, keyPath = filepath.Join(outDir, certName), filepath.Join(outDir, keyName)
	if err := writeFileAtomic(keyPath, keyPEM, keyFileMode); err != nil {
		return "", "", err
	}
	if err := writeFileAtomic(certPath, certPEM, certFileMode); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// writeFileAtomic writes data to path with mode via a temporary file in the
// same directory and a rename. The temporary file is created 0600, so key
// bytes are never readable by others even briefly.
func writeFileAtomic(path string, data []byte, mode os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(mode); err != nil {
		_ = f.Close()
		return fmt.Errorf("setting mode of %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("installing %s: %w", path, err)
	}
	return nil
}
