package server

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// syncBuffer is a log destination the test reads while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// expiredNode is a node certificate the CA in dir signed that expired an
// hour ago.
func expiredNode(t *testing.T, dir string) tls.Certificate {
	t.Helper()
	caPEM, caKeyPEM, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCertificate(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := pki.ParsePrivateKey(caKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "gpu-old"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHandshakeRefusalsLogged: the agent listener logs every TLS handshake
// it refuses with the peer's address and the reason — an expired node
// certificate, one from a foreign CA, none at all — and nothing for a node
// that gets in.
func TestHandshakeRefusalsLogged(t *testing.T) {
	dir, foreign := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, foreign} {
		if _, _, err := pki.InitCA(d, pki.CAOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	srvCert, srvKey, err := pki.IssueServer(dir, "server", []string{"127.0.0.1"}, dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := pki.ServerTLS(srvCert, srvKey, filepath.Join(dir, "ca.pem"), true)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	srv := grpc.NewServer(grpc.Creds(newRefusalLog(credentials.NewTLS(tlsCfg), log, "agent_listen")))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	roots := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(caPEM)
	load := func(caDir, node string) tls.Certificate {
		cert, key, err := pki.IssueNode(caDir, node, t.TempDir(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// dial handshakes as a node would and returns the local address, which
	// the server sees as the peer's.
	dial := func(certs []tls.Certificate) string {
		conn, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: certs, NextProtos: []string{"h2"}})
		if err != nil {
			return "" // TLS 1.2 fails on the client's side too
		}
		defer conn.Close()
		local := conn.LocalAddr().String()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Read(make([]byte, 1)) // TLS 1.3: the refusal arrives as an alert
		return local
	}
	for _, tc := range []struct {
		name   string
		certs  []tls.Certificate
		reason string
	}{
		{"expired", []tls.Certificate{expiredNode(t, dir)}, "certificate has expired"},
		{"foreign CA", []tls.Certificate{load(foreign, "gpu-x")}, "certificate signed by unknown authority"},
		{"no certificate", nil, "client didn't provide a certificate"},
	} {
		local := dial(tc.certs)
		testcluster.WaitFor(t, tc.name+" refusal logged", 10*time.Second, func() (bool, string) {
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, `msg="tls handshake refused"`) && strings.Contains(line, tc.reason) &&
					strings.Contains(line, "listener=agent_listen") && (local == "" || strings.Contains(line, "remote="+local)) &&
					strings.Contains(line, "remote=127.0.0.1:") {
					return true, ""
				}
			}
			return false, logs.String()
		})
	}

	before := strings.Count(logs.String(), "tls handshake refused")
	if local := dial([]tls.Certificate{load(dir, "gpu-ok")}); local == "" {
		t.Fatal("a node of the CA could not connect")
	}
	if n := strings.Count(logs.String(), "tls handshake refused"); n != before {
		t.Errorf("a node that got in was logged as refused:\n%s", logs.String())
	}
}

// TestHandshakeRefusalsBounded: a peer refused in a loop is logged five
// times a minute; the next line says how many were left out.
func TestHandshakeRefusalsBounded(t *testing.T) {
	var logs syncBuffer
	r := newRefusalLog(nil, slog.New(slog.NewTextHandler(&logs, nil)), "agent_listen")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	addr := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 40000}
	for range 12 {
		r.refused(addr, errString("bad certificate"))
	}
	if n := strings.Count(logs.String(), "tls handshake refused"); n != 5 {
		t.Errorf("%d lines in a minute, want 5:\n%s", n, logs.String())
	}
	now = now.Add(time.Minute)
	r.refused(addr, errString("bad certificate"))
	if n := strings.Count(logs.String(), "tls handshake refused"); n != 6 || !strings.Contains(logs.String(), "not_logged_before=7") {
		t.Errorf("%d lines after a minute, want 6, the last saying 7 were not logged:\n%s", n, logs.String())
	}
}

type errString string

func (e errString) Error() string { return string(e) }
