package testcluster

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what Errorf says.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Helper() {}

// TestSecretScanMetricsCannotPassEmpty: the metrics half of the secret scan
// fails the test when a running control plane's metrics cannot be read,
// and when they were never read at all; it passes with metrics read before
// the control plane was killed, and finds a secret in them.
func TestSecretScanMetricsCannotPassEmpty(t *testing.T) {
	status := http.StatusInternalServerError
	body := "oops"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	running := &Proc{Done: make(chan struct{})}

	r := &recorder{TB: t}
	c := &Cluster{t: r, metricsURL: srv.URL, Server: running}
	c.scrapeMetrics()
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "runs but its metrics cannot be read") || !strings.Contains(r.errors[0], "500") {
		t.Errorf("a failing scrape of a running control plane: errors %q", r.errors)
	}

	dead := &Proc{Done: make(chan struct{})}
	close(dead.Done)
	r = &recorder{TB: t}
	c = &Cluster{t: r, metricsURL: srv.URL, Server: dead}
	c.scrapeMetrics()
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "never read") {
		t.Errorf("metrics never read: errors %q", r.errors)
	}

	// Read while it ran (watchMetrics), then killed: the scan uses them.
	status, body = http.StatusOK, "# TYPE llmgw_x counter\nllmgw_x{key=\"sk-secret-123\"} 1\n"
	r = &recorder{TB: t}
	c = &Cluster{t: r, metricsURL: srv.URL, Server: dead}
	if err := c.readMetrics(); err != nil {
		t.Fatal(err)
	}
	status = http.StatusServiceUnavailable
	c.scrapeMetrics()
	c.AddSecret("sk-secret-123")
	c.scanForSecrets()
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "appears in the output of metrics") {
		t.Errorf("metrics read before the kill with a secret in them: errors %q", r.errors)
	}
}
