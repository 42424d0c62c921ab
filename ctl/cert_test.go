package ctl

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/pki"
)

// readCert parses a certificate file the cert commands wrote.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertificate(data)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// assertMode checks a written file's permission bits.
func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s has mode %#o, want %#o", path, got, want)
	}
}

func TestCertCommands(t *testing.T) {
	base := t.TempDir()
	caDir := filepath.Join(base, "pki")
	out := filepath.Join(base, "etc")
	caFile := filepath.Join(caDir, "ca.pem")

	// init-ca
	code, stdout, stderr := runCtl(t, nil, "cert", "init-ca", "--dir", caDir)
	if code != 0 {
		t.Fatalf("init-ca: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"wrote " + caFile + ": ", "wrote " + filepath.Join(caDir, "ca-key.pem") + ": ", "keep it private", "not a secret", "(mode 0600)", "valid until 20"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("init-ca output lacks %q:\n%s", want, stdout)
		}
	}
	assertMode(t, filepath.Join(caDir, "ca-key.pem"), 0o600)
	ca := readCert(t, caFile)
	if !ca.IsCA {
		t.Error("ca.pem is not a CA certificate")
	}

	// A second init-ca without --force keeps the CA.
	code, _, stderr = runCtl(t, nil, "cert", "init-ca", "--dir", caDir)
	if code != 1 || !strings.Contains(stderr, "--force") {
		t.Errorf("second init-ca: exit %d, stderr %q; want 1 and a hint to use --force", code, stderr)
	}
	if !readCert(t, caFile).Equal(ca) {
		t.Error("second init-ca without --force replaced the CA")
	}

	pool := x509.NewCertPool()
	pool.AddCert(ca)

	// issue-server, positional name after the flags
	code, stdout, stderr = runCtl(t, nil, "cert", "issue-server", "--host", "127.0.0.1", "--host", "llmgw-ctl.internal",
		"--dir", caDir, "--out", out, "--validity", "720h", "llmgw-ctl")
	if code != 0 {
		t.Fatalf("issue-server: exit %d: %s", code, stderr)
	}
	serverCert := readCert(t, filepath.Join(out, "server.pem"))
	assertMode(t, filepath.Join(out, "server-key.pem"), 0o600)
	if serverCert.Subject.CommonName != "llmgw-ctl" || !slices.Equal(serverCert.DNSNames, []string{"llmgw-ctl.internal"}) ||
		len(serverCert.IPAddresses) != 1 || !serverCert.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("server certificate: CN %q DNS %v IP %v", serverCert.Subject.CommonName, serverCert.DNSNames, serverCert.IPAddresses)
	}
	if _, err := serverCert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "llmgw-ctl.internal"}); err != nil {
		t.Errorf("server certificate does not verify against the CA: %v", err)
	}
	if left := time.Until(serverCert.NotAfter); left < 719*time.Hour || left > 721*time.Hour {
		t.Errorf("server certificate valid for %s, want 720h", left)
	}
	wantExpiry := "valid until " + serverCert.NotAfter.UTC().Format("2006-01-02 15:04 UTC") + "\n"
	if !strings.Contains(stdout, "server certificate llmgw-ctl for 127.0.0.1, llmgw-ctl.internal") || !strings.HasSuffix(stdout, wantExpiry) {
		t.Errorf("issue-server output:\n%s\nwant the hosts and %q", stdout, wantExpiry)
	}

	// issue-node
	code, stdout, stderr = runCtl(t, nil, "cert", "issue-node", "llmgw-node01", "--dir", caDir, "--out", out)
	if code != 0 {
		t.Fatalf("issue-node: exit %d: %s", code, stderr)
	}
	nodeCert := readCert(t, filepath.Join(out, "llmgw-node01.pem"))
	assertMode(t, filepath.Join(out, "llmgw-node01-key.pem"), 0o600)
	if nodeCert.Subject.CommonName != "llmgw-node01" || !slices.Contains(nodeCert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Errorf("node certificate: CN %q usages %v", nodeCert.Subject.CommonName, nodeCert.ExtKeyUsage)
	}
	if _, err := nodeCert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("node certificate does not verify against the CA: %v", err)
	}
	if left := time.Until(nodeCert.NotAfter); left < 8759*time.Hour {
		t.Errorf("node certificate valid for %s, want the 8760h default", left)
	}
	if !strings.Contains(stdout, "wrote "+filepath.Join(out, "llmgw-node01.pem")+": node certificate") {
		t.Errorf("issue-node output:\n%s", stdout)
	}

	// The files serve the management API: ctl verifies the server with ca.pem.
	srvTLS, err := pki.ServerTLS(filepath.Join(out, "server.pem"), filepath.Join(out, "server-key.pem"), "", false)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cannedManage(), srvTLS)
	env := map[string]string{EnvEndpoint: addr, EnvToken: testToken, EnvCACert: caFile}
	if code, _, stderr := runCtl(t, env, "status"); code != 0 {
		t.Errorf("status against the issued certificate: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCtl(t, env, "status", "--server-name", "llmgw-ctl.internal"); code != 0 {
		t.Errorf("status with --server-name: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCtl(t, env, "status", "--server-name", "elsewhere"); code != 1 || !strings.Contains(stderr, "elsewhere") {
		t.Errorf("status with a wrong --server-name: exit %d, stderr %q; want 1 naming it", code, stderr)
	}

	// --force replaces the CA; the old server certificate stops verifying.
	code, _, stderr = runCtl(t, nil, "cert", "init-ca", "--force", "--dir", caDir)
	if code != 0 {
		t.Fatalf("init-ca --force: exit %d: %s", code, stderr)
	}
	if readCert(t, caFile).Equal(ca) {
		t.Error("init-ca --force kept the old CA")
	}
}

func TestCertUsageErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"init-ca without --dir", []string{"cert", "init-ca"}, 2, "no CA directory: pass --dir"},
		{"issue-server without --host", []string{"cert", "issue-server", "s", "--dir", dir, "--out", dir}, 2, "no --host"},
		{"issue-server without a name", []string{"cert", "issue-server", "--host", "h", "--dir", dir, "--out", dir}, 2, "missing the server name"},
		{"issue-node without --out", []string{"cert", "issue-node", "n", "--dir", dir}, 2, "no output directory: pass --out"},
		{"negative validity", []string{"cert", "issue-node", "n", "--dir", dir, "--out", dir, "--validity", "-1h"}, 2, "--validity must be positive"},
		{"no CA in --dir", []string{"cert", "issue-node", "n", "--dir", dir, "--out", dir}, 1, "ca.pem"},
		{"bad node name", []string{"cert", "issue-node", "no/de", "--dir", dir, "--out", dir}, 1, "no/de"},
		{"unknown cert command", []string{"cert", "revoke"}, 2, "unknown command \"revoke\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCtl(t, nil, tt.args...)
			if code != tt.wantCode || !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tt.wantCode, tt.wantErr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
		})
	}
}
