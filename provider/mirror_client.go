package provider

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api/mirrorv1"
	"github.com/llmgw/llmgw/pki"
)

// mirrorClientName is the common name of the client certificate the
// provider signs itself (with pki) for a mirror's management listener.
const mirrorClientName = "llmgw-terraform"

// mirrorClient speaks a weights mirror's management API (docs/mirror.md).
type mirrorClient struct {
	base string
	http *http.Client
}

// mirrorError is an answer of the mirror other than the one expected.
type mirrorError struct {
	Op     string
	Status int
	Body   string
}

func (e *mirrorError) Error() string {
	return fmt.Sprintf("%s: the mirror answered %d %s: %s", e.Op, e.Status, http.StatusText(e.Status), e.Body)
}

// mirror returns a client for the mirror's management listener at
// endpoint: https with mutual TLS (the pki CA verifies the mirror, and a
// client certificate the pki CA signs now, valid for an hour, identifies
// the provider), or plain http for a mirror run without TLS flags.
func (c *Client) mirror(endpoint string) (*mirrorClient, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("mirror %q is not an http(s) URL of the mirror's management listener (e.g. https://models.internal:8082)", endpoint)
	}
	mc := &mirrorClient{base: strings.TrimSuffix(u.String(), "/"), http: &http.Client{Timeout: callTimeout}}
	if u.Scheme == "http" {
		return mc, nil
	}
	if c.pkiCert == "" || c.pkiKey == "" {
		return nil, fmt.Errorf("mirror %s speaks mutual TLS: set pki = { ca_cert_file = ..., ca_key_file = ... } in the provider block (or %s and %s), the CA its --tls-ca names; the provider signs itself a client certificate with it", endpoint, EnvCACert, EnvCAKey)
	}
	caPEM, err := os.ReadFile(c.pkiCert)
	if err != nil {
		return nil, fmt.Errorf("reading pki.ca_cert_file %s: %w", c.pkiCert, err)
	}
	keyPEM, err := os.ReadFile(c.pkiKey)
	if err != nil {
		return nil, fmt.Errorf("reading pki.ca_key_file %s: %w", c.pkiKey, err)
	}
	certPEM, clientKey, err := pki.SignNode(caPEM, keyPEM, mirrorClientName, time.Hour)
	if err != nil {
		return nil, fmt.Errorf("signing a client certificate for the mirror with pki.ca_cert_file %s: %w", c.pkiCert, err)
	}
	pair, err := tls.X509KeyPair(certPEM, clientKey)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("pki.ca_cert_file %s holds no certificate", c.pkiCert)
	}
	mc.http.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}
	return mc, nil
}

// do sends a request and decodes a JSON answer of one of the want codes
// into out; any other answer is a *mirrorError.
func (m *mirrorClient) do(ctx context.Context, op, method, path string, body any, out any, want ...int) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, m.base+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := m.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	for _, w := range want {
		if resp.StatusCode == w {
			if out != nil && len(raw) > 0 {
				if err := json.Unmarshal(raw, out); err != nil {
					return resp.StatusCode, fmt.Errorf("%s: reading the mirror's answer: %w", op, err)
				}
			}
			return resp.StatusCode, nil
		}
	}
	return resp.StatusCode, &mirrorError{Op: op, Status: resp.StatusCode, Body: strings.TrimSpace(string(raw))}
}

// startDownload starts model/version's download; a download of it already
// running is not an error (the caller waits for it).
func (m *mirrorClient) startDownload(ctx context.Context, req mirrorv1.DownloadRequest) error {
	_, err := m.do(ctx, "starting the download of "+req.Model+"/"+req.Version, http.MethodPost, "/v1/downloads", req, nil, http.StatusAccepted, http.StatusConflict)
	return err
}

// download returns model/version's download, ok false when the mirror
// started none since it started.
func (m *mirrorClient) download(ctx context.Context, model, version string) (mirrorv1.DownloadStatus, bool, error) {
	var st mirrorv1.DownloadStatus
	code, err := m.do(ctx, "reading the download of "+model+"/"+version, http.MethodGet, "/v1/downloads/"+url.PathEscape(model)+"/"+url.PathEscape(version), nil, &st, http.StatusOK, http.StatusNotFound)
	return st, code == http.StatusOK, err
}

// holding returns model/version as the mirror holds it, ok false when it
// does not.
func (m *mirrorClient) holding(ctx context.Context, model, version string) (mirrorv1.Holding, bool, error) {
	var hs []mirrorv1.Holding
	if _, err := m.do(ctx, "listing the mirror's holdings", http.MethodGet, "/v1/holdings", nil, &hs, http.StatusOK); err != nil {
		return mirrorv1.Holding{}, false, err
	}
	for _, h := range hs {
		if h.Model == model && h.Version == version {
			return h, true, nil
		}
	}
	return mirrorv1.Holding{}, false, nil
}

// errDownloading is deleteHolding's error while a download fills it.
var errDownloading = errors.New("a download of it is running in the mirror")

// deleteHolding deletes model/version; one the mirror does not hold is
// gone already.
func (m *mirrorClient) deleteHolding(ctx context.Context, model, version string) error {
	code, err := m.do(ctx, "deleting "+model+"/"+version+" from the mirror", http.MethodDelete, "/v1/holdings/"+url.PathEscape(model)+"/"+url.PathEscape(version), nil, nil, http.StatusNoContent, http.StatusNotFound, http.StatusConflict)
	if err == nil && code == http.StatusConflict {
		return errDownloading
	}
	return err
}
