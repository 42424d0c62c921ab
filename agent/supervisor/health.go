package supervisor

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// probeTimeout bounds one health request; an engine busy loading may be
// slow to answer.
const probeTimeout = 2 * time.Second

// probeHost is the address to probe an engine bound to host on: a wildcard
// bind is reached through loopback.
func probeHost(host string) string {
	if host == "" {
		return "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if ip.To4() != nil {
			return "127.0.0.1"
		}
		return "::1"
	}
	return host
}

// probeClient is a client of its own (never http.DefaultClient) that goes
// straight to the engine, whatever proxy the environment names.
func probeClient() *http.Client {
	return &http.Client{
		Timeout:   probeTimeout,
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
	}
}

// probe GETs url and returns nil on 200.
func probe(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("building health request %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
