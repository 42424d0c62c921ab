package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// handshakeResult is what the server side of one connection saw.
type handshakeResult struct {
	cn  string
	err error
}

// serveOnce listens on 127.0.0.1:0 with cfg, accepts one connection,
// completes the handshake, writes "ok" and reports the peer's CN.
func serveOnce(t *testing.T, cfg *tls.Config) (addr string, result <-chan handshakeResult) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan handshakeResult, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ch <- handshakeResult{err: err}
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			ch <- handshakeResult{err: err}
			return
		}
		cn, err := PeerCommonName(tc.ConnectionState())
		if _, werr := tc.Write([]byte("ok")); werr != nil && err == nil {
			err = werr
		}
		ch <- handshakeResult{cn: cn, err: err}
	}()
	return ln.Addr().String(), ch
}

// dial connects with cfg and reads the server's "ok"; with TLS 1.3 a
// rejected client certificate only shows up on that first read.
func dial(addr string, cfg *tls.Config) error {
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ok" {
		return errors.New("unexpected reply " + string(buf))
	}
	return nil
}

func TestMutualTLS(t *testing.T) {
	caDir := testCA(t)
	otherCA := testCA(t)
	out := t.TempDir()
	srvCert, srvKey, err := IssueServer(caDir, "llmgw-ctl", []string{"127.0.0.1", "localhost"}, out, 0)
	if err != nil {
		t.Fatal(err)
	}
	nodeCert, nodeKey, err := IssueNode(caDir, "node01", out, 0)
	if err != nil {
		t.Fatal(err)
	}
	strangerDir := t.TempDir()
	strangerCert, strangerKey, err := IssueNode(otherCA, "node01", strangerDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(caDir, CACertFile)

	tests := []struct {
		name       string
		require    bool
		clientCert string
		clientKey  string
		rootCA     string
		serverName string
		wantCN     string
		wantErr    bool
	}{
		{name: "node with the fleet's CA", require: true, clientCert: nodeCert, clientKey: nodeKey, rootCA: caFile, wantCN: "node01"},
		{name: "server name by DNS SAN", require: true, clientCert: nodeCert, clientKey: nodeKey, rootCA: caFile, serverName: "localhost", wantCN: "node01"},
		{name: "node certificate from another CA", require: true, clientCert: strangerCert, clientKey: strangerKey, rootCA: caFile, wantErr: true},
		{name: "no client certificate", require: true, rootCA: caFile, wantErr: true},
		{name: "server certificate used as client certificate", require: true, clientCert: srvCert, clientKey: srvKey, rootCA: caFile, wantErr: true},
		{name: "client trusting another CA", require: true, clientCert: nodeCert, clientKey: nodeKey, rootCA: filepath.Join(otherCA, CACertFile), wantErr: true},
		{name: "server name not in SANs", require: true, clientCert: nodeCert, clientKey: nodeKey, rootCA: caFile, serverName: "llmgw-ctl", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scfg, err := ServerTLS(srvCert, srvKey, caFile, tt.require)
			if err != nil {
				t.Fatalf("ServerTLS: %v", err)
			}
			if scfg.MinVersion < tls.VersionTLS12 {
				t.Errorf("server MinVersion = %x", scfg.MinVersion)
			}
			addr, result := serveOnce(t, scfg)
			ccfg, err := ClientTLS(tt.rootCA, tt.clientCert, tt.clientKey, tt.serverName)
			if err != nil {
				t.Fatalf("ClientTLS: %v", err)
			}
			if tt.serverName == "" {
				ccfg.ServerName = "127.0.0.1"
			}
			dialErr := dial(addr, ccfg)
			res := <-result
			if tt.wantErr {
				if dialErr == nil && res.err == nil {
					t.Fatalf("connection succeeded with peer CN %q, want it refused", res.cn)
				}
				return
			}
			if dialErr != nil {
				t.Fatalf("client: %v (server: %v)", dialErr, res.err)
			}
			if res.err != nil || res.cn != tt.wantCN {
				t.Errorf("server saw CN %q, err %v; want %q", res.cn, res.err, tt.wantCN)
			}
		})
	}
}

