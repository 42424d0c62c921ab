package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics listener serves /metrics and nothing else.
func TestHandlerServesMetricsOnly(t *testing.T) {
	r := New()
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	cases := []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/metrics", http.StatusOK},
		{http.MethodHead, "/metrics", http.StatusOK},
		{http.MethodGet, "/", http.StatusNotFound},
		{http.MethodGet, "/metrics/", http.StatusNotFound},
		{http.MethodGet, "/debug/pprof/", http.StatusNotFound},
		{http.MethodGet, "/debug/pprof/heap", http.StatusNotFound},
		{http.MethodGet, "/v1/models", http.StatusNotFound},
		{http.MethodGet, "/health", http.StatusNotFound},
		{http.MethodPost, "/metrics", http.StatusNotFound},
	}
	for _, tc := range cases {
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s = %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusOK && tc.method == http.MethodGet && !strings.Contains(string(body), "go_goroutines") {
			t.Errorf("GET /metrics has no Go collector metrics")
		}
	}
}

func TestRegister(t *testing.T) {
	r := New()
	rows := prometheus.NewCounter(prometheus.CounterOpts{Name: "llmgw_usage_rows_written_total", Help: "Usage rows written."})
	if err := r.Register(rows); err != nil {
		t.Fatal(err)
	}
	rows.Add(3)
	if !strings.Contains(exposition(t, r.Gatherer()), "llmgw_usage_rows_written_total 3\n") {
		t.Fatal("registered collector not gathered")
	}
	again := prometheus.NewCounter(prometheus.CounterOpts{Name: "llmgw_usage_rows_written_total", Help: "Usage rows written."})
	err := r.Register(again)
	if err == nil || !strings.Contains(err.Error(), "registering metrics collector") {
		t.Fatalf("registering a clashing collector: err = %v", err)
	}
	if _, err := NewObserver(r); err != nil {
		t.Fatalf("first observer: %v", err)
	}
	if _, err := NewObserver(r); err == nil {
		t.Fatal("a second observer on one registry registered twice")
	}
}
