package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ServerTLS returns a TLS configuration for a server presenting certFile
// and keyFile, TLS 1.2 or later. With clientCAFile set, client certificates
// are verified against it (and must carry the clientAuth usage); with
// requireClientCert a client without a valid certificate is refused
// (mutual TLS, as on the agent port), otherwise one is verified if given.
func ServerTLS(certFile, keyFile, clientCAFile string, requireClientCert bool) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading server certificate %s and key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
	}
	switch {
	case clientCAFile != "":
		pool, err := LoadCertPool(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("loading client CA: %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		if requireClientCert {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
	case requireClientCert:
		return nil, errors.New("requiring client certificates needs a client CA file to verify them against")
	}
	return cfg, nil
}

// ClientTLS returns a TLS configuration for a client, TLS 1.2 or later,
// that verifies the server against caFile (the system roots when empty) and
// the name serverName (when empty, the dialled host). certFile and keyFile
// are the client's own certificate for mutual TLS; leave both empty for a
// server-auth-only client such as llmgw ctl.
func ClientTLS(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
	}
	if caFile != "" {
		pool, err := LoadCertPool(caFile)
		if err != nil {
			return nil, fmt.Errorf("loading server CA: %w", err)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("loading client certificate %s and key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, fmt.Errorf("client certificate %q and key %q: give both or neither", certFile, keyFile)
	}
	return cfg, nil
}

// LoadCertPool reads PEM certificates from file into a new pool.
func LoadCertPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("reading %s: no PEM certificates found", file)
	}
	return pool, nil
}

// PeerCommonName returns the common name of the peer's verified
// certificate: a node's id on the agent port. It fails when the peer
// presented no certificate or one that was not verified against the
// configured CA, and when the common name is empty.
func PeerCommonName(state tls.ConnectionState) (string, error) {
	if len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		if len(state.PeerCertificates) > 0 {
			return "", errors.New("the peer's certificate was not verified")
		}
		return "", errors.New("the peer presented no certificate")
	}
	cn := state.VerifiedChains[0][0].Subject.CommonName
	if cn == "" {
		return "", errors.New("the peer's certificate has an empty common name")
	}
	return cn, nil
}