// TestServerAuthOnlyClient is llmgw ctl: it verifies the server but has no
// certificate of its own, so the server cannot name it.
func TestServerAuthOnlyClient(t *testing.T) {
	caDir := testCA(t)
	out := t.TempDir()
	srvCert, srvKey, err := IssueServer(caDir, "llmgw-ctl", []string{"127.0.0.1"}, out, 0)
	if err != nil {
		t.Fatal(err)
	}
	scfg, err := ServerTLS(srvCert, srvKey, filepath.Join(caDir, CACertFile), false)
	if err != nil {
		t.Fatal(err)
	}
	addr, result := serveOnce(t, scfg)
	ccfg, err := ClientTLS(filepath.Join(caDir, CACertFile), "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ccfg.ServerName = "127.0.0.1"
	if err := dial(addr, ccfg); err != nil {
		t.Fatalf("server-auth-only client: %v", err)
	}
	res := <-result
	if res.err == nil || !strings.Contains(res.err.Error(), "no certificate") {
		t.Errorf("PeerCommonName without a client certificate: cn %q err %v; want a 'no certificate' error", res.cn, res.err)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	caDir := testCA(t)
	out := t.TempDir()
	srvCert, srvKey, err := IssueServer(caDir, "s", []string{"127.0.0.1"}, out, 0)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(caDir, CACertFile)
	missing := filepath.Join(out, "missing.pem")
	tests := []struct {
		name    string
		fn      func() error
		wantErr string
	}{
		{"server: require without CA", func() error { _, err := ServerTLS(srvCert, srvKey, "", true); return err }, "client CA"},
		{"server: missing cert", func() error { _, err := ServerTLS(missing, srvKey, caFile, true); return err }, "missing.pem"},
		{"server: missing CA", func() error { _, err := ServerTLS(srvCert, srvKey, missing, true); return err }, "missing.pem"},
		{"server: CA file without certificates", func() error { _, err := ServerTLS(srvCert, srvKey, srvKey, true); return err }, "no PEM certificates"},
		{"client: cert without key", func() error { _, err := ClientTLS(caFile, srvCert, "", ""); return err }, "both or neither"},
		{"client: missing CA", func() error { _, err := ClientTLS(missing, "", "", ""); return err }, "missing.pem"},
		{"client: mismatched pair", func() error { _, err := ClientTLS(caFile, srvCert, filepath.Join(caDir, CAKeyFile), ""); return err }, "server.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.fn()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	if _, err := ServerTLS(srvCert, srvKey, "", false); err != nil {
		t.Errorf("server without client auth: %v", err)
	}
}

func TestPeerCommonName(t *testing.T) {
	caCert, caKey, err := NewCA(CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodePEM, _, err := SignNode(caCert, caKey, "node09", 0)
	if err != nil {
		t.Fatal(err)
	}
	node, err := ParseCertificate(nodePEM)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := ParseCertificate(caCert)
	if err != nil {
		t.Fatal(err)
	}
	noCN := *node
	noCN.Subject.CommonName = ""
	tests := []struct {
		name    string
		state   tls.ConnectionState
		want    string
		wantErr string
	}{
		{"verified", tls.ConnectionState{PeerCertificates: []*x509.Certificate{node}, VerifiedChains: [][]*x509.Certificate{{node, ca}}}, "node09", ""},
		{"no certificate", tls.ConnectionState{}, "", "no certificate"},
		{"unverified", tls.ConnectionState{PeerCertificates: []*x509.Certificate{node}}, "", "not verified"},
		{"empty CN", tls.ConnectionState{PeerCertificates: []*x509.Certificate{&noCN}, VerifiedChains: [][]*x509.Certificate{{&noCN, ca}}}, "", "empty common name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PeerCommonName(tt.state)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("PeerCommonName = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
