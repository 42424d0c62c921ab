package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// testCA creates a CA in a temp dir and returns the dir.
func testCA(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	if _, _, err := InitCA(dir, CAOptions{}); err != nil {
		t.Fatalf("InitCA: %v", err)
	}
	return dir
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCertificate(data)
	if err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	return c
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s mode = %o, want %o", path, got, want)
	}
}

func caPool(t *testing.T, caDir string) *x509.CertPool {
	t.Helper()
	pool, err := LoadCertPool(filepath.Join(caDir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

func TestInitCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	before := time.Now()
	certPath, keyPath, err := InitCA(dir, CAOptions{})
	if err != nil {
		t.Fatalf("InitCA: %v", err)
	}
	if certPath != filepath.Join(dir, "ca.pem") || keyPath != filepath.Join(dir, "ca-key.pem") {
		t.Errorf("paths = %s, %s", certPath, keyPath)
	}
	assertMode(t, keyPath, 0o600)
	assertMode(t, dir, 0o700)
	ca := readCert(t, certPath)
	if !ca.IsCA || !ca.BasicConstraintsValid || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA certificate lacks CA constraints: IsCA=%v KeyUsage=%b", ca.IsCA, ca.KeyUsage)
	}
	if ca.Subject.CommonName != "llmgw CA" {
		t.Errorf("CA CN = %q", ca.Subject.CommonName)
	}
	pub, ok := ca.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("CA key is %T, want ECDSA P-256", ca.PublicKey)
	}
	if want := before.Add(DefaultCAValidity); ca.NotAfter.Before(want.Add(-time.Minute)) || ca.NotAfter.After(want.Add(time.Minute)) {
		t.Errorf("CA NotAfter = %v, want about %v", ca.NotAfter, want)
	}
	if _, err := ca.Verify(x509.VerifyOptions{Roots: caPool(t, dir)}); err != nil {
		t.Errorf("CA does not verify against itself: %v", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(mustRead(t, certPath), keyPEM); err != nil {
		t.Errorf("CA certificate and key do not match: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestInitCARefusesOverwrite(t *testing.T) {
	dir := testCA(t)
	original := mustRead(t, filepath.Join(dir, CACertFile))

	_, _, err := InitCA(dir, CAOptions{})
	if !errors.Is(err, ErrCAExists) {
		t.Fatalf("second InitCA: err = %v, want ErrCAExists", err)
	}
	if !strings.Contains(err.Error(), "force") || !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q should name the directory and say how to force", err)
	}
	if got := mustRead(t, filepath.Join(dir, CACertFile)); string(got) != string(original) {
		t.Fatal("refused InitCA changed ca.pem")
	}

	// Only the key left behind still counts as an existing CA.
	if err := os.Remove(filepath.Join(dir, CACertFile)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := InitCA(dir, CAOptions{}); !errors.Is(err, ErrCAExists) {
		t.Errorf("InitCA over a lone ca-key.pem: err = %v, want ErrCAExists", err)
	}

	if _, _, err := InitCA(dir, CAOptions{Force: true, CommonName: "replacement", Validity: 48 * time.Hour}); err != nil {
		t.Fatalf("forced InitCA: %v", err)
	}
	ca := readCert(t, filepath.Join(dir, CACertFile))
	if ca.Subject.CommonName != "replacement" || ca.NotAfter.After(time.Now().Add(49*time.Hour)) {
		t.Errorf("forced CA = CN %q until %v", ca.Subject.CommonName, ca.NotAfter)
	}
	assertMode(t, filepath.Join(dir, CAKeyFile), 0o600)
}

func TestIssueServer(t *testing.T) {
	caDir := testCA(t)
	out := filepath.Join(t.TempDir(), "etc")
	hosts := []string{"10.0.0.140", "llmgw-ctl.internal", "::1", "localhost", "10.0.0.140"}
	certPath, keyPath, err := IssueServer(caDir, "llmgw-ctl", hosts, out, 0)
	if err != nil {
		t.Fatalf("IssueServer: %v", err)
	}
	if certPath != filepath.Join(out, "server.pem") || keyPath != filepath.Join(out, "server-key.pem") {
		t.Errorf("paths = %s, %s", certPath, keyPath)
	}
	assertMode(t, keyPath, 0o600)
	cert := readCert(t, certPath)
	if cert.Subject.CommonName != "llmgw-ctl" {
		t.Errorf("CN = %q", cert.Subject.CommonName)
	}
	if !slices.Equal(cert.DNSNames, []string{"llmgw-ctl.internal", "localhost"}) {
		t.Errorf("DNSNames = %v", cert.DNSNames)
	}
	var ips []string
	for _, ip := range cert.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Equal(ips, []string{"10.0.0.140", "::1"}) {
		t.Errorf("IPAddresses = %v, want 10.0.0.140 and ::1 (once each)", ips)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("ExtKeyUsage = %v, want serverAuth", cert.ExtKeyUsage)
	}
	if cert.IsCA {
		t.Error("server certificate is a CA")
	}
	if want := time.Now().Add(DefaultServerValidity); cert.NotAfter.After(want.Add(time.Minute)) || cert.NotAfter.Before(want.Add(-time.Minute)) {
		t.Errorf("NotAfter = %v, want about %v", cert.NotAfter, want)
	}

	tests := []struct {
		name    string
		opts    x509.VerifyOptions
		wantErr bool
	}{
		{"IP SAN", x509.VerifyOptions{DNSName: "10.0.0.140"}, false},
		{"IPv6 SAN", x509.VerifyOptions{DNSName: "::1"}, false},
		{"DNS SAN", x509.VerifyOptions{DNSName: "llmgw-ctl.internal"}, false},
		{"CN is not a SAN", x509.VerifyOptions{DNSName: "llmgw-ctl"}, true},
		{"other IP", x509.VerifyOptions{DNSName: "10.0.0.141"}, true},
		{"not a client cert", x509.VerifyOptions{KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Roots = caPool(t, caDir)
			_, err := cert.Verify(tt.opts)
			if (err != nil) != tt.wantErr {
				t.Errorf("Verify(%+v) err = %v, wantErr %v", tt.opts.DNSName, err, tt.wantErr)
			}
		})
	}
}

func TestIssueServerRejectsBadInput(t *testing.T) {
	caDir := testCA(t)
	tests := []struct {
		name    string
		cn      string
		hosts   []string
		wantErr string
	}{
		{"no hosts", "s", nil, "no hosts"},
		{"empty host", "s", []string{"a", " "}, "empty"},
		{"host with port", "s", []string{"ctl.internal:7443"}, `"ctl.internal:7443"`},
		{"URL", "s", []string{"https://ctl"}, `"https://ctl"`},
		{"empty name", "", []string{"ctl"}, "name is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := IssueServer(caDir, tt.cn, tt.hosts, t.TempDir(), 0)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestIssueNode(t *testing.T) {
	caDir := testCA(t)
	out := t.TempDir()
	certPath, keyPath, err := IssueNode(caDir, "llmgw-node04", out, 0)
	if err != nil {
		t.Fatalf("IssueNode: %v", err)
	}
	if certPath != filepath.Join(out, "llmgw-node04.pem") || keyPath != filepath.Join(out, "llmgw-node04-key.pem") {
		t.Errorf("paths = %s, %s", certPath, keyPath)
	}
	assertMode(t, keyPath, 0o600)
	assertMode(t, certPath, 0o644)
	cert := readCert(t, certPath)
	if cert.Subject.CommonName != "llmgw-node04" {
		t.Errorf("CN = %q, want llmgw-node04", cert.Subject.CommonName)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("ExtKeyUsage = %v, want clientAuth", cert.ExtKeyUsage)
	}
	if want := time.Now().Add(DefaultNodeValidity); cert.NotAfter.After(want.Add(time.Minute)) || cert.NotAfter.Before(want.Add(-time.Minute)) {
		t.Errorf("NotAfter = %v, want about a year from now", cert.NotAfter)
	}
	roots := caPool(t, caDir)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("node certificate does not verify as a client: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots}); err == nil {
		t.Error("node certificate verified as a server certificate")
	}
	if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
		t.Errorf("node certificate and key do not load as a pair: %v", err)
	}

	// Reissuing replaces the pair.
	if _, _, err := IssueNode(caDir, "llmgw-node04", out, 2*time.Hour); err != nil {
		t.Fatalf("reissuing: %v", err)
	}
	if again := readCert(t, certPath); again.SerialNumber.Cmp(cert.SerialNumber) == 0 {
		t.Error("reissued certificate has the same serial")
	}
}

func TestNodeNames(t *testing.T) {
	tests := []struct {
		node string
		ok   bool
	}{
		{"llmgw-node04", true},
		{"gpu01.rack2", true},
		{"n_1", true},
		{"", false},
		{"../etc/passwd", false},
		{"a/b", false},
		{"-leading-dash", false},
		{".hidden", false},
		{"a..b", false},
		{"has space", false},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
	}
	caCert, caKey, err := NewCA(CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.node, func(t *testing.T) {
			if err := ValidNodeName(tt.node); (err == nil) != tt.ok {
				t.Errorf("ValidNodeName(%q) = %v, want ok=%v", tt.node, err, tt.ok)
			}
			if _, _, err := SignNode(caCert, caKey, tt.node, 0); (err == nil) != tt.ok {
				t.Errorf("SignNode(%q) = %v, want ok=%v", tt.node, err, tt.ok)
			}
		})
	}
}

func TestSignInMemory(t *testing.T) {
	caCert, caKey, err := NewCA(CAOptions{Validity: 30 * 24 * time.Hour})
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	ca, err := ParseCertificate(caCert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	certPEM, keyPEM, err := SignNode(caCert, caKey, "node01", 0)
	if err != nil {
		t.Fatalf("SignNode: %v", err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("SignNode output is not a key pair: %v", err)
	}
	node, err := ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !node.NotAfter.Equal(ca.NotAfter) {
		t.Errorf("node NotAfter %v should be capped at the CA's %v", node.NotAfter, ca.NotAfter)
	}
	if _, err := node.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("node certificate does not verify: %v", err)
	}

	srvPEM, _, err := SignServer(caCert, caKey, "mirror", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatalf("SignServer: %v", err)
	}
	srv, err := ParseCertificate(srvPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("server certificate does not verify for its IP: %v", err)
	}

	otherCert, otherKey, err := NewCA(CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	failures := []struct {
		name           string
		caCert, caKey  []byte
		validity       time.Duration
		wantErrContain string
	}{
		{"key of another CA", caCert, otherKey, 0, "does not belong"},
		{"leaf as CA", certPEM, keyPEM, 0, "not a CA"},
		{"garbage certificate", []byte("nope"), caKey, 0, "no CERTIFICATE"},
		{"garbage key", otherCert, []byte("nope"), 0, "no private key"},
		{"negative validity", caCert, caKey, -time.Hour, "negative"},
	}
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := SignNode(tt.caCert, tt.caKey, "node01", tt.validity)
			if err == nil || !strings.Contains(err.Error(), tt.wantErrContain) {
				t.Errorf("err = %v, want one containing %q", err, tt.wantErrContain)
			}
		})
	}
}

func TestIssueWithoutCA(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none")
	if _, _, err := IssueNode(missing, "node01", t.TempDir(), 0); err == nil || !strings.Contains(err.Error(), "ca.pem") {
		t.Errorf("IssueNode without a CA: err = %v, want one naming ca.pem", err)
	}
	if _, _, err := IssueServer(missing, "s", []string{"x"}, t.TempDir(), 0); err == nil || !strings.Contains(err.Error(), "ca.pem") {
		t.Errorf("IssueServer without a CA: err = %v, want one naming ca.pem", err)
	}
}

func TestParsePrivateKeyFormats(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		pem  []byte
	}{
		{"SEC 1", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})},
		{"PKCS 8", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})},
		{"after a certificate block", append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePrivateKey(tt.pem)
			if err != nil {
				t.Fatalf("ParsePrivateKey: %v", err)
			}
			if !key.PublicKey.Equal(got.Public()) {
				t.Error("parsed key differs from the original")
			}
		})
	}
}
