package provider

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/pki"
)

// testCA writes a fresh CA to a temp dir and returns its file names.
func testCA(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	certPEM, keyPEM, err := pki.NewCA(pki.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestSignNodeCertificate(t *testing.T) {
	caCert, caKey := testCA(t)
	tests := []struct {
		name     string
		node     string
		validity time.Duration
	}{
		{"one hour", "gpu-01", time.Hour},
		{"a year", "node01.rack-a", 8760 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now()
			nc, d := signNodeCertificate(caCert, caKey, tt.node, tt.validity)
			if d.HasError() {
				t.Fatal(d)
			}
			cert, err := pki.ParseCertificate(nc.certPEM)
			if err != nil {
				t.Fatal(err)
			}
			if cert.Subject.CommonName != tt.node {
				t.Errorf("CN = %q, want %q", cert.Subject.CommonName, tt.node)
			}
			if len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
				t.Errorf("ExtKeyUsage = %v, want clientAuth only", cert.ExtKeyUsage)
			}
			pool, err := pki.LoadCertPool(caCert)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("chain does not verify against the CA: %v", err)
			}
			if lo, hi := before.Add(tt.validity-time.Minute), time.Now().Add(tt.validity+time.Minute); cert.NotAfter.Before(lo) || cert.NotAfter.After(hi) {
				t.Errorf("NotAfter = %s, want about now + %s", cert.NotAfter, tt.validity)
			}
			if !nc.notAfter.Equal(cert.NotAfter) {
				t.Errorf("notAfter = %s, certificate says %s", nc.notAfter, cert.NotAfter)
			}
			if _, err := pki.ParsePrivateKey(nc.keyPEM); err != nil {
				t.Errorf("private key: %v", err)
			}
			if ca, _ := os.ReadFile(caCert); string(nc.caPEM) != string(ca) {
				t.Error("caPEM is not the CA file's content")
			}
		})
	}
}

func TestSignNodeCertificateErrors(t *testing.T) {
	caCert, caKey := testCA(t)
	missing := filepath.Join(t.TempDir(), "nope.pem")
	tests := []struct {
		name, cert, key, node, want string
	}{
		{"no pki", "", "", "n1", "pki = {"},
		{"no key file", caCert, missing, "n1", "pki.ca_key_file " + missing},
		{"no cert file", missing, caKey, "n1", "pki.ca_cert_file " + missing},
		{"bad node", caCert, caKey, "bad node", "not valid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, d := signNodeCertificate(tt.cert, tt.key, tt.node, time.Hour)
			if !d.HasError() {
				t.Fatal("no error")
			}
			if got := d[0].Detail(); !strings.Contains(got, tt.want) {
				t.Errorf("detail %q does not contain %q", got, tt.want)
			}
		})
	}
}

func TestReadyForRenewal(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		notAfter time.Time
		early    int64
		want     bool
	}{
		{"far from expiry", now.Add(1000 * time.Hour), 720, false},
		{"inside the early window", now.Add(700 * time.Hour), 720, true},
		{"exactly at the window", now.Add(720 * time.Hour), 720, true},
		{"early window longer than validity", now.Add(time.Hour), 2, true},
		{"expired, no early window", now.Add(-time.Minute), 0, true},
		{"valid, no early window", now.Add(time.Minute), 0, false},
		{"unreadable expiry", time.Time{}, 720, true},
	}
	for _, tt := range tests {
		if got := readyForRenewal(now, tt.notAfter, tt.early); got != tt.want {
			t.Errorf("%s: readyForRenewal = %v, want %v", tt.name, got, tt.want)
		}
	}
}
